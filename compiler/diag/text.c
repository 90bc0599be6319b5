/* diag/text.c: the human-readable renderer, in clang's format:
 *
 *   plans/bad.plan:12:5: error: message [check]
 *      12 |     "model.norm": SequenceParallel(),
 *         |     ^~~~~~~~~~~~
 *   models/llama.model:40:9: note: the producer of this value
 *      ...
 *   fix: write RowwiseParallel(input_layouts=Replicate())
 *
 * Diagnostics are separated by a blank line; a summary ("2 errors
 * generated.") follows when there are errors, warnings or unsupported
 * findings. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/diag/diag.h"
#include "util/xalloc.h"

#define TAB_STOP 8

/* clang's escape sequences (llvm::raw_ostream::changeColor). */
#define C_RESET "\033[0m"
#define C_BOLD "\033[1m"
#define C_ERROR "\033[0;1;31m"
#define C_WARNING "\033[0;1;35m"
#define C_NOTE "\033[0;1;36m"
#define C_UNSUPPORTED "\033[0;1;33m"
#define C_CARET "\033[0;1;32m"
#define C_FIXIT "\033[0;32m"

typedef struct text_ctx {
    tp_buf *out;
    const tp_sources *src;
    int color;
} text_ctx;

/* Text that echoes input (a plan key, a path, a config.json string) with
 * its control characters written as \xNN (C0 and DEL) or \uNNNN (C1,
 * U+0080-U+009F, which UTF-8 writes as C2 80-C2 9F): printed raw, an
 * escape sequence in a plan could move the cursor or recolour the
 * terminal of whoever reads the log. Other UTF-8 text is kept. */
static void append_visible(tp_buf *out, const char *s)
{
    for (const char *run = s;; s++) {
        unsigned char ch = (unsigned char)*s;
        bool c1 = ch == 0xC2 && (unsigned char)s[1] >= 0x80 && (unsigned char)s[1] <= 0x9F;
        if (ch && ch >= 0x20 && ch != 0x7F && !c1)
            continue;
        tp_buf_append_n(out, run, (size_t)(s - run));
        if (!ch)
            return;
        if (c1)
            tp_buf_appendf(out, "\\u%04x", (unsigned char)*++s);
        else
            tp_buf_appendf(out, "\\x%02x", ch);
        run = s + 1;
    }
}

static void put_colored(const text_ctx *c, const char *color, const char *s)
{
    if (c->color)
        tp_buf_append(c->out, color);
    append_visible(c->out, s);
    if (c->color)
        tp_buf_append(c->out, C_RESET);
}

static int span_in_file(const text_ctx *c, tp_span sp)
{
    return sp.file >= 0 && sp.file < c->src->count;
}

/* ---- display columns ----
 * The source line is printed with tabs expanded and control characters
 * replaced, so carets are placed by display column, not byte: a tab
 * advances to the next tab stop and UTF-8 continuation bytes take no
 * room. */

static int is_utf8_continuation(unsigned char ch)
{
    return (ch & 0xC0) == 0x80;
}

static int advance(int dcol, unsigned char ch)
{
    if (ch == '\t')
        return (dcol / TAB_STOP + 1) * TAB_STOP;
    return is_utf8_continuation(ch) ? dcol : dcol + 1;
}

/* Display column (0-based) of byte `byte` of the line; bytes past the end
 * of the line count one column each. */
static int display_col(const char *line, int len, int byte)
{
    int dcol = 0;
    for (int i = 0; i < byte && i < len; i++)
        dcol = advance(dcol, (unsigned char)line[i]);
    return byte > len ? dcol + (byte - len) : dcol;
}

/* Control characters are shown as '?': echoing them could move the
 * cursor or recolour the terminal. */
static char visible(unsigned char ch)
{
    return ch < 0x20 || ch == 0x7F ? '?' : (char)ch;
}

static void append_expanded(tp_buf *out, const char *line, int len)
{
    int dcol = 0;
    for (int i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        int next = advance(dcol, ch);
        if (ch == '\t')
            tp_buf_append_char(out, ' ', (size_t)(next - dcol));
        else
            tp_buf_append_char(out, visible(ch), 1);
        dcol = next;
    }
}

/* ---- header line ---- */

static const char *level_color(tp_diag_level level)
{
    switch (level) {
    case TP_ERROR: return C_ERROR;
    case TP_WARNING: return C_WARNING;
    case TP_UNSUPPORTED: return C_UNSUPPORTED;
    default: return C_NOTE;
    }
}

/* "path:line:col: level: message [check]". Without a location, a
 * diagnostic is attributed to "tpcc:" like clang's driver errors, while a
 * note (attached) just follows the diagnostic it belongs to. */
