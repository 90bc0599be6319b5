/* report.c: tpcc --report (see report.h).
 *
 * Everything is read from the lowered program, never from a table: the
 * collectives are the schedule's, their bytes the buffers' sizes. The bound
 * is Megatron's (research/sharding-compilers.md §2): per transformer layer
 * and forward step, tensor parallelism all-reduces the layer's b*s*h
 * activation twice, sequence parallelism all-gathers and reduce-scatters it
 * twice; with ring algorithms both send 4 (t-1)/t * b*s*h*d bytes per rank.
 * A training step's backward conjugates each of them: the same again. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/front/model.h"
#include "compiler/report/report.h"
#include "sched/dp_shard.h"
#include "sched/workspace.h"
#include "util/xalloc.h"

double tp_ring_bytes(tp_op_kind kind, int64_t elems, size_t dsize, int64_t world)
{
    double full = (double)elems * (double)dsize, t = (double)world;
    switch (kind) {
    case TP_OP_ALL_GATHER:
    case TP_OP_REDUCE_SCATTER: return full * (t - 1) / t;
    case TP_OP_ALL_REDUCE: return 2 * full * (t - 1) / t;      /* reduce-scatter + all-gather */
    case TP_OP_ALL_TO_ALL: return full / t * (t - 1) / t;      /* each rank keeps 1/t of its shard */
    default: return 0;
    }
}

/* The tensor-parallel group's collectives, which the costs below are of;
 * the data-parallel ones (sharded training state) are the dp phases'. */
static bool tp_group_collective(tp_op_kind k) { return tp_op_is_collective(k) && !tp_op_is_dp_collective(k); }

typedef struct comm_totals {
    int count[TP_OP_COUNT];
    double logical[TP_OP_COUNT], sent[TP_OP_COUNT];
    double layer_sent;           /* all kinds, inside the layers */
    double recompute_sent;       /* of that, the recomputed forward's (activation recomputation) */
    double step_sent;
} comm_totals;

/* The collectives of one phase, or of all of them (phase < 0). */
static void phase_totals(const tp_ir *ir, size_t dsize, int phase, comm_totals *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead || !tp_group_collective(op->kind) || (phase >= 0 && op->phase != (tp_phase)phase))
            continue;
        double sent = tp_ring_bytes(op->kind, op->elems, dsize, ir->world);
        t->count[op->kind]++;
        t->logical[op->kind] += (double)op->elems * (double)dsize;
        t->sent[op->kind] += sent;
        t->step_sent += sent;
        if (op->layer)
            t->layer_sent += sent;
        if (op->layer && op->recompute)
            t->recompute_sent += sent;
    }
}

static void totals_of(const tp_ir *ir, size_t dsize, comm_totals *t) { phase_totals(ir, dsize, -1, t); }

static bool training(const tp_ir *ir) { return ir->grad_buf != NULL; }

/* Megatron's bytes per rank for one layer's forward step. */
static double bound_per_layer(const tp_ir *ir, size_t dsize)
{
    double t = (double)ir->world;
    return 4 * (t - 1) / t * (double)ir->layer_input_elems * (double)dsize;
}

static int64_t param_elems(const tp_ir *ir, int i)
{
    return ir->params[i].local[0] * (ir->params[i].rank > 1 ? ir->params[i].local[1] : 1);
}

static int64_t param_bytes(const tp_ir *ir, size_t dsize)
{
    int64_t n = 0;
    for (int i = 0; i < ir->nparams; i++)
        n += param_elems(ir, i);
    return n * (int64_t)dsize;
}

/* Bytes of a rank's weight region as tprun lays it out: the weights in
 * order, each from an aligned offset (sched/workspace.h). AdamW's moments
 * and the master weights take the same layout in fp32. */
static int64_t weight_region_bytes(const tp_ir *ir, size_t dsize)
{
    int64_t end = 0;
    for (int i = 0; i < ir->nparams; i++)
        end = tp_weight_region_offset(end) + param_elems(ir, i);
    return end * (int64_t)dsize;
}

double tp_op_flops(const tp_ir_op *op)
{
    switch (op->kind) {
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    case TP_OP_##NAME:                                                                                         \
        return flops;
#include "sched/ops.def"
#undef OP
    case TP_OP_COUNT:
        break;
    }
    return 0;
}

static double phase_flops(const tp_ir *ir, tp_phase phase)
{
    double f = 0;
    for (int i = 0; i < ir->nops; i++)
        if (!ir->ops[i].dead && ir->ops[i].phase == phase)
            f += tp_op_flops(&ir->ops[i]);
    return f;
}

/* The forward ops the backward runs again (activation recomputation):
 * how many, and their FLOPs, which phase_flops counts in the backward's. */
typedef struct recomputed { int ops; double flops; } recomputed;

static recomputed recomputed_of(const tp_ir *ir)
{
    recomputed r = {0, 0};
    for (int i = 0; i < ir->nops; i++)
        if (!ir->ops[i].dead && ir->ops[i].recompute) {
            r.ops++;
            r.flops += tp_op_flops(&ir->ops[i]);
        }
    return r;
}

