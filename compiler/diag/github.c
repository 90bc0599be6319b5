/* diag/github.c: GitHub Actions' workflow commands, one line per
 * finding, which a workflow step turns into annotations on the pull
 * request (a pull request from a fork, which cannot upload SARIF, too):
 *
 *   ::error file=plans/llama-sp.plan,line=12,col=5,endColumn=17,title=tpcc (relabel)::MESSAGE
 *
 * Warnings are ::warning; unsupported findings (what tpcc cannot handle
 * yet, no failure of the plan) and notes are ::notice. The notes' locations and the
 * fix lines follow the message, one a line. GitHub reads the message up
 * to the end of the line, so '%', CR and LF in it are written %25, %0D,
 * %0A; in a property ',' and ':' end the value too, and are %2C and %3A.
 * Paths are relative to the working directory when they are below it (a
 * workflow runs at the repository's root), as GitHub matches them to the
 * repository's files. Suppressed findings are left out, as in text. */
#include <stdlib.h>
#include <string.h>

#include "compiler/diag/diag.h"
#include "util/xalloc.h"

static void append_escaped(tp_buf *b, const char *s, bool property)
{
    for (; *s; s++) {
        if (*s == '%') tp_buf_append(b, "%25");
        else if (*s == '\r') tp_buf_append(b, "%0D");
        else if (*s == '\n') tp_buf_append(b, "%0A");
        else if (property && *s == ':') tp_buf_append(b, "%3A");
        else if (property && *s == ',') tp_buf_append(b, "%2C");
        else tp_buf_append_n(b, s, 1);
    }
}

/* The file's path as GitHub knows it: below the working directory,
 * relative to it. */
static char *shown_path(const char *path, const char *cwd)
{
    char *tidy = tp_path_tidy(path);
    size_t n = cwd ? strlen(cwd) : 0;
    if (tidy[0] == '/' && n > 1 && !strncmp(tidy, cwd, n) && tidy[n] == '/') {
        char *rel = tp_xstrdup(tidy + n + 1);
        free(tidy);
        return rel;
    }
    return tidy;
}

static const char *command(tp_diag_level level)
{
    switch (level) {
    case TP_ERROR: return "error";
    case TP_WARNING: return "warning";
    default: return "notice";
    }
}

/* The column one past the span when it ends on its own line, else 0. */
static int end_column(const tp_sources *src, tp_span sp)
{
    const tp_source_file *f = &src->files[sp.file];
    if (f->unread || sp.length <= 0 || (size_t)sp.offset + (size_t)sp.length > f->size ||
        memchr(f->text + sp.offset, '\n', (size_t)sp.length))
        return 0;
    return sp.col + sp.length;
}

static void location(tp_buf *msg, const tp_sources *src, tp_span sp, const char *cwd)
{
    if (sp.file < 0 || sp.file >= src->count)
        return;
    char *path = shown_path(src->files[sp.file].path, cwd);
    tp_buf_appendf(msg, "%s:%d:%d: ", path, sp.line, sp.col);
    free(path);
}

static void render_one(tp_buf *b, const tp_diag_unit *u, const tp_diag *g, const char *cwd)
{
    tp_buf_appendf(b, "::%s ", command(g->level));
    bool located = g->span.file >= 0 && g->span.file < u->src->count;
    /* a finding with no place in a file (a bad -D) is its plan's */
    char *path = shown_path(located ? u->src->files[g->span.file].path : u->plan, cwd);
    tp_buf_append(b, "file=");
    append_escaped(b, path, true);
    free(path);
    if (located) {
        tp_buf_appendf(b, ",line=%d,col=%d", g->span.line, g->span.col);
        int end = end_column(u->src, g->span);
        if (end)
            tp_buf_appendf(b, ",endColumn=%d", end);
    }
    tp_buf_append(b, ",title=");
    char *title = *g->check ? tp_xasprintf("tpcc (%s)", g->check) : tp_xstrdup("tpcc");
    append_escaped(b, title, true);
    free(title);
    tp_buf_append(b, "::");

    tp_buf msg;
    tp_buf_init(&msg);
    tp_buf_append(&msg, g->message);
    if (g->promoted)
        tp_buf_appendf(&msg, " [%s]", g->promoted);
    for (int i = 0; i < g->nnotes; i++) {
        tp_buf_append(&msg, "\nnote: ");
        location(&msg, u->src, g->notes[i].span, cwd);
        tp_buf_append(&msg, g->notes[i].message);
    }
    for (int i = 0; i < g->nhelps; i++)
        tp_buf_appendf(&msg, "\nfix: %s", g->helps[i]);
    append_escaped(b, msg.data, false);
    tp_buf_free(&msg);
    tp_buf_append(b, "\n");
}

char *tp_diags_render_github(const tp_diag_unit *u, const char *cwd)
{
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; i < u->diags->count; i++)
        if (!u->diags->items[i].suppression)
            render_one(&b, u, &u->diags->items[i], cwd);
    return tp_buf_take(&b);
}
