/* memplan.c: buffer lifetimes -> offsets in one activation arena.
 *
 * Lifetimes. Time runs over the ops: t = i + 1 for op i, t = 0 before the
 * first op and t = nops + 1 after the last. A buffer is live on the closed
 * interval [first use, last use] of the ops that are not dead, where a use
 * is a read (in[]) or a write (out, or each output of an op with several).
 * Model inputs are live from t = 0 (the runtime fills them before op 0),
 * outputs (the `output` flag, loss_buf, logits_buf) to t = nops + 1 (the
 * runtime reads them after the last op). An op reading x and writing y
 * makes both live at its t, so they never share bytes, nor do the outputs
 * of one op; an in-place op (out == in) is one buffer.
 *
 * The lifetimes are always derived from the ops here (the IR stores none),
 * so dead ops cannot put two live buffers on the same bytes.
 *
 * Aliases. A buffer with alias_of >= 0 is a view: it follows the chain to
 * its root and occupies the root's storage. The root's block lives from
 * the first use to the last use of any member of its alias group and is as
 * large as the largest member; every member gets the root's offset.
 * A group that no live op touches (and that holds no input or output)
 * gets no storage: offset -1.
 *
 * Placement. Offline interval packing, greedy by size (as TFLite's
 * "greedy by size" planner): blocks in decreasing size, each put into the
 * smallest gap, between the already placed blocks whose lifetimes overlap
 * its own, that holds it (best fit), else above all of them. Sizes and
 * offsets are multiples of 256 bytes. The placed blocks that overlap
 * [s, e] are those live at s (a stabbing query) plus those starting in
 * (s, e]; two segment trees over time answer both in O(log T + k), so the
 * planner costs O((n + K) log n) with K the number of overlapping pairs,
 * not O(n^2).
 *
 * tp_memplan_verify recomputes the lifetimes and checks every pair of
 * groups live at the same time by brute force (pairs sorted by start, so
 * only overlapping pairs are visited). */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/memplan.h"
#include "util/xalloc.h"
#include "util/errmsg.h"

#define ARENA_ALIGN 256
#define MAX_IN ((int)(sizeof ((tp_ir_op *)0)->in / sizeof ((tp_ir_op *)0)->in[0]))

/* the outputs of an op (each its own buffer and lifetime), 0 for a kind
 * out of range (check_refs reports it) */
static int nout(const tp_ir_op *op) { return (unsigned)op->kind < TP_OP_COUNT ? tp_ops[op->kind].nout : 0; }

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static int64_t buf_bytes(const tp_ir_buf *b)
{
    return tp_ir_buf_elems(b) * (int64_t)tp_dtype_size(b->dtype);
}

/* ---- lifetimes ---- */

/* The alias root of every buffer; -1 where the chain leaves the buffer
 * table or loops. Each buffer is visited once. */
static int *alias_roots(const tp_ir *ir)
{
    enum { UNKNOWN = -2, ON_PATH = -3 };
    int n = ir->nbufs;
    int *root = tp_xreallocarray(NULL, (size_t)n + 1, sizeof *root);
    int *path = tp_xreallocarray(NULL, (size_t)n + 1, sizeof *path);
    for (int b = 0; b < n; b++)
        root[b] = UNKNOWN;
    for (int b = 0; b < n; b++) {
        int len = 0, cur = b, r;
        for (;;) {
            if (root[cur] != UNKNOWN) {
                r = root[cur];
                break;
            }
            root[cur] = ON_PATH;
            path[len++] = cur;
            int a = ir->bufs[cur].alias_of;
            if (a < 0) {
                r = cur;
                break;
            }
            if (a >= n || root[a] == ON_PATH) {
                r = -1;
                break;
            }
            cur = a;
        }
        for (int i = 0; i < len; i++)
            root[path[i]] = r;
    }
    free(path);
    return root;
}

/* One block of storage: an alias group. */
typedef struct group {
    int64_t start, end;     /* live on [start, end] (times as above); start > end: never */
    int64_t size;           /* largest member, rounded up to ARENA_ALIGN */
    int64_t extent;         /* largest member in bytes, unrounded */
    int64_t offset;
} group;

typedef struct lifetimes {
    int *root;              /* alias root, -1 for a broken chain */
    int *grp;               /* the group a buffer belongs to (its root, or itself) */
    group *g;               /* indexed by buffer; meaningful for group leaders */
} lifetimes;