static int64_t buf_bytes(const tp_ir *ir, int b)
{
    return tp_ir_buf_elems(&ir->bufs[b]) * (int64_t)tp_dtype_size(ir->bufs[b].dtype);
}

/* tprun's reshard staging (sched/workspace.h): buffers of the largest
 * tensor a collective reads or writes. */
static int64_t staging_bytes(const tp_ir *ir)
{
    int64_t largest = 0;
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (!op->dead && tp_op_is_collective(op->kind)) {
            /* of the data-parallel collectives, only a padded weight's
             * reduce-scatter stages (runtime/exec/exec.c) */
            int64_t in = 0, out = 0;
            if (!tp_op_is_dp_collective(op->kind)) {
                in = buf_bytes(ir, op->in[0]);
                out = buf_bytes(ir, op->out);
            } else if (op->kind == TP_OP_DP_REDUCE_SCATTER) {
                int64_t dp = op->elems / tp_ir_buf_elems(&ir->bufs[op->out]);   /* elems: dp runs of out's */
                in = tp_dp_shard_staging_elems(param_elems(ir, op->weight), dp) *
                     (int64_t)tp_dtype_size(ir->bufs[op->out].dtype);
            }
            largest = in > largest ? in : largest;
            largest = out > largest ? out : largest;
        }
    }
    return TP_STAGING_BUFFERS * largest;
}

/* The CUDA backend's scratch (sched/workspace.h): one buffer, grown to the
 * largest request of a step's kernels; in the forward only rope_attention
 * asks for some. */
static int64_t cuda_scratch_bytes(const tp_ir *ir, bool bf16)
{
    int64_t most = training(ir) ? TP_CUDA_SUM_SQUARES_SCRATCH_BYTES : 0;
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        int64_t floats = 0;
        if (op->dead)
            continue;
        if (op->kind == TP_OP_ATTENTION_GRAD)
            floats = tp_cuda_attention_grad_scratch(bf16, op->m, op->n, op->heads, op->groups, op->k);
        else if (op->kind == TP_OP_ROPE_ATTENTION)
            floats = tp_cuda_rope_attention_scratch(bf16, op->m, op->n, op->heads, op->groups, op->k, op->rotary,
                                                    false);
        else if (op->kind == TP_OP_ROPE_ATTENTION_GRAD)
            floats = tp_cuda_scratch_part(false, tp_cuda_attention_grad_scratch(bf16, op->m, op->n, op->heads,
                                                                                op->groups, op->k)) +
                     tp_cuda_rope_attention_scratch(bf16, op->m, op->n, op->heads, op->groups, op->k,
                                                    op->rotary, true);
        else if (op->kind == TP_OP_RMSNORM_DW || op->kind == TP_OP_LAYERNORM_DW)
            floats = tp_cuda_norm_grad_scratch(op->kind == TP_OP_LAYERNORM_DW, op->m);
        if (floats * (int64_t)sizeof(float) > most)
            most = floats * (int64_t)sizeof(float);
    }
    return most;
}

/* A step's memory per rank: the weight region, the arena and the
 * workspace: the reshard staging, and on CUDA cuBLAS's workspace and the
 * kernels' scratch. A training step's adds the gradients, AdamW's two
 * moments (fp32) and the fp32 master weights tprun keeps beside weights
 * stored in bf16; its arena holds the activations saved for the backward.
 * The total is what tprun's CUDA backend allocates for the step, but for a
 * byte of padding a buffer and the optimizer's two floats of sums; not the
 * CUDA context, cuBLAS's handle or NCCL's own buffers. */
typedef struct step_memory {
    int64_t params, grads, optimizer, masters, accumulator, activations, staging, blas, scratch, zero, workspace, total;
} step_memory;

/* How a training step holds its state: dp data-parallel replicas,
 * sharding what `shard` says (sched/dp_shard.h), and the micro-batches
 * whose gradients it sums (the plan's train { micro_batches }). */
typedef struct train_layout {
    int64_t dp;
    tp_dp_shard shard;
    int64_t micro_batches;
} train_layout;

