/* fuzz_train.c: libFuzzer entry point. The input is what a training run
 * reads besides its schedule and weights, three files joined by
 * TP_FUZZ_SEPARATOR (scratch.h):
 *     TOKENS  SEPARATOR  tprun_state.json  SEPARATOR  optimizer.safetensors
 * TOKENS is the --data stream, read as a .npy when it starts with NumPy's
 * magic, else as llm.c's .bin (runtime/train/tokens.c); the other two make
 * a --resume directory (runtime/train/save.c), a part the input lacks
 * absent from it. tprun's job runs on them as `tprun SCHED --data TOKENS
 * --resume DIR --steps 3` (tr_run, one rank, the CPU backend), the
 * schedule a one-layer Llama of a few hundred weights compiled in this
 * process at the first input, DIR's model.safetensors written from its
 * weights' names and shapes. Whatever the loaders accept must train
 * without touching memory it does not own; whatever they refuse must come
 * with a message. seeds.sh makes real inputs: the files of a two-step
 * run's --save and its token stream. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/driver/compile.h"
#include "runtime/io/safetensors_write.h"
#include "runtime/job/run.h"
#include "sched/load.h"
#include "sched/write.h"
#include "tests/fuzz/scratch.h"

#define STEPS 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The schedule seeds.sh compiles too (tpcc PLAN DEFINES --train). ORDER seeds.sh */
static const char *const defines[] = {"tp=1", "layers=1", "hidden=8", "heads=2", "kv_heads=1",
                                      "ffn=8", "vocab=16", "seq=4", "batch=1"};

static void fail(const char *what, const char *why)
{
    fprintf(stderr, "fuzz_train: %s: %s\n", what, why);
    abort();
}

static const char *compile_schedule(void)
{
    const char *path = tp_fuzz_path("train.sched");
    tp_unit u;
    tp_compile_opts opts = {defines, (int)(sizeof defines / sizeof *defines), NULL, true, TP_F32, true, true,
                            TP_LOSS_NONE, NULL, 0, false, TP_RECOMPUTE_NONE, false, NULL, NULL, 0};
    tp_compile(&u, TPCC_SOURCE_DIR "/plans/llama-tiny.plan", &opts);
    if (u.diags.errors || !u.built)
        fail("compiling plans/llama-tiny.plan", "the plan has errors");
    char err[512];
    int nsettings;
    tp_setting *settings = tp_config_settings(&u.config, &nsettings);
    tp_schedule_meta meta = {.producer = "fuzz_train", .dtype = TP_F32, .config = settings, .nconfig = nsettings,
                             .plan_path = "plans/llama-tiny.plan", .data_parallel = 1, .dp_shard = TP_DP_SHARD_NONE};
    if (tp_schedule_write(&u.ir, &meta, path, err, sizeof err))
        fail("writing the schedule", err);
    free(settings);
    tp_unit_free(&u);
    return path;
}

/* DIR with a model.safetensors of the schedule's weights (small values:
 * only their names and shapes matter to --resume) and a config.json. */
static const char *checkpoint_dir(const char *sched)
{
    const char *dir = tp_fuzz_mkdir("resume");
    char err[600];
    tr_schedule s;
    if (tr_schedule_load(&s, sched, 0, 0, err, sizeof err))
        fail("loading the schedule", err);
    tp_st_tensor *t = calloc((size_t)s.nweights, sizeof *t);
    float *values = calloc((size_t)s.weight_elems + 1, sizeof *values);
    if (!t || !values)
        fail("allocating the weights", "out of memory");
    for (int64_t i = 0; i < s.weight_elems; i++)
        values[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < s.nweights; i++) {
        t[i] = (tp_st_tensor){.name = s.weights[i].name, .ndim = s.weights[i].rank, .data = values};
        memcpy(t[i].shape, s.weights[i].logical, sizeof s.weights[i].logical);
    }
    if (tp_safetensors_write(tp_fuzz_path("resume/model.safetensors"), t, s.nweights, err, sizeof err))
        fail("writing model.safetensors", err);
    if (tp_fuzz_write(tp_fuzz_path("resume/config.json"), (const uint8_t *)"{}\n", 3))
        fail("writing config.json", "cannot write");
    free(values);
    free(t);
    tr_schedule_free(&s);
    return dir;
}

/* Part k of the input as the file `name` (removed where there is none). */
static int put(const char *name, const uint8_t *const parts[], const size_t lens[], int nparts, int k)
{
    const char *path = tp_fuzz_path(name);
    if (k >= nparts) {
        unlink(path);
        return 0;
    }
    return tp_fuzz_write(path, parts[k], lens[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *sched, *dir;
    if (!sched) {
        sched = compile_schedule();
        dir = checkpoint_dir(sched);
    }
    const uint8_t *parts[3];
    size_t lens[3];
    int nparts = tp_fuzz_split(data, size, parts, lens, 3);
    bool npy = lens[0] >= 6 && !memcmp(parts[0], "\x93NUMPY", 6);
    const char *tokens = npy ? "data.npy" : "data.bin";
    unlink(tp_fuzz_path(npy ? "data.bin" : "data.npy"));
    if (put(tokens, parts, lens, nparts, 0) || put("resume/tprun_state.json", parts, lens, nparts, 1) ||
        put("resume/optimizer.safetensors", parts, lens, nparts, 2))
        return 0;
    tr_options o = {.schedule = sched, .tolerance = 1e-4, .quiet = true, .threads = 1, .backend = "cpu",
                    .train = tr_train_defaults()};
    o.train.streams[TR_STREAM_DATA] = tp_fuzz_path(tokens);
    o.train.steps = STEPS;
    o.train.resume = o.weights = dir;
    tp_comm comm;
    tp_comm_single(&comm);
    char err[1200] = "";
    bool everywhere;
    if (tr_run(&o, &comm, &everywhere, err, sizeof err) && !err[0])
        fail("tr_run", "failed without a message");
    return 0;
}
