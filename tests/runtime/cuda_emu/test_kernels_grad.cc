// The backward kernels of runtime/kernels (the gradients and
// the optimizer), under the emulator, against the CPU backend's: random
// inputs, ragged sizes, GQA, soft-capping, repeated and masked ids, padded
// vocabularies, ignored labels, both storage types. Each comparison prints
// its largest error ("max error ..."). As in test_kernels.cc,
// bf16 inputs are rounded first and the reference runs on the rounded
// values, so bf16 adds only the kernel's one rounding at the store.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "attention_flash.cuh"

namespace {

using namespace tp_ktest;

// the reference: the CPU backend's kernels
const tp_backend &ref() { return *cpu(); }

class GradKernels : public ::testing::TestWithParam<tp_kernel_dtype> {
  protected:
    tp_kernel_dtype t() const { return GetParam(); }
};

std::string dims(std::initializer_list<int64_t> v)
{
    std::string s;
    for (int64_t x : v)
        s += (s.empty() ? "" : "x") + std::to_string(x);
    return s;
}

// ---- column sums: fp32 over up to 1000 rows in a fixed tree against the
// reference's sums; 1e-5 relative to the result plus 1e-5 absolute where
// terms of both signs cancel

TEST_P(GradKernels, SumRows)
{
    const Tol tol = stored({1e-5, 1e-5}, t());
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {1000, 5}, {3, 300}, {0, 4}}) {
        Vec x = as_stored(random_vec((size_t)(m * n), 70), t());
        Vec want((size_t)n);
        ref().sum_rows(want.data(), x.data(), m, n, 0.5f);
        Dev dx(t(), x), dout(t(), (size_t)n);
        tp_k_sum_rows(nullptr, t(), dout.ptr(), dx.ptr(), m, n, 0.5f);
        compare(dout.download(), want, tol, label(t(), "sum_rows " + dims({m, n})));
    }
}

// ---- the seed gradient of a summed loss: exactly 1 in either dtype

TEST_P(GradKernels, Ones)
{
    for (int64_t n : {1, 37, 5000, 0}) {
        Vec want((size_t)n, NAN);
        ref().ones(want.data(), n);
        Dev dout(t(), Vec((size_t)n, 5.0f));
        tp_k_ones(nullptr, t(), dout.ptr(), n);
        compare(dout.download(), want, {0, 0}, label(t(), "ones " + dims({n})));
    }
}

// ---- norms: the statistics in fp32 block sums (as the forward), dx with
// one cancelling sum over the row; dw sums over rows of O(1) terms

TEST_P(GradKernels, RmsNorm)
{
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {5, 1000}, {300, 64}})
        for (bool unit_offset : {false, true}) {
            const std::string what = label(t(), std::string(unit_offset ? "rmsnorm (1 + w) " : "rmsnorm ") + dims({m, n}));
            Vec x = as_stored(random_vec((size_t)(m * n), 71, -2.0f, 2.0f), t());
            Vec dy = as_stored(random_vec((size_t)(m * n), 72), t());
            Vec w = as_stored(random_vec((size_t)n, 73, 0.5f, 1.5f), t());
            Vec want_dx(x.size()), want_dw((size_t)n);
            ref().rmsnorm_dx(want_dx.data(), x.data(), dy.data(), w.data(), m, n, 1e-5f, unit_offset, nullptr);
            ref().rmsnorm_dw(want_dw.data(), x.data(), dy.data(), m, n, 1e-5f);
            Dev dx(t(), x), ddy(t(), dy), dw(t(), w), dout(t(), x.size()), dgw(t(), (size_t)n);
            DevOf<float> scratch((size_t)m);
            tp_k_rmsnorm_dx(nullptr, t(), dout.ptr(), dx.ptr(), ddy.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset, nullptr);
            compare(dout.download(), want_dx, stored({2e-5, 1e-5}, t()), what + " dx");
            tp_k_rmsnorm_dw(nullptr, t(), dgw.ptr(), dx.ptr(), ddy.ptr(), scratch.ptr(), m, n, 1e-5f);
            compare(dgw.download(), want_dw, stored({2e-5 * std::sqrt((double)m), 1e-5}, t()), what + " dw");
        }
}

// With a gradient to add (-O1's fusion of the add after it): what
// rmsnorm_dx then an add of the stored result give, bit for bit, also when
// the sum is written over what it adds.
TEST_P(GradKernels, RmsNormDxAddsAsTheAddAfterIt)
{
    const int64_t m = 5, n = 1000;
    const Vec x = as_stored(random_vec((size_t)(m * n), 77, -2.0f, 2.0f), t());
    const Vec dy = as_stored(random_vec((size_t)(m * n), 78), t());
    const Vec w = as_stored(random_vec((size_t)n, 79, 0.5f, 1.5f), t());
    const Vec res = as_stored(random_vec((size_t)(m * n), 80, -3.0f, 3.0f), t());
    Dev dx(t(), x), ddy(t(), dy), dw(t(), w), dres(t(), res), dgrad(t(), x.size()), dpair(t(), x.size()),
        dfused(t(), x.size());
    tp_k_rmsnorm_dx(nullptr, t(), dgrad.ptr(), dx.ptr(), ddy.ptr(), dw.ptr(), m, n, 1e-5f, true, nullptr);
    tp_k_binary(nullptr, t(), 0, dpair.ptr(), dres.ptr(), m * n, dgrad.ptr(), m * n);
    tp_k_rmsnorm_dx(nullptr, t(), dfused.ptr(), dx.ptr(), ddy.ptr(), dw.ptr(), m, n, 1e-5f, true, dres.ptr());
    expect_equal(dfused.download(), dpair.download(), label(t(), "rmsnorm_dx + add, fused"));
    tp_k_rmsnorm_dx(nullptr, t(), dres.ptr(), dx.ptr(), ddy.ptr(), dw.ptr(), m, n, 1e-5f, true, dres.ptr());
    expect_equal(dres.download(), dpair.download(), label(t(), "rmsnorm_dx + add, over what it adds"));
}

