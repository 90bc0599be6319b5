/* fuzz_plan.c: libFuzzer entry point. The input is written to a plan file
 * in a scratch directory whose models/ links to the shipped models (so
 * `model "../models/llama.model"` resolves) and run through the whole
 * front end, explain table included. */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "compiler/driver/compile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[600];
    if (!path[0]) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tpcc-fuzz-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        char plans[540], models[540];
        snprintf(plans, sizeof plans, "%s/plans", dir);
        snprintf(models, sizeof models, "%s/models", dir);
        if ((mkdir(dir, 0700) && errno != EEXIST) || (mkdir(plans, 0700) && errno != EEXIST) ||
            (symlink(TPCC_SOURCE_DIR "/models", models) && errno != EEXIST)) {
            perror("fuzz_plan: scratch directory");
            abort();
        }
        snprintf(path, sizeof path, "%s/input.plan", plans);
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    size_t wrote = fwrite(data, 1, size, f);
    if (fclose(f) != 0 || wrote != size)
        return 0;
    tp_compile_opts opts = {NULL, 0, NULL, true, TP_F32, true, false, TP_LOSS_NONE, NULL, 0};
    tp_unit u;
    tp_compile(&u, path, &opts);
    tp_diags_sort(&u.diags);
    char *text = tp_diags_render_text(&u.diags, &u.src, 0);
    free(text);
    if (u.built) {
        FILE *devnull = fopen("/dev/null", "w");
        if (devnull) {
            tp_explain_print(&u.analysis, &u.plan, devnull);
            fclose(devnull);
        }
    }
    tp_unit_free(&u);
    return 0;
}
