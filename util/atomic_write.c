/* atomic_write.c: see atomic_write.h. */
#define _XOPEN_SOURCE 700   /* mkstemp, fchmod, fsync */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/atomic_write.h"
#include "util/xalloc.h"
#include "util/errmsg.h"

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        /* Linux writes at most about 2 GiB per call */
        ssize_t n = write(fd, data, len > (1u << 30) ? (1u << 30) : len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Make the rename itself durable; best effort (some file systems refuse
 * to sync a directory, and the file is complete either way). */
static void sync_dir(const char *path)
{
    char *dir = tp_path_parent(path);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        (void)close(fd);
    }
    free(dir);
}

char *tp_write_temp(const char *path, int mode, const tp_bytes *pieces, int npieces, char *err, size_t errlen)
{
    char *tmp = tp_xasprintf("%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        tp_error(err, errlen, "cannot write '%s': cannot create a temporary file next to it: %s", path, strerror(e));
        return NULL;
    }
    if (mode < 0) {
        mode_t mask = umask(0);   /* a new file gets the usual 0666 & ~umask, not mkstemp's 0600 */
        umask(mask);
        mode = (int)(0666 & ~mask);
    }
    const char *failed = NULL;
    if (fchmod(fd, (mode_t)mode) != 0)
        failed = "set the mode of";
    for (int i = 0; i < npieces && !failed; i++)
        if (write_all(fd, pieces[i].data, pieces[i].len) != 0)
            failed = "write";
    if (!failed && fsync(fd) != 0)
        failed = "sync";
    int saved = errno;
    if (close(fd) != 0 && !failed) {
        failed = "write";
        saved = errno;
    }
    if (!failed)
        return tmp;
    tp_error(err, errlen, "cannot write '%s': cannot %s the temporary file %s: %s", path, failed, tmp,
             strerror(saved));
    (void)unlink(tmp);   /* best effort: the error above is what matters */
    free(tmp);
    return NULL;
}

/* A character device or a FIFO named as the output is written through
 * (`-o /dev/stdout`, a pipe): renaming a file over it would replace the
 * device node. A FIFO nobody reads is an error, not a hang (O_NONBLOCK
 * makes the open fail with ENXIO instead of waiting for a reader). */
static int write_through(const char *path, const tp_bytes *pieces, int npieces, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return tp_error(err, errlen, "cannot write '%s': %s", path,
                        errno == ENXIO ? "it is a FIFO and no process reads it" : strerror(errno));
    int flags = fcntl(fd, F_GETFL);
    int rc = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? -1 : 0;
    for (int i = 0; i < npieces && !rc; i++)
        rc = write_all(fd, pieces[i].data, pieces[i].len);
    int saved = errno;
    if (close(fd) != 0 && !rc) {
        rc = -1;
        saved = errno;
    }
    return rc ? tp_error(err, errlen, "cannot write '%s': %s", path, strerror(saved)) : 0;
}

int tp_write_file_atomic(const char *path, const tp_bytes *pieces, int npieces, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
            return write_through(path, pieces, npieces, err, errlen);
        if (!S_ISREG(st.st_mode))
            return tp_error(err, errlen, "cannot write '%s': it is %s, not a regular file; name a file", path,
                            S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device" : "a socket");
    }
    /* a link is followed: the file it names is replaced, not the link */
    char *target = NULL;
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) && !(target = realpath(path, NULL)))
        return tp_error(err, errlen, "cannot write '%s': it is a symbolic link to a missing file", path);
    const char *dest = target ? target : path;
    char *tmp = tp_write_temp(dest, -1, pieces, npieces, err, errlen);
    int rc = 0;
    if (!tmp) {
        rc = -1;
    } else if (rename(tmp, dest) != 0) {
        int saved = errno;
        (void)unlink(tmp);
        rc = tp_error(err, errlen, "cannot write '%s': cannot replace it: %s", path, strerror(saved));
    } else {
        sync_dir(dest);
    }
    free(tmp);
    free(target);
    return rc;
}

int tp_check_output_path(const char *path, bool dir, char *err, size_t errlen)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    char *name = tp_xstrndup(path, len);
    char *parent = tp_path_parent(name);
    struct stat st;
    const char *why = NULL;
    if (stat(parent, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(parent, W_OK | X_OK) != 0)
        why = strerror(errno);
    int rc = 0;
    if (why)
        rc = tp_error(err, errlen, "cannot write '%s': its directory '%s': %s", path, parent, why);
    else if (!dir && stat(name, &st) == 0 && S_ISDIR(st.st_mode))
        rc = tp_error(err, errlen, "cannot write '%s': it is a directory; name a file", path);
    free(parent);
    free(name);
    return rc;
}

char *tp_path_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? tp_xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : tp_xstrdup(".");
}

bool tp_same_file(const char *a, const char *b)
{
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}