static void header(const text_ctx *c, tp_span sp, tp_diag_level level, int attached,
                   const char *message, const char *check, const char *promoted)
{
    char *loc = NULL;
    if (span_in_file(c, sp))
        loc = tp_xasprintf("%s:%d:%d: ", c->src->files[sp.file].path, sp.line, sp.col);
    else if (!attached)
        loc = tp_xstrdup("tpcc: ");
    if (loc)
        put_colored(c, C_BOLD, loc);
    free(loc);

    char *label = tp_xasprintf("%s: ", tp_diag_level_name(level));
    put_colored(c, level_color(level), label);
    free(label);

    /* a finding made an error says by which option, as clang's [-Werror,-Wx] */
    char *text = check && *check && promoted ? tp_xasprintf("%s [%s, %s]", message, check, promoted)
               : check && *check ? tp_xasprintf("%s [%s]", message, check)
                                 : tp_xstrdup(message);
    /* clang prints the message of errors and warnings in bold. */
    if (level == TP_NOTE)
        append_visible(c->out, text);
    else
        put_colored(c, C_BOLD, text);
    free(text);
    tp_buf_append(c->out, "\n");
}

/* ---- source snippet ---- */

typedef struct snippet_line {
    const char *text;
    int len;
    int width;      /* of the line-number column */
    int indent;     /* display columns before the text: "..." when the line is cut */
} snippet_line;

/* A source line is shown at most this many bytes wide, around the span:
 * a minified or mistaken file (one huge line) must not pour its content
 * into a log. */
enum { SNIPPET_MAX_BYTES = 200 };

