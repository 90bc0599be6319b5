/* source.h: the files a run reads, and spans into them.
 *
 * Every diagnostic points into a loaded file through a tp_span, so the
 * renderer can print the source line and a caret. Files are loaded once
 * and kept for the whole run. */
#ifndef TPCC_SOURCE_H
#define TPCC_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

/* A half-open byte range [offset, offset+length) in file `file`, with the
 * 1-based line and column of its first byte. file < 0 means "no location"
 * (command-line flags, built-in defaults). */
typedef struct tp_span {
    int file;
    int line, col;
    int offset, length;
} tp_span;

#define TP_NO_SPAN ((tp_span){-1, 0, 0, 0, 0})

typedef struct tp_source_file {
    char *path;      /* as given by the user (or resolved relative to the includer) */
    char *text;      /* contents, NUL-terminated */
    size_t size;     /* bytes, excluding the NUL */
    bool unread;     /* could not be read: a path for diagnostics to point at, no text */
    size_t *line_starts;    /* offset of each line, for tp_source_line */
    int nlines;
} tp_source_file;

typedef struct tp_sources {
    tp_source_file *files;
    int count, cap;
} tp_sources;

void tp_sources_init(tp_sources *s);
void tp_sources_free(tp_sources *s);

/* Load a file; returns its id, or -1 with a message in err (size errlen)
 * when it cannot be read, is not a regular file (a FIFO or a device is
 * refused without waiting on it) or is not text (NUL bytes). Loading the
 * same path twice returns the first id. */
int tp_sources_load(tp_sources *s, const char *path, char *err, size_t errlen);

/* "a FIFO", "a directory", ... for a st_mode, in messages. */
const char *tp_file_kind_name(unsigned mode);

/* Add a file that could not be read, so that the error saying so points
 * at it (line 1) like any other finding. It has no lines, and loading the
 * path again tries the file again. Returns its id. */
int tp_sources_add_unread(tp_sources *s, const char *path);

/* Add an in-memory buffer (tests, fuzzing, -D values). */
int tp_sources_add(tp_sources *s, const char *path, const char *text, size_t size);

/* The text of line `line` (1-based) of file: start pointer and length
 * without the newline. Returns 0 when out of range. */
int tp_source_line(const tp_sources *s, int file, int line, const char **start, int *len);

/* A span covering a..b (both in the same file). */
tp_span tp_span_join(tp_span a, tp_span b);

/* Lexically drop "." components and "dir/.." pairs: "plans/../models/x"
 * becomes "models/x". Returns a new string. */
char *tp_path_tidy(const char *path);

/* `path` as seen from the directory of the file `base` (a plan naming its
 * model), tidied. Absolute paths stay as they are. Returns a new string. */
char *tp_path_relative_to(const char *base, const char *path);

#endif /* TPCC_SOURCE_H */