/* The ZeRO paper's name for a sharding mode. */
static const char *zero_stage(tp_dp_shard m)
{
    static const char *const names[TP_DP_SHARD_COUNT] = {"replicated", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    return names[m];
}

static train_layout train_layout_of(const tp_plan *p)
{
    const tp_train_values *v = &p->train.values;
    return (train_layout){p->data_parallel, p->data_parallel > 1 ? p->train.shard_mode : TP_DP_SHARD_NONE,
                          tp_train_given(v, TP_TF_MICRO_BATCHES) ? (int64_t)v->v[TP_TF_MICRO_BATCHES] : 1};
}

/* ZeRO's shard region (runtime/train/zero.h): each weight's run over dp,
 * end to end; *widest the longest run, *padded the runs of the weights
 * padded to dp runs, whose reduced gradients take a buffer of their own. */
static int64_t shard_region_elems(const tp_ir *ir, int64_t dp, int64_t *widest, int64_t *padded)
{
    int64_t n = 0;
    *widest = *padded = 0;
    for (int i = 0; i < ir->nparams; i++) {
        int64_t c = tp_dp_shard_elems(param_elems(ir, i), dp);
        n += c;
        *widest = c > *widest ? c : *widest;
        *padded += tp_dp_shard_padded(param_elems(ir, i), dp) ? c : 0;
    }
    return n;
}

static step_memory memory_of(const tp_ir *ir, size_t dsize, train_layout d)
{
    bool train = training(ir);
    step_memory m = {weight_region_bytes(ir, dsize), 0, 0, 0, 0, 0, staging_bytes(ir), TP_CUDA_BLAS_WORKSPACE_BYTES,
                     cuda_scratch_bytes(ir, dsize == 2), 0, 0, 0};
    if (train) {
        int64_t widest, padded, runs = shard_region_elems(ir, d.dp, &widest, &padded);
        bool sharded = d.shard != TP_DP_SHARD_NONE, grad_runs = d.shard >= TP_DP_SHARD_GRADIENTS;
        int64_t state = sharded ? runs * 4 : weight_region_bytes(ir, 4);   /* fp32 moments and masters */
        /* ZeRO-2 leaves each gradient as its run; the whole gradients are
         * activations of the backward, freed after their reduce-scatter.
         * FSDP keeps the parameters' runs; the gathered ones are
         * activations, freed after their layer */
        m.grads = grad_runs ? runs * (int64_t)dsize : param_bytes(ir, dsize);
        if (d.shard == TP_DP_SHARD_PARAMETERS)
            m.params = runs * (int64_t)dsize;
        m.optimizer = 2 * state;
        m.masters = dsize == 4 ? 0 : state;
        /* gradient accumulation's fp32 sum of the gradient buffers (runtime/train/accum.h) */
        m.accumulator = d.micro_batches > 1 ? m.grads / (int64_t)dsize * 4 : 0;
        /* ZeRO-1's reduced gradient runs of the padded weights (the others
         * stay in their gradients' place), and its collectives' staging:
         * dp runs of the widest and one more (fp32) */
        m.zero = sharded ? (grad_runs ? 0 : padded * (int64_t)dsize) + (d.dp + 1) * widest * 4 : 0;
    }
    /* the gradients live in the arena (outputs.grads), counted once */
    m.activations = ir->arena_bytes - m.grads;
    m.workspace = m.staging + m.blas + m.scratch + m.zero;
    m.total = m.params + m.grads + m.optimizer + m.masters + m.accumulator + m.activations + m.workspace;
    return m;
}

/* The analytic minimum: the largest set of buffers that must be live at the
 * same time for this sequence of ops (written before an op, read at or
 * after it; model inputs and outputs for the whole step). An arena can be
 * larger only through fragmentation. */
static int64_t live_peak(const tp_ir *ir)
{
    int n = ir->nbufs;
    int *first = tp_xmalloc((size_t)(n ? n : 1) * sizeof *first), *last = tp_xmalloc((size_t)(n ? n : 1) * sizeof *last);
    for (int b = 0; b < n; b++) {
        first[b] = ir->bufs[b].input ? 0 : ir->nops;
        last[b] = ir->bufs[b].output || b == ir->loss_buf ? ir->nops : -1;
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead)
            continue;
        for (int o = 0; o < tp_ops[op->kind].nout; o++) {
            if (op->outs[o] < 0)
                continue;
            int r = tp_ir_alias_root(ir, op->outs[o]);
            if (i < first[r]) first[r] = i;
            if (i > last[r]) last[r] = i;
        }
        for (int k = 0; k < op->nin; k++) {
            int r = tp_ir_alias_root(ir, op->in[k]);
            if (i > last[r]) last[r] = i;
        }
        const int from[2] = {op->weight_from - 1, op->bias_from - 1};   /* FSDP's gathered weights */
        for (int k = 0; k < 2; k++)
            if (from[k] >= 0 && i > last[tp_ir_alias_root(ir, from[k])])
                last[tp_ir_alias_root(ir, from[k])] = i;
    }
    int64_t *delta = tp_xcalloc((size_t)ir->nops + 2, sizeof *delta);
    for (int b = 0; b < n; b++) {
        if (ir->bufs[b].alias_of >= 0 || last[b] < first[b])
            continue;
        int64_t bytes = tp_ir_buf_elems(&ir->bufs[b]) * (int64_t)tp_dtype_size(ir->bufs[b].dtype);
        delta[first[b]] += bytes;
        delta[last[b] + 1] -= bytes;
    }
    int64_t live = 0, peak = 0;
    for (int i = 0; i <= ir->nops; i++) {
        live += delta[i];
        if (live > peak)
            peak = live;
    }
    free(first);
    free(last);
    free(delta);
    return peak;
}

static bool uses_sequence_parallel(const tp_plan *p)
{
    for (int i = 0; i < p->nstyles; i++)
        if (p->styles[i]->kind == TP_STYLE_SEQUENCE)
            return true;
    return false;
}

/* Korthikanti et al. (arXiv 2205.05198) Table 2, bytes per layer of
 * training activations with 16-bit activations: for reference only. */
