/* attention_grad.c: the gradients of the CPU backend's causal attention
 * (cpu_attention in backend_cpu.c) with respect to q, k and v, in one pass.
 *
 * For a query row i (one batch element, one query head) with scores
 * S_ij = scale q_i . k_j (capped as softcap tanh(S / softcap) when softcap
 * > 0), P = softmax over the keys j <= i, and the output's gradient dy_i:
 *   dP_ij = dy_i . v_j,   D_i = sum_j P_ij dP_ij  (= dy_i . o_i),
 *   dS_ij = P_ij (dP_ij - D_i) (times 1 - tanh^2(S_ij / softcap), the cap's
 *           derivative, when softcap > 0),
 *   dq_i = scale sum_j dS_ij k_j,  dk_j += scale dS_ij q_i,  dv_j += P_ij dy_i,
 * where k_j, v_j are those of the kv head i / (h / g) that the query head
 * reads, so a kv head's dk and dv sum over the h / g query heads of its
 * group.
 *
 * Flash-style, as the forward: for each query head and block of
 * GRAD_QBLOCK queries, the keys the block sees (causal: none past its last
 * query) are walked once in blocks of GRAD_KBLOCK, recomputing the block
 * of scores and dP; P = exp(score - lse) from each row's log-sum-exp that
 * the forward wrote, and D = dy . o from its output, so no walk recomputes
 * the softmax's statistics. Then three SGEMMs add dS K to dq's rows,
 * dS^T Q to dk's and P^T dy to dv's. The scratch is two blocks whatever
 * the sequence length. Scores, P and dS are fp32 as the forward's (the
 * exps vec.h's, as the forward's); D is summed in double.
 *
 * An output that is NULL is not computed (dv alone needs no dP). dk and dv
 * accumulate over the query heads of their kv head, then the query blocks,
 * in that order, with products of the same shapes whichever other heads a
 * rank holds, so a kv head's gradient is the same whichever rank computes
 * it. The pool's threads take (batch element, kv head) pairs, each with
 * the query heads of its group: the sums stay in that order at any thread
 * count.
 *
 * With segments, a key of another document than its query's is hidden as
 * one in its future is (documents.h); a row that sees no key (padding)
 * has P = 0 and passes no gradient. */
#include "runtime/backends/cpu/cpu_training.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/backends/cpu/documents.h"
#include "runtime/backends/cpu/pool.h"
#include "runtime/backends/cpu/vec.h"
#include "runtime/backends/cpu/vexp.h"
#include "util/xalloc.h"

#define GRAD_QBLOCK 64
#define GRAD_KBLOCK 128

/* One (batch element, query head): q, dy and dq rows at stride h * d; k,
 * v, dk and dv rows of its kv head at stride g * d. */
typedef struct head_view {
    const float *q, *dy, *o, *k, *v;
    const float *lse;     /* the head's [s] */
    float *dq, *dk, *dv;
    int64_t qstride, kvstride, d;
    double scale, softcap;
    const int32_t *seg;   /* the row's documents, or NULL */
} head_view;

/* The scratch of one query block: a block of scores (then P) and of dP
 * (then dS), and each row's D. */
typedef struct block_rows {
    float *p, *ds;
    float dsum[GRAD_QBLOCK];
} block_rows;

/* Scores of queries q0 .. q0 + nq - 1 against keys k0 .. k0 + nk - 1 into
 * p (nq x nk), capped, and -inf where causality hides the key; with dp,
 * dP = dy V^T into dp. */
static void scores(const head_view *hv, int64_t q0, int64_t nq, int64_t k0, int64_t nk, float *p, float *dp)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)hv->d, (float)hv->scale,
                hv->q + q0 * hv->qstride, (int)hv->qstride, hv->k + k0 * hv->kvstride, (int)hv->kvstride, 0.0f, p,
                (int)nk);
    if (dp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)hv->d, 1.0f,
                    hv->dy + q0 * hv->qstride, (int)hv->qstride, hv->v + k0 * hv->kvstride, (int)hv->kvstride, 0.0f,
                    dp, (int)nk);
    for (int64_t i = 0; i < nq; i++) {
        float *row = p + i * nk;
        /* query q0 + i sees keys k0 .. q0 + i of this block */
        const int64_t seen = q0 + i - k0 + 1 < nk ? q0 + i - k0 + 1 : nk;
        for (int64_t j = 0; j < seen && hv->softcap > 0; j++)
            row[j] = (float)(hv->softcap * tanh(row[j] / hv->softcap));
        for (int64_t j = seen < 0 ? 0 : seen; j < nk; j++)
            row[j] = -INFINITY;
        if (hv->seg)
            tp_cpu_hide_other_documents(row, seen, hv->seg, q0 + i, k0);
    }
}

/* Each row's D = dy . o, summed in double. */
static void row_dsum(const head_view *hv, int64_t q0, int64_t nq, block_rows *br)
{
    for (int64_t i = 0; i < nq; i++) {
        const float *dy = hv->dy + (q0 + i) * hv->qstride, *o = hv->o + (q0 + i) * hv->qstride;
        double dot = 0.0;
        for (int64_t c = 0; c < hv->d; c++)
            dot += (double)dy[c] * o[c];
        br->dsum[i] = (float)dot;
    }
}

/* The walk: P and dS block by block, and their products into the
 * gradients asked for. */