TEST_P(GradKernels, LayerNorm)
{
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {4, 1000}, {300, 64}}) {
        const std::string what = label(t(), "layernorm " + dims({m, n}));
        // a mean far from zero: the two-pass variance matters
        Vec x = as_stored(random_vec((size_t)(m * n), 74, 9.0f, 11.0f), t());
        Vec dy = as_stored(random_vec((size_t)(m * n), 75), t());
        Vec w = as_stored(random_vec((size_t)n, 76, 0.5f, 1.5f), t());
        Vec want_dx(x.size()), want_dw((size_t)n);
        ref().layernorm_dx(want_dx.data(), x.data(), dy.data(), w.data(), m, n, 1e-5f);
        ref().layernorm_dw(want_dw.data(), x.data(), dy.data(), m, n, 1e-5f);
        Dev dx(t(), x), ddy(t(), dy), dw(t(), w), dout(t(), x.size()), dgw(t(), (size_t)n);
        DevOf<float> scratch((size_t)(2 * m));
        tp_k_layernorm_dx(nullptr, t(), dout.ptr(), dx.ptr(), ddy.ptr(), dw.ptr(), m, n, 1e-5f);
        // x^ is (x - mean) r with r ~ 1/0.58: fp32's mean of values near 10
        // is off by ~1e-6, which r turns into 2e-6 on x^
        compare(dout.download(), want_dx, stored({5e-5, 1e-5}, t()), what + " dx");
        tp_k_layernorm_dw(nullptr, t(), dgw.ptr(), dx.ptr(), ddy.ptr(), scratch.ptr(), m, n, 1e-5f);
        compare(dgw.download(), want_dw, stored({5e-5 * std::sqrt((double)m), 1e-5}, t()), what + " dw");
    }
}

// ---- attention: fp32 scores, an fp32 log-sum-exp and D = dy . O, sums
// over up to 130 keys (dq) or queries times heads (dk, dv) against the
// reference; gradients of O(0.1 .. 1), absolute error ~1e-6

TEST_P(GradKernels, Attention)
{
    struct Case {
        int64_t b, s, h, g, d;
    };
    const char *names[] = {"dq", "dk", "dv"};
    const bool bf16 = t() == TP_KERNEL_BF16;
    // key tiles hold 4096 / d keys: d 256 and 128 span two and three tiles
    for (Case c : {Case{1, 1, 1, 1, 1}, Case{2, 19, 4, 2, 64}, Case{1, 67, 2, 1, 40}, Case{1, 20, 2, 2, 256},
                   Case{1, 70, 1, 1, 128}, Case{1, 9, 3, 3, 33}})
        for (auto [scale, softcap] : {std::pair<double, double>{1.0 / std::sqrt((double)c.d), 0.0}, {0.2, 2.0}}) {
            if (bf16 && tp_cuda_flash_head_dim(c.d))
                continue; // the tensor-core kernels: test_kernels_flash_grad.cc
            const std::string shape = "attention b" + std::to_string(c.b) + " s" + std::to_string(c.s) + " h" +
                                      std::to_string(c.h) + " g" + std::to_string(c.g) + " d" + std::to_string(c.d) +
                                      (softcap > 0 ? " capped" : "");
            const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d));
            Vec q = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 77, -amp, amp), t());
            Vec k = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 78, -amp, amp), t());
            Vec v = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 79), t());
            Vec dy = as_stored(random_vec(q.size(), 80), t());
            Dev dq(t(), q), dk(t(), k), dv(t(), v), ddy(t(), dy);
            DevOf<float> scratch((size_t)tp_cuda_attention_grad_scratch(bf16, c.b, c.s, c.h, c.g, c.d));
            const AttnSaved f =
                attn_saved(t(), AttnCase{c.b, c.s, c.h, c.g, c.d, scale, softcap}, dq, dk, dv, nullptr);
            std::vector<Vec> want = {Vec(q.size()), Vec(k.size()), Vec(k.size())};
            ref().attention_grad(want[0].data(), want[1].data(), want[2].data(), q.data(), k.data(), v.data(),
                                 dy.data(), f.o.data(), f.lse.data(), c.b, c.s, c.h, c.g, c.d, scale, softcap,
                                 nullptr, nullptr);
            // all three in one launch (dk and dv from one key-major kernel), then
            // each alone (the kernels that compute dk or dv only)
            for (int only = -1; only < 3; only++) {
                Dev gq(t(), q.size()), gk(t(), k.size()), gv(t(), k.size());
                void *out[3] = {gq.ptr(), gk.ptr(), gv.ptr()};
                for (int which = 0; which < 3; which++)
                    out[which] = only < 0 || only == which ? out[which] : nullptr;
                tp_k_attention_grad(nullptr, t(), out[0], out[1], out[2], dq.ptr(), dk.ptr(), dv.ptr(), ddy.ptr(),
                                    f.dev_o->ptr(), f.dev_lse->ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d,
                                    (float)scale, (float)softcap, nullptr, nullptr);
                Dev *got[3] = {&gq, &gk, &gv};
                for (int which = 0; which < 3; which++)
                    if (out[which])
                        compare(got[which]->download(), want[which], stored({1e-5, 1e-5}, t()),
                                label(t(), shape + " " + names[which] + (only < 0 ? "" : " alone")));
            }
        }
}

