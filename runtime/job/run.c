/* run.c: see run.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/exec/exec.h"
#include "runtime/backends/cpu/blas_info.h"
#include "runtime/backends/cpu/vec.h"
#include "runtime/backends/gpu.h"
#include "runtime/comm/node.h"
#include "runtime/comm/progress.h"
#include "runtime/io/npy.h"
#include "runtime/job/run.h"
#include "runtime/exec/weights_load.h"
#include "runtime/train/dp.h"
#include "runtime/io/weights.h"
#include "runtime/train/gather.h"
#include "runtime/train/labels.h"
#include "runtime/train/segments.h"
#include "runtime/train/train.h"
#include "sched/validate.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/json_quote.h"
#include "util/xalloc.h"

typedef struct job {
    const tr_options *o;
    tp_comm *comm;
    tr_schedule s;
    tr_exec x;
    tp_checkpoint *ckpt;
    int64_t vocab;              /* rows of the input embedding: valid token ids */
    size_t weight_bytes_read;
    uint64_t data_bytes_read;   /* training: of its data streams (batches.h) */
    bool everywhere;            /* the failure in err is every rank's (tp_agree): no abort needed */
    int32_t *ids, *labels;      /* the inputs, host copies: every step writes them again, since
                                   the arena reuses their memory once they are read */
    const char *labels_from;    /* --labels, or "tokens" for a loss given none; NULL: no loss */
    int32_t *segments;          /* of the ids, where the schedule takes them (segments.h) */
    int nsteps;                 /* forward steps run (--repeat) */
    double *step_seconds;       /* each step's time, in the order run */
    float *masters;             /* a bf16 training schedule's weights as read, fp32: the optimizer's
                                   master weights start from them, not from their bf16 rounding */
    tp_rank_node *nodes;             /* rank 0: every rank's node, for the rank map (NULL for one rank) */
    char *err;
    size_t errlen;
} job;

/* The message, without the rank: tr_run names the rank at the end, this
 * one's or, for a failure every rank agreed on, the one it came from. */
