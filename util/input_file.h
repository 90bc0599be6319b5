/* input_file.h: opening a file a run reads, without ever waiting on it. A
 * FIFO (or a terminal, a device) named where a file belongs blocks open()
 * until a writer comes, and reads after that, forever: each input is
 * opened with O_NONBLOCK, which open() on a FIFO honours at once, and
 * refused unless fstat on the descriptor says it is a regular file. */
#ifndef TP_UTIL_INPUT_FILE_H
#define TP_UTIL_INPUT_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* A read-only descriptor of `path`, a regular file (close-on-exec,
 * blocking again once checked). With `no_follow`, a symbolic link is
 * refused too (O_NOFOLLOW): for a file a directory is trusted to hold
 * itself. -1 with "PATH: cannot open: ..." or "PATH: is a FIFO, not a
 * regular file; ..." in err. */
int tp_input_open(const char *path, bool no_follow, char *err, size_t errlen);

/* The same as a FILE for reading ("rb"); NULL with the message. */
FILE *tp_input_fopen(const char *path, char *err, size_t errlen);

#endif /* TP_UTIL_INPUT_FILE_H */