static void touch(group *g, int64_t t)
{
    if (t < g->start)
        g->start = t;
    if (t > g->end)
        g->end = t;
}

static void lifetimes_compute(const tp_ir *ir, lifetimes *L)
{
    int n = ir->nbufs;
    L->root = alias_roots(ir);
    L->grp = tp_xreallocarray(NULL, (size_t)n + 1, sizeof *L->grp);
    L->g = tp_xcalloc((size_t)n + 1, sizeof *L->g);
    for (int b = 0; b < n; b++) {
        L->grp[b] = L->root[b] >= 0 ? L->root[b] : b;
        L->g[b].start = INT64_MAX;
        L->g[b].end = -1;
        L->g[b].offset = -1;
    }
    for (int b = 0; b < n; b++) {
        group *g = &L->g[L->grp[b]];
        int64_t bytes = buf_bytes(&ir->bufs[b]);
        if (bytes > g->extent)
            g->extent = bytes;
        int64_t size = round_up(bytes > 0 ? bytes : 1, ARENA_ALIGN);
        if (size > g->size)
            g->size = size;
        if (ir->bufs[b].input)
            touch(g, 0);
        if (ir->bufs[b].output || b == ir->loss_buf || b == ir->logits_buf)
            touch(g, (int64_t)ir->nops + 1);
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead)
            continue;
        for (int o = 0; o < nout(op); o++)
            if (op->outs[o] >= 0 && op->outs[o] < n)
                touch(&L->g[L->grp[op->outs[o]]], (int64_t)i + 1);
        for (int k = 0; k < op->nin && k < MAX_IN; k++)
            if (op->in[k] >= 0 && op->in[k] < n)
                touch(&L->g[L->grp[op->in[k]]], (int64_t)i + 1);
        /* a weight gathered over dp (FSDP) is read from its buffer */
        const int from[2] = {op->weight_from - 1, op->bias_from - 1};
        for (int k = 0; k < 2; k++)
            if (from[k] >= 0 && from[k] < n)
                touch(&L->g[L->grp[from[k]]], (int64_t)i + 1);
    }
}

static void lifetimes_free(lifetimes *L)
{
    free(L->root);
    free(L->grp);
    free(L->g);
}

/* ---- interval index: two segment trees over time ---- */

/* Lists of group ids hanging off tree nodes, in one pool. */
typedef struct seglists {
    int *head;              /* per node, -1 when empty */
    int *next, *val;
    int n, cap;
} seglists;

static void seglists_init(seglists *s, int nodes)
{
    s->head = tp_xreallocarray(NULL, (size_t)nodes, sizeof *s->head);
    for (int i = 0; i < nodes; i++)
        s->head[i] = -1;
    s->next = s->val = NULL;
    s->n = s->cap = 0;
}

static void seglists_push(seglists *s, int node, int v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->next = tp_xreallocarray(s->next, (size_t)s->cap, sizeof *s->next);
        s->val = tp_xreallocarray(s->val, (size_t)s->cap, sizeof *s->val);
    }
    s->val[s->n] = v;
    s->next[s->n] = s->head[node];
    s->head[node] = s->n++;
}

static void seglists_free(seglists *s)
{
    free(s->head);
    free(s->next);
    free(s->val);
}

typedef struct span_ref {
    int64_t offset, end;
} span_ref;

typedef struct planner {
    int leaves;             /* a power of two >= the number of times */
    seglists cover;         /* interval stored at its canonical nodes: stab queries */
    seglists starts;        /* interval stored at every ancestor of its start leaf */
    span_ref *found; int nfound, capfound;
    const group *g;
} planner;

static void collect(planner *P, const seglists *s, int node)
{
    for (int e = s->head[node]; e >= 0; e = s->next[e]) {
        P->found = tp_xgrow(P->found, P->nfound, &P->capfound, sizeof *P->found, 256);
        const group *g = &P->g[s->val[e]];
        P->found[P->nfound++] = (span_ref){g->offset, g->offset + g->size};
    }
}

/* The placed blocks whose lifetimes overlap [s, e]. */
static void query(planner *P, int s, int e)
{
    P->nfound = 0;
    for (int i = s + P->leaves; i >= 1; i >>= 1)
        collect(P, &P->cover, i);
    for (int l = s + 1 + P->leaves, r = e + 1 + P->leaves; l < r; l >>= 1, r >>= 1) {
        if (l & 1)
            collect(P, &P->starts, l++);
        if (r & 1)
            collect(P, &P->starts, --r);
    }
}

