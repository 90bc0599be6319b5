/* source.c: loading source files and looking up their lines. */
#define _POSIX_C_SOURCE 200809L   /* fdopen, fstat, O_CLOEXEC */

#include "compiler/diag/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/xalloc.h"
#include "util/errmsg.h"

/* Plans and models are a few kilobytes; anything this big is a mistake
 * (a checkpoint passed by accident) and would only make tpcc slow. */
#define TP_SOURCE_MAX_SIZE ((size_t)16 << 20)

void tp_sources_init(tp_sources *s)
{
    s->files = NULL;
    s->count = s->cap = 0;
}

void tp_sources_free(tp_sources *s)
{
    for (int i = 0; i < s->count; i++) {
        free(s->files[i].path);
        free(s->files[i].text);
        free(s->files[i].line_starts);
    }
    free(s->files);
    tp_sources_init(s);
}

/* The path with "." segments and repeated slashes removed, so that
 * "./a.plan", "a.plan" and ".//a.plan" name the same file. ".." is kept:
 * resolving it would need the file system (symlinks). */
static char *normalize_path(const char *path)
{
    tp_buf out;
    tp_buf_init(&out);
    if (path[0] == '/')
        tp_buf_append(&out, "/");
    size_t root = out.len;
    const char *p = path;
    while (*p) {
        size_t n = strcspn(p, "/");
        int skip = n == 0 || (n == 1 && p[0] == '.');
        if (!skip) {
            if (out.len > root)
                tp_buf_append(&out, "/");
            tp_buf_append_n(&out, p, n);
        }
        p += n;
        if (*p == '/')
            p++;
    }
    if (out.len == 0)
        tp_buf_append(&out, ".");
    return tp_buf_take(&out);
}

static int find_loaded(const tp_sources *s, const char *path)
{
    char *want = normalize_path(path);
    int found = -1;
    for (int i = 0; i < s->count && found < 0; i++) {
        if (s->files[i].unread)
            continue;
        char *have = normalize_path(s->files[i].path);
        if (strcmp(have, want) == 0)
            found = i;
        free(have);
    }
    free(want);
    return found;
}

/* Where each line of f starts: one pass when the file is added, so that
 * rendering a diagnostic finds its line at once (a scan from the start
 * per diagnostic made n diagnostics on a file of n lines quadratic). */
static void index_lines(tp_source_file *f)
{
    int cap = 0;
    f->line_starts = NULL;
    f->nlines = 0;
    for (const char *p = f->text, *end = f->text + f->size;;) {
        f->line_starts = tp_xgrow(f->line_starts, f->nlines, &cap, sizeof *f->line_starts, 64);
        f->line_starts[f->nlines++] = (size_t)(p - f->text);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        p = nl + 1;
    }
}

/* Takes ownership of text (size bytes plus a NUL). */
static int add_owned(tp_sources *s, const char *path, char *text, size_t size)
{
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->files = tp_xreallocarray(s->files, (size_t)s->cap, sizeof *s->files);
    }
    tp_source_file *f = &s->files[s->count];
    f->path = tp_xstrdup(path);
    f->text = text;
    f->size = size;
    f->unread = false;
    index_lines(f);
    return s->count++;
}

int tp_sources_add_unread(tp_sources *s, const char *path)
{
    int id = add_owned(s, path, tp_xstrdup(""), 0);
    s->files[id].unread = true;
    return id;
}

int tp_sources_add(tp_sources *s, const char *path, const char *text, size_t size)
{
    char *copy = tp_xmalloc(size + 1);
    memcpy(copy, text, size);
    copy[size] = '\0';
    return add_owned(s, path, copy, size);
}

const char *tp_file_kind_name(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
    }
}

/* Only regular files are sources: a FIFO, a terminal or a device (model
 * "/dev/stdin") could block the read forever or never end, and a
 * directory has no text. The limit is checked before reading a byte. */
