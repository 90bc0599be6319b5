// The CPU backend's training kernels (runtime/backends/cpu/backward.c,
// attention_grad.c, optimizer.c) against the forward kernels they are the
// gradients of, from the same backend.
//
// A backward kernel computes a vector-Jacobian product: given the output's
// cotangent c, the input gradient J^T c. For a random direction u and a
// random c, <c, J u> is a directional derivative of the forward, which a
// central difference (f(x + eps u) - f(x - eps u)) / 2 eps measures to
// O(eps^2); it must equal <J^T c, u> from the kernel. The inputs are float,
// so x +- eps u is rounded: the direction compared is the one actually
// taken, (fl(x + eps u) - fl(x - eps u)) / 2 eps. Random u and c weigh every
// element of the gradient, so a wrong sign, a wrong index or a missing
// term changes the inner product by far more than the tolerance (1e-3
// relative; the differences themselves are good to about 1e-5 here).
//
// Linear maps (narrow, embedding, rope's inverse rotation) are checked as
// exact adjoints, and the vocab-parallel ce_grad against cross_entropy_grad
// over simulated ranks. AdamW is checked against torch.optim.AdamW's own
// numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "tests/support/ce_rule.h"
#include "sched/rope.h"
}

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using Map = std::function<Vec(const Vec &)>;

const tp_backend *be() { return tp_backend_cpu(); }

// float32 unit roundoff
constexpr double kU = 5.960464477539063e-08; // 2^-24

Vec random_vec(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(n);
    for (float &x : v)
        x = dist(gen);
    return v;
}

double dot(const Vec &a, const DVec &b)
{
    double acc = 0;
    for (size_t i = 0; i < a.size(); i++)
        acc += (double)a[i] * b[i];
    return acc;
}

double dot(const Vec &a, const Vec &b)
{
    return dot(a, DVec(b.begin(), b.end()));
}

// <c, J u> by central differences and <vjp(c), u> for one random (u, c),
// with the scale of the sum: sum |c_i (J u)_i|, from the same differences.
struct Directional {
    double numeric, analytic, magnitude;
};

Directional directional(const Map &forward, const Map &vjp, const Vec &x, unsigned seed, double eps)
{
    Vec u = random_vec(x.size(), seed), xp(x.size()), xm(x.size());
    DVec taken(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        xp[i] = (float)((double)x[i] + eps * u[i]);
        xm[i] = (float)((double)x[i] - eps * u[i]);
        taken[i] = ((double)xp[i] - xm[i]) / (2 * eps);
    }
    Vec fp = forward(xp), fm = forward(xm);
    Vec c = random_vec(fp.size(), seed + 1);
    double numeric = 0, magnitude = 0;
    for (size_t i = 0; i < fp.size(); i++) {
        double term = (double)c[i] * ((double)fp[i] - fm[i]) / (2 * eps);
        numeric += term;
        magnitude += std::fabs(term);
    }
    Vec g = vjp(c);
    EXPECT_EQ(g.size(), x.size());
    return {numeric, dot(g, taken), magnitude};
}

// Three random directions. The error is relative to the sum's magnitude,
// not its value, which random signs can make small; a wrong sign or index
// in even one of a few hundred elements moves the result by more than
// rtol. Prints the worst error (the numbers the documentation quotes).
void expect_gradient(const char *what, const Map &forward, const Map &vjp, const Vec &x, double eps = 1e-3,
                     double rtol = 1e-3)
{
    double worst = 0;
    for (unsigned trial = 0; trial < 3; trial++) {
        Directional r = directional(forward, vjp, x, 1000 + 17 * trial, eps);
        double err = std::fabs(r.analytic - r.numeric) / std::max(r.magnitude, 1e-30);
        worst = std::max(worst, err);
        EXPECT_LE(err, rtol) << what << ", direction " << trial << ": kernel " << r.analytic << ", finite difference "
                             << r.numeric << " (magnitude " << r.magnitude << ")";
    }
    std::printf("[ gradient ] %-44s max relative error %.2e\n", what, worst);
}

// --- matmul_tn, sum_rows ---------------------------------------------------------------

// A Linear's weight [n, k] gradient is dy^T x: matmul_tn(dy, x), a = dy
// [m, n]; a Conv1D's weight [k, n] gradient is x^T dy: matmul_tn(x, dy).
void expect_weight_gradient(bool conv1d)
{
    const int64_t m = 7, n = 5, k = 9;
    Vec x = random_vec(m * k, 1);
    Map forward = [&](const Vec &w) {
        Vec out(m * n);
        (conv1d ? be()->conv1d : be()->matmul)(out.data(), x.data(), w.data(), m, n, k);
        return out;
    };
    Map vjp = [&](const Vec &dy) {
        Vec dw(n * k, NAN);
        if (conv1d)
            be()->matmul_tn(dw.data(), x.data(), dy.data(), m, k, n);
        else
            be()->matmul_tn(dw.data(), dy.data(), x.data(), m, n, k);
        return dw;
    };
    expect_gradient(conv1d ? "matmul_tn: Conv1D weight" : "matmul_tn: Linear weight", forward, vjp,
                    random_vec(n * k, 2));
}

TEST(BackendCpuGrad, MatmulTnIsTheLinearWeightGradient) { expect_weight_gradient(false); }

TEST(BackendCpuGrad, MatmulTnIsTheConv1dWeightGradient) { expect_weight_gradient(true); }

TEST(BackendCpuGrad, MatmulTnOverNoRowsIsZero)
{
    Vec out(6, 5.0f);
    be()->matmul_tn(out.data(), nullptr, nullptr, 0, 2, 3);
    for (float v : out)
        EXPECT_EQ(v, 0.0f);
}