// Documents (tpcc --segments): a padded row and a row of several
// documents; a padding query passes no gradient, a key none from another
// document's queries.
TEST_P(GradKernels, AttentionWithinDocuments)
{
    const char *names[] = {"dq", "dk", "dv"};
    const bool bf16 = t() == TP_KERNEL_BF16;
    for (AttnCase c : {AttnCase{2, 29, 4, 2, 64, 0.125, 0.0}, AttnCase{2, 20, 2, 1, 33, 0.2, 2.0}}) {
        if (bf16 && tp_cuda_flash_head_dim(c.d))
            continue; // the tensor-core kernels: test_kernels_flash_grad.cc
        const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d));
        Vec q = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 82, -amp, amp), t());
        Vec k = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 83, -amp, amp), t());
        Vec v = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 84), t());
        Vec dy = as_stored(random_vec(q.size(), 85), t());
        IVec seg = attn_documents(c.b, c.s);
        Dev dq(t(), q), dk(t(), k), dv(t(), v), ddy(t(), dy), gq(t(), q.size()), gk(t(), k.size()), gv(t(), k.size());
        DevOf<int32_t> dseg(seg);
        DevOf<float> scratch((size_t)tp_cuda_attention_grad_scratch(bf16, c.b, c.s, c.h, c.g, c.d));
        const AttnSaved f = attn_saved(t(), c, dq, dk, dv, dseg.ptr());
        std::vector<Vec> want = {Vec(q.size()), Vec(k.size()), Vec(k.size())};
        ref().attention_grad(want[0].data(), want[1].data(), want[2].data(), q.data(), k.data(), v.data(),
                             dy.data(), f.o.data(), f.lse.data(), c.b, c.s, c.h, c.g, c.d, c.scale, c.softcap,
                             seg.data(), nullptr);
        tp_k_attention_grad(nullptr, t(), gq.ptr(), gk.ptr(), gv.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), ddy.ptr(),
                            f.dev_o->ptr(), f.dev_lse->ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d,
                            (float)c.scale, (float)c.softcap, dseg.ptr(), nullptr);
        Dev *got[3] = {&gq, &gk, &gv};
        for (int which = 0; which < 3; which++)
            compare(got[which]->download(), want[which], stored({1e-5, 1e-5}, t()),
                    label(t(), "attention within documents " + c.name() + " " + names[which]));
    }
}

// ---- elementwise: a few fp32 operations per element

// both kernel paths (pack.cuh): aligned with a tail, one element off
TEST_P(GradKernels, Activations)
{
    const char *names[] = {"silu", "gelu_tanh", "relu", "gelu_erf"};
    for (int op = 0; op < 4; op++)
        for (int64_t n : {1, 1000, 1003})
            for (int64_t off : {0, 1}) {
                Vec x = random_vec((size_t)(n + off), 81, -6.0f, 6.0f);
                if (n > 4) {
                    x[off] = -100.0f; // silu: e^-x overflows, the gradient is 0
                    x[off + 1] = 100.0f;
                    x[off + 2] = 0.0f;
                }
                x = as_stored(x, t());
                Vec dy = as_stored(random_vec((size_t)(n + off), 82), t());
                Vec want((size_t)n);
                ref().unary_grad((tp_unary)op, want.data(), x.data() + off, dy.data() + off, n);
                Dev dx(t(), x), ddy(t(), dy), dout(t(), x.size());
                tp_k_unary_grad(nullptr, t(), op, dout.at(off), dx.at(off), ddy.at(off), n);
                Vec got = dout.download();
                compare(Vec(got.begin() + off, got.end()), want, stored({1e-6, 1e-5}, t()),
                        label(t(), std::string(names[op]) + "_grad n " + std::to_string(n) + " offset " +
                                       std::to_string(off)));
            }
    for (int64_t n : {1, 300, 1001})
        for (int64_t off : {0, 1}) {
            Vec x = as_stored(random_vec((size_t)(n + off), 83, -90.0f, 90.0f), t());
            Vec dy = as_stored(random_vec((size_t)(n + off), 84), t());
            Vec want((size_t)n);
            ref().softcap_grad(want.data(), x.data() + off, dy.data() + off, n, 30.0f);
            Dev dx(t(), x), ddy(t(), dy), dout(t(), x.size());
            tp_k_softcap_grad(nullptr, t(), dout.at(off), dx.at(off), ddy.at(off), n, 30.0f);
            Vec got = dout.download();
            compare(Vec(got.begin() + off, got.end()), want, stored({1e-6, 1e-5}, t()),
                    label(t(), "softcap_grad n " + std::to_string(n) + " offset " + std::to_string(off)));
        }
}

// silu_mul's gradient on both kernel paths (aligned, one element off), with
// each output alone and both; products of a few fp32 operations
TEST_P(GradKernels, SiluMul)
{
    const Tol tol = stored({1e-6, 2e-5}, t());
    for (int64_t n : {1, 9, 1000, 4099})
        for (int64_t off : {0, 1}) {
            Vec a = random_vec((size_t)(n + off), 85, -8.0f, 8.0f);
            if (n > 4) {
                a[off] = -100.0f; // e^-x overflows: both gradients finite
                a[off + 1] = 100.0f;
                a[off + 2] = 0.0f;
            }
            a = as_stored(a, t());
            Vec b = as_stored(random_vec((size_t)(n + off), 86), t()), dy = as_stored(random_vec((size_t)(n + off), 87), t());
            Vec want_a((size_t)n), want_b((size_t)n);
            ref().silu_mul_grad(want_a.data(), want_b.data(), a.data() + off, b.data() + off, dy.data() + off, n);
            const std::string what = label(t(), "silu_mul_grad n " + std::to_string(n) + " offset " + std::to_string(off));
            for (int which = 1; which <= 3; which++) {   // da, db, both
                Dev da(t(), a), db(t(), b), ddy(t(), dy), ga(t(), a.size()), gb(t(), a.size());
                tp_k_silu_mul_grad(nullptr, t(), which & 1 ? ga.at(off) : nullptr, which & 2 ? gb.at(off) : nullptr,
                                   da.at(off), db.at(off), ddy.at(off), n);
                Vec got_a = ga.download(), got_b = gb.download();
                if (which & 1)
                    compare(Vec(got_a.begin() + off, got_a.end()), want_a, tol, what + " da");
                if (which & 2)
                    compare(Vec(got_b.begin() + off, got_b.end()), want_b, tol, what + " db");
            }
        }
}

