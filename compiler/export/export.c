/* export.c: --export: pick the format, and write the result where -o says. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "compiler/export/export.h"
#include "util/atomic_write.h"

int tp_export_format_parse(const char *name)
{
    if (!strcmp(name, "pytorch")) return TP_EXPORT_PYTORCH;
    if (!strcmp(name, "hf")) return TP_EXPORT_HF;
    return -1;
}

char *tp_export(const tp_export_unit *u, const char *plan_path, tp_export_format fmt)
{
    /* neither format has a place for the training script's part: say so
     * rather than drop it unseen */
    if (u->plan->train.block)
        tp_diag_add(u->diags, TP_WARNING, u->plan->train.block->span, "export",
                    "the export carries the parallelize plan only, not train { }: the training script must split "
                    "its batches, clip its gradients and checkpoint its layers' activations as the block says");
    return fmt == TP_EXPORT_PYTORCH ? tp_export_pytorch(u, plan_path) : tp_export_hf(u);
}

int tp_export_write(const char *text, const char *out, char *err, size_t errlen)
{
    size_t len = strlen(text);
    if (!out || !strcmp(out, "-")) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            snprintf(err, errlen, "cannot write the export to stdout: %s", strerror(errno));
            return -1;
        }
        return 0;
    }
    tp_bytes piece = {text, len};
    return tp_write_file_atomic(out, &piece, 1, err, errlen);
}