static int fail(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(job *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_verror(j->err, j->errlen, fmt, ap);
    va_end(ap);
    return 1;
}

/* The end of an I/O phase (progress.h), which every rank reaches: they
 * leave it together, a failure on one every rank's (tp_agree). */
static int agreed(job *j, int rc)
{
    return tp_agree(j->comm, rc, &j->everywhere, j->err, j->errlen) ? 1 : 0;
}

static bool rank0(const job *j) { return j->comm->rank == 0; }

/* ---- weights ------------------------------------------------------------ */

static void progress(void *ctx, int done, int total)
{
    const job *j = ctx;
    if (!rank0(j) || j->o->quiet || !isatty(STDERR_FILENO))
        return;
    int width = 30, filled = total ? done * width / total : width;
    fprintf(stderr, "\rloading weights [%.*s%*s] %d/%d", filled, "##############################", width - filled, "",
            done, total);
    if (done == total)
        fputc('\n', stderr);
}

/* Straight into the backend's weight region (weights_load.h); a bf16
 * training schedule keeps the float32 values too, for the optimizer's
 * master weights. */
static int load_weights(job *j)
{
    const tr_schedule *s = &j->s;
    char why[600];
    if (j->o->weights && tp_checkpoint_open(&j->ckpt, j->o->weights, why, sizeof why))
        return fail(j, "%s", why);
    /* a checkpoint of more layers than the schedule's loads in part: as
     * transformers, say so; --save would copy its config.json beside a
     * model it does not describe */
    const char *unused_name;
    size_t unused = j->ckpt ? tr_weights_unused(s, j->ckpt, &unused_name) : 0;
    char extra[400];
    if (unused)
        snprintf(extra, sizeof extra, "%s holds %zu tensors the schedule's model does not take (%s%s)", j->o->weights,
                 unused, unused_name, unused > 1 ? ", ..." : "");
    if (unused && j->o->train.save)
        return fail(j, "%s: --save would copy its config.json, which describes another model; compile the schedule "
                    "with tpcc --hf-config on that config.json", extra);
    if (unused && rank0(j) && !j->o->quiet)
        fprintf(stderr, "tprun: warning: %s, left unused: is it a checkpoint of another configuration?\n", extra);
    if (s->grads && j->x.be->dtype != TP_F32)
        j->masters = tp_xcalloc((size_t)s->weight_elems + 1, sizeof *j->masters);   /* gaps: 0 */
    tr_weight_source src = {.ckpt = j->ckpt, .seed = j->o->seed};
    tr_weights_sink dst = {.region = j->x.weights, .dtype = j->x.be->dtype, .fp32_copy = j->masters,
                           .runs = s->dp_shard == TP_DP_SHARD_PARAMETERS, .progress = progress, .ctx = j};
    if (tr_weights_load(&j->x, &src, &dst, why, sizeof why))
        return fail(j, "%s", why);
    j->weight_bytes_read = j->ckpt ? tp_checkpoint_bytes_read_rank(j->ckpt, s->rank) : 0;
    return 0;
}

/* ---- inputs ------------------------------------------------------------- */

/* "1,2,3" or a .npy file of n ids: 1-D, or 2-D of the input's [batch,
 * seq] (a [seq, batch] array holds as many ids, in another order). */
static int read_ids(job *j, const char *what, const char *arg, int32_t *dst, int64_t n)
{
    const tr_buf *input = &j->s.bufs[j->s.input_ids];
    char why[600];
    size_t len = strlen(arg);
    if (len > 4 && !strcmp(arg + len - 4, ".npy")) {
        int32_t *v;
        int64_t shape[2];
        int ndim;
        if (tp_npy_read_tokens(arg, &v, shape, &ndim, why, sizeof why))
            return fail(j, "%s: %s", what, why);
        int64_t count = shape[0] * (ndim == 2 ? shape[1] : 1);
        if (ndim == 2 && input->rank == 2 && count == n && shape[0] != input->shape[0]) {
            free(v);
            return fail(j, "%s: %s has shape [%lld, %lld], the schedule takes [%lld, %lld] (batch, seq)", what, arg,
                        (long long)shape[0], (long long)shape[1], (long long)input->shape[0],
                        (long long)input->shape[1]);
        }
        if (count != n) {
            free(v);
            return fail(j, "%s: %s holds %lld ids, the schedule takes %lld (batch x seq)", what, arg, (long long)count,
                        (long long)n);
        }
        memcpy(dst, v, (size_t)n * sizeof *dst);
        free(v);
        return 0;
    }
    int64_t k = 0;
    for (const char *p = arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < INT32_MIN || v > INT32_MAX)
            return fail(j, "%s: '%s' is not a comma-separated list of integers (or a .npy file)", what, arg);
        if (k < n)
            dst[k] = (int32_t)v;
        k++;
        p = *end ? end + 1 : end;
    }
    if (k != n)
        return fail(j, "%s: %lld ids given, the schedule takes %lld (batch x seq)", what, (long long)k, (long long)n);
    return 0;
}

/* --labels goes with a loss: a schedule that computes one scores them, or
 * without --labels the input ids (model(input_ids, labels=input_ids), the
 * language-model loss of the text itself); one whose model returns only
 * logits has nothing to use them for. --out and --compare go with logits. */
static int options_match_schedule(job *j)
{
    const tr_schedule *s = &j->s;
    j->labels_from = s->loss < 0 ? NULL : j->o->labels ? j->o->labels : "tokens";
    if (s->loss < 0 && j->o->labels)
        return fail(j, "--labels: %s computes no loss (its model returns the logits); drop --labels, or compile a "
                    "model whose forward returns cross_entropy(logits, labels)", j->o->schedule);
    if (s->logits < 0 && (j->o->out || j->o->compare))
        return fail(j, "%s outputs no logits: %s has nothing to %s", j->o->schedule,
                    j->o->compare ? "--compare" : "--out", j->o->compare ? "compare" : "write");
    return 0;
}

