/* atomic_write.h: replacing a file so that readers see the old contents or
 * the new, never a part: write a temporary file next to it, sync it, rename
 * it over the original. Used for schedules and .npy outputs. */
#ifndef TPCC_ATOMIC_WRITE_H
#define TPCC_ATOMIC_WRITE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tp_bytes {
    const void *data;
    size_t len;
} tp_bytes;

/* Write the pieces, in order, as the new contents of `path` (mode 0666
 * less the umask). On any error nothing is left behind, the previous file
 * is untouched, and -1 is returned with "cannot write 'path': ..." in err.
 * Only a regular file (or a new path) is replaced; a symbolic link's
 * target is; a character device or FIFO is written through (a FIFO
 * without a reader is an error, never a wait); a directory, block device
 * or socket is refused. */
int tp_write_file_atomic(const char *path, const tp_bytes *pieces, int npieces, char *err, size_t errlen);

/* The directory `path` is an entry of, malloc'ed: "." for a bare name,
 * "/" for an entry of the root. */
char *tp_path_parent(const char *path);

/* Whether both paths exist and name the same file (an output that would
 * replace one of the run's inputs). */
bool tp_same_file(const char *a, const char *b);

/* Before the work whose result goes to `path`: 0 when a file or
 * directory can be created there (the directory it goes in exists and is
 * writable, and `path` is no directory unless `dir` says one is wanted);
 * else -1 with "cannot write 'path': ..." and the cause in err. A
 * trailing slash names the same path. */
int tp_check_output_path(const char *path, bool dir, char *err, size_t errlen);

/* The first half of it, for replacing several files together (--fix):
 * write the pieces to a new, synced temporary file next to `path` with
 * permissions `mode` (-1: 0666 less the umask) and return its malloc'ed
 * name, for the caller to rename over path or unlink; NULL with a message
 * in err, nothing left behind. */
char *tp_write_temp(const char *path, int mode, const tp_bytes *pieces, int npieces, char *err, size_t errlen);

#endif /* TPCC_ATOMIC_WRITE_H */