static int check_file_kind(int fd, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return tp_error(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return tp_error(err, errlen, "'%s' is a directory", path);
    if (!S_ISREG(st.st_mode))
        return tp_error(err, errlen, "'%s' is %s, not a regular file", path, tp_file_kind_name(st.st_mode));
    if ((unsigned long long)st.st_size > TP_SOURCE_MAX_SIZE)
        return tp_error(err, errlen, "'%s': file too large (%lld bytes; the limit is 16 MiB)",
                        path, (long long)st.st_size);
    return 0;
}

/* The file at path opened for reading, or NULL with the message in err.
 * O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one
 * before check_file_kind could refuse it; a regular file ignores it. */
static FILE *open_source(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        tp_error(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (check_file_kind(fd, path, err, errlen) < 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        tp_error(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

/* Read the whole stream into a NUL-terminated buffer. */
static int read_stream(FILE *f, const char *path, char **text, size_t *size,
                       char *err, size_t errlen)
{
    tp_buf b;
    tp_buf_init(&b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > TP_SOURCE_MAX_SIZE) {
            tp_error(err, errlen, "'%s': file too large (over 16 MiB)", path);
            tp_buf_free(&b);
            return -1;
        }
        tp_buf_append_n(&b, chunk, n);
    }
    if (ferror(f)) {
        tp_error(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        tp_buf_free(&b);
        return -1;
    }
    *size = b.len;
    *text = tp_buf_take(&b);
    return 0;
}

/* A NUL byte means a binary file (or UTF-16): the lexer would stop at it
 * and report nonsense, so say what is wrong instead. */
static int check_text(const char *text, size_t size, const char *path,
                      char *err, size_t errlen)
{
    const char *nul = memchr(text, '\0', size);
    if (!nul)
        return 0;
    tp_error(err, errlen, "'%s' is not a text file (NUL byte at offset %zu)",
            path, (size_t)(nul - text));
    return -1;
}

int tp_sources_load(tp_sources *s, const char *path, char *err, size_t errlen)
{
    int id = find_loaded(s, path);
    if (id >= 0)
        return id;

    FILE *f = open_source(path, err, errlen);
    if (!f)
        return -1;
    char *text = NULL;
    size_t size = 0;
    int rc = read_stream(f, path, &text, &size, err, errlen);
    /* A read-only stream has nothing to flush, but a failing close still
     * means we cannot trust what we read. */
    if (fclose(f) != 0 && rc == 0) {
        tp_error(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0)
        rc = check_text(text, size, path, err, errlen);
    if (rc != 0) {
        free(text);
        return -1;
    }
    return add_owned(s, path, text, size);
}

int tp_source_line(const tp_sources *s, int file, int line, const char **start, int *len)
{
    *start = NULL;
    *len = 0;
    if (file < 0 || file >= s->count || line < 1 || s->files[file].unread || line > s->files[file].nlines)
        return 0;
    const tp_source_file *f = &s->files[file];
    const char *p = f->text + f->line_starts[line - 1], *end = f->text + f->size;
    const char *e = memchr(p, '\n', (size_t)(end - p));
    if (!e)
        e = end;
    /* CRLF files: the \r is part of the line break, not of the text. */
    if (e > p && e[-1] == '\r')
        e--;
    *start = p;
    *len = (int)(e - p);
    return 1;
}

tp_span tp_span_join(tp_span a, tp_span b)
{
    if (a.file < 0)
        return b;
    if (b.file != a.file)
        return a;
    int end_a = a.offset + a.length, end_b = b.offset + b.length;
    tp_span first = a.offset <= b.offset ? a : b;
    int end = end_a > end_b ? end_a : end_b;
    first.length = end - first.offset;
    return first;
}

/* Drop "dir/.." pairs and "." components, lexically, so messages say
 * "models/llama.model" rather than "plans/../models/llama.model".
 * Returns a new string. */
char *tp_path_tidy(const char *path)
{
    size_t len = strlen(path);
    char *out = tp_xmalloc(len + 2);
    size_t o = 0;
    int kept = 0;                      /* components a ".." may still remove */
    if (path[0] == '/')
        out[o++] = '/';
    size_t root = o;
    for (const char *in = path; *in;) {
        const char *end = strchr(in, '/');
        size_t n = end ? (size_t)(end - in) : strlen(in);
        bool dotdot = n == 2 && in[0] == '.' && in[1] == '.';
        if (n == 0 || (n == 1 && in[0] == '.') || (dotdot && root && !kept)) {
            /* nothing to keep ("/.." is "/") */
        } else if (dotdot && kept > 0) {
            while (o > root && out[o - 1] != '/')
                o--;                   /* drop the last component ... */
            if (o > root)
                o--;                   /* ... and the '/' before it */
            kept--;
        } else {
            if (o > root)
                out[o++] = '/';
            memcpy(out + o, in, n);
            o += n;
            kept += !dotdot;
        }
        in += n + (end != NULL);
    }
    if (o == 0)
        out[o++] = '.';
    out[o] = '\0';
    return out;
}

char *tp_path_relative_to(const char *base, const char *path)
{
    const char *slash = strrchr(base, '/');
    char *joined = path[0] == '/' || !slash ? tp_xstrdup(path)
                                            : tp_xasprintf("%.*s/%s", (int)(slash - base), base, path);
    char *r = tp_path_tidy(joined);
    free(joined);
    return r;
}