static int read_inputs(job *j)
{
    const tr_schedule *s = &j->s;
    int rc = options_match_schedule(j);
    if (rc)
        return rc;
    int64_t n = tr_buf_elems(&s->bufs[s->input_ids]);
    int32_t *ids = j->ids = tp_xmalloc((size_t)n * sizeof *ids);
    int32_t *labels = j->labels = tp_xmalloc((size_t)n * sizeof *labels);
    if (j->o->tokens) {
        rc = read_ids(j, "--tokens", j->o->tokens, ids, n);
    } else {
        uint64_t z = j->o->seed * 0x9E3779B97F4A7C15ull + 1;    /* same ids on every rank */
        for (int64_t i = 0; i < n; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((z >> 33) % (uint64_t)j->vocab);
        }
    }
    for (int64_t i = 0; i < n && !rc; i++)
        if (ids[i] < 0 || ids[i] >= j->vocab)
            rc = fail(j, "token id %d at position %lld is outside the vocabulary [0, %lld)", ids[i], (long long)i,
                      (long long)j->vocab);
    if (!rc && s->segments >= 0) {
        const tr_buf *b = &s->bufs[s->input_ids];
        int64_t seq = b->rank > 1 ? b->shape[b->rank - 1] : n;
        j->segments = tp_xmalloc((size_t)n * sizeof *j->segments);
        const tr_segment_marks marks = {.ids = ids, .pad_id = j->o->train.pad_id, .eos_id = j->o->train.eos_id};
        tr_segments_of(j->segments, &marks, n / seq, seq);
    }
    if (rc || !j->labels_from)
        return rc;
    bool from_ids = !strcmp(j->labels_from, "tokens");
    if (!from_ids && read_ids(j, "--labels", j->labels_from, labels, n))
        return -1;
    if (from_ids)
        memcpy(labels, ids, (size_t)n * sizeof *labels);
    int64_t bad = tr_labels_first_invalid(labels, n, j->vocab, j->o->train.ignore_index);
    if (bad >= 0)
        return fail(j, "label %d at position %lld is neither the ignore index %d nor in [0, %lld)", labels[bad],
                    (long long)bad, j->o->train.ignore_index, (long long)j->vocab);
    tr_labels_map_ignored(labels, n, j->o->train.ignore_index);
    if (from_ids && s->label_shift == 0) {   /* the loss scores each row's next tokens */
        const tr_buf *b = &s->bufs[s->labels];
        int64_t seq = b->rank > 1 ? b->shape[b->rank - 1] : n;
        int32_t *next = tp_xmalloc((size_t)n * sizeof *next);
        tr_labels_next_tokens(next, labels, n / seq, seq);
        free(j->labels);
        j->labels = next;
    }
    return 0;
}

/* The inputs into the arena, before each step. */
static void write_inputs(job *j)
{
    const tr_schedule *s = &j->s;
    tr_exec_write_buf(&j->x, s->input_ids, j->ids);
    if (s->labels >= 0 && j->labels_from)
        tr_exec_write_buf(&j->x, s->labels, j->labels);
    if (s->segments >= 0)
        tr_exec_write_buf(&j->x, s->segments, j->segments);
}

/* ---- outputs ------------------------------------------------------------ */

/* The full logits on rank 0 ([batch, seq, vocab], padding dropped) in
 * *out; NULL elsewhere. Returns 0 or an exit status. */
static int gather_logits(job *j, float **out, int64_t shape[3])
{
    *out = NULL;
    const tr_schedule *s = &j->s;
    const tr_buf *b = &s->bufs[s->logits];
    int64_t local = tr_buf_elems(b), world = j->comm->world;
    bool sharded = s->logits_pl.kind == TP_SHARD;
    float *mine = tp_xmalloc((size_t)local * sizeof *mine);
    tr_exec_read_buf(&j->x, s->logits, mine);
    float *all = rank0(j) ? tp_xmalloc((size_t)(local * world) * sizeof *all) : NULL;
    char why[400];
    if (sharded && j->comm->ops->gather_bytes(j->comm, all, mine, (size_t)local * sizeof *mine, why, sizeof why)) {
        free(mine);
        free(all);
        return fail(j, "%s", why);
    }
    float *full = NULL;
    int64_t fs[TP_MAX_RANK];
    memcpy(fs, b->shape, sizeof fs);
    if (rank0(j)) {
        if (sharded) {
            fs[s->logits_pl.dim] *= world;
            full = tp_xmalloc((size_t)(local * world) * sizeof *full);
            /* host memory: the CPU kernels rearrange it, whatever backend ran */
            tp_backend_cpu()->join_blocks(full, all, fs, b->rank, s->logits_pl.dim, (int)world);
        } else {
            full = mine;
            mine = NULL;
        }
    }
    free(mine);
    free(all);
    if (!full)
        return 0;
    /* drop the padded vocabulary columns */
    int64_t rows = tr_buf_elems(b) * (sharded ? world : 1) / fs[b->rank - 1], vpad = fs[b->rank - 1];
    for (int64_t r = 0; r < rows; r++)
        memmove(full + r * s->vocab, full + r * vpad, (size_t)s->vocab * sizeof *full);
    shape[0] = fs[0];
    shape[1] = b->rank > 2 ? fs[1] : 1;
    shape[2] = s->vocab;
    *out = full;
    return 0;
}

