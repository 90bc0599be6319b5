/* output.c: one document for all the plans (see output.h). */
#define _DEFAULT_SOURCE   /* realpath */

#include "compiler/driver/output.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errmsg.h"
#include "util/xalloc.h"

int tp_output_init(tp_output *o, tp_diag_format format, int color, bool summary, FILE *docs,
                   const char *sarif_root, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->format = format;
    o->docs = docs;
    o->render.color = color;
    o->summary = summary && format == TP_FMT_TEXT;
    if (format != TP_FMT_SARIF && format != TP_FMT_GITHUB)
        return 0;
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof buf))
        return tp_error(err, errlen, "cannot find the working directory: %s", strerror(errno));
    o->render.cwd = tp_xstrdup(buf);
    if (format == TP_FMT_GITHUB)
        return 0;
    /* resolved as getcwd() is, symbolic links followed, so that the
     * working directory's files compare equal to it */
    if (sarif_root && !realpath(sarif_root, buf))
        return tp_error(err, errlen, "--sarif-root '%s': %s", sarif_root, strerror(errno));
    o->render.root = tp_xstrdup(buf);
    return 0;
}

int tp_output_add(tp_output *o, const char *plan, tp_diags *diags, tp_sources *src, int status)
{
    o->plans++;
    o->clean += status == 0 && diags->errors == 0 && diags->warnings == 0 && diags->unsupported == 0;
    if (o->format == TP_FMT_TEXT || o->format == TP_FMT_GITHUB) {
        tp_diag_unit u = {plan, diags, src, status};
        return tp_diags_render(&u, 1, o->format, &o->render, o->format == TP_FMT_TEXT ? stderr : o->docs);
    }
    o->kept = tp_xreallocarray(o->kept, (size_t)o->count + 1, sizeof *o->kept);
    o->kept[o->count++] = (tp_kept_plan){tp_xstrdup(plan), *diags, *src, status};
    tp_diags_init(diags);
    tp_sources_init(src);
    return 0;
}

int tp_output_finish(tp_output *o)
{
    if (o->summary && o->clean == o->plans)
        return fprintf(stderr, "All checks passed! (%d plan%s)\n", o->plans, o->plans == 1 ? "" : "s") < 0 ? -1 : 0;
    if (o->format == TP_FMT_TEXT || o->format == TP_FMT_GITHUB)
        return 0;
    tp_diag_unit *units = tp_xreallocarray(NULL, (size_t)o->count + 1, sizeof *units);
    for (int i = 0; i < o->count; i++)
        units[i] = (tp_diag_unit){o->kept[i].plan, &o->kept[i].diags, &o->kept[i].src, o->kept[i].status};
    int rc = tp_diags_render(units, o->count, o->format, &o->render, o->docs);
    free(units);
    return rc;
}

void tp_output_free(tp_output *o)
{
    for (int i = 0; i < o->count; i++) {
        tp_diags_free(&o->kept[i].diags);
        tp_sources_free(&o->kept[i].src);
        free(o->kept[i].plan);
    }
    free(o->kept);
    free((char *)o->render.cwd);
    free((char *)o->render.root);
    memset(o, 0, sizeof *o);
}