// bias_add's bias gradient, scale included; 300 columns cross the kernel's
// blocks of double accumulators.
TEST(BackendCpuGrad, SumRowsIsTheBiasGradient)
{
    for (int64_t n : {13, 300}) {
        const int64_t m = 5;
        const float scale = 0.25f;
        Vec x = random_vec(m * n, 5);
        Map forward = [&](const Vec &b) {
            Vec out(m * n);
            be()->bias_add(out.data(), x.data(), b.data(), m, n, scale);
            return out;
        };
        Map vjp = [&](const Vec &dy) {
            Vec db(n, NAN);
            be()->sum_rows(db.data(), dy.data(), m, n, scale);
            return db;
        };
        expect_gradient(n > 256 ? "sum_rows (blocks)" : "sum_rows", forward, vjp, random_vec(n, 6));
    }
}

// The seed gradient of a summed loss (tpcc --loss sum): the vector-Jacobian
// product of x -> sum(x) is dy times ones.
TEST(BackendCpuGrad, OnesIsTheGradientOfASum)
{
    const int64_t n = 37;
    Map forward = [&](const Vec &x) {
        Vec out(1, NAN);
        be()->sum_rows(out.data(), x.data(), n, 1, 1.0f);
        return out;
    };
    Map vjp = [&](const Vec &dy) {
        Vec dx(n, NAN);
        be()->ones(dx.data(), n);
        for (float &v : dx)
            v *= dy[0];
        return dx;
    };
    expect_gradient("ones", forward, vjp, random_vec(n, 7));
}

// --- norms -----------------------------------------------------------------------------

struct NormCase {
    int64_t m, n;
    bool unit_offset;
};

const NormCase kNormCases[] = {{1, 7, false}, {5, 33, false}, {4, 300, false}, {3, 16, true}};

// The rows are offset from 0 (mean 0.7) so LayerNorm's centring matters.
Vec norm_input(int64_t m, int64_t n, unsigned seed) { return random_vec(m * n, seed, -0.3f, 1.7f); }

TEST(BackendCpuGrad, RmsNormInputGradient)
{
    for (const NormCase &c : kNormCases) {
        const float eps = 1e-5f;
        Vec w = random_vec(c.n, 10, 0.5f, 1.5f);
        Map forward = [&](const Vec &x) {
            Vec out(c.m * c.n);
            be()->rmsnorm(out.data(), x.data(), w.data(), c.m, c.n, eps, c.unit_offset);
            return out;
        };
        Vec x0 = norm_input(c.m, c.n, 11);
        Map vjp = [&](const Vec &dy) {
            Vec dx(c.m * c.n, NAN);
            be()->rmsnorm_dx(dx.data(), x0.data(), dy.data(), w.data(), c.m, c.n, eps, c.unit_offset, nullptr);
            return dx;
        };
        expect_gradient(c.unit_offset ? "rmsnorm_dx (unit_offset)" : "rmsnorm_dx", forward, vjp, x0);
    }
}

// With a gradient to add (-O1's fusion of the add after it): what
// rmsnorm_dx then the add give, bit for bit, also written over it.
TEST(BackendCpuGrad, RmsNormDxAddsAsTheAddAfterIt)
{
    const NormCase c = kNormCases[2];
    Vec w = random_vec(c.n, 13, 0.5f, 1.5f), x = norm_input(c.m, c.n, 14), dy = random_vec(c.m * c.n, 15),
        res = random_vec(c.m * c.n, 16, -3.0f, 3.0f), grad(c.m * c.n), pair(c.m * c.n), fused(c.m * c.n);
    be()->rmsnorm_dx(grad.data(), x.data(), dy.data(), w.data(), c.m, c.n, 1e-5f, false, nullptr);
    be()->binary(TP_BINARY_ADD, pair.data(), res.data(), c.m * c.n, grad.data(), c.m * c.n);
    be()->rmsnorm_dx(fused.data(), x.data(), dy.data(), w.data(), c.m, c.n, 1e-5f, false, res.data());
    EXPECT_EQ(fused, pair);
    be()->rmsnorm_dx(res.data(), x.data(), dy.data(), w.data(), c.m, c.n, 1e-5f, false, res.data());
    EXPECT_EQ(res, pair);
}

TEST(BackendCpuGrad, RmsNormWeightGradient)
{
    for (const NormCase &c : kNormCases) {
        const float eps = 1e-5f;
        Vec x = norm_input(c.m, c.n, 12);
        Map forward = [&](const Vec &w) {
            Vec out(c.m * c.n);
            be()->rmsnorm(out.data(), x.data(), w.data(), c.m, c.n, eps, c.unit_offset);
            return out;
        };
        Map vjp = [&](const Vec &dy) {
            Vec dw(c.n, NAN);
            be()->rmsnorm_dw(dw.data(), x.data(), dy.data(), c.m, c.n, eps);
            return dw;
        };
        expect_gradient(c.unit_offset ? "rmsnorm_dw (unit_offset)" : "rmsnorm_dw", forward, vjp,
                        random_vec(c.n, 13, -0.5f, 0.5f));
    }
}

TEST(BackendCpuGrad, LayerNormInputGradient)
{
    for (const NormCase &c : kNormCases) {
        const float eps = 1e-5f;
        Vec w = random_vec(c.n, 14, 0.5f, 1.5f), b = random_vec(c.n, 15);
        Map forward = [&](const Vec &x) {
            Vec out(c.m * c.n);
            be()->layernorm(out.data(), x.data(), w.data(), b.data(), c.m, c.n, eps);
            return out;
        };
        Vec x0 = norm_input(c.m, c.n, 16);
        Map vjp = [&](const Vec &dy) {
            Vec dx(c.m * c.n, NAN);
            be()->layernorm_dx(dx.data(), x0.data(), dy.data(), w.data(), c.m, c.n, eps);
            return dx;
        };
        expect_gradient("layernorm_dx", forward, vjp, x0);
    }
}