static int compare_logits(job *j, const float *logits, const int64_t shape[3])
{
    float *ref;
    int64_t rshape[8];
    int rnd;
    char why[600];
    if (tp_npy_read_f32(j->o->compare, &ref, rshape, &rnd, why, sizeof why))
        return fail(j, "--compare: %s", why);
    int64_t n = shape[0] * shape[1] * shape[2], rn = 1;
    for (int i = 0; i < rnd; i++)
        rn *= rshape[i];
    if (rn != n) {
        free(ref);
        return fail(j, "--compare: %s holds %lld values, the logits have %lld", j->o->compare, (long long)rn, (long long)n);
    }
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)logits[i] - (double)ref[i]);
        if (!(d <= worst)) {          /* NaN counts as the worst */
            worst = d;
            at = i;
        }
    }
    free(ref);
    bool ok = worst <= j->o->tolerance;
    if (!j->o->quiet)
        printf("  agreement   max |logits - %s| = %.3g at %lld (tolerance %.3g): %s\n", j->o->compare, worst,
               (long long)at, j->o->tolerance, ok ? "ok" : "MISMATCH");
    return ok ? 0 : fail(j, "the logits differ from %s by %.3g (tolerance %.3g)", j->o->compare, worst, j->o->tolerance);
}

/* ---- where the ranks run ------------------------------------------------------ */

/* Rank 0 gathers every rank's node (collective: every rank calls it) and
 * warns of a tensor-parallel group that crosses nodes: its collectives,
 * on every layer, would run over the network. */
static int locate_ranks(job *j)
{
    int world = j->comm->world;
    if (world == 1)
        return 0;
    tp_rank_node *all = rank0(j) ? tp_xcalloc((size_t)world, sizeof *all) : NULL;
    char why[400];
    if (j->comm->ops->gather_bytes(j->comm, all, &j->comm->node, sizeof *all, why, sizeof why)) {
        free(all);
        return fail(j, "gathering which node each rank runs on: %s", why);
    }
    j->nodes = all;
    char warning[600];
    if (all && !j->o->quiet && tp_node_tp_spans(all, world, j->s.world, warning, sizeof warning))
        fprintf(stderr, "tprun: warning: %s\n", warning);
    return 0;
}

/* The header of a run's report: the schedule, the ranks and the backend
 * (with the communicator of a device backend's ranks: nccl, or mpi-staged
 * where they share GPUs), and for several ranks where each runs (rank 0,
 * after locate_ranks) */
static void print_header(const job *j)
{
    int world = j->comm->world;
    printf("tprun: %s (%d rank%s, %s backend", j->o->schedule, world, world == 1 ? "" : "s", j->x.be->name);
    if (world > 1 && !j->x.be->host_memory)
        printf(", %s collectives", j->comm->ops->name);
    printf(")\n");
    if (!j->nodes)
        return;
    tp_buf map;
    tp_buf_init(&map);
    tp_node_rank_map(&map, j->nodes, world, j->s.world, "              ");
    printf("  ranks       %s", map.data);
    tp_buf_free(&map);
}

static void print_summary(job *j, const float *logits, const int64_t shape[3], float loss)
{
    const tr_schedule *s = &j->s;
    print_header(j);
    printf("  plan        %s, produced by %s\n", s->plan, s->producer);
    printf("  weights     %s\n", j->o->weights ? j->o->weights : "seeded initialisation");
    printf("  logits      [%lld, %lld, %lld]\n", (long long)shape[0], (long long)shape[1], (long long)shape[2]);
    if (j->labels_from)
        printf("  loss        %.6f%s\n", loss, j->o->labels ? "" : " (labels: the input ids)");
    printf("  next token  ");
    for (int64_t b = 0; b < shape[0]; b++) {       /* argmax at the last position of each sequence */
        const float *row = logits + ((b + 1) * shape[1] - 1) * shape[2];
        int64_t best = 0;
        for (int64_t v = 1; v < shape[2]; v++)
            if (row[v] > row[best])
                best = v;
        printf("%s%lld", b ? ", " : "", (long long)best);
    }
    double sec = j->x.profile.total_seconds;
    printf("\n  forward     %.3f ms, %.0f tokens/s", sec * 1e3, sec > 0 ? (double)(shape[0] * shape[1]) / sec : 0);
    if (j->nsteps > 1)
        printf(" (median of %d steps)", j->nsteps);
    printf("\n");
}