static double paper_activation_bytes(const tp_ir *ir, const tp_plan *p)
{
    if (ir->layer_input_rank != 3)
        return 0;
    double b = (double)ir->layer_input_shape[0], s = (double)ir->layer_input_shape[1];
    double h = (double)ir->layer_input_shape[2], t = (double)ir->world, a = 0;
    for (int i = 0; i < ir->nops && !a; i++)
        if (ir->ops[i].kind == TP_OP_ATTENTION || ir->ops[i].kind == TP_OP_ROPE_ATTENTION)
            a = (double)ir->ops[i].heads_global;
    double sbh = s * b * h;
    if (t == 1)
        return sbh * (34 + 5 * a * s / h);
    if (uses_sequence_parallel(p))
        return sbh * (34 / t + 5 * a * s / (h * t));
    return sbh * (10 + 24 / t + 5 * a * s / (h * t));
}

static const char *human(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

static const char *entry_name(const tp_ir_op *op)
{
    return op->entry ? op->entry : op->implicit ? "(implicit, DTensor)" : "(model)";
}

typedef struct entry_bytes {
    const char *entry;
    double sent;
} entry_bytes;

/* Layer traffic grouped by plan entry, largest first: who to blame for a
 * ratio above 1. */
static int group_by_entry(const tp_ir *ir, size_t dsize, entry_bytes **out)
{
    entry_bytes *e = NULL;
    int n = 0;
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead || !tp_group_collective(op->kind) || !op->layer)
            continue;
        const char *name = entry_name(op);
        int k = 0;
        while (k < n && strcmp(e[k].entry, name))
            k++;
        if (k == n) {
            e = tp_xreallocarray(e, (size_t)n + 1, sizeof *e);
            e[n++] = (entry_bytes){name, 0};
        }
        e[k].sent += tp_ring_bytes(op->kind, op->elems, dsize, ir->world);
    }
    for (int i = 1; i < n; i++)          /* insertion sort: a handful of entries */
        for (int j = i; j > 0 && e[j].sent > e[j - 1].sent; j--) {
            entry_bytes x = e[j];
            e[j] = e[j - 1];
            e[j - 1] = x;
        }
    *out = e;
    return n;
}

/* The bound of the whole step a program computes: a training step's
 * backward moves what its forward does. */
static double step_bound_per_layer(const tp_ir *ir, size_t dsize)
{
    return bound_per_layer(ir, dsize) * (training(ir) ? 2 : 1);
}

/* The layers' traffic against the bound, the recomputed forward's left
 * out: recomputation sends the forward's collectives again by choice, which
 * says nothing of how well the plan places them. */
static double ratio_of(const tp_ir *ir, const comm_totals *t, size_t dsize)
{
    double bound = step_bound_per_layer(ir, dsize) * ir->nlayers;
    return bound > 0 ? (t->layer_sent - t->recompute_sent) / bound : 0;
}

/* tprun's data-parallel collectives (runtime/train/dp.c, zero.c):
 * replicated, one all-reduce of each gradient; ZeRO-1 and 2, a
 * reduce-scatter of each gradient (ZeRO-2's in the schedule, in the
 * backward) and an all-gather of each updated weight, in runs padded
 * to dp equal ones: a ring all-reduce's traffic; FSDP, the schedule's
 * all-gathers of each weight before the forward and again before the
 * backward (once for a weight outside the layers): 1.5 times that. The
 * step's loss and norm add a few floats. */
typedef struct dp_traffic {
    int count[2];                /* collectives of each kind */
    tp_op_kind kind[2];          /* all-reduce; or reduce-scatter, all-gather */
    int kinds;
    double bytes[2], sent[2];    /* the logical tensors, and what each rank sends */
} dp_traffic;

static dp_traffic dp_traffic_of(const tp_ir *ir, size_t ds, train_layout d)
{
    dp_traffic a = {0};
    if (d.dp <= 1)
        return a;
    a.count[0] = a.count[1] = ir->nparams;
    if (d.shard == TP_DP_SHARD_NONE) {
        a.kinds = 1;
        a.kind[0] = TP_OP_ALL_REDUCE;
        a.bytes[0] = (double)param_bytes(ir, ds);
        a.sent[0] = tp_ring_bytes(TP_OP_ALL_REDUCE, param_bytes(ir, 1), ds, d.dp);
        return a;
    }
    int64_t widest, padded_runs, padded = d.dp * shard_region_elems(ir, d.dp, &widest, &padded_runs);
    a.kinds = 2;
    a.kind[0] = TP_OP_REDUCE_SCATTER;
    a.kind[1] = TP_OP_ALL_GATHER;
    for (int k = 0; k < 2; k++) {
        a.bytes[k] = (double)padded * (double)ds;
        a.sent[k] = tp_ring_bytes(a.kind[k], padded, ds, d.dp);
    }
    if (d.shard == TP_DP_SHARD_PARAMETERS) {
        a.count[1] = 0;
        a.bytes[1] = a.sent[1] = 0;
        for (int i = 0; i < ir->nops; i++)
            if (!ir->ops[i].dead && ir->ops[i].kind == TP_OP_DP_ALL_GATHER) {
                a.count[1]++;
                a.bytes[1] += (double)ir->ops[i].elems * (double)ds;
                a.sent[1] += tp_ring_bytes(TP_OP_ALL_GATHER, ir->ops[i].elems, ds, d.dp);
            }
    }
    return a;
}