// ---- embedding: sums of a few rows of dy, in token order

TEST_P(GradKernels, Embedding)
{
    struct Case {
        int64_t ntok, rows, dim, vocab_start;
        bool masked;
    };
    // one token; repeated ids over more tokens than a block (300 > 256);
    // more columns than a block covers (1100 > 1024); masked shards
    for (Case c : {Case{1, 1, 1, 0, false}, Case{300, 7, 37, 0, false}, Case{9, 5, 1100, 0, false},
                   Case{40, 10, 33, 5, true}, Case{6, 3, 2, 100, true}}) {
        const std::string what = label(t(), "embedding_grad ntok " + std::to_string(c.ntok) + " rows " +
                                                 std::to_string(c.rows) + " dim " + std::to_string(c.dim) +
                                                 (c.masked ? " masked" : ""));
        IVec ids((size_t)c.ntok);
        std::mt19937 gen(85);
        const int64_t lo = c.masked ? 0 : c.vocab_start, hi = c.vocab_start + c.rows + (c.masked ? 10 : 0);
        for (int32_t &id : ids)
            id = (int32_t)(lo + (int64_t)(gen() % (uint64_t)(hi - lo)));
        Vec dy = as_stored(random_vec((size_t)(c.ntok * c.dim), 86), t());
        Vec want((size_t)(c.rows * c.dim));
        ref().embedding_grad(want.data(), ids.data(), dy.data(), c.ntok, c.rows, c.dim, c.vocab_start, c.masked);
        Dev ddy(t(), dy), dout(t(), want.size());
        DevOf<int32_t> dids(ids);
        tp_k_embedding_grad(nullptr, t(), dout.ptr(), dids.ptr(), ddy.ptr(), c.ntok, c.rows, c.dim, c.vocab_start,
                            c.masked);
        compare(dout.download(), want, stored({1e-6, 1e-6}, t()), what);
    }
}

// ---- narrow's gradient: a copy into zeros, exact

TEST_P(GradKernels, NarrowGrad)
{
    struct Case {
        std::vector<int64_t> shape;
        int dim;
    };
    for (const Case &c : {Case{{2, 6, 5}, 1}, Case{{2, 6, 5}, -1}, Case{{4, 3}, 0}, Case{{7}, 0}, Case{{2, 3, 4, 6}, 3}}) {
        const int rank = (int)c.shape.size(), d = c.dim < 0 ? c.dim + rank : c.dim;
        int64_t n = 1;
        for (int64_t e : c.shape)
            n *= e;
        for (int64_t start = 0; start < c.shape[d]; start++)
            for (int64_t length = 1; start + length <= c.shape[d]; length++) {
                Vec dy = as_stored(random_vec((size_t)(n / c.shape[d] * length), 87), t());
                Vec want((size_t)n);
                ref().narrow_grad(want.data(), dy.data(), c.shape.data(), rank, c.dim, start, length);
                Dev ddy(t(), dy), dout(t(), (size_t)n);
                tp_k_narrow_grad(nullptr, t(), dout.ptr(), ddy.ptr(), c.shape.data(), rank, c.dim, start, length);
                expect_equal(dout.download(), want,
                             label(t(), "narrow_grad dim " + std::to_string(c.dim) + " " + std::to_string(start) +
                                            "+" + std::to_string(length)));
            }
    }
}

// ---- cross-entropy: softmax in fp32 against the reference's, divided by
// the number of labelled rows; entries ~1/(N vocab), so the tolerance is
// relative with a small absolute floor

IVec random_labels(int64_t b, int64_t s, int64_t vocab, unsigned seed, int ignore_every)
{
    std::mt19937 gen(seed);
    IVec labels((size_t)(b * s));
    for (size_t i = 0; i < labels.size(); i++)
        labels[i] = ignore_every && i % (size_t)ignore_every == 1 ? -100 : (int32_t)(gen() % (uint64_t)vocab);
    return labels;
}

TEST_P(GradKernels, CrossEntropy)
{
    struct Case {
        int64_t b, s, v, vocab;
        int ignore_every;
    };
    for (tp_ce_rule rule : {kHfLoss, kNextTokenLoss, tp_ce_rule{1, 7.5}, tp_ce_rule{0, 7.5}})
        for (Case c : {Case{2, 9, 37, 31, 3}, Case{1, 2, 1, 1, 0}, Case{3, 40, 16, 13, 5}, Case{1, 5, 1000, 1000, 0}}) {
            const std::string what = label(t(), "cross_entropy_grad " + dims({c.b, c.s, c.v}) + " vocab " +
                                                     std::to_string(c.vocab) + " shift " + std::to_string(rule.shift) +
                                                     " divisor " + std::to_string(rule.divisor));
            Vec logits = as_stored(random_vec((size_t)(c.b * c.s * c.v), 88, -4.0f, 4.0f), t());
            IVec labels = random_labels(c.b, c.s, c.vocab, 89, c.ignore_every);
            Vec want(logits.size());
            ref().cross_entropy_grad(want.data(), logits.data(), labels.data(), c.b, c.s, c.v, c.vocab, rule);
            Dev dl(t(), logits), dout(t(), logits.size());
            DevOf<int32_t> dlab(labels);
            tp_k_cross_entropy_grad(nullptr, t(), dout.ptr(), dl.ptr(), dlab.ptr(), c.b, c.s, c.v, c.vocab, rule.shift,
                                    (float)rule.divisor);
            compare(dout.download(), want, stored({1e-8, 1e-5}, t()), what);
        }
}

