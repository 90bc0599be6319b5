/* fuzz_plan.c: libFuzzer entry point. The input is written to a plan file
 * in a scratch directory whose models/ links to the shipped models (so
 * `model "../models/llama.model"` resolves) and run through the whole
 * front end, explain table included. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "compiler/driver/compile.h"
#include "tests/fuzz/scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *path;
    if (!path) {
        tp_fuzz_mkdir("plans");
        if (symlink(TPCC_SOURCE_DIR "/models", tp_fuzz_path("models")) && errno != EEXIST) {
            perror("fuzz_plan: models link");
            abort();
        }
        path = tp_fuzz_path("plans/input.plan");
    }
    if (tp_fuzz_write(path, data, size))
        return 0;
    tp_compile_opts opts = {NULL, 0, NULL, true, TP_F32, true, false, TP_LOSS_NONE, NULL, 0, false, TP_RECOMPUTE_NONE,
                            false, NULL, NULL, 0};
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