TEST(BackendCpuGrad, LayerNormWeightGradient)
{
    for (const NormCase &c : kNormCases) {
        const float eps = 1e-5f;
        Vec x = norm_input(c.m, c.n, 17);
        Map forward = [&](const Vec &w) {
            Vec out(c.m * c.n);
            be()->layernorm(out.data(), x.data(), w.data(), nullptr, c.m, c.n, eps);
            return out;
        };
        Map vjp = [&](const Vec &dy) {
            Vec dw(c.n, NAN);
            be()->layernorm_dw(dw.data(), x.data(), dy.data(), c.m, c.n, eps);
            return dw;
        };
        expect_gradient("layernorm_dw", forward, vjp, random_vec(c.n, 18));
    }
}

// dx may be written over dy (the executor may reuse a dead gradient's buffer).
TEST(BackendCpuGrad, NormInputGradientsMayOverwriteDy)
{
    const int64_t m = 3, n = 9;
    Vec x = norm_input(m, n, 19), w = random_vec(n, 20), dy = random_vec(m * n, 21);
    Vec rms(m * n), ln(m * n), rms_in = dy, ln_in = dy;
    be()->rmsnorm_dx(rms.data(), x.data(), dy.data(), w.data(), m, n, 1e-6f, true, nullptr);
    be()->rmsnorm_dx(rms_in.data(), x.data(), rms_in.data(), w.data(), m, n, 1e-6f, true, nullptr);
    be()->layernorm_dx(ln.data(), x.data(), dy.data(), w.data(), m, n, 1e-6f);
    be()->layernorm_dx(ln_in.data(), x.data(), ln_in.data(), w.data(), m, n, 1e-6f);
    EXPECT_EQ(rms, rms_in);
    EXPECT_EQ(ln, ln_in);
}

// --- attention -------------------------------------------------------------------------

struct AttnCase {
    const char *name;
    int64_t b, s, h, g, d;
    double scale, softcap;
    const int32_t *segments = nullptr;   // [b, s]: documents (tpcc --segments), -1 padding
};

// GQA (4 query heads over 2 kv heads), plain multi-head, softcap (the
// scores are made large enough by scale 1 that tanh bends them), and a
// sequence longer than the kernel's key block of 128.
const AttnCase kAttnCases[] = {
    {"GQA h=4 g=2", 2, 6, 4, 2, 8, 0.35355339059327373, 0},
    {"h=g=3", 1, 5, 3, 3, 4, 0.5, 0},
    {"GQA softcap", 2, 5, 4, 2, 8, 1.0, 1.5},
    {"MQA s=131", 1, 131, 2, 1, 4, 0.5, 0},
};

// Which of attention_grad's outputs a check reads.
enum AttnInput { kQ, kK, kV };

// The three gradients of one call of attention_grad (an output is computed
// only where want[i]; the others are left NaN).
std::vector<Vec> attention_grads(const AttnCase &c, const Vec &q, const Vec &k, const Vec &v, const Vec &dy,
                                 std::array<bool, 3> want = {true, true, true})
{
    std::vector<Vec> out = {Vec(q.size(), NAN), Vec(k.size(), NAN), Vec(k.size(), NAN)};
    Vec o(q.size()), lse((size_t)(c.b * c.h * c.s));   // the forward's, which the gradient reads
    be()->attention(o.data(), lse.data(), q.data(), k.data(), v.data(), c.b, c.s, c.h, c.g, c.d, c.scale, c.softcap,
                    c.segments, nullptr);
    be()->attention_grad(want[kQ] ? out[kQ].data() : nullptr, want[kK] ? out[kK].data() : nullptr,
                         want[kV] ? out[kV].data() : nullptr, q.data(), k.data(), v.data(), dy.data(), o.data(),
                         lse.data(), c.b, c.s, c.h, c.g, c.d, c.scale, c.softcap, c.segments, nullptr);
    return out;
}

// One input of the attention varies (which), the other two are fixed; the
// fused kernel computes all three gradients, `which`'s is checked.
void expect_attention_gradient(const AttnCase &c, AttnInput which)
{
    const int64_t nq = c.b * c.s * c.h * c.d, nkv = c.b * c.s * c.g * c.d;
    Vec q = random_vec(nq, 30), k = random_vec(nkv, 31), v = random_vec(nkv, 32);
    auto run = [&](const Vec &qq, const Vec &kk, const Vec &vv) {
        Vec out(nq);
        be()->attention(out.data(), nullptr, qq.data(), kk.data(), vv.data(), c.b, c.s, c.h, c.g, c.d, c.scale,
                        c.softcap, c.segments, nullptr);
        return out;
    };
    Map forward = [&](const Vec &x) {
        return which == kQ ? run(x, k, v) : which == kK ? run(q, x, v) : run(q, k, x);
    };
    Map vjp = [&](const Vec &dy) { return attention_grads(c, q, k, v, dy)[which]; };
    const char *input = which == kQ ? "dq" : which == kK ? "dk" : "dv";
    std::string what = std::string("attention ") + input + " (" + c.name + ")";
    expect_gradient(what.c_str(), forward, vjp, which == kQ ? q : which == kK ? k : v);
}

// Documents: row 0 left padding then two documents, row 1 three documents
// (one of a single token) then right padding; a padding query passes no
// gradient, and no key gets one from another document's queries.
const int32_t kSegments[2 * 9] = {-1, -1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 2, 2, 2, 2, -1, -1};

TEST(BackendCpuGrad, AttentionGradientsStayWithinDocuments)
{
    for (AttnCase c : {AttnCase{"documents", 2, 9, 4, 2, 8, 0.5, 0, kSegments},
                       AttnCase{"documents softcap", 2, 9, 4, 2, 8, 1.0, 1.5, kSegments}})
        for (AttnInput which : {kQ, kK, kV})
            expect_attention_gradient(c, which);
}