static void block_grads(const head_view *hv, int64_t q0, int64_t nq, block_rows *br)
{
    const bool need_ds = hv->dq || hv->dk;
    const int64_t d = hv->d;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    float cap_grad[GRAD_KBLOCK]; /* the capped scores' derivative, 1 - tanh^2 */
    for (int64_t k0 = 0; k0 < q0 + nq; k0 += GRAD_KBLOCK) {
        const int64_t nk = q0 + nq - k0 < GRAD_KBLOCK ? q0 + nq - k0 : GRAD_KBLOCK;
        scores(hv, q0, nq, k0, nk, br->p, need_ds ? br->ds : NULL);
        for (int64_t i = 0; i < nq; i++) {
            float *prow = br->p + i * nk, *dsrow = br->ds + i * nk;
            const float lse = hv->lse[q0 + i], dsum = need_ds ? br->dsum[i] : 0.0f; /* dv alone: no D */
            if (lse == INFINITY) {   /* a row that sees no key: no probability, no gradient */
                memset(prow, 0, (size_t)nk * sizeof *prow);
                memset(dsrow, 0, (size_t)nk * sizeof *dsrow);
                continue;
            }
            for (int64_t j = 0; j < nk; j++) {
                /* from the capped score itself, tanh = score / softcap; 1
                 * for a key in the row's future (-inf), whose P is 0 */
                const float t = hv->softcap > 0 && prow[j] > -INFINITY ? prow[j] / (float)hv->softcap : 0.0f;
                cap_grad[j] = 1.0f - t * t;
            }
            vec->exp_sum(prow, prow, nk, lse); /* 0 for a key in the row's future */
            for (int64_t j = 0; j < nk; j++) {
                if (need_ds)
                    dsrow[j] = prow[j] * (dsrow[j] - dsum) * cap_grad[j] * (float)hv->scale;
            }
        }
        if (hv->dv)   /* dv[k0 ..] += P^T dy */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)d, (int)nq, 1.0f, br->p, (int)nk,
                        hv->dy + q0 * hv->qstride, (int)hv->qstride, 1.0f, hv->dv + k0 * hv->kvstride,
                        (int)hv->kvstride);
        if (hv->dk)   /* dk[k0 ..] += dS^T q */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)d, (int)nq, 1.0f, br->ds, (int)nk,
                        hv->q + q0 * hv->qstride, (int)hv->qstride, 1.0f, hv->dk + k0 * hv->kvstride,
                        (int)hv->kvstride);
        if (hv->dq)   /* dq[q0 ..] += dS k */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)d, (int)nk, 1.0f, br->ds, (int)nk,
                        hv->k + k0 * hv->kvstride, (int)hv->kvstride, 1.0f, hv->dq + q0 * hv->qstride,
                        (int)hv->qstride);
    }
}

/* One call's operands, for the parts of the pool. */
typedef struct grad_job {
    float *dq, *dk, *dv;
    const float *q, *k, *v, *dy, *o, *lse;
    int64_t s, h, g, d;
    double scale, softcap;
    const int32_t *segments;
} grad_job;

/* kv heads [begin, end), numbered bi * g + kh over the batch: each with the
 * query heads of its group, in order, so its dk and dv add up in the same
 * order whichever part (and thread) computes it. */
static void kv_heads_part(void *ctx, int64_t begin, int64_t end)
{
    const grad_job *j = ctx;
    const int64_t group = j->h / j->g, s = j->s, h = j->h, g = j->g, d = j->d;
    block_rows br;
    br.p = tp_xmalloc((size_t)2 * GRAD_QBLOCK * GRAD_KBLOCK * sizeof *br.p);
    br.ds = br.p + GRAD_QBLOCK * GRAD_KBLOCK;
    for (int64_t item = begin; item < end; item++) {
        const int64_t bi = item / g, kh = item % g, kvrow = bi * s * g + kh; /* row 0's, in heads */
        for (int64_t hi = kh * group; hi < (kh + 1) * group; hi++) {
            const int64_t qrow = bi * s * h + hi;
            head_view hv = {j->q + qrow * d, j->dy + qrow * d, j->o + qrow * d, j->k + kvrow * d, j->v + kvrow * d,
                            j->lse + (bi * h + hi) * s, j->dq ? j->dq + qrow * d : NULL, j->dk ? j->dk + kvrow * d : NULL,
                            j->dv ? j->dv + kvrow * d : NULL, h * d, g * d, d, j->scale, j->softcap,
                            j->segments ? j->segments + bi * s : NULL};
            for (int64_t q0 = 0; q0 < s; q0 += GRAD_QBLOCK) {
                const int64_t nq = s - q0 < GRAD_QBLOCK ? s - q0 : GRAD_QBLOCK;
                if (j->dq || j->dk)   /* dv alone needs no dS */
                    row_dsum(&hv, q0, nq, &br);
                block_grads(&hv, q0, nq, &br);
            }
        }
    }
    free(br.p);
}

void tp_cpu_attention_grad(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                           const float *dy, const float *o, const float *lse, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, double scale,
                           double softcap, const int32_t *segments)
{
    /* the outputs accumulate: they must not overlap the inputs or each other */
    const float *in[] = {q, k, v, dy, o, lse};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        assert((!dq || dq != in[i]) && (!dk || dk != in[i]) && (!dv || dv != in[i]));
    assert(g > 0 && h % g == 0 && d > 0);
    if (dq)
        memset(dq, 0, (size_t)(b * s * h * d) * sizeof *dq);
    if (dk)
        memset(dk, 0, (size_t)(b * s * g * d) * sizeof *dk);
    if (dv)
        memset(dv, 0, (size_t)(b * s * g * d) * sizeof *dv);
    if (!dq && !dk && !dv)
        return;
    grad_job job = {dq, dk, dv, q, k, v, dy, o, lse, s, h, g, d, scale, softcap, segments};
    tp_cpu_parallel(b * g, 1, kv_heads_part, &job);
}