static int digits(int n)
{
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

/* The gutter: " %4d | " on the source line, blanks on the lines below. */
static void gutter(const text_ctx *c, const snippet_line *sl, int line_no)
{
    if (line_no > 0)
        tp_buf_appendf(c->out, " %*d |", sl->width, line_no);
    else {
        tp_buf_append_char(c->out, ' ', (size_t)sl->width + 1);
        tp_buf_append(c->out, " |");
    }
}

/* "^~~~" under the span. A span running past the end of the line (or onto
 * the next lines) is underlined to the end of the line; an empty span, or
 * one at the end of the line, gets a lone caret. */
static void caret_line(const text_ctx *c, const snippet_line *sl, tp_span sp)
{
    int start = sp.col - 1;
    if (start < 0)
        start = 0;
    if (start > sl->len)
        start = sl->len;
    int end = sp.length > sl->len - start ? sl->len : start + sp.length;
    int dstart = display_col(sl->text, sl->len, start);
    int dend = display_col(sl->text, sl->len, end);

    tp_buf marks;
    tp_buf_init(&marks);
    tp_buf_append(&marks, "^");
    if (dend - dstart > 1)
        tp_buf_append_char(&marks, '~', (size_t)(dend - dstart - 1));

    gutter(c, sl, 0);
    tp_buf_append_char(c->out, ' ', (size_t)(dstart + 1 + sl->indent));
    put_colored(c, C_CARET, marks.data);
    tp_buf_append(c->out, "\n");
    tp_buf_free(&marks);
}

/* Whether a fix-it can be shown on the line under the caret: it must edit
 * the same line and insert one line of text. */
static int fixit_shown(const tp_fixit *f, tp_span sp)
{
    return f->span.file == sp.file && f->span.line == sp.line &&
           f->replacement[0] != '\0' && strchr(f->replacement, '\n') == NULL;
}

typedef struct placed_fixit {
    int dcol, width;
    const char *text;
} placed_fixit;

static int text_width(const char *text)
{
    int width = 0;
    for (const char *p = text; *p; p++)
        width += !is_utf8_continuation((unsigned char)*p);
    return width;
}

static int overlaps_placed(const placed_fixit *p, int n, int dcol, int width)
{
    for (int i = 0; i < n; i++)
        if (dcol < p[i].dcol + p[i].width && p[i].dcol < dcol + width)
            return 1;
    return 0;
}

/* Insertion sort by column: a diagnostic has a handful of fix-its. */
static void sort_placed(placed_fixit *p, int n)
{
    for (int i = 1; i < n; i++) {
        placed_fixit x = p[i];
        int j = i;
        for (; j > 0 && p[j - 1].dcol > x.dcol; j--)
            p[j] = p[j - 1];
        p[j] = x;
    }
}

/* clang shows the text a fix-it inserts on a line below the caret, at the
 * column where it goes. Fix-its that would cover one shown earlier are
 * left out of this line (the help lines and JSON still carry them). */
static void fixit_line(const text_ctx *c, const snippet_line *sl, const tp_diag *g)
{
    placed_fixit *p = tp_xreallocarray(NULL, (size_t)g->nfixits, sizeof *p);
    int n = 0;
    for (int i = 0; i < g->nfixits; i++) {
        const tp_fixit *f = &g->fixits[i];
        if (!fixit_shown(f, g->span))
            continue;
        int col = f->span.col - 1 < 0 ? 0 : f->span.col - 1;
        placed_fixit x = {display_col(sl->text, sl->len, col), text_width(f->replacement),
                          f->replacement};
        if (x.width > 0 && !overlaps_placed(p, n, x.dcol, x.width))
            p[n++] = x;
    }
    sort_placed(p, n);

    tp_buf line;
    tp_buf_init(&line);
    int cursor = 0;
    for (int i = 0; i < n; i++) {
        tp_buf_append_char(&line, ' ', (size_t)(p[i].dcol - cursor));
        for (const char *t = p[i].text; *t; t++)
            tp_buf_append_char(&line, *t == '\t' ? ' ' : visible((unsigned char)*t), 1);
        cursor = p[i].dcol + p[i].width;
    }
    if (n > 0) {
        gutter(c, sl, 0);
        tp_buf_append(c->out, " ");
        put_colored(c, C_FIXIT, line.data);
        tp_buf_append(c->out, "\n");
    }
    tp_buf_free(&line);
    free(p);
}

/* The source line of sp with its caret line; g (may be NULL) supplies the
 * fix-its to show under it. Nothing is printed when the line is unknown. */
static void snippet(const text_ctx *c, tp_span sp, const tp_diag *g)
{
    snippet_line sl;
    if (!span_in_file(c, sp) || !tp_source_line(c->src, sp.file, sp.line, &sl.text, &sl.len))
        return;
    sl.width = digits(sp.line) > 4 ? digits(sp.line) : 4;
    sl.indent = 0;
    bool cut_after = false;
    if (sl.len > SNIPPET_MAX_BYTES) {
        int start = sp.col - 1 - SNIPPET_MAX_BYTES / 4;
        start = start < 0 ? 0 : start > sl.len ? sl.len : start;
        while (start > 0 && is_utf8_continuation((unsigned char)sl.text[start]))
            start--;
        int end = start + SNIPPET_MAX_BYTES < sl.len ? start + SNIPPET_MAX_BYTES : sl.len;
        while (end < sl.len && end > start && is_utf8_continuation((unsigned char)sl.text[end]))
            end--;
        cut_after = end < sl.len;
        sl.indent = start > 0 ? 3 : 0;
        sl.text += start;
        sl.len = end - start;
        sp.col -= start;
        g = NULL;          /* fix-its' columns are the whole line's */
    }

    gutter(c, &sl, sp.line);
    if (sl.len > 0) {
        tp_buf_append(c->out, sl.indent ? " ..." : " ");
        append_expanded(c->out, sl.text, sl.len);
        if (cut_after)
            tp_buf_append(c->out, "...");
    }
    tp_buf_append(c->out, "\n");
    caret_line(c, &sl, sp);
    if (g)
        fixit_line(c, &sl, g);
}

static void render_diag(const text_ctx *c, const tp_diag *g)
{
    header(c, g->span, g->level, 0, g->message, g->check, g->promoted);
    snippet(c, g->span, g);
    for (int i = 0; i < g->nnotes; i++) {
        header(c, g->notes[i].span, TP_NOTE, 1, g->notes[i].message, NULL, NULL);
        snippet(c, g->notes[i].span, NULL);
    }
    for (int i = 0; i < g->nhelps; i++) {
        put_colored(c, C_CARET, "fix:");
        tp_buf_append(c->out, " ");
        append_visible(c->out, g->helps[i]);
        tp_buf_append(c->out, "\n");
    }
}

static void append_count(tp_buf *out, int n, const char *what)
{
    tp_buf_appendf(out, "%d %s%s", n, what, n == 1 ? "" : "s");
}

/* "1 error generated.", "2 warnings generated.",
 * "2 errors, 1 warning, 1 unsupported generated." */
static void summary(tp_buf *out, const tp_diags *d)
{
    const char *sep = "";
    if (d->errors > 0) {
        append_count(out, d->errors, "error");
        sep = ", ";
    }
    if (d->warnings > 0) {
        tp_buf_append(out, sep);
        append_count(out, d->warnings, "warning");
        sep = ", ";
    }
    if (d->unsupported > 0)
        tp_buf_appendf(out, "%s%d unsupported", sep, d->unsupported);
    tp_buf_append(out, " generated.\n");
}

char *tp_diags_render_text(const tp_diags *d, const tp_sources *src, int color)
{
    tp_buf out;
    tp_buf_init(&out);
    text_ctx c = {&out, src, color};
    int shown = 0;
    for (int i = 0; i < d->count; i++) {
        if (d->items[i].suppression)
            continue;      /* silenced by a "# tpcc: ignore" comment: SARIF only */
        if (shown++ > 0)
            tp_buf_append(&out, "\n");
        render_diag(&c, &d->items[i]);
    }
    if (d->errors > 0 || d->warnings > 0 || d->unsupported > 0) {
        if (shown > 0)
            tp_buf_append(&out, "\n");
        summary(&out, d);
    }
    return tp_buf_take(&out);
}