static int outputs(job *j)
{
    const tr_schedule *s = &j->s;
    float loss = NAN;
    if (s->loss >= 0)
        tr_exec_read_buf(&j->x, s->loss, &loss);
    /* a quiet run without --out or --compare reads no logits: no host copy
     * of them (every rank has the same options, so all skip the gather) */
    if (s->logits < 0 || (j->o->quiet && !j->o->out && !j->o->compare))
        return 0;
    int64_t shape[3];
    float *logits;
    int rc = gather_logits(j, &logits, shape);
    if (rc || !logits)
        return rc;
    char why[600];
    if (!j->o->quiet)
        print_summary(j, logits, shape, loss);
    if (j->o->out && tp_npy_write_f32(j->o->out, logits, shape, 3, why, sizeof why))
        rc = fail(j, "--out: %s", why);
    if (!rc && j->o->compare)
        rc = compare_logits(j, logits, shape);
    free(logits);
    return rc;
}

/* ---- profile and trace ----------------------------------------------------- */

typedef struct rank_stats {
    double seconds[TP_OP_COUNT];
    double count[TP_OP_COUNT];
    double phase[TP_PHASE_COUNT], dp, optimizer;
    double comm_bytes, weight_bytes, data_bytes, total;
} rank_stats;

static int gather_stats(job *j, rank_stats *all)
{
    rank_stats mine = {0};
    for (int k = 0; k < TP_OP_COUNT; k++) {
        mine.seconds[k] = j->x.profile.seconds[k];
        mine.count[k] = j->x.profile.count[k];
    }
    for (int k = 0; k < TP_PHASE_COUNT; k++)
        mine.phase[k] = j->x.profile.phase_seconds[k];
    mine.dp = j->x.profile.dp_seconds;
    mine.optimizer = j->x.profile.optimizer_seconds;
    mine.comm_bytes = j->x.profile.comm_bytes;
    mine.weight_bytes = (double)j->weight_bytes_read;
    mine.data_bytes = (double)j->data_bytes_read;
    mine.total = j->x.profile.total_seconds;
    char why[400];
    if (j->comm->ops->gather_bytes(j->comm, all, &mine, sizeof mine, why, sizeof why))
        return fail(j, "%s", why);
    return 0;
}

/* The CPU backend's BLAS and its kernels, the ISA copy of its own vector
 * loops (vec.h), and a warning when the BLAS kernels are weaker than the
 * CPU's (blas_info.h). */
static void print_blas(const job *j)
{
    char line[600], warn[600];
    tp_blas_describe(line, sizeof line, warn, sizeof warn);
    printf("profile: BLAS %s; CPU loops %s; %d CPU thread%s per rank\n", line, tp_cpu_vec_host()->isa, j->o->threads,
           j->o->threads == 1 ? "" : "s");
    if (*warn)
        fprintf(stderr, "tprun: warning: %s\n", warn);
}

/* A training step's phases: the schedule's (forward, backward, the
 * gradients' reduction over tp) and the trainer's. */
static void print_phases(const rank_stats *r)
{
    printf("  phases            ");
    for (int k = 0; k < TP_PHASE_COUNT; k++)
        printf(" %s %.3f ms,", tp_phase_names[k], r->phase[k] * 1e3);
    printf(" dp_average %.3f ms, optimizer %.3f ms\n", r->dp * 1e3, r->optimizer * 1e3);
}

static void print_profile(const job *j, const rank_stats *all)
{
    if (j->x.be == tp_backend_cpu())
        print_blas(j);
    const bool training = j->s.grads != NULL;
    for (int r = 0; r < j->comm->world; r++) {
        char median[48] = "";
        if (j->nsteps > 1)
            snprintf(median, sizeof median, " (median of %d steps)", j->nsteps);
        char data[64] = "";
        if (training)
            snprintf(data, sizeof data, ", %.1f KiB of data read", all[r].data_bytes / 1024);
        printf("profile, rank %d: %.3f ms %s%s, %.1f KiB moved by collectives, %.1f KiB of weights read%s\n", r,
               all[r].total * 1e3, training ? "per training step" : "forward", median, all[r].comm_bytes / 1024,
               all[r].weight_bytes / 1024, data);
        if (training)
            print_phases(&all[r]);
        for (int k = 0; k < TP_OP_COUNT; k++)
            if (all[r].count[k])
                printf("  %-18s %5.0f x %10.3f ms  %5.1f%%\n", tp_op_names[k], all[r].count[k], all[r].seconds[k] * 1e3,
                       all[r].total > 0 ? 100 * all[r].seconds[k] / all[r].total : 0);
    }
}