// The vocab-parallel gradient on simulated ranks: each rank's columns from
// the global max and sum of exp must be that rank's columns of the whole
// gradient.
TEST_P(GradKernels, CeGradPieces)
{
    struct Case {
        int64_t b, s, vocab, tp, vl;
    };
    for (tp_ce_rule rule : {kHfLoss, kNextTokenLoss, tp_ce_rule{1, 7.5}, tp_ce_rule{0, 7.5}})
        for (Case c : {Case{2, 9, 31, 4, 8}, Case{1, 6, 20, 4, 8}, Case{3, 1, 5, 1, 5}}) {
            const int64_t rows = c.b * c.s, vpad = c.vl * c.tp;
            const std::string what = label(t(), "ce_grad " + dims({c.b, c.s}) + " vocab " + std::to_string(c.vocab) +
                                                     " tp " + std::to_string(c.tp) + " shift " +
                                                     std::to_string(rule.shift) +
                                                     " divisor " + std::to_string(rule.divisor));
            Vec full = as_stored(random_vec((size_t)(rows * vpad), 90, -4.0f, 4.0f), t());
            IVec labels = random_labels(c.b, c.s, c.vocab, 91, 4);
            Vec whole(full.size());
            ref().cross_entropy_grad(whole.data(), full.data(), labels.data(), c.b, c.s, vpad, c.vocab, rule);
            // the all-reduced statistics, from the real columns
            Vec gmax((size_t)rows, -INFINITY), gsum((size_t)rows, 0.0f);
            for (int64_t i = 0; i < rows; i++) {
                for (int64_t col = 0; col < c.vocab; col++)
                    gmax[(size_t)i] = std::max(gmax[(size_t)i], full[(size_t)(i * vpad + col)]);
                double sum = 0.0;
                for (int64_t col = 0; col < c.vocab; col++)
                    sum += std::exp((double)full[(size_t)(i * vpad + col)] - gmax[(size_t)i]);
                gsum[(size_t)i] = (float)sum;
            }
            DevOf<int32_t> dlab(labels);
            DevOf<float> dmax(gmax), dsum(gsum);
            for (int64_t r = 0; r < c.tp; r++) {
                Vec local((size_t)(rows * c.vl)), want_local(local.size());
                for (int64_t i = 0; i < rows; i++) {
                    std::copy_n(full.begin() + i * vpad + r * c.vl, c.vl, local.begin() + i * c.vl);
                    std::copy_n(whole.begin() + i * vpad + r * c.vl, c.vl, want_local.begin() + i * c.vl);
                }
                Vec want(local.size());
                ref().ce_grad(want.data(), local.data(), gmax.data(), gsum.data(), labels.data(), c.b, c.s, c.vl,
                              r * c.vl, c.vocab, rule);
                Dev dlocal(t(), local), dout(t(), local.size());
                tp_k_ce_grad(nullptr, t(), dout.ptr(), dlocal.ptr(), dmax.ptr(), dsum.ptr(), dlab.ptr(), c.b, c.s, c.vl,
                             r * c.vl, c.vocab, rule.shift, (float)rule.divisor);
                const std::string rk = what + " rank " + std::to_string(r);
                compare(dout.download(), want, stored({1e-8, 1e-5}, t()), rk);
                compare(dout.download(), want_local, stored({1e-8, 1e-5}, t()), rk + " = cross_entropy_grad");
            }
        }
}

// ---- AdamW on fp32 weights, in place (parts without a master): three
// steps of torch's update order against the reference, the gradient
// halved by clipping's factor on step 2 (applied in fp32 in the kernel,
// on the host for the reference); |w| ~ 1 and steps ~ lr, so 1e-6
// absolute is a few ulps

// The reference's step on one fp32 weight in place from g as given
// (clipping's factor applied already), with st.weight_decay: the CPU
// backend's one part, which neither its decay flag nor its grad_scale
// changes.
void ref_adamw(float *w, const float *g, float *m, float *v, int64_t n, const tp_adamw_step &st)
{
    const tp_adamw_part part = {nullptr, w, m, v, g, n, true};
    ref().adamw(&part, 1, 1.0f, &st);
}

// g times the factor, rounded to float, as clipping's scale leaves it
Vec scaled(Vec g, float factor)
{
    for (float &x : g)
        x *= factor;
    return g;
}

TEST(GradKernelsF32, AdamW)
{
    const int64_t n = 1000;
    Vec w = random_vec((size_t)n, 92), m((size_t)n, 0.0f), v((size_t)n, 0.0f);
    DevOf<float> dw(w), dm(m), dv(v);
    for (int64_t step = 1; step <= 3; step++) {
        const float scale = step == 2 ? 0.5f : 1.0f;
        const Vec g = random_vec((size_t)n, 93 + (unsigned)step, -0.1f, 0.1f);
        const tp_adamw_step st = {1e-2, 0.9, 0.999, 1e-8, 0.1, step}; // torch's betas
        ref_adamw(w.data(), scaled(g, scale).data(), m.data(), v.data(), n, st);
        DevOf<float> dg(g);
        const tp_adamw_part part = {nullptr, dw.ptr(), dm.ptr(), dv.ptr(), dg.ptr(), n, true};
        tp_k_adamw_parts(nullptr, TP_KERNEL_F32, &part, 1, scale, st.lr, st.beta1, st.beta2, st.eps, st.weight_decay,
                         st.step);
        const std::string what = "f32 adamw in place, step " + std::to_string(step);
        compare(dw.download(), w, {1e-6, 1e-6}, what + " w");
        compare(dm.download(), m, {1e-8, 1e-6}, what + " m");
        compare(dv.download(), v, {1e-10, 1e-6}, what + " v");
    }
}