static void insert(planner *P, int id, int s, int e)
{
    for (int l = s + P->leaves, r = e + 1 + P->leaves; l < r; l >>= 1, r >>= 1) {
        if (l & 1)
            seglists_push(&P->cover, l++, id);
        if (r & 1)
            seglists_push(&P->cover, --r, id);
    }
    for (int i = s + P->leaves; i >= 1; i >>= 1)
        seglists_push(&P->starts, i, id);
}

static int cmp_span(const void *pa, const void *pb)
{
    const span_ref *a = pa, *b = pb;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

/* Best fit among the gaps left by the overlapping blocks; above them all
 * when none is large enough. The result depends only on the set of
 * blocks, not on the order they were found in. */
static int64_t best_fit(planner *P, int64_t size)
{
    if (P->nfound > 1)
        qsort(P->found, (size_t)P->nfound, sizeof *P->found, cmp_span);
    int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
    for (int i = 0; i < P->nfound; i++) {
        const span_ref *f = &P->found[i];
        if (f->offset > cursor) {
            int64_t gap = f->offset - cursor;
            if (gap >= size && gap < best_gap) {
                best_gap = gap;
                best = cursor;
            }
        }
        if (f->end > cursor)
            cursor = f->end;
    }
    return best >= 0 ? best : cursor;
}

static const group *sort_groups;

/* Larger first; then earlier, then longer-lived, then lower index, so the
 * order (and the plan) is fully determined by the IR. */
static int cmp_group(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    const group *x = &sort_groups[a], *y = &sort_groups[b];
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->end != y->end)
        return x->end > y->end ? -1 : 1;
    return (a > b) - (a < b);
}

void tp_memplan(tp_ir *ir)
{
    int n = ir->nbufs;
    ir->arena_bytes = 0;
    if (n == 0)
        return;
    lifetimes L;
    lifetimes_compute(ir, &L);

    int *order = tp_xreallocarray(NULL, (size_t)n, sizeof *order);
    int nlive = 0;
    for (int b = 0; b < n; b++)
        if (L.grp[b] == b && L.g[b].start <= L.g[b].end)
            order[nlive++] = b;
    sort_groups = L.g;
    qsort(order, (size_t)nlive, sizeof *order, cmp_group);
    sort_groups = NULL;

    planner P = {0};
    int64_t times = (int64_t)ir->nops + 2;
    P.leaves = 1;
    while (P.leaves < times)
        P.leaves <<= 1;
    seglists_init(&P.cover, 2 * P.leaves);
    seglists_init(&P.starts, 2 * P.leaves);
    P.g = L.g;

    int64_t arena = 0;
    for (int i = 0; i < nlive; i++) {
        group *g = &L.g[order[i]];
        int s = (int)g->start, e = (int)g->end;
        query(&P, s, e);
        g->offset = best_fit(&P, g->size);
        insert(&P, order[i], s, e);
        if (g->offset + g->size > arena)
            arena = g->offset + g->size;
    }

    for (int b = 0; b < n; b++)
        ir->bufs[b].offset = L.g[L.grp[b]].offset;
    ir->arena_bytes = arena;

    seglists_free(&P.cover);
    seglists_free(&P.starts);
    free(P.found);
    free(order);
    lifetimes_free(&L);
}

/* ---- verification ---- */

static const char *name_of(const tp_ir *ir, int b)
{
    return ir->bufs[b].name ? ir->bufs[b].name : "(unnamed)";
}

static int cmp_start(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    const group *x = &sort_groups[a], *y = &sort_groups[b];
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return (a > b) - (a < b);
}