/* --profile-json and --trace: the document built in memory, then written
 * atomically (a reader never sees half of it; a failure leaves the old
 * file), with every name from outside (paths, ops, modules) escaped. */
static int write_json(job *j, const char *option, const char *path, tp_buf *doc)
{
    char why[600];
    const tp_bytes piece = {doc->data, doc->len};
    int rc = tp_write_file_atomic(path, &piece, 1, why, sizeof why) ? fail(j, "%s: %s", option, why) : 0;
    tp_buf_free(doc);
    return rc;
}

static int write_profile_json(job *j, const rank_stats *all, const double *steps)
{
    tp_buf f = {0};
    tp_buf_append(&f, "{\"schedule\": ");
    tp_buf_append_json_string(&f, j->o->schedule);
    tp_buf_append(&f, ", \"ranks\": [");
    for (int r = 0; r < j->comm->world; r++) {
        tp_buf_appendf(&f, "%s\n  {\"rank\": %d, \"%s\": %.9g, \"weight_bytes_read\": %.0f, "
                          "\"collective_bytes\": %.0f, ", r ? "," : "", r,
                       j->s.grads ? "step_seconds" : "forward_seconds", all[r].total, all[r].weight_bytes,
                       all[r].comm_bytes);
        if (j->s.grads) {
            tp_buf_appendf(&f, "\"data_bytes_read\": %.0f, ", all[r].data_bytes);
            tp_buf_append(&f, "\"phases\": {");
            for (int k = 0; k < TP_PHASE_COUNT; k++)
                tp_buf_appendf(&f, "\"%s\": %.9g, ", tp_phase_names[k], all[r].phase[k]);
            tp_buf_appendf(&f, "\"dp_average\": %.9g, \"optimizer\": %.9g}, ", all[r].dp, all[r].optimizer);
        }
        tp_buf_append(&f, "\"ops\": {");
        int first = 1;
        for (int k = 0; k < TP_OP_COUNT; k++)
            if (all[r].count[k]) {
                tp_buf_append(&f, first ? "" : ", ");
                tp_buf_append_json_string(&f, tp_op_names[k]);
                tp_buf_appendf(&f, ": {\"count\": %.0f, \"seconds\": %.9g}", all[r].count[k], all[r].seconds[k]);
                first = 0;
            }
        tp_buf_append(&f, "}, \"steps\": [");
        for (int i = 0; i < j->nsteps; i++)
            tp_buf_appendf(&f, "%s%.9g", i ? ", " : "", steps[(size_t)r * j->nsteps + i]);
        tp_buf_append(&f, "]}");
    }
    tp_buf_append(&f, "\n]}\n");
    return write_json(j, "--profile-json", j->o->profile_json, &f);
}

/* Chrome trace events: one track (pid) per rank, compute and collectives
 * on separate threads. Every rank runs the same ops, so each sends its
 * (start, duration) pairs and rank 0 writes them all. */
static int write_trace(job *j)
{
    const tr_schedule *s = &j->s;
    int n = s->nops, w = j->comm->world;
    double *mine = tp_xmalloc((size_t)(2 * n + 1) * sizeof *mine), *all = NULL;
    for (int i = 0; i < n; i++) {
        mine[2 * i] = j->x.trace[i].start_us;
        mine[2 * i + 1] = j->x.trace[i].dur_us;
    }
    if (rank0(j))
        all = tp_xmalloc((size_t)(2 * n * w + 1) * sizeof *all);
    char why[400];
    int rc = 0;
    if (j->comm->ops->gather_bytes(j->comm, all, mine, (size_t)(2 * n) * sizeof *mine, why, sizeof why))
        rc = fail(j, "%s", why);
    if (!rc && rank0(j)) {
        tp_buf f = {0};
        tp_buf_append(&f, "{\"traceEvents\": [\n");
        for (int r = 0; r < w; r++) {
            tp_buf_appendf(&f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
                           r ? ",\n" : "", r, r);
            for (int i = 0; i < n; i++) {
                const tr_op *op = &s->ops[i];
                const bool coll = tp_op_is_collective(op->kind);
                tp_buf_append(&f, ",\n{\"name\": ");
                tp_buf_append_json_string(&f, tp_op_names[op->kind]);
                tp_buf_appendf(&f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                                  "\"dur\": %.3f, \"args\": {\"module\": ",
                               coll ? "collective" : "compute", r, coll ? 1 : 0, all[(size_t)r * 2 * n + 2 * i],
                               all[(size_t)r * 2 * n + 2 * i + 1]);
                tp_buf_append_json_string(&f, op->module);
                tp_buf_appendf(&f, ", \"phase\": \"%s\"}}", tp_phase_names[op->phase]);
            }
        }
        tp_buf_append(&f, "\n]}\n");
        rc = write_json(j, "--trace", j->o->trace, &f);
    }
    free(mine);
    free(all);
    return rc;
}