TEST(BackendCpuGrad, AttentionQueryGradient)
{
    for (const AttnCase &c : kAttnCases)
        expect_attention_gradient(c, kQ);
}

TEST(BackendCpuGrad, AttentionKeyGradient)
{
    for (const AttnCase &c : kAttnCases)
        expect_attention_gradient(c, kK);
}

TEST(BackendCpuGrad, AttentionValueGradient)
{
    for (const AttnCase &c : kAttnCases)
        expect_attention_gradient(c, kV);
}

// An output not asked for (NULL) is not computed, and asking for fewer
// changes none of the others by a bit (dv alone skips dP and D).
TEST(BackendCpuGrad, AttentionGradientsAskedForAloneEqualThemAllTogether)
{
    for (const AttnCase &c : kAttnCases) {
        const int64_t nq = c.b * c.s * c.h * c.d, nkv = c.b * c.s * c.g * c.d;
        Vec q = random_vec(nq, 36), k = random_vec(nkv, 37), v = random_vec(nkv, 38), dy = random_vec(nq, 39);
        std::vector<Vec> all = attention_grads(c, q, k, v, dy);
        for (AttnInput i : {kQ, kK, kV}) {
            std::array<bool, 3> want = {i == kQ, i == kK, i == kV};
            std::vector<Vec> alone = attention_grads(c, q, k, v, dy, want);
            EXPECT_EQ(std::memcmp(alone[i].data(), all[i].data(), all[i].size() * sizeof(float)), 0)
                << c.name << " output " << i;
            for (AttnInput other : {kQ, kK, kV}) {
                if (other != i) {
                    EXPECT_TRUE(std::isnan(alone[other][0])) << c.name << ": output " << other << " was written";
                }
            }
        }
    }
}

// Heads [from, from + n) of a [b, s, heads, d] tensor: what a rank holds
// of it under tensor parallelism.
Vec heads_of(const Vec &x, int64_t b, int64_t s, int64_t heads, int64_t d, int64_t from, int64_t n)
{
    Vec out;
    for (int64_t r = 0; r < b * s; r++)
        out.insert(out.end(), x.begin() + (r * heads + from) * d, x.begin() + (r * heads + from + n) * d);
    return out;
}

// A kv head's dk and dv, and its query heads' dq, are the same to the bit
// whether one rank holds every head or a rank holds that kv head's group
// alone (tp 2 of GQA h=4 g=2): a tensor-parallel run computes them as a
// single rank does.
TEST(BackendCpuGrad, AKvHeadsGradientDoesNotDependOnTheRankComputingIt)
{
    const AttnCase whole = {"GQA h=4 g=2 s=131", 2, 131, 4, 2, 8, 0.35355339059327373, 0};
    const AttnCase half = {"its second kv head", 2, 131, 2, 1, 8, 0.35355339059327373, 0};
    const int64_t nq = whole.b * whole.s * whole.h * whole.d, nkv = whole.b * whole.s * whole.g * whole.d;
    Vec q = random_vec(nq, 40), k = random_vec(nkv, 41), v = random_vec(nkv, 42), dy = random_vec(nq, 43);
    std::vector<Vec> all = attention_grads(whole, q, k, v, dy);
    auto qh = [&](const Vec &x) { return heads_of(x, whole.b, whole.s, whole.h, whole.d, 2, 2); };
    auto kvh = [&](const Vec &x) { return heads_of(x, whole.b, whole.s, whole.g, whole.d, 1, 1); };
    std::vector<Vec> rank1 = attention_grads(half, qh(q), kvh(k), kvh(v), qh(dy));
    EXPECT_EQ(rank1[kQ], qh(all[kQ]));
    EXPECT_EQ(rank1[kK], kvh(all[kK]));
    EXPECT_EQ(rank1[kV], kvh(all[kV]));
}

// Causality: token 0 attends to key 0 alone (P = 1), so a dy on token 0
// alone gives dv = dy at key 0 summed over the h / g query heads of each kv
// head, dk = 0 (a softmax over one key does not vary), and nothing at the
// other keys. dk at key 0 is 0 up to fp32's rounding: dS = P (dP - D)
// with dP = dy . v_0 from the scores' SGEMM and D = dy . o_0 summed in
// double, the same value rounded apart.
TEST(BackendCpuGrad, AttentionGradientOfTheFirstTokenReachesOnlyTheFirstKey)
{
    const AttnCase c = kAttnCases[0];
    const int64_t nq = c.b * c.s * c.h * c.d, nkv = c.b * c.s * c.g * c.d;
    Vec q = random_vec(nq, 33), k = random_vec(nkv, 34), v = random_vec(nkv, 35), dy(nq, 0.0f);
    for (int64_t bi = 0; bi < c.b; bi++)
        for (int64_t i = 0; i < c.h * c.d; i++)
            dy[bi * c.s * c.h * c.d + i] = 1.0f; // token 0 of each sequence
    std::vector<Vec> grads = attention_grads(c, q, k, v, dy);
    for (AttnInput which : {kK, kV}) {
        const Vec &out = grads[which];
        for (int64_t bi = 0; bi < c.b; bi++)
            for (int64_t t = 0; t < c.s; t++)
                for (int64_t i = 0; i < c.g * c.d; i++) {
                    float got = out[(bi * c.s + t) * c.g * c.d + i];
                    float want = t == 0 && which == kV ? (float)(c.h / c.g) : 0.0f;
                    if (t == 0 && which == kK)
                        EXPECT_NEAR(got, 0.0f, 1e-6) << "token 0";   // |dy . v| ~ 1, a few roundings
                    else
                        EXPECT_EQ(got, want) << "token " << t;
                }
    }
}

// --- elementwise -----------------------------------------------------------------------