static bool check_refs(const tp_ir *ir, char *err, size_t errlen)
{
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->nin < 0 || op->nin > MAX_IN) {
            tp_error(err, errlen, "op %d (%s) has %d inputs", i, tp_op_names[op->kind], op->nin);
            return false;
        }
        for (int o = 0; o < nout(op); o++)
            if (op->outs[o] < -1 || op->outs[o] >= ir->nbufs) {
                tp_error(err, errlen, "op %d (%s) writes buffer %d, outside the %d buffers", i,
                        tp_op_names[op->kind], op->outs[o], ir->nbufs);
                return false;
            }
        for (int k = 0; k < op->nin; k++) {
            if (op->in[k] < 0 || op->in[k] >= ir->nbufs) {
                tp_error(err, errlen, "op %d (%s) reads buffer %d, outside the %d buffers", i,
                        tp_op_names[op->kind], op->in[k], ir->nbufs);
                return false;
            }
        }
        if (op->weight_from < 0 || op->weight_from > ir->nbufs || op->bias_from < 0 || op->bias_from > ir->nbufs) {
            tp_error(err, errlen, "op %d (%s) reads its weight from outside the %d buffers", i, tp_op_names[op->kind],
                     ir->nbufs);
            return false;
        }
    }
    return true;
}

/* Each buffer against its group: placed, aligned, inside the arena, at
 * its root's offset. */
static bool check_buffers(const tp_ir *ir, const lifetimes *L, char *err, size_t errlen)
{
    for (int b = 0; b < ir->nbufs; b++) {
        const tp_ir_buf *buf = &ir->bufs[b];
        if (L->root[b] < 0) {
            tp_error(err, errlen, "buffer %d (%s): its alias chain loops or leaves the buffer table", b,
                    name_of(ir, b));
            return false;
        }
        const group *g = &L->g[L->grp[b]];
        if (g->start > g->end)
            continue;   /* never live: no storage needed */
        int r = L->root[b];
        if (r != b && buf->offset != ir->bufs[r].offset) {
            tp_error(err, errlen, "buffer %d (%s) is a view of buffer %d (%s) but has offset %" PRId64
                    ", not %" PRId64, b, name_of(ir, b), r, name_of(ir, r), buf->offset, ir->bufs[r].offset);
            return false;
        }
        int64_t bytes = buf_bytes(buf);
        if (buf->offset < 0 || buf->offset % ARENA_ALIGN != 0) {
            tp_error(err, errlen, "buffer %d (%s) is live but has offset %" PRId64
                    " (not a non-negative multiple of %d)", b, name_of(ir, b), buf->offset, ARENA_ALIGN);
            return false;
        }
        if (buf->offset + bytes > ir->arena_bytes) {
            tp_error(err, errlen, "buffer %d (%s) at %" PRId64 " + %" PRId64 " bytes ends beyond the arena (%"
                    PRId64 " bytes)", b, name_of(ir, b), buf->offset, bytes, ir->arena_bytes);
            return false;
        }
    }
    return true;
}

static int64_t op_of(const tp_ir *ir, int64_t t)
{
    return t > ir->nops ? ir->nops : t - 1;
}

bool tp_memplan_verify(const tp_ir *ir, char *err, size_t errlen)
{
    if (!check_refs(ir, err, errlen))
        return false;
    int n = ir->nbufs;
    if (n == 0)
        return true;
    lifetimes L;
    lifetimes_compute(ir, &L);
    bool ok = check_buffers(ir, &L, err, errlen);

    int *order = tp_xreallocarray(NULL, (size_t)n, sizeof *order);
    int nlive = 0;
    for (int b = 0; b < n && ok; b++)
        if (L.grp[b] == b && L.g[b].start <= L.g[b].end)
            order[nlive++] = b;
    sort_groups = L.g;
    qsort(order, (size_t)nlive, sizeof *order, cmp_start);
    sort_groups = NULL;

    for (int i = 0; i < nlive && ok; i++) {
        int a = order[i];
        const group *x = &L.g[a];
        int64_t xo = ir->bufs[a].offset;
        for (int j = i + 1; j < nlive && ok; j++) {
            int b = order[j];
            const group *y = &L.g[b];
            if (y->start > x->end)
                break;
            int64_t yo = ir->bufs[b].offset;
            if (xo < yo + y->extent && yo < xo + x->extent) {
                int64_t from = y->start, to = x->end < y->end ? x->end : y->end;
                tp_error(err, errlen, "buffers %d (%s, bytes %" PRId64 "..%" PRId64 ") and %d (%s, bytes %"
                        PRId64 "..%" PRId64 ") are both live from op %" PRId64 " to op %" PRId64
                        " but overlap in the arena", a, name_of(ir, a), xo, xo + x->extent, b, name_of(ir, b),
                        yo, yo + y->extent, op_of(ir, from), op_of(ir, to));
                ok = false;
            }
        }
    }
    free(order);
    lifetimes_free(&L);
    return ok;
}