static void print_memory(const tp_ir *ir, size_t ds, train_layout dl, int64_t device_memory, FILE *out)
{
    char a[32], b[32], c[32], d[32];
    bool train = training(ir);
    step_memory m = memory_of(ir, ds, dl);
    const char *stage = zero_stage(dl.shard);
    fprintf(out, "\n%s step, memory per rank\n", train ? "training" : "forward");
    fprintf(out, "  parameters        %s", human((double)m.params, a, sizeof a));
    if (dl.shard == TP_DP_SHARD_PARAMETERS)
        fprintf(out, "  (1/dp of them, %s: each rank's run of each, gathered for each layer, as activations)",
                stage);
    fprintf(out, "\n");
    if (train) {
        fprintf(out, "  gradients         %s", human((double)m.grads, a, sizeof a));
        if (dl.shard >= TP_DP_SHARD_GRADIENTS)
            fprintf(out, "  (1/dp of them, %s: each rank's run of each, reduce-scattered in the backward)", stage);
        fprintf(out, "\n  optimizer state   %s  (AdamW's two moments, fp32%s%s)\n",
                human((double)m.optimizer, a, sizeof a), m.zero ? "; 1/dp of them, " : "", m.zero ? stage : "");
    }
    if (m.masters)
        fprintf(out, "  master weights    %s  (fp32 copies of the parameters, which AdamW updates%s%s)\n",
                human((double)m.masters, a, sizeof a), m.zero ? "; 1/dp of them, " : "", m.zero ? stage : "");
    if (m.accumulator)
        fprintf(out, "  accumulator       %s  (the fp32 sum of the gradients of %lld micro-batches)\n",
                human((double)m.accumulator, a, sizeof a), (long long)dl.micro_batches);
    fprintf(out, "  activations       %s  (%s)\n", human((double)m.activations, a, sizeof a),
            train ? "the arena less the gradients: what the backward reads" : "the arena");
    fprintf(out, "  workspace         %s  (reshard staging %s; on CUDA, cuBLAS's %s", human((double)m.workspace, a, sizeof a),
            human((double)m.staging, b, sizeof b), human((double)m.blas, c, sizeof c));
    if (train)
        fprintf(out, " and the kernels' scratch %s", human((double)m.scratch, d, sizeof d));
    if (m.zero)
        fprintf(out, "; ZeRO's gradient runs and padded staging %s", human((double)m.zero, d, sizeof d));
    fprintf(out, ")\n  total             %s", human((double)m.total, a, sizeof a));
    if (device_memory > 0)
        fprintf(out, "  %s %s of device memory", m.total <= device_memory ? "fits in" : "DOES NOT FIT in",
                human((double)device_memory, b, sizeof b));
    fprintf(out, "\n");
}

static void print_training(const tp_ir *ir, size_t ds, train_layout dl, FILE *out)
{
    char a[32], b[32];
    fprintf(out, "\ncommunication per phase, bytes each rank sends with ring algorithms\n");
    fprintf(out, "  %-10s %6s %14s %14s\n", "phase", "count", "sent", "bound");
    double bound = ir->world > 1 && ir->layer_input_elems ? bound_per_layer(ir, ds) * ir->nlayers : 0;
    for (int ph = 0; ph < TP_PHASE_COUNT; ph++) {
        comm_totals t;
        phase_totals(ir, ds, ph, &t);
        int count = 0;
        for (int k = 0; k < TP_OP_COUNT; k++)
            count += t.count[k];
        bool bounded = ph != TP_PHASE_GRAD_SYNC && bound > 0;
        fprintf(out, "  %-10s %6d %14s %14s\n", tp_phase_names[ph], count, human(t.step_sent, a, sizeof a),
                bounded ? human(bound, b, sizeof b) : "-");
    }
    dp_traffic dt = dp_traffic_of(ir, ds, dl);
    static const char *const what[4] = {
        "each gradient all-reduced over the %lld dp replicas, then / %lld",
        "each gradient reduce-scattered over the %lld dp ranks, then / %lld: %s",
        "each updated weight all-gathered over the %lld dp ranks: %s",
        "each weight all-gathered over the %lld dp ranks for the forward, again for the backward: %s"};
    static const char *const phase[4] = {"dp average", "dp reduce", "dp gather", "dp gather"};
    for (int k = 0; k < dt.kinds; k++) {
        int row = !dl.shard ? 0 : k == 0 ? 1 : dl.shard == TP_DP_SHARD_PARAMETERS ? 3 : 2;
        fprintf(out, "  %-10s %6d %14s %14s  (", phase[row], dt.count[k], human(dt.sent[k], a, sizeof a), "-");
        if (row >= 2)
            fprintf(out, what[row], (long long)dl.dp, zero_stage(dl.shard));
        else
            fprintf(out, what[row], (long long)dl.dp, (long long)dl.dp, zero_stage(dl.shard));
        fprintf(out, ")\n");
    }
    fprintf(out, "  %-10s %6d %14s %14s  (AdamW updates each rank's own slice%s)\n", "optimizer", 0, "0 B", "-",
            dl.dp <= 1 ? "" : dl.shard ? "; its state is sharded over dp" : "; its state is replicated over dp");
}

