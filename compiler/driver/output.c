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

int tp_output_init(tp_output *f, tp_diag_format format, int color, const char *sarif_root,
                     char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->format = format;
    f->render.color = color;
    if (format != TP_FMT_SARIF)
        return 0;
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof buf))
        return tp_error(err, errlen, "cannot find the working directory: %s", strerror(errno));
    f->render.cwd = tp_xstrdup(buf);
    /* resolved as getcwd() is, symbolic links followed, so that the
     * working directory's files compare equal to it */
    if (sarif_root && !realpath(sarif_root, buf))
        return tp_error(err, errlen, "--sarif-root '%s': %s", sarif_root, strerror(errno));
    f->render.root = tp_xstrdup(buf);
    return 0;
}

int tp_output_add(tp_output *f, const char *plan, tp_diags *diags, tp_sources *src, int status)
{
    if (f->format == TP_FMT_TEXT) {
        tp_diag_unit u = {plan, diags, src, status};
        return tp_diags_render(&u, 1, TP_FMT_TEXT, &f->render, stderr);
    }
    f->kept = tp_xreallocarray(f->kept, (size_t)f->count + 1, sizeof *f->kept);
    f->kept[f->count++] = (tp_kept_plan){tp_xstrdup(plan), *diags, *src, status};
    tp_diags_init(diags);
    tp_sources_init(src);
    return 0;
}

int tp_output_finish(tp_output *f)
{
    if (f->format == TP_FMT_TEXT)
        return 0;
    tp_diag_unit *units = tp_xreallocarray(NULL, (size_t)f->count + 1, sizeof *units);
    for (int i = 0; i < f->count; i++)
        units[i] = (tp_diag_unit){f->kept[i].plan, &f->kept[i].diags, &f->kept[i].src, f->kept[i].status};
    int rc = tp_diags_render(units, f->count, f->format, &f->render, stdout);
    free(units);
    return rc;
}

void tp_output_free(tp_output *f)
{
    for (int i = 0; i < f->count; i++) {
        tp_diags_free(&f->kept[i].diags);
        tp_sources_free(&f->kept[i].src);
        free(f->kept[i].plan);
    }
    free(f->kept);
    free((char *)f->render.cwd);
    free((char *)f->render.root);
    memset(f, 0, sizeof *f);
}