TEST(BackendCpuGrad, UnaryGradients)
{
    struct Case {
        const char *name;
        tp_unary op;
    };
    const int64_t n = 203;
    // [-6, 6], kept 0.01 away from relu's kink
    Vec x = random_vec(n, 40, -6.0f, 6.0f);
    for (float &xi : x)
        if (std::fabs(xi) < 0.01f)
            xi = 0.5f;
    for (Case c : {Case{"silu_grad", TP_UNARY_SILU}, Case{"gelu_grad (tanh)", TP_UNARY_GELU_TANH},
                   Case{"gelu_grad (erf)", TP_UNARY_GELU_ERF}, Case{"relu_grad", TP_UNARY_RELU}}) {
        Map forward = [&](const Vec &xx) {
            Vec out(n);
            be()->unary(c.op, out.data(), xx.data(), n);
            return out;
        };
        Map vjp = [&](const Vec &dy) {
            Vec dx(n, NAN);
            be()->unary_grad(c.op, dx.data(), x.data(), dy.data(), n);
            return dx;
        };
        expect_gradient(c.name, forward, vjp, x);
    }
}

// Far out in the tails the derivatives are their limits, never NaN.
TEST(BackendCpuGrad, UnaryGradientsAtLargeInputs)
{
    Vec x = {-1000.0f, -80.0f, 80.0f, 1000.0f}, dy(4, 1.0f), dx(4);
    for (tp_unary op : {TP_UNARY_SILU, TP_UNARY_GELU_TANH, TP_UNARY_GELU_ERF, TP_UNARY_RELU}) {
        be()->unary_grad(op, dx.data(), x.data(), dy.data(), 4);
        EXPECT_EQ(dx[0], 0.0f) << op;
        EXPECT_EQ(dx[3], 1.0f) << op;
    }
}

TEST(BackendCpuGrad, SoftcapGradient)
{
    const int64_t n = 57;
    const float cap = 2.0f;
    Vec x = random_vec(n, 41, -5.0f, 5.0f);
    Map forward = [&](const Vec &xx) {
        Vec out(n);
        be()->softcap(out.data(), xx.data(), n, cap);
        return out;
    };
    Map vjp = [&](const Vec &dy) {
        Vec dx(n, NAN);
        be()->softcap_grad(dx.data(), x.data(), dy.data(), n, cap);
        return dx;
    };
    expect_gradient("softcap_grad", forward, vjp, x);
}

// --- embedding, narrow -----------------------------------------------------------------

// The lookup is linear in the table: its gradient is its exact adjoint,
// <c, embedding(u)> = <embedding_grad(c), u> up to rounding. A rank of a
// vocab-parallel embedding (rows [6, 10) of 12) sees ids below, inside and
// above its rows, and repeated ids whose rows add.
TEST(BackendCpuGrad, EmbeddingGradientIsTheLookupsAdjoint)
{
    struct Case {
        const char *name;
        int64_t rows, vocab_start;
        bool masked;
    };
    const std::vector<int32_t> ids = {7, 0, 9, 7, 11, 6, 3, 7, 10, 6};
    const int64_t ntok = (int64_t)ids.size(), dim = 5;
    for (Case c : {Case{"embedding_grad (masked)", 4, 6, true}, Case{"embedding_grad", 12, 0, false}}) {
        Map forward = [&](const Vec &w) {
            Vec out(ntok * dim);
            be()->embedding(out.data(), ids.data(), ntok, w.data(), c.rows, dim, c.vocab_start, c.masked);
            return out;
        };
        Map vjp = [&](const Vec &dy) {
            Vec dw(c.rows * dim, NAN);
            be()->embedding_grad(dw.data(), ids.data(), dy.data(), ntok, c.rows, dim, c.vocab_start, c.masked);
            return dw;
        };
        expect_gradient(c.name, forward, vjp, random_vec(c.rows * dim, 42));
        // row by row: the sum of the tokens' dy that hold it, 0 for a row no token holds
        Vec dy = random_vec(ntok * dim, 43);
        Vec dw = vjp(dy);
        for (int64_t r = 0; r < c.rows; r++)
            for (int64_t col = 0; col < dim; col++) {
                double want = 0;
                for (int64_t t = 0; t < ntok; t++)
                    if (ids[t] == c.vocab_start + r)
                        want += dy[t * dim + col];
                EXPECT_NEAR(dw[r * dim + col], want, 4 * kU * 4) << c.name << " row " << r;
            }
    }
}

// narrow_grad puts dy back where narrow took it from: narrow(narrow_grad(dy))
// is dy exactly, and the rest is exactly 0.
TEST(BackendCpuGrad, NarrowGradientIsNarrowsInverse)
{
    struct Case {
        std::vector<int64_t> shape;
        int dim;
        int64_t start, length;
    };
    for (const Case &c : {Case{{4, 6, 5}, 1, 2, 3}, Case{{4, 6, 5}, -1, 1, 4}, Case{{4, 6, 5}, 0, 3, 1},
                          Case{{7}, 0, 0, 7}, Case{{3, 8}, 1, 4, 0}}) {
        const int rank = (int)c.shape.size();
        const int d = c.dim < 0 ? c.dim + rank : c.dim;
        int64_t total = 1;
        for (int64_t e : c.shape)
            total *= e;
        std::vector<int64_t> narrowed = c.shape;
        narrowed[d] = c.length;
        const int64_t part = total / c.shape[d] * c.length;
        Vec dy = random_vec(part, 44);
        Vec full(total, NAN), back(part, NAN);
        be()->narrow_grad(full.data(), dy.data(), c.shape.data(), rank, c.dim, c.start, c.length);
        be()->narrow(back.data(), full.data(), c.shape.data(), rank, c.dim, c.start, c.length);
        EXPECT_EQ(back, dy);
        // what narrow does not read is zero: the sum of |full| is that of |dy|
        double sum_full = 0, sum_dy = 0;
        for (float f : full)
            sum_full += std::fabs(f);
        for (float f : dy)
            sum_dy += std::fabs(f);
        EXPECT_EQ(sum_full, sum_dy);
        // and it is the adjoint: <narrow_grad(dy), u> = <dy, narrow(u)>
        Vec u = random_vec(total, 45);
        Vec nu(part);
        be()->narrow(nu.data(), u.data(), c.shape.data(), rank, c.dim, c.start, c.length);
        EXPECT_NEAR(dot(full, u), dot(dy, nu), 1e-12);
    }
}