static int report(job *j)
{
    if (!j->o->profile && !j->o->profile_json)
        return j->o->trace ? write_trace(j) : 0;
    rank_stats *all = tp_xcalloc((size_t)j->comm->world, sizeof *all);
    double *steps = tp_xcalloc((size_t)j->comm->world * (size_t)j->nsteps, sizeof *steps);
    char why[400];
    int rc = gather_stats(j, all);
    if (!rc && j->comm->ops->gather_bytes(j->comm, steps, j->step_seconds, (size_t)j->nsteps * sizeof *steps, why,
                                          sizeof why))
        rc = fail(j, "%s", why);
    if (!rc && rank0(j) && j->o->profile)
        print_profile(j, all);
    if (!rc && rank0(j) && j->o->profile_json)
        rc = write_profile_json(j, all, steps);
    free(all);
    free(steps);
    if (!rc && j->o->trace)
        rc = write_trace(j);
    return rc;
}

/* ---- steps ---------------------------------------------------------------- */

/* --repeat N: the forward N times on the same inputs, written again before
 * each step (the memory plan reuses their arena space once they are read);
 * every op rewrites its output, so each step computes the same numbers.
 * The logits and the trace are the last step's; the profile, the median
 * step's. */
static int run_forward(job *j)
{
    char why[900];
    j->nsteps = j->o->repeat > 0 ? j->o->repeat : 1;
    j->step_seconds = tp_xcalloc((size_t)j->nsteps, sizeof *j->step_seconds);
    tr_profile *steps = tp_xcalloc((size_t)j->nsteps, sizeof *steps);
    for (int i = 0; i < j->nsteps; i++) {
        memset(&j->x.profile, 0, sizeof j->x.profile);
        write_inputs(j);
        if (tr_exec_run(&j->x, why, sizeof why)) {
            free(steps);
            return fail(j, "%s", why);
        }
        steps[i] = j->x.profile;
    }
    tr_profile_keep_median(&j->x.profile, steps, j->nsteps, j->step_seconds);
    free(steps);
    return 0;
}

/* A training schedule takes --data and --steps and nothing of a forward
 * run's inputs and outputs; a forward schedule takes no training option. */
static int options_match_training(job *j)
{
    const tr_options *o = j->o;
    if (!j->s.grads) {
        bool streams = false;
        for (int k = 0; k < TR_STREAM_KINDS; k++)
            streams |= o->train.streams[k] || o->train.eval[k];
        if (streams || o->train.steps || o->train.log_json || o->train.grads_out || o->train.save ||
            o->train.max_shard_given || o->train.resume || o->train.micro_batches > 1 || o->train.epochs ||
            o->train.shuffle || o->train.eval_every || o->train.no_decay)
            return fail(j, "%s is a forward schedule: --data, --steps and the other training options go with a "
                        "schedule compiled with tpcc PLAN --train -o FILE.sched", o->schedule);
        return 0;
    }
    if ((!o->train.steps && !o->train.epochs) || !o->train.streams[TR_STREAM_DATA])
        return fail(j, "%s is a training schedule (tpcc --train): give it --data TOKENS and --steps N (or --epochs "
                    "E, every step of E passes over the data)", o->schedule);
    if (o->repeat)
        return fail(j, "%s is a training schedule: --repeat repeats a forward step; a training run takes --steps N "
                    "(--log-json FILE records each step's time)", o->schedule);
    if (o->tokens || o->out || o->compare)
        return fail(j, "%s is a training schedule: --tokens, --out and --compare go with forward schedules; it "
                    "reads its batches from --data", o->schedule);
    if (o->labels && !strcmp(o->labels, "tokens"))
        return fail(j, "%s is a training schedule: its labels are the --data tokens already, unless --labels FILE "
                    "gives a stream of them beside --data", o->schedule);
    return 0;
}

