/* export.c: --export: pick the format, and write the result where -o says
 * without ever replacing an input. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include "compiler/export/export.h"
#include "util/atomic_write.h"

int tp_export_format_parse(const char *name)
{
    if (!strcmp(name, "pytorch")) return TP_EXPORT_PYTORCH;
    if (!strcmp(name, "hf")) return TP_EXPORT_HF;
    return -1;
}

char *tp_export(tp_unit *u, const char *plan_path, tp_export_format fmt)
{
    return fmt == TP_EXPORT_PYTORCH ? tp_export_pytorch(u, plan_path) : tp_export_hf(u);
}

const char *tp_export_key(const tp_style *s)
{
    return s->entry->kids[0]->str;
}

void tp_export_pystr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Same file: the same device and inode (a path spelled differently, a
 * hard or symbolic link). */
static bool same_file(const char *a, const struct stat *bst)
{
    struct stat ast;
    return stat(a, &ast) == 0 && ast.st_dev == bst->st_dev && ast.st_ino == bst->st_ino;
}

int tp_export_write(const tp_unit *u, const char *text, const char *out, char *err, size_t errlen)
{
    size_t len = strlen(text);
    if (!out || !strcmp(out, "-")) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            snprintf(err, errlen, "cannot write the export to stdout: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    struct stat ost;
    if (stat(out, &ost) == 0) {
        /* the sources hold the plan, its model files and --hf-config's config.json */
        for (int i = 0; i < u->src.count; i++)
            if (same_file(u->src.files[i].path, &ost)) {
                snprintf(err, errlen, "-o %s is an input (%s); the export goes to a new file, such as "
                         "parallelize_plan.py", out, u->src.files[i].path);
                return -1;
            }
    }
    tp_bytes piece = {text, len};
    return tp_write_file_atomic(out, &piece, 1, err, errlen);
}