// --- rope's inverse ----------------------------------------------------------------------

// The backward of RoPE is the rotation by minus each angle, which the
// executor gets from the forward kernel with negated inv_freq: applied after
// the forward it gives the input back, and with a cos/sin scale it is the
// forward's exact adjoint (transpose).
std::vector<double> rope_freqs(int64_t rotary, bool negate)
{
    const tp_rope_scaling none = {TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    std::vector<double> f(rotary / 2);
    tp_rope_inv_freq(&none, 10000.0, rotary, 0, f.data());
    for (double &x : f)
        x = negate ? -x : x;
    return f;
}

TEST(BackendCpuGrad, RopeInverseUndoesRope)
{
    const int64_t b = 2, s = 7, h = 3, d = 8;
    for (int64_t rotary : {d, (int64_t)4}) {
        std::vector<double> f = rope_freqs(rotary, false), inv = rope_freqs(rotary, true);
        Vec x = random_vec(b * s * h * d, 50), y(x.size()), back(x.size());
        be()->rope(y.data(), x.data(), b, s, h, d, rotary, 5, f.data(), 1.0, nullptr);
        be()->rope(back.data(), y.data(), b, s, h, d, rotary, 5, inv.data(), 1.0, nullptr);
        for (size_t i = 0; i < x.size(); i++)
            EXPECT_NEAR(back[i], x[i], 4 * kU) << "rotary " << rotary << " element " << i;
    }
}

TEST(BackendCpuGrad, RopeInverseIsTheAdjoint)
{
    const int64_t b = 1, s = 9, h = 2, d = 6, rotary = 6;
    const double scale = 1.3; // yarn's attention_factor
    std::vector<double> f = rope_freqs(rotary, false), inv = rope_freqs(rotary, true);
    Map forward = [&](const Vec &x) {
        Vec out(x.size());
        be()->rope(out.data(), x.data(), b, s, h, d, rotary, 3, f.data(), scale, nullptr);
        return out;
    };
    Map vjp = [&](const Vec &dy) {
        Vec dx(dy.size());
        be()->rope(dx.data(), dy.data(), b, s, h, d, rotary, 3, inv.data(), scale, nullptr);
        return dx;
    };
    expect_gradient("rope (inverse)", forward, vjp, random_vec(b * s * h * d, 51));
}

// --- cross-entropy ---------------------------------------------------------------------

// b = 2, s = 5, a vocabulary of 10 padded to 12 columns, one ignored label
// (-100): rows t < 4 with a label count, 7 of them.
const int64_t kB = 2, kS = 5, kVocab = 10, kPadded = 12;
const std::vector<int32_t> kLabels = {3, 9, 0, -100, 4, /* */ 1, 2, 2, 8, 5};

Vec ce_logits()
{
    Vec logits = random_vec(kB * kS * kPadded, 60, -3.0f, 3.0f);
    for (int64_t r = 0; r < kB * kS; r++)
        for (int64_t c = kVocab; c < kPadded; c++)
            logits[r * kPadded + c] = 50.0f; // padding that would dominate a softmax that read it
    return logits;
}

Vec ce_grad_full(const Vec &logits)
{
    Vec g(logits.size(), NAN);
    be()->cross_entropy_grad(g.data(), logits.data(), kLabels.data(), kB, kS, kPadded, kVocab, kHfLoss);
    return g;
}

TEST(BackendCpuGrad, CrossEntropyGradient)
{
    Map forward = [&](const Vec &logits) {
        Vec loss(1);
        be()->cross_entropy(loss.data(), logits.data(), kLabels.data(), kB, kS, kPadded, kVocab, kHfLoss);
        return loss;
    };
    // d loss = 1: the kernel's output is the gradient itself, scaled by c
    Map vjp = [&](const Vec &c) {
        Vec g = ce_grad_full(ce_logits());
        for (float &x : g)
            x *= c[0];
        return g;
    };
    expect_gradient("cross_entropy_grad", forward, vjp, ce_logits(), 1e-2);
}

// Rows without a label (the last of each sequence, the ignored one) and the
// padded columns get exactly 0; each labelled row sums to 0 (softmax minus
// a one-hot) with -(1 - p) / 7 at its label.
TEST(BackendCpuGrad, CrossEntropyGradientZeroesRowsWithoutLabelAndPadding)
{
    Vec g = ce_grad_full(ce_logits());
    for (int64_t bi = 0; bi < kB; bi++)
        for (int64_t t = 0; t < kS; t++) {
            const int64_t r = bi * kS + t;
            const bool labelled = t + 1 < kS && kLabels[bi * kS + t + 1] != -100;
            double sum = 0;
            for (int64_t c = 0; c < kPadded; c++) {
                float x = g[r * kPadded + c];
                if (!labelled || c >= kVocab) {
                    EXPECT_EQ(x, 0.0f) << "row " << r << " column " << c;
                } else if (c == kLabels[bi * kS + t + 1]) {
                    EXPECT_LT(x, 0.0f) << "row " << r;
                } else {
                    EXPECT_GT(x, 0.0f) << "row " << r << " column " << c;
                }
                sum += x;
            }
            EXPECT_NEAR(sum, 0.0, 1e-7) << "row " << r;
        }
}

// Vocab-parallel: the ranks' ce_grad over their columns, from the
// all-reduced max and sumexp (computed with ce_max and ce_sumexp as the
// executor does), laid side by side, are cross_entropy_grad of the whole
// logits. Two ranks of 6 columns (the second holding the padding) and
// three of 4 (the last half padding).
TEST(BackendCpuGrad, CeGradOverRanksIsCrossEntropyGrad)
{
    const Vec logits = ce_logits();
    const Vec want = ce_grad_full(logits);
    const int64_t rows = kB * kS;
    for (int ranks : {2, 3}) {
        const int64_t v = kPadded / ranks;
        std::vector<Vec> local(ranks, Vec(rows * v));
        for (int r = 0; r < ranks; r++)
            for (int64_t i = 0; i < rows; i++)
                std::copy_n(logits.begin() + i * kPadded + r * v, v, local[r].begin() + i * v);
        Vec max(rows, -INFINITY), sumexp(rows, 0.0f), part(rows);
        for (int r = 0; r < ranks; r++) {
            be()->ce_max(part.data(), local[r].data(), rows, v, r * v, kVocab);
            for (int64_t i = 0; i < rows; i++)
                max[i] = std::max(max[i], part[i]);
        }
        for (int r = 0; r < ranks; r++) {
            be()->ce_sumexp(part.data(), local[r].data(), max.data(), rows, v, r * v, kVocab);
            for (int64_t i = 0; i < rows; i++)
                sumexp[i] += part[i];
        }
        for (int r = 0; r < ranks; r++) {
            Vec g(rows * v, NAN);
            be()->ce_grad(g.data(), local[r].data(), max.data(), sumexp.data(), kLabels.data(), kB, kS, v, r * v,
                          kVocab, kHfLoss);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t c = 0; c < v; c++) {
                    float w = want[i * kPadded + r * v + c];
                    // sumexp is rounded to float once (and summed over ranks in float)
                    EXPECT_NEAR(g[i * v + c], w, 4 * kU * std::fabs(w) + 1e-9)
                        << ranks << " ranks, rank " << r << " row " << i << " column " << c;
                }
        }
    }
}