/* The rank layout tprun runs a dp x tp schedule in (runtime/train/dp.c),
 * tp fastest: rank r is dp replica r / tp and tp rank r % tp, so each
 * replica is tp consecutive ranks. tpcc does not know the nodes; it says
 * what a node must hold for the tp collectives to stay inside it. */
static void print_rank_layout(int64_t tp, int64_t dp, FILE *out)
{
    fprintf(out, "ranks: tp fastest, rank = dp index x %lld + tp index:", (long long)tp);
    for (int64_t d = 0; d < dp; d++) {
        if (dp > 3 && d == 2) {          /* the first two and the last replica: the pattern is plain */
            fprintf(out, " ...,");
            d = dp - 1;
        }
        fprintf(out, " dp %lld = ranks %lld-%lld%s", (long long)d, (long long)(d * tp), (long long)(d * tp + tp - 1),
                d + 1 < dp ? "," : "");
    }
    fprintf(out, "; a node holding a multiple of %lld consecutive ranks keeps each tp group inside it\n\n",
            (long long)tp);
}

/* The same layout as JSON: each rank's dp and tp index */
static json_t *rank_layout_json(int64_t tp, int64_t dp)
{
    json_t *ranks = tp_xcheck(json_array());
    for (int64_t r = 0; r < tp * dp; r++)
        json_array_append_new(ranks, json_pack("{s:I, s:I, s:I}", "rank", (json_int_t)r, "dp", (json_int_t)(r / tp),
                                               "tp", (json_int_t)(r % tp)));
    return ranks;
}

static void print_text(const tp_ir *opt, const tp_ir *unopt, const tp_plan *p, const char *plan_path,
                       tp_dtype dtype, int64_t device_memory, FILE *out)
{
    size_t ds = tp_dtype_size(dtype);
    char a[32], b[32], c[32];
    comm_totals t, t0;
    totals_of(opt, ds, &t);
    totals_of(unopt, ds, &t0);
    int64_t minimum = live_peak(opt);
    if (p->data_parallel > 1) {
        fprintf(out, "tpcc report: %s (tp=%lld, dp=%lld: %lld ranks, %s)\n\n", plan_path, (long long)opt->world,
                (long long)p->data_parallel, (long long)(opt->world * p->data_parallel), tp_dtype_name(dtype));
        print_rank_layout(opt->world, p->data_parallel, out);
    } else
        fprintf(out, "tpcc report: %s (tp=%lld, %s)\n\n", plan_path, (long long)opt->world, tp_dtype_name(dtype));
    fprintf(out, "per rank\n");
    fprintf(out, "  parameters        %s\n", human((double)param_bytes(opt, ds), a, sizeof a));
    fprintf(out, "  activation arena  %s  (analytic minimum %s, ratio %.2f; -O0 arena %s)\n",
            human((double)opt->arena_bytes, a, sizeof a), human((double)minimum, b, sizeof b),
            minimum ? (double)opt->arena_bytes / (double)minimum : 0, human((double)unopt->arena_bytes, c, sizeof c));
    fprintf(out, "  forward FLOPs     %.3g (matmuls and attention)\n", phase_flops(opt, TP_PHASE_FORWARD));
    if (training(opt)) {
        recomputed r = recomputed_of(opt);
        fprintf(out, "  backward FLOPs    %.3g\n", phase_flops(opt, TP_PHASE_BACKWARD));
        fprintf(out, "  recompute         %s: %d forward ops run again in the backward, %.3g FLOPs (counted in the "
                     "backward's), %s sent\n", tp_recompute_names[p->train.recompute], r.ops, r.flops,
                human(t.recompute_sent, a, sizeof a));
    }
    double paper = paper_activation_bytes(opt, p);
    if (paper > 0)
        fprintf(out, "  reference         %s per layer, %s for %d layers: training activations, 16-bit "
                     "(Korthikanti et al., Table 2)\n",
                human(paper, a, sizeof a), human(paper * opt->nlayers, b, sizeof b), opt->nlayers);
    print_memory(opt, ds, train_layout_of(p), device_memory, out);
    if (training(opt))
        print_training(opt, ds, train_layout_of(p), out);

    fprintf(out, "\ncommunication, %s step, bytes each rank sends with ring algorithms\n",
            training(opt) ? "training" : "forward");
    fprintf(out, "  %-15s %6s %14s %14s %8s\n", "kind", "count", "logical", "sent", "-O0 count");
    for (int k = 0; k < TP_OP_COUNT; k++)
        if (t.count[k] || t0.count[k])
            fprintf(out, "  %-15s %6d %14s %14s %8d\n", tp_op_names[k], t.count[k], human(t.logical[k], a, sizeof a),
                    human(t.sent[k], b, sizeof b), t0.count[k]);
    fprintf(out, "  %-15s %6s %14s %14s\n", "step", "", "", human(t.step_sent, a, sizeof a));
    if (opt->nlayers) {
        fprintf(out, "  per layer: ");
        bool first = true;
        for (int k = 0; k < TP_OP_COUNT; k++) {
            int in_layers = 0;
            for (int i = 0; i < opt->nops; i++)
                in_layers += !opt->ops[i].dead && opt->ops[i].kind == (tp_op_kind)k &&
                             opt->ops[i].layer != NULL;
            if (in_layers && tp_group_collective((tp_op_kind)k)) {
                fprintf(out, "%s%g %s", first ? "" : " + ", (double)in_layers / opt->nlayers, tp_op_names[k]);
                first = false;
            }
        }
        fprintf(out, "%s, %s sent\n", first ? "none" : "", human(t.layer_sent / opt->nlayers, a, sizeof a));
    }
    if (opt->world > 1 && opt->nlayers && opt->layer_input_elems) {
        double r = ratio_of(opt, &t, ds), r0 = ratio_of(unopt, &t0, ds);
        fprintf(out, "  bound (Megatron TP or TP+SP): %s4(t-1)/t * b*s*h*d = %s per layer; ratio %.2f (-O0: %.2f)%s\n",
                training(opt) ? "forward + backward, 2 x " : "", human(step_bound_per_layer(opt, ds), a, sizeof a),
                r, r0, t.recompute_sent > 0 ? "; the recomputed forward's collectives left out" : "");
        if (r > 1.005) {
            entry_bytes *e;
            int n = group_by_entry(opt, ds, &e);
            fprintf(out, "  above the bound; layer traffic by plan entry:\n");
            for (int i = 0; i < n; i++)
                fprintf(out, "    %-40s %s per layer\n", e[i].entry, human(e[i].sent / opt->nlayers, a, sizeof a));
            free(e);
        }
    }
    fprintf(out, "\ncollectives (%s step, in order)\n", training(opt) ? "training" : "forward");
    fprintf(out, "  %-15s %12s %12s  %-40s %s\n", "kind", "logical", "sent", "module", "plan entry");
    for (int i = 0; i < opt->nops; i++) {
        const tp_ir_op *op = &opt->ops[i];
        if (op->dead || !tp_group_collective(op->kind))
            continue;
        fprintf(out, "  %-15s %12s %12s  %-40s %s\n", tp_op_names[op->kind],
                human((double)op->elems * (double)ds, a, sizeof a),
                human(tp_ring_bytes(op->kind, op->elems, ds, opt->world), b, sizeof b),
                op->module && op->module[0] ? op->module : "(root)", entry_name(op));
    }
}