int tr_run(const tr_options *o, tp_comm *comm, bool *everywhere, char *err, size_t errlen)
{
    job j = {0};
    j.o = o;
    j.comm = comm;
    j.err = err;
    j.errlen = errlen;
    err[0] = '\0';
    char why[900];
    tp_progress_io("loading the schedule");
    int rc = tr_schedule_load(&j.s, o->schedule, comm->rank, comm->world > 1 ? comm->world : 0, why, sizeof why)
                 ? fail(&j, "%s", why) : 0;
    int ranks = j.s.world * j.s.data_parallel;
    if (!rc)
        rc = options_match_training(&j);
    /* a training run checks its ids in force, the plan's train { } ones among them (train.c) */
    const tr_segment_sources sources = tr_train_segment_sources(&o->train);
    if (!rc && !j.s.grads && tr_segments_check(o->schedule, j.s.segments >= 0, tr_schedule_token_vocab(&j.s),
                                               &sources, why, sizeof why))
        rc = fail(&j, "%s", why);
    if (!rc && comm->world == 1 && ranks > 1)
        rc = fail(&j, "%s is a schedule for %d ranks: run it with tprun -n %d %s", o->schedule, ranks, ranks,
                  o->schedule);
    rc = agreed(&j, rc);
    tr_dp groups = {0};
    if (!rc && j.s.data_parallel > 1 && !j.s.grads)
        rc = fail(&j, "%s has data_parallel %d but no backward: only training schedules (tpcc --train) have "
                  "data-parallel replicas; recompile it", o->schedule, j.s.data_parallel);
    if (!rc && tr_dp_init(&groups, comm, j.s.world, j.s.data_parallel, why, sizeof why))
        rc = fail(&j, "%s", why);
    if (!rc)
        rc = locate_ranks(&j);
    /* from here to the agreement below, no collective: every rank gets there */
    bool in_step = !rc;
    tp_progress_io("loading the weights");
    const tp_backend *be = tp_backend_cpu();
    if (!rc && o->backend && !strcmp(o->backend, "cuda") && !(be = tp_backend_cuda(j.s.dtype)))
        rc = fail(&j, "the cuda backend computes in fp32 or bf16, the schedule is %s", tp_dtype_name(j.s.dtype));
    if (!rc && be->set_threads)
        be->set_threads(o->threads);
    if (!rc && tr_exec_init(&j.x, &j.s, be, &groups.tp, why, sizeof why))
        rc = fail(&j, "%s", why);
    if (!rc) {
        j.x.dp = &groups.dp;     /* a sharded training schedule's dp_* collectives run over it */
        j.x.tracing = o->profile || o->profile_json || o->trace;
        j.vocab = tr_schedule_token_vocab(&j.s);   /* the range the validator proved safe */
        rc = load_weights(&j);
    }
    if (!rc && !j.s.grads) {
        tp_progress_io("reading the inputs");
        rc = read_inputs(&j);
    }
    if (in_step)
        rc = agreed(&j, rc);
    if (!rc && j.s.grads) {
        if (rank0(&j) && j.nodes && !o->quiet)     /* a forward run prints it with its results */
            print_header(&j);
        if (tr_train(o, &groups, &j.x, j.masters, j.vocab, &j.step_seconds, &j.nsteps, &j.data_bytes_read,
                     &j.everywhere, why, sizeof why))
            rc = fail(&j, "%s", why);
        if (!rc)
            rc = report(&j);
    } else {
        if (!rc)
            rc = run_forward(&j);
        if (!rc)
            rc = outputs(&j);
        if (!rc)
            rc = report(&j);
    }
    if (j.ckpt)
        tp_checkpoint_close(j.ckpt);
    free(j.step_seconds);
    free(j.ids);
    free(j.labels);
    free(j.segments);
    free(j.masters);
    free(j.nodes);
    tr_exec_free(&j.x);
    tr_dp_free(&groups);
    tr_schedule_free(&j.s);
    /* a failure every rank agreed on names its rank already */
    if (rc && !j.everywhere && comm->world > 1) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err);
        tp_error(err, errlen, "rank %d: %s", comm->rank, msg);
    }
    *everywhere = rc && j.everywhere;
    return rc;
}