// All labels ignored: the loss is NaN (0/0) but the gradient is 0, as torch's.
TEST(BackendCpuGrad, CrossEntropyGradientWithNoLabelIsZero)
{
    const std::vector<int32_t> none(kB * kS, -100);
    Vec logits = ce_logits(), g(logits.size(), NAN);
    be()->cross_entropy_grad(g.data(), logits.data(), none.data(), kB, kS, kPadded, kVocab, kHfLoss);
    for (float x : g)
        EXPECT_EQ(x, 0.0f);
}

// --- optimizer -------------------------------------------------------------------------

// torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8) on a float32
// tensor on the CPU, three steps with the gradients below, printed with
// %.9g (torch 2.15). The elements: an ordinary one, a negative one, one
// whose first gradient is 0 (v = 0: the update is 0 / eps) and whose second
// is tiny, and one starting at 0 (where weight decay does nothing).
const Vec kW0 = {0.5f, -1.25f, 2.0f, 0.0f};
const Vec kGrads[3] = {{0.1f, -0.2f, 0.0f, 3.0f}, {-0.3f, 0.05f, 1e-4f, 2.5f}, {0.2f, -0.1f, -2.0f, 0.0f}};

// m and v do not depend on the weight decay (it is decoupled)
const Vec kAdamwM[3] = {{0.0100000007f, -0.0200000014f, 0.0f, 0.300000012f},
                        {-0.0209999997f, -0.0130000012f, 9.99999975e-06f, 0.520000041f},
                        {0.00110000069f, -0.0217000004f, -0.199991003f, 0.468000025f}};
const Vec kAdamwV[3] = {{1.00000007e-05f, 4.00000026e-05f, 0.0f, 0.00899999961f},
                        {9.99900076e-05f, 4.24600039e-05f, 9.99999996e-12f, 0.0152409999f},
                        {0.00013989002f, 5.24175448e-05f, 0.00400000019f, 0.0152257588f}};

struct AdamwExpected {
    double weight_decay;
    Vec w[3];
};

const AdamwExpected kAdamw[] = {
    {0.0,
     {{0.400000006f, -1.14999998f, 2.0f, -0.100000001f},
      {0.449418992f, -1.10305321f, 1.92559683f, -0.199117303f},
      {0.447540224f, -1.04250586f, 1.98947537f, -0.275735259f}}},
    {0.01,
     {{0.399500012f, -1.14874995f, 1.99800003f, -0.100000001f},
      {0.448519498f, -1.10065448f, 1.92159891f, -0.199017286f},
      {0.446192205f, -1.03900647f, 1.98355591f, -0.275436223f}}},
};

