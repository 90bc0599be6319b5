/* input_file.c: see input_file.h. */
#define _XOPEN_SOURCE 700   /* fdopen, O_NOFOLLOW, O_CLOEXEC */
#include "util/input_file.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/errmsg.h"

static const char *kind_of(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

int tp_input_open(const char *path, bool no_follow, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (no_follow ? O_NOFOLLOW : 0));
    if (fd < 0 && no_follow && errno == ELOOP)
        return tp_error(err, errlen, "%s: is a symbolic link, which a checkpoint directory's files may not be; "
                        "copy the file it names into the directory", path);
    if (fd < 0)
        return tp_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    const char *why = fstat(fd, &st) != 0 ? strerror(errno) : NULL;
    int flags = why ? 0 : fcntl(fd, F_GETFL);
    if (!why && S_ISREG(st.st_mode) && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0))
        why = strerror(errno);
    if (why) {
        close(fd);
        return tp_error(err, errlen, "%s: cannot open: %s", path, why);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tp_error(err, errlen, "%s: is %s, not a regular file; an input must be a file (a FIFO or a device "
                        "could keep the run waiting forever)", path, kind_of(st.st_mode));
    }
    return fd;
}

FILE *tp_input_fopen(const char *path, char *err, size_t errlen)
{
    int fd = tp_input_open(path, false, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        tp_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