// ---- AdamW on fp32 master weights (bf16 training): the master, m and v
// fp32 against the reference's fp32 step on the gradient as stored, times
// clipping's factor (applied in fp32, so 0.5 on step 2 counts); w is the
// master rounded to the storage type, exactly the rounding of the master
// the kernel computed. Then a step too small for bf16: lr 1e-6 moves
// |w| ~ 1 by ~1e-6, far below bf16's half-ulp (2^-9 at 1): the master
// moves, the bf16 weight must not (an update done in bf16 would lose it).

// tp_k_adamw_parts on one part with a master
void adamw_master_one(tp_kernel_dtype t, float *master, void *w, const void *g, float *m, float *v, int64_t n,
                      float grad_scale, const tp_adamw_step &st)
{
    const tp_adamw_part part = {master, (float *)w, m, v, (const float *)g, n, st.weight_decay != 0};
    tp_k_adamw_parts(nullptr, t, &part, 1, grad_scale, st.lr, st.beta1, st.beta2, st.eps, st.weight_decay, st.step);
}

TEST_P(GradKernels, AdamWMaster)
{
    const int64_t n = 1000;
    Vec master = random_vec((size_t)n, 94), m((size_t)n, 0.0f), v((size_t)n, 0.0f);
    DevOf<float> dmaster(master), dm(m), dv(v);
    Dev dw(t(), as_stored(master, t()));
    for (int64_t step = 1; step <= 3; step++) {
        const float scale = step == 2 ? 0.5f : 1.0f;
        const Vec g = as_stored(random_vec((size_t)n, 95 + (unsigned)step, -0.1f, 0.1f), t());
        const tp_adamw_step st = {1e-2, 0.9, 0.999, 1e-8, 0.1, step};
        ref_adamw(master.data(), scaled(g, scale).data(), m.data(), v.data(), n, st);
        Dev dg(t(), g);
        adamw_master_one(t(), dmaster.ptr(), dw.ptr(), dg.ptr(), dm.ptr(), dv.ptr(), n, scale, st);
        const std::string what = label(t(), "adamw_master step " + std::to_string(step));
        compare(dmaster.download(), master, {1e-6, 1e-6}, what + " master");
        compare(dm.download(), m, {1e-8, 1e-6}, what + " m");
        compare(dv.download(), v, {1e-10, 1e-6}, what + " v");
        expect_equal(dw.download(), as_stored(dmaster.download(), t()), what + " w = the master, stored");
    }
    const Vec before = dmaster.download(), w_before = dw.download();
    const Vec g = as_stored(random_vec((size_t)n, 99, -0.1f, 0.1f), t());
    Dev dg(t(), g);
    adamw_master_one(t(), dmaster.ptr(), dw.ptr(), dg.ptr(), dm.ptr(), dv.ptr(), n, 1.0f,
                     tp_adamw_step{1e-6, 0.9, 0.999, 1e-8, 0.0, 4});
    const Vec after = dmaster.download(), w_after = dw.download();
    int64_t moved = 0, w_moved = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        moved += after[i] != before[i];
        w_moved += w_after[i] != w_before[i];
    }
    EXPECT_GT(moved, n * 9 / 10) << label(t(), "the fp32 master takes a step of 1e-6");
    expect_equal(w_after, as_stored(after, t()), label(t(), "w = the master after a step of 1e-6, stored"));
    if (t() == TP_KERNEL_BF16) { // only a master within 1e-6 of a rounding boundary crosses it
        EXPECT_LT(w_moved, n / 100) << "bf16 w: a step of 1e-6 is below its resolution";
    }
}

// ---- the sum of squares: double accumulation, so the same as the
// reference's to double rounding

TEST_P(GradKernels, SumSquares)
{
    for (int64_t n : {0, 1, 1000, 300000}) {
        Vec x = as_stored(random_vec((size_t)n, 97), t());
        const tp_run host_run = {x.data(), n};
        const double want = ref().sum_squares(&host_run, 1);
        Dev dx(t(), x);
        DevOf<double> dout(1);
        const tp_run run = {(const float *)dx.ptr(), n};
        tp_k_sum_squares(nullptr, t(), dout.ptr(), &run, 1);
        const double got = dout.download()[0];
        EXPECT_NEAR(got, want, 1e-12 * (want + 1.0)) << label(t(), "sum_squares n " + std::to_string(n));
    }
}

// ---- many parts in one call, as a rank's whole step takes them

// Sizes about the edges of a thread's 8 elements and of a block's chunk
// of 8192, and where the parts of `count` lie in one buffer: every other
// one off 16 bytes by one element (the element path), 8 apart.
struct PartsLayout {
    std::vector<int64_t> at, n;
    int64_t total = 0;
    explicit PartsLayout(int count)
    {
        static const int64_t sizes[] = {0, 1, 7, 8, 9, 15, 16, 17, 100, 2047, 2048, 2049, 8191, 8192, 8193, 12000};
        for (int i = 0; i < count; i++) {
            n.push_back(sizes[i % (int)(sizeof sizes / sizeof *sizes)]);
            at.push_back(total + i % 2);
            total = (at.back() + n.back() + 7) / 8 * 8 + 8;
        }
    }
};