// The same three steps by the formula in double (hand-computed references
// that do not depend on torch): the float kernel is within float rounding.
DVec adamw_in_double(double wd)
{
    DVec w(kW0.begin(), kW0.end()), m(4, 0.0), v(4, 0.0);
    for (int step = 1; step <= 3; step++)
        for (size_t i = 0; i < 4; i++) {
            double g = kGrads[step - 1][i];
            w[i] *= 1 - 0.1 * wd;
            m[i] += (g - m[i]) * (1 - 0.9);
            v[i] = v[i] * 0.999 + (1 - 0.999) * g * g;
            double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
            w[i] -= (0.1 / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
        }
    return w;
}

// The step on one weight held in fp32, updated in place, as one part
// without a master that takes the step's weight decay, unscaled.
void adamw_one(float *w, const float *g, float *m, float *v, int64_t n, const tp_adamw_step &st)
{
    const tp_adamw_part part = {nullptr, w, m, v, g, n, true};
    be()->adamw(&part, 1, 1.0f, &st);
}

TEST(BackendCpuGrad, AdamwMatchesTorch)
{
    for (const AdamwExpected &e : kAdamw) {
        Vec w = kW0, m(4, 0.0f), v(4, 0.0f);
        for (int step = 1; step <= 3; step++) {
            const tp_adamw_step st = {0.1, 0.9, 0.999, 1e-8, e.weight_decay, step};
            adamw_one(w.data(), kGrads[step - 1].data(), m.data(), v.data(), 4, st);
            for (size_t i = 0; i < 4; i++) {
                // bit for bit on x86-64; a few ulp where a compiler fuses
                // other multiply-adds than torch's lerp
                EXPECT_NEAR(w[i], e.w[step - 1][i], 8 * kU * std::fabs(e.w[step - 1][i]))
                    << "wd " << e.weight_decay << " step " << step << " w[" << i << "]";
                EXPECT_NEAR(m[i], kAdamwM[step - 1][i], 4 * kU * std::fabs(kAdamwM[step - 1][i]))
                    << "wd " << e.weight_decay << " step " << step << " m[" << i << "]";
                EXPECT_NEAR(v[i], kAdamwV[step - 1][i], 4 * kU * std::fabs(kAdamwV[step - 1][i]))
                    << "wd " << e.weight_decay << " step " << step << " v[" << i << "]";
            }
        }
        DVec exact = adamw_in_double(e.weight_decay);
        for (size_t i = 0; i < 4; i++)
            EXPECT_NEAR(w[i], exact[i], 1e-6 * std::fabs(exact[i])) << "wd " << e.weight_decay << " w[" << i << "]";
    }
}

// Weight decay acts before the update and only when non-zero; with a zero
// gradient from the first step the update itself is 0 / eps = 0.
TEST(BackendCpuGrad, AdamwWeightDecayAloneScalesTheWeight)
{
    Vec w = {3.0f, -2.0f}, g(2, 0.0f), m(2, 0.0f), v(2, 0.0f);
    const tp_adamw_step st = {0.5, 0.9, 0.999, 1e-8, 0.1, 1};
    adamw_one(w.data(), g.data(), m.data(), v.data(), 2, st);
    EXPECT_EQ(w[0], 3.0f * 0.95f);
    EXPECT_EQ(w[1], -2.0f * 0.95f);
}

// One call over many parts is the steps a training step took one weight
// at a time before, bit for bit: the gradient scaled in place by
// clipping's factor (scale), then each weight's step alone, with weight
// decay 0 where it takes none. Parts of 0, 1, 4099 (a thread pool's
// split) and 9 elements, one with a master (the CPU stores fp32: w
// becomes the master); the elements between parts stay.
TEST(BackendCpuGrad, AdamwPartsAreTheStepsOneWeightAtATime)
{
    const int64_t sizes[] = {9, 0, 4099, 1, 9};
    const bool decays[] = {true, true, false, true, false};
    const int count = 5, master_part = 4;
    const tp_adamw_step st = {1e-2, 0.9, 0.95, 1e-8, 0.1, 3};
    const float coef = 0.37f;
    int64_t total = 0, at[5];
    for (int i = 0; i < count; i++) {
        at[i] = total;
        total += sizes[i] + 1;      // one element between parts
    }
    const Vec g = random_vec((size_t)total, 30, -0.1f, 0.1f), w0 = random_vec((size_t)total, 31);
    const Vec m0 = random_vec((size_t)total, 32, -0.01f, 0.01f), v0 = random_vec((size_t)total, 33, 0.0f, 1e-4f);
    const Vec master0 = random_vec((size_t)total, 34);
    Vec w = w0, m = m0, v = v0, master = master0;
    std::vector<tp_adamw_part> parts;
    for (int i = 0; i < count; i++) {
        const bool own = i == master_part;
        parts.push_back({own ? master.data() + at[i] : nullptr, w.data() + at[i], m.data() + at[i], v.data() + at[i],
                         g.data() + at[i], sizes[i], decays[i]});
    }
    be()->adamw(parts.data(), count, coef, &st);

    Vec scaled(g.size()), want_w = w0, want_m = m0, want_v = v0, want_master = master0;
    be()->scale(scaled.data(), g.data(), total, coef);
    for (int i = 0; i < count; i++) {
        tp_adamw_step one = st;
        one.weight_decay = decays[i] ? st.weight_decay : 0.0;
        float *target = i == master_part ? want_master.data() : want_w.data();
        adamw_one(target + at[i], scaled.data() + at[i], want_m.data() + at[i], want_v.data() + at[i], sizes[i], one);
        if (i == master_part)
            std::copy_n(want_master.begin() + at[i], sizes[i], want_w.begin() + at[i]);
    }
    for (size_t k = 0; k < (size_t)total; k++) {
        ASSERT_EQ(w[k], want_w[k]) << "w[" << k << "]";
        ASSERT_EQ(m[k], want_m[k]) << "m[" << k << "]";
        ASSERT_EQ(v[k], want_v[k]) << "v[" << k << "]";
        ASSERT_EQ(master[k], want_master[k]) << "master[" << k << "]";
    }
}

TEST(BackendCpuGrad, SumSquaresInDouble)
{
    // (1 + 2^-23)^2 = 1 + 2^-22 + 2^-46: float would round the last term away
    Vec x = {1.0f + (float)kU * 2, 3.0f, -4.0f};
    double want = 0;
    for (float f : x)
        want += (double)f * f;
    const tp_run whole = {x.data(), 3}, split[] = {{x.data(), 1}, {x.data() + 1, 0}, {x.data() + 1, 2}};
    EXPECT_EQ(be()->sum_squares(&whole, 1), want);
    EXPECT_EQ(be()->sum_squares(split, 3), want);
    EXPECT_EQ(be()->sum_squares(&whole, 0), 0.0);
}

} // namespace