static json_t *totals_json(const comm_totals *t)
{
    json_t *o = tp_xcheck(json_object());
    for (int k = 0; k < TP_OP_COUNT; k++)
        if (t->count[k])
            json_object_set_new(o, tp_op_names[k],
                                json_pack("{s:i, s:f, s:f}", "count", t->count[k], "bytes", t->logical[k],
                                          "sent_bytes", t->sent[k]));
    return o;
}

/* The step's memory: "training" holds it with the rest of the training
 * figures, "forward" alone. */
static json_t *memory_json(const tp_ir *ir, size_t ds, train_layout dl, int64_t device_memory)
{
    step_memory m = memory_of(ir, ds, dl);
    json_t *o = json_pack("{s:I, s:I, s:I}", "param_bytes", (json_int_t)m.params, "activation_bytes",
                          (json_int_t)m.activations, "total_bytes", (json_int_t)m.total);
    tp_xcheck(o);
    if (training(ir)) {
        json_object_set_new(o, "grad_bytes", json_integer(m.grads));
        json_object_set_new(o, "optimizer_bytes", json_integer(m.optimizer));
    }
    if (m.masters)
        json_object_set_new(o, "master_bytes", json_integer(m.masters));
    if (m.accumulator)
        json_object_set_new(o, "accumulator_bytes", json_integer(m.accumulator));
    json_object_set_new(o, "workspace", json_pack("{s:I, s:I, s:I, s:I, s:I}", "bytes", (json_int_t)m.workspace,
                                                  "staging_bytes", (json_int_t)m.staging, "cuda_blas_bytes",
                                                  (json_int_t)m.blas, "cuda_scratch_bytes", (json_int_t)m.scratch,
                                                  "dp_shard_bytes", (json_int_t)m.zero));
    if (device_memory > 0) {
        json_object_set_new(o, "device_memory_bytes", json_integer(device_memory));
        json_object_set_new(o, "fits", json_boolean(m.total <= device_memory));
    }
    return o;
}