// 49 weights, 45 of them not empty (a launch of 32 parts, then one of 13
// that the last, empty, part ends), weight decay on every
// third, a step past the first on moments already set, the gradient
// halved by clipping: each part's master, m and v as the reference's step
// of that part alone, with its own decay, and w the master stored; what
// lies between the parts untouched. A part skipped, run twice, given
// another's decay or another's chunks fails.
TEST_P(GradKernels, AdamWMasterManyParts)
{
    const int count = 49;
    const PartsLayout l(count);
    const size_t total = (size_t)l.total;
    Vec master = random_vec(total, 120), m = random_vec(total, 121, -0.01f, 0.01f),
        v = random_vec(total, 122, 0.0f, 1e-4f), g = as_stored(random_vec(total, 123, -0.1f, 0.1f), t());
    DevOf<float> dmaster(master), dm(m), dv(v);
    Dev dw(t(), as_stored(master, t())), dg(t(), g);
    std::vector<tp_adamw_part> parts;
    for (int i = 0; i < count; i++) {
        const int64_t at = l.at[(size_t)i], n = l.n[(size_t)i];
        const bool decay = i % 3 == 0;
        parts.push_back({dmaster.ptr() + at, (float *)dw.at(at), dm.ptr() + at, dv.ptr() + at,
                         (const float *)dg.at(at), n, decay});
        const Vec half = scaled(Vec(g.begin() + at, g.begin() + at + n), 0.5f);
        const tp_adamw_step st = {1e-2, 0.9, 0.999, 1e-8, decay ? 0.1 : 0.0, 3};
        ref_adamw(master.data() + at, half.data(), m.data() + at, v.data() + at, n, st);
    }
    tp_k_adamw_parts(nullptr, t(), parts.data(), count, 0.5f, 1e-2, 0.9, 0.999, 1e-8, 0.1, 3);
    const std::string what = label(t(), "adamw_master over 49 parts");
    compare(dmaster.download(), master, {1e-6, 1e-6}, what + " master");
    compare(dm.download(), m, {1e-8, 1e-6}, what + " m");
    compare(dv.download(), v, {1e-10, 1e-6}, what + " v");
    expect_equal(dw.download(), as_stored(dmaster.download(), t()), what + " w = the master, stored");
}

// fp32 training's step: the same 49 parts in one call, each fp32 weight
// updated in place (no master) but every fourth, whose w takes its
// master's value (one launch may mix the two); decay on every third, the
// gradient halved by clipping in the kernel: each part's w (or master), m
// and v as the reference's step of that part alone on the halved
// gradient, with its own decay; what lies between the parts untouched. A
// part skipped, run twice, given another's decay or another's chunks, a
// decay flag or grad_scale ignored, fails.
TEST(GradKernelsF32, AdamWManyParts)
{
    const int count = 49;
    const PartsLayout l(count);
    const size_t total = (size_t)l.total;
    Vec w = random_vec(total, 125), master = random_vec(total, 126), m = random_vec(total, 127, -0.01f, 0.01f),
        v = random_vec(total, 128, 0.0f, 1e-4f);
    const Vec g = random_vec(total, 129, -0.1f, 0.1f);
    DevOf<float> dw(w), dmaster(master), dm(m), dv(v), dg(g);
    std::vector<tp_adamw_part> parts;
    for (int i = 0; i < count; i++) {
        const int64_t at = l.at[(size_t)i], n = l.n[(size_t)i];
        const bool decay = i % 3 == 0, with_master = i % 4 == 1;
        parts.push_back({with_master ? dmaster.ptr() + at : nullptr, dw.ptr() + at, dm.ptr() + at, dv.ptr() + at,
                         dg.ptr() + at, n, decay});
        const tp_adamw_step st = {1e-2, 0.9, 0.999, 1e-8, decay ? 0.1 : 0.0, 3};
        float *target = with_master ? master.data() : w.data();
        ref_adamw(target + at, scaled(Vec(g.begin() + at, g.begin() + at + n), 0.5f).data(), m.data() + at,
                  v.data() + at, n, st);
        if (with_master)
            std::copy_n(master.begin() + at, n, w.begin() + at);
    }
    tp_k_adamw_parts(nullptr, TP_KERNEL_F32, parts.data(), count, 0.5f, 1e-2, 0.9, 0.999, 1e-8, 0.1, 3);
    const std::string what = "f32 adamw over 49 parts";
    compare(dw.download(), w, {1e-6, 1e-6}, what + " w");
    compare(dmaster.download(), master, {1e-6, 1e-6}, what + " master");
    compare(dm.download(), m, {1e-8, 1e-6}, what + " m");
    compare(dv.download(), v, {1e-10, 1e-6}, what + " v");
    const Vec got_w = dw.download(), got_master = dmaster.download();
    for (int i = 1; i < count; i += 4) {
        const int64_t at = l.at[(size_t)i], n = l.n[(size_t)i];
        expect_equal(Vec(got_w.begin() + at, got_w.begin() + at + n),
                     Vec(got_master.begin() + at, got_master.begin() + at + n),
                     what + " part " + std::to_string(i) + ": w = its master");
    }
}

