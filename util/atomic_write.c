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
    const char *slash = strrchr(path, '/');
    char *dir = slash ? tp_xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : tp_xstrdup(".");
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

int tp_write_file_atomic(const char *path, const tp_bytes *pieces, int npieces, char *err, size_t errlen)
{
    char *tmp = tp_write_temp(path, -1, pieces, npieces, err, errlen);
    if (!tmp)
        return -1;
    if (rename(tmp, path) != 0) {
        int saved = errno;
        (void)unlink(tmp);
        free(tmp);
        return tp_error(err, errlen, "cannot write '%s': cannot replace it: %s", path, strerror(saved));
    }
    free(tmp);
    sync_dir(path);
    return 0;
}