static json_t *training_json(const tp_ir *ir, size_t ds, train_layout dl, tp_recompute mode, int64_t device_memory)
{
    json_t *o = memory_json(ir, ds, dl, device_memory);
    json_object_set_new(o, "dp_shard", json_string(tp_dp_shard_names[dl.shard]));
    json_object_set_new(o, "flops", json_pack("{s:f, s:f}", "forward", phase_flops(ir, TP_PHASE_FORWARD), "backward",
                                              phase_flops(ir, TP_PHASE_BACKWARD)));
    recomputed r = recomputed_of(ir);
    comm_totals t;
    totals_of(ir, ds, &t);
    json_object_set_new(o, "recompute", json_pack("{s:s, s:i, s:f, s:f}", "mode", tp_recompute_names[mode], "ops",
                                                  r.ops, "flops", r.flops, "sent_bytes", t.recompute_sent));
    json_t *phases = tp_xcheck(json_object());
    double bound = ir->world > 1 && ir->layer_input_elems ? bound_per_layer(ir, ds) * ir->nlayers : 0;
    for (int ph = 0; ph < TP_PHASE_COUNT; ph++) {
        comm_totals t;
        phase_totals(ir, ds, ph, &t);
        json_t *p = json_pack("{s:o, s:f}", "totals", totals_json(&t), "sent_bytes", t.step_sent);
        if (ph != TP_PHASE_GRAD_SYNC && bound > 0)
            json_object_set_new(p, "bound_bytes", json_real(bound));
        json_object_set_new(phases, tp_phase_names[ph], p);
    }
    dp_traffic dt = dp_traffic_of(ir, ds, dl);
    if (dt.kinds) {
        json_t *totals = tp_xcheck(json_object());
        double sent = 0;
        for (int k = 0; k < dt.kinds; k++) {
            json_object_set_new(totals, tp_op_names[dt.kind[k]], json_pack("{s:i, s:f, s:f}", "count", dt.count[k],
                                                                          "bytes", dt.bytes[k], "sent_bytes",
                                                                          dt.sent[k]));
            sent += dt.sent[k];
        }
        json_object_set_new(phases, dl.shard ? "dp_sharded" : "dp_average",
                            json_pack("{s:o, s:f}", "totals", totals, "sent_bytes", sent));
    }
    json_object_set_new(phases, "optimizer", json_pack("{s:o, s:f}", "totals", json_object(), "sent_bytes", 0.0));
    json_object_set_new(o, "phases", phases);
    return o;
}

static void print_json(const tp_ir *opt, const tp_ir *unopt, const tp_plan *p, const char *plan_path,
                       tp_dtype dtype, int64_t device_memory, FILE *out)
{
    size_t ds = tp_dtype_size(dtype);
    comm_totals t, t0;
    totals_of(opt, ds, &t);
    totals_of(unopt, ds, &t0);
    json_t *root = tp_xcheck(json_object());
    json_object_set_new(root, "plan", json_string(plan_path));
    json_object_set_new(root, "world_size", json_integer(opt->world));
    json_object_set_new(root, "data_parallel", json_integer(p->data_parallel));
    json_object_set_new(root, "ranks", rank_layout_json(opt->world, p->data_parallel));
    json_object_set_new(root, "dtype", json_string(tp_dtype_name(dtype)));
    json_object_set_new(root, "param_bytes", json_integer(param_bytes(opt, ds)));
    json_object_set_new(root, "arena_bytes", json_integer(opt->arena_bytes));
    json_object_set_new(root, "arena_min_bytes", json_integer(live_peak(opt)));
    json_object_set_new(root, "arena_bytes_O0", json_integer(unopt->arena_bytes));
    json_object_set_new(root, "forward_flops", json_real(phase_flops(opt, TP_PHASE_FORWARD)));
    if (training(opt))
        json_object_set_new(root, "training", training_json(opt, ds, train_layout_of(p), p->train.recompute, device_memory));
    else
        json_object_set_new(root, "forward", memory_json(opt, ds, train_layout_of(p), device_memory));
    json_object_set_new(root, "paper_activation_bytes_per_layer", json_real(paper_activation_bytes(opt, p)));
    json_t *list = tp_xcheck(json_array());
    for (int i = 0; i < opt->nops; i++) {
        const tp_ir_op *op = &opt->ops[i];
        if (op->dead || !tp_group_collective(op->kind))
            continue;
        json_array_append_new(list, json_pack("{s:s, s:I, s:f, s:s, s:s, s:o}", "kind", tp_op_names[op->kind],
                                              "bytes", (json_int_t)(op->elems * (int64_t)ds),
                                              "sent_bytes", tp_ring_bytes(op->kind, op->elems, ds, opt->world),
                                              "module", op->module ? op->module : "",
                                              "entry", entry_name(op),
                                              "layer", op->layer ? json_string(op->layer) : json_null()));
    }
    json_object_set_new(root, "collectives", list);
    json_object_set_new(root, "totals", totals_json(&t));
    json_object_set_new(root, "totals_O0", totals_json(&t0));
    json_object_set_new(root, "layers", json_integer(opt->nlayers));
    json_object_set_new(root, "layer_sent_bytes", json_real(t.layer_sent));
    if (opt->world > 1 && opt->nlayers && opt->layer_input_elems) {
        json_object_set_new(root, "bound_bytes_per_layer", json_real(step_bound_per_layer(opt, ds)));
        json_object_set_new(root, "ratio", json_real(ratio_of(opt, &t, ds)));
        json_object_set_new(root, "ratio_O0", json_real(ratio_of(unopt, &t0, ds)));
    }
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    fprintf(out, "%s\n", text ? text : "{}");
    free(text);
    json_decref(root);
}

int tp_report(const tp_ir *opt, const tp_ir *unopt, const tp_plan *p, const char *plan_path, tp_dtype dtype,
              int64_t device_memory, tp_report_format fmt, FILE *out)
{
    if (fmt == TP_REPORT_JSON)
        print_json(opt, unopt, p, plan_path, dtype, device_memory, out);
    else
        print_text(opt, unopt, p, plan_path, dtype, device_memory, out);
    return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}