// 70 runs, 65 of them not empty (a launch of 64, then one of 1 adding to
// it), as the gradient
// norm sums a rank's parts: the double sum of every run's squares.
TEST_P(GradKernels, SumSquaresOverManyRuns)
{
    const int count = 70;
    const PartsLayout l(count);
    const Vec x = as_stored(random_vec((size_t)l.total, 124), t());
    Dev dx(t(), x);
    std::vector<tp_run> runs;
    double want = 0.0;
    for (int i = 0; i < count; i++) {
        runs.push_back({(const float *)dx.at(l.at[(size_t)i]), l.n[(size_t)i]});
        for (int64_t k = l.at[(size_t)i]; k < l.at[(size_t)i] + l.n[(size_t)i]; k++)
            want += (double)x[(size_t)k] * x[(size_t)k];
    }
    DevOf<double> dout(1);
    tp_k_sum_squares(nullptr, t(), dout.ptr(), runs.data(), count);
    EXPECT_NEAR(dout.download()[0], want, 1e-12 * want) << label(t(), "sum_squares over 70 runs");
    tp_k_sum_squares(nullptr, t(), dout.ptr(), runs.data(), 0);
    EXPECT_EQ(dout.download()[0], 0.0) << label(t(), "sum_squares over no run");
}

// Gradient accumulation over 3 micro-batches: the fp32 sum in their order,
// rounded once to the storage type at the last (the CPU backend's the same
// in fp32); a bf16 sum rounded at every add would differ.
TEST_P(GradKernels, AccumulateGradSumsInFp32AndRoundsOnce)
{
    const int64_t n = 1000;
    std::vector<Vec> g;
    for (unsigned k = 0; k < 3; k++)
        g.push_back(as_stored(random_vec((size_t)n, 110 + k), t()));
    Vec sum(n), cpu_acc(n), cpu_g;
    for (int64_t i = 0; i < n; i++)
        sum[i] = (g[0][i] + g[1][i]) + g[2][i];
    DevOf<float> acc((size_t)n);
    Dev dg(t(), g[0]);
    tp_k_accumulate_grad(nullptr, t(), acc.ptr(), dg.ptr(), n, TP_ACCUM_FIRST);
    for (unsigned k = 1; k < 3; k++) {
        Dev next(t(), g[k]);
        tp_k_accumulate_grad(nullptr, t(), acc.ptr(), next.ptr(), n, k < 2 ? TP_ACCUM_ADD : TP_ACCUM_LAST);
        if (k == 2)
            expect_equal(next.download(), as_stored(sum, t()), label(t(), "accumulate_grad"));
    }
    if (t() == TP_KERNEL_F32) {   // the CPU backend, the reference
        cpu_g = g[0];
        ref().accumulate_grad(cpu_acc.data(), cpu_g.data(), n, TP_ACCUM_FIRST);
        cpu_g = g[1];
        ref().accumulate_grad(cpu_acc.data(), cpu_g.data(), n, TP_ACCUM_ADD);
        cpu_g = g[2];
        ref().accumulate_grad(cpu_acc.data(), cpu_g.data(), n, TP_ACCUM_LAST);
        expect_equal(cpu_g, sum, "cpu accumulate_grad");
    }
}

// ---- determinism: fixed reduction orders, so the schedule (the seed)
// must not change a bit

TEST_P(GradKernels, ResultsDoNotDependOnTheSchedule)
{
    const int64_t s = 21, h = 4, g = 2, d = 40, m = 50, n = 70;
    Vec q = as_stored(random_vec((size_t)(s * h * d), 98), t()), k = as_stored(random_vec((size_t)(s * g * d), 99), t());
    Vec x = as_stored(random_vec((size_t)(m * n), 100), t()), dy = as_stored(random_vec((size_t)(m * n), 101), t());
    IVec ids((size_t)m);
    for (size_t i = 0; i < ids.size(); i++)
        ids[i] = (int32_t)(i * 7 % 5);
    std::vector<Vec> first;
    for (uint64_t seed : {1, 2, 3}) {
        tp_emu_set_seed(seed);
        Dev dq(t(), q), dk(t(), k), dx(t(), x), ddy(t(), dy), dattn(t(), k.size()), dattn_q(t(), q.size()),
            dattn_v(t(), k.size()), dw(t(), (size_t)n), demb(t(), (size_t)(5 * n));
        const int64_t attention_scratch = tp_cuda_attention_grad_scratch(t() == TP_KERNEL_BF16, 1, s, h, g, d);
        DevOf<float> scratch((size_t)std::max<int64_t>(attention_scratch, m));
        DevOf<int32_t> dids(ids);
        Dev dattn_o(t(), q.size());
        DevOf<float> dlse((size_t)(h * s));
        tp_k_attention(nullptr, t(), dattn_o.ptr(), dlse.ptr(), dq.ptr(), dk.ptr(), dk.ptr(), 1, s, h, g, d, 0.15f, 0.0f,
                       nullptr, nullptr);
        tp_k_attention_grad(nullptr, t(), dattn_q.ptr(), dattn.ptr(), dattn_v.ptr(), dq.ptr(), dk.ptr(), dk.ptr(),
                            dq.ptr(), dattn_o.ptr(), dlse.ptr(), scratch.ptr(), 1, s, h, g, d, 0.15f, 0.0f, nullptr, nullptr);
        tp_k_rmsnorm_dw(nullptr, t(), dw.ptr(), dx.ptr(), ddy.ptr(), scratch.ptr(), m, n, 1e-6f);
        tp_k_embedding_grad(nullptr, t(), demb.ptr(), dids.ptr(), ddy.ptr(), m, 5, n, 0, false);
        std::vector<Vec> now = {dattn_q.download(), dattn.download(), dattn_v.download(), dw.download(),
                                demb.download()};
        if (seed == 1) {
            first = now;
            continue;
        }
        for (size_t i = 0; i < now.size(); i++)
            EXPECT_EQ(std::memcmp(first[i].data(), now[i].data(), now[i].size() * 4), 0) << "result " << i << " seed "
                                                                                         << seed;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GradKernels, ::testing::Values(TP_KERNEL_F32, TP_KERNEL_BF16),
                         [](const ::testing::TestParamInfo<tp_kernel_dtype> &info) {
                             return std::string(dtype_name(info.param));
                         });

} // namespace
