// The CPU backend's kernels (runtime/backends/cpu/backend_cpu.c) against straightforward
// double-precision references written here with naive loops, on random
// inputs with ragged sizes: one row, odd dimensions, sizes that are not
// multiples of 8 (so no SIMD-width assumption hides a bug), GQA with
// h = 4, g = 2 and h = g. The vocab-parallel cross-entropy pieces are
// composed over simulated ranks exactly as the executor does (slice the
// logits by columns, all-reduce MAX / SUM by hand) and must reproduce
// cross_entropy on the full logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "tests/support/ce_rule.h"
}

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

const tp_backend *be() { return tp_backend_cpu(); }

Vec random_vec(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    Vec v(n);
    for (float &x : v)
        x = dist(gen);
    return v;
}

// |got - want| <= atol + rtol * |want|, element by element, reporting the
// first few failures with their index.
void expect_close(const Vec &got, const DVec &want, double atol, double rtol, const char *what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; i++) {
        double err = got[i] == want[i] ? 0.0 : std::fabs((double)got[i] - want[i]);   /* an inf meets the same inf */
        if (!(err <= atol + rtol * std::fabs(want[i]))) {
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
            bad++;
        }
    }
}

// float32 unit roundoff: one correctly rounded store of a double result
// is off by at most this much, relatively.
constexpr double kU = 5.960464477539063e-08; // 2^-24

// --- memory ----------------------------------------------------------------------

TEST(BackendCpu, AllocIsZeroedAndCopiesRoundTrip)
{
    EXPECT_STREQ(be()->name, "cpu");
    float *p = (float *)be()->alloc(37 * sizeof(float));
    ASSERT_NE(p, nullptr);
    for (int i = 0; i < 37; i++)
        EXPECT_EQ(p[i], 0.0f);
    Vec src = random_vec(37, 1), back(37);
    be()->to_device(p, src.data(), 37 * sizeof(float));
    be()->to_host(back.data(), p, 37 * sizeof(float));
    EXPECT_EQ(src, back);
    be()->release(p);
    // an empty buffer is not an allocation failure
    void *e = be()->alloc(0);
    EXPECT_NE(e, nullptr);
    be()->release(e);
}

// --- embedding --------------------------------------------------------------------

DVec ref_embedding(const std::vector<int32_t> &ids, const Vec &w, int64_t rows, int64_t dim, int64_t start)
{
    DVec out(ids.size() * dim, 0.0);
    for (size_t t = 0; t < ids.size(); t++) {
        int64_t r = ids[t] - start;
        if (r >= 0 && r < rows)
            for (int64_t c = 0; c < dim; c++)
                out[t * dim + c] = w[r * dim + c];
    }
    return out;
}

TEST(BackendCpu, EmbeddingUnmaskedLooksUpRows)
{
    const int64_t rows = 11, dim = 7;
    Vec w = random_vec(rows * dim, 2);
    std::vector<int32_t> ids = {0, 10, 3, 3, 7};
    Vec out(ids.size() * dim, -1.0f);
    be()->embedding(out.data(), ids.data(), (int64_t)ids.size(), w.data(), rows, dim, 0, false);
    // a lookup is a copy: exact
    expect_close(out, ref_embedding(ids, w, rows, dim, 0), 0, 0, "embedding");
}

// A vocab-parallel embedding: each rank holds a block of rows and zeroes the
// ids it does not hold; the sum over ranks is the full lookup. The vocabulary
// is padded (10 -> 12 over 4 ranks), so the last rank holds rows no id uses.
TEST(BackendCpu, EmbeddingMaskedZeroesOutOfRangeRowsAndSumsToFullLookup)
{
    const int64_t vocab = 10, padded = 12, dim = 5;
    Vec w = random_vec(padded * dim, 3);
    std::vector<int32_t> ids = {0, 9, 4, 5, 2, 8, 1};
    const int64_t ntok = (int64_t)ids.size();
    DVec full = ref_embedding(ids, w, vocab, dim, 0);
    for (int ranks : {2, 4}) {
        const int64_t rows = padded / ranks;
        DVec sum(ntok * dim, 0.0);
        for (int r = 0; r < ranks; r++) {
            Vec out(ntok * dim, 42.0f); // garbage that must be overwritten
            be()->embedding(out.data(), ids.data(), ntok, w.data() + r * rows * dim, rows, dim, r * rows, true);
            for (int64_t t = 0; t < ntok; t++) {
                bool local = ids[t] >= r * rows && ids[t] < (r + 1) * rows;
                for (int64_t c = 0; c < dim; c++) {
                    float got = out[t * dim + c];
                    if (local)
                        EXPECT_EQ(got, w[ids[t] * dim + c]);
                    else
                        EXPECT_EQ(got, 0.0f) << "rank " << r << " token " << t;
                    sum[t * dim + c] += got;
                }
            }
        }
        Vec sumf(sum.begin(), sum.end());
        expect_close(sumf, full, 0, 0, "sum of masked embeddings");
    }
}

// --- matmul, bias ------------------------------------------------------------------

// The reference is the exact product (in double) of the float inputs. The
// float result of a length-k dot product is within k * u * sum |x_i w_i|
// of it for any summation order sgemm picks (the standard gamma_k bound).
// w_in_out: the weight is [k, n] (transformers' Conv1D), else [n, k] (nn.Linear).
void expect_matmul(bool w_in_out)
{
    struct Case { int64_t m, n, k; };
    for (Case c : {Case{1, 1, 1}, Case{1, 7, 13}, Case{5, 9, 3}, Case{17, 31, 65}, Case{3, 100, 257}}) {
        Vec x = random_vec(c.m * c.k, 10 + (unsigned)c.k), w = random_vec(c.n * c.k, 20 + (unsigned)c.n);
        Vec out(c.m * c.n, std::nanf(""));
        (w_in_out ? be()->conv1d : be()->matmul)(out.data(), x.data(), w.data(), c.m, c.n, c.k);
        for (int64_t i = 0; i < c.m; i++)
            for (int64_t j = 0; j < c.n; j++) {
                double ref = 0, mag = 0;
                for (int64_t l = 0; l < c.k; l++) {
                    double wl = w_in_out ? w[l * c.n + j] : w[j * c.k + l];
                    ref += (double)x[i * c.k + l] * wl;
                    mag += std::fabs((double)x[i * c.k + l] * wl);
                }
                EXPECT_NEAR(out[i * c.n + j], ref, (c.k + 1) * kU * mag + 1e-30)
                    << "m=" << c.m << " n=" << c.n << " k=" << c.k << " at " << i << "," << j;
            }
    }
}

TEST(BackendCpu, MatmulMatchesNnLinear) { expect_matmul(false); }

TEST(BackendCpu, Conv1dMatchesTransformersConv1D) { expect_matmul(true); }

TEST(BackendCpu, MatmulWithEmptyInnerDimIsZero)
{
    Vec out(6, 5.0f);
    be()->matmul(out.data(), nullptr, nullptr, 2, 3, 0);
    for (float v : out)
        EXPECT_EQ(v, 0.0f);
}

TEST(BackendCpu, BiasAddScalesAndMayWorkInPlace)
{
    const int64_t m = 3, n = 13;
    Vec x = random_vec(m * n, 30), b = random_vec(n, 31);
    for (float scale : {1.0f, 0.25f}) {
        DVec ref(m * n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                ref[i * n + j] = (double)x[i * n + j] + (double)scale * b[j];
        Vec out(m * n);
        be()->bias_add(out.data(), x.data(), b.data(), m, n, scale);
        // one rounding of the product (exact for these scales) and one of the sum
        expect_close(out, ref, 0, 2 * kU, "bias_add");
        Vec inplace = x;
        be()->bias_add(inplace.data(), inplace.data(), b.data(), m, n, scale);
        EXPECT_EQ(inplace, out);
    }
}

// --- norms -------------------------------------------------------------------------

// Both norms accumulate in double; the result is one float rounding of a
// value computed in double, plus the product with w: a few ulp. With
// unit_offset (Gemma) the scale is 1 + w, the weights stored around 0.
TEST(BackendCpu, RmsNormMatchesReference)
{
    for (int64_t n : {1, 7, 33, 1000})
    for (bool unit_offset : {false, true}) {
        const int64_t m = n == 1 ? 1 : 3;
        Vec x = random_vec(m * n, 40 + (unsigned)n, -3, 3), w = random_vec(n, 41, 0.5f, 1.5f);
        if (unit_offset)
            for (float &v : w)
                v -= 1.0f;
        const double offset = unit_offset ? 1.0 : 0.0;
        DVec ref(m * n);
        for (int64_t i = 0; i < m; i++) {
            double ss = 0;
            for (int64_t j = 0; j < n; j++)
                ss += (double)x[i * n + j] * x[i * n + j];
            double rms = std::sqrt(ss / n + 1e-6);
            for (int64_t j = 0; j < n; j++)
                ref[i * n + j] = x[i * n + j] / rms * (offset + w[j]);
        }
        Vec out(m * n);
        be()->rmsnorm(out.data(), x.data(), w.data(), m, n, 1e-6f, unit_offset);
        expect_close(out, ref, 1e-12, 8 * kU, unit_offset ? "rmsnorm (1 + w)" : "rmsnorm");
        Vec inplace = x;
        be()->rmsnorm(inplace.data(), inplace.data(), w.data(), m, n, 1e-6f, unit_offset);
        EXPECT_EQ(inplace, out);
    }
}

DVec ref_layernorm(const Vec &x, const Vec &w, const Vec *b, int64_t m, int64_t n, double eps)
{
    DVec ref(m * n);
    for (int64_t i = 0; i < m; i++) {
        double mean = 0;
        for (int64_t j = 0; j < n; j++)
            mean += x[i * n + j];
        mean /= n;
        double var = 0;
        for (int64_t j = 0; j < n; j++)
            var += (x[i * n + j] - mean) * (x[i * n + j] - mean);
        var /= n;
        for (int64_t j = 0; j < n; j++)
            ref[i * n + j] = (x[i * n + j] - mean) / std::sqrt(var + eps) * w[j] + (b ? (*b)[j] : 0.0);
    }
    return ref;
}

TEST(BackendCpu, LayerNormMatchesReferenceWithAndWithoutBias)
{
    for (int64_t n : {1, 7, 33, 1000}) {
        const int64_t m = n == 1 ? 1 : 2;
        Vec x = random_vec(m * n, 50 + (unsigned)n, -2, 2), w = random_vec(n, 51), b = random_vec(n, 52);
        Vec out(m * n);
        be()->layernorm(out.data(), x.data(), w.data(), b.data(), m, n, 1e-5f);
        // the normalised value is O(1); atol covers results near 0 after + b
        expect_close(out, ref_layernorm(x, w, &b, m, n, 1e-5), 4 * kU, 8 * kU, "layernorm+bias");
        be()->layernorm(out.data(), x.data(), w.data(), nullptr, m, n, 1e-5f);
        expect_close(out, ref_layernorm(x, w, nullptr, m, n, 1e-5), 4 * kU, 8 * kU, "layernorm");
    }
}

// A large mean and a small spread: E[x^2] - E[x]^2 in float would lose every
// digit of the variance here; a careful kernel matches the reference.
TEST(BackendCpu, LayerNormIsStableUnderALargeMean)
{
    const int64_t m = 2, n = 301;
    Vec x = random_vec(m * n, 53, -0.01f, 0.01f), w(n, 1.0f);
    for (float &v : x)
        v += 1000.0f;
    Vec out(m * n);
    be()->layernorm(out.data(), x.data(), w.data(), nullptr, m, n, 1e-12f);
    expect_close(out, ref_layernorm(x, w, nullptr, m, n, 1e-12), 1e-5, 1e-5, "layernorm, large mean");
}

// --- RoPE --------------------------------------------------------------------------

// Written the way Hugging Face writes it: inv_freq = 1 / theta^(arange(0, d, 2)/d),
// emb = cat(freqs, freqs), out = x * cos(emb) + rotate_half(x) * sin(emb),
// rotate_half(x) = cat(-x[d/2:], x[:d/2]).
DVec ref_rope(const Vec &x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t off, double theta)
{
    DVec out(x.size());
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < s; j++) {
            DVec emb(d);
            for (int64_t i = 0; i < d / 2; i++) {
                double inv_freq = 1.0 / std::pow(theta, (double)(2 * i) / d);
                emb[i] = emb[i + d / 2] = (double)(off + j) * inv_freq;
            }
            for (int64_t hi = 0; hi < h; hi++) {
                const float *xr = &x[((bi * s + j) * h + hi) * d];
                DVec rot(d);
                for (int64_t i = 0; i < d; i++)
                    rot[i] = i < d / 2 ? -(double)xr[i + d / 2] : (double)xr[i - d / 2];
                for (int64_t i = 0; i < d; i++)
                    out[((bi * s + j) * h + hi) * d + i] = xr[i] * std::cos(emb[i]) + rot[i] * std::sin(emb[i]);
            }
        }
    return out;
}

// The default frequencies, theta^(-2i/d), as the executor computes them.
std::vector<double> default_freqs(int64_t d, double theta)
{
    const tp_rope_scaling none = {TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    std::vector<double> f(d / 2);
    tp_rope_inv_freq(&none, theta, d, 0, f.data());
    return f;
}

TEST(BackendCpu, RopeMatchesHuggingFaceRotateHalf)
{
    struct Case { int64_t b, s, h, d, off; float theta; };
    for (Case c : {Case{1, 1, 1, 2, 0, 10000}, Case{2, 5, 3, 8, 0, 10000}, Case{1, 9, 4, 14, 7, 10000},
                   Case{1, 3, 2, 64, 4093, 500000}}) {
        Vec x = random_vec(c.b * c.s * c.h * c.d, 60 + (unsigned)c.d);
        Vec out(x.size());
        const std::vector<double> f = default_freqs(c.d, c.theta);
        be()->rope(out.data(), x.data(), c.b, c.s, c.h, c.d, c.d, c.off, f.data(), 1.0, nullptr);
        // a rotation of a pair: two products and a sum, rounded once; the
        // angles are computed in double by both
        expect_close(out, ref_rope(x, c.b, c.s, c.h, c.d, c.off, c.theta), 4 * kU, 4 * kU, "rope");
        Vec inplace = x;
        be()->rope(inplace.data(), inplace.data(), c.b, c.s, c.h, c.d, c.d, c.off, f.data(), 1.0, nullptr);
        EXPECT_EQ(inplace, out);
    }
}

// Partial rotary (Phi-3's partial_rotary_factor): the first r dims of each
// head are RoPE over a head of r dims, the other d - r pass through.
TEST(BackendCpu, PartialRopeRotatesTheLeadingDimsOnly)
{
    const int64_t b = 2, s = 5, h = 3, d = 10, r = 6, off = 3;
    Vec x = random_vec(b * s * h * d, 62), out(x.size()), lead(b * s * h * r);
    for (int64_t row = 0; row < b * s * h; row++)
        for (int64_t i = 0; i < r; i++)
            lead[row * r + i] = x[row * d + i];
    const std::vector<double> f = default_freqs(r, 10000.0);
    be()->rope(out.data(), x.data(), b, s, h, d, r, off, f.data(), 1.0, nullptr);
    DVec want = ref_rope(lead, b, s, h, r, off, 10000.0);
    for (int64_t row = 0; row < b * s * h; row++) {
        for (int64_t i = 0; i < r; i++)
            EXPECT_NEAR(out[row * d + i], want[row * r + i], 4 * kU) << "row " << row << " dim " << i;
        for (int64_t i = r; i < d; i++)
            EXPECT_EQ(out[row * d + i], x[row * d + i]) << "row " << row << " dim " << i;
    }
    Vec inplace = x;
    be()->rope(inplace.data(), inplace.data(), b, s, h, d, r, off, f.data(), 1.0, nullptr);
    EXPECT_EQ(inplace, out);
}

// YaRN's attention_factor multiplies cos and sin (transformers'
// attention_scaling): the rotated dims scale by it, partial-rotary tails don't.
TEST(BackendCpu, RopeScaleMultipliesTheRotatedDimsOnly)
{
    const int64_t b = 1, s = 4, h = 2, d = 10, r = 6, off = 5;
    const double scale = 1.1386294361119890;
    Vec x = random_vec(b * s * h * d, 63), plain(x.size()), scaled(x.size());
    const std::vector<double> f = default_freqs(r, 10000.0);
    be()->rope(plain.data(), x.data(), b, s, h, d, r, off, f.data(), 1.0, nullptr);
    be()->rope(scaled.data(), x.data(), b, s, h, d, r, off, f.data(), scale, nullptr);
    for (int64_t row = 0; row < b * s * h; row++)
        for (int64_t i = 0; i < d; i++)
            EXPECT_NEAR(scaled[row * d + i], i < r ? plain[row * d + i] * scale : x[row * d + i], 4 * kU)
                << "row " << row << " dim " << i;
}

// A sequence shard (rank r holds positions [r*s/2, ...)) with pos_offset gives
// the same rows as RoPE over the whole sequence.
TEST(BackendCpu, RopeWithOffsetEqualsTheMatchingSliceOfTheFullSequence)
{
    const int64_t b = 1, s = 6, h = 2, d = 6;
    Vec x = random_vec(b * s * h * d, 61), full(x.size());
    const std::vector<double> f = default_freqs(d, 10000.0);
    be()->rope(full.data(), x.data(), b, s, h, d, d, 0, f.data(), 1.0, nullptr);
    const int64_t half = s / 2 * h * d;
    Vec second(x.begin() + half, x.end()), out(half);
    be()->rope(out.data(), second.data(), b, s / 2, h, d, d, s / 2, f.data(), 1.0, nullptr);
    EXPECT_EQ(out, Vec(full.begin() + half, full.end()));
}

// --- attention ---------------------------------------------------------------------

// With seg ([b, s]), query t sees key j <= t only where seg[j] == seg[t]
// >= 0; a query that sees none is 0.
// The output, and into *lse ([b, h, s]) where given each query's
// log-sum-exp of its scores, +inf for one that sees no key.
DVec ref_attention(const Vec &q, const Vec &k, const Vec &v, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d,
                   double scale, double softcap, const int32_t *seg = nullptr, DVec *lse = nullptr)
{
    DVec out(q.size());
    if (lse)
        lse->assign((size_t)(b * h * s), INFINITY);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t hi = 0; hi < h; hi++) {
            int64_t kh = hi * g / h; // the kv head that serves this query head
            for (int64_t t = 0; t < s; t++) {
                auto sees = [&](int64_t j) {
                    return !seg || (seg[bi * s + t] >= 0 && seg[bi * s + j] == seg[bi * s + t]);
                };
                DVec sc(t + 1, -INFINITY);
                for (int64_t j = 0; j <= t; j++) {
                    if (!sees(j))
                        continue;
                    double dot = 0;
                    for (int64_t c = 0; c < d; c++)
                        dot += (double)q[((bi * s + t) * h + hi) * d + c] * k[((bi * s + j) * g + kh) * d + c];
                    sc[j] = dot * scale;
                    if (softcap > 0)
                        sc[j] = softcap * std::tanh(sc[j] / softcap);
                }
                double mx = *std::max_element(sc.begin(), sc.end()), z = 0;
                if (mx == -INFINITY)
                    continue; // out stays 0
                for (double &e : sc)
                    z += (e = std::exp(e - mx));
                if (lse)
                    (*lse)[(size_t)((bi * h + hi) * s + t)] = mx + std::log(z);
                for (int64_t c = 0; c < d; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= t; j++)
                        acc += sc[j] / z * v[((bi * s + j) * g + kh) * d + c];
                    out[((bi * s + t) * h + hi) * d + c] = acc;
                }
            }
        }
    return out;
}

TEST(BackendCpu, AttentionIsCausalGqaSoftmax)
{
    struct Case { int64_t b, s, h, g, d; float qscale; };
    // h=4,g=2 and h=g; s=300 crosses the kernel's query blocks (64), s=600
    // its key blocks (512) with three query heads to a kv head; a large
    // q scale makes the scores ~1e3, which overflow exp() without the max
    // subtraction
    for (Case c : {Case{1, 1, 1, 1, 1, 1}, Case{2, 7, 4, 2, 8, 1}, Case{1, 13, 4, 4, 5, 1}, Case{1, 11, 6, 1, 3, 1},
                   Case{1, 300, 2, 1, 16, 1}, Case{1, 9, 4, 2, 7, 300}, Case{2, 600, 6, 2, 8, 1}})
    // SDPA's default scale, and Gemma 2's: another scale with the scores capped
    for (auto [scale, softcap] : {std::pair<double, double>{1.0 / std::sqrt((double)c.d), 0.0}, {0.0625, 50.0}}) {
        Vec q = random_vec(c.b * c.s * c.h * c.d, 70 + (unsigned)c.s, -c.qscale, c.qscale);
        Vec k = random_vec(c.b * c.s * c.g * c.d, 71 + (unsigned)c.s);
        Vec v = random_vec(c.b * c.s * c.g * c.d, 72 + (unsigned)c.s);
        Vec out(q.size(), std::nanf("")), lse((size_t)(c.b * c.h * c.s), std::nanf(""));
        be()->attention(out.data(), lse.data(), q.data(), k.data(), v.data(), c.b, c.s, c.h, c.g, c.d, scale, softcap,
                        nullptr, nullptr);
        const std::string what = "attention s=" + std::to_string(c.s) + " h=" + std::to_string(c.h) + " g=" +
                                 std::to_string(c.g);
        DVec want_lse;
        // outputs are convex combinations of |v| <= 1, accumulated in fp32
        // one key block at a time
        expect_close(out, ref_attention(q, k, v, c.b, c.s, c.h, c.g, c.d, scale, softcap, nullptr, &want_lse), 1e-6, 0,
                     what.c_str());
        // the log-sum-exp: fp32's rounding of scores up to ~1e3 (the large q scale)
        expect_close(lse, want_lse, 1e-5, 1e-6, (what + " lse").c_str());
    }
}

// Documents (tpcc --segments): row 0 left padding, then documents that
// cross the kernel's query blocks (64); row 1 packed documents, the first
// of one token, then right padding. Padding queries are 0.
TEST(BackendCpu, AttentionStaysWithinDocuments)
{
    const int64_t b = 2, s = 150, h = 4, g = 2, d = 8;
    std::vector<int32_t> seg(b * s);
    for (int64_t t = 0; t < s; t++) {
        seg[t] = t < 5 ? -1 : t < 70 ? 0 : t < 71 ? 1 : 2;
        seg[s + t] = t < 1 ? 0 : t < 90 ? 1 : t < 140 ? 2 : -1;
    }
    Vec q = random_vec(b * s * h * d, 73), k = random_vec(b * s * g * d, 74), v = random_vec(b * s * g * d, 75);
    for (auto [scale, softcap] : {std::pair<double, double>{1.0 / std::sqrt((double)d), 0.0}, {0.5, 2.0}}) {
        Vec out(q.size(), std::nanf("")), lse((size_t)(b * h * s), std::nanf(""));
        be()->attention(out.data(), lse.data(), q.data(), k.data(), v.data(), b, s, h, g, d, scale, softcap,
                        seg.data(), nullptr);
        DVec want_lse;
        DVec want = ref_attention(q, k, v, b, s, h, g, d, scale, softcap, seg.data(), &want_lse);
        expect_close(out, want, 1e-6, 0, "attention within documents");
        expect_close(lse, want_lse, 1e-5, 1e-6, "attention's log-sum-exp within documents (padding +inf)");
        // and not what plain causal attention gives
        EXPECT_GT(std::fabs(want[(70 * h) * d] - ref_attention(q, k, v, b, s, h, g, d, scale, softcap)[(70 * h) * d]),
                  1e-3);
    }
}

// Positions by document restart at each change of segment; rope at such
// positions is rope of each document on its own.
TEST(BackendCpu, PositionsAndRopeRestartAtEachDocument)
{
    const std::vector<int32_t> seg = {-1, -1, 0, 0, 0, 1, 1, 2, 0, 0, 1, 1, 1, 1, -1, -1};
    std::vector<int32_t> pos(16, -7);
    be()->positions(pos.data(), 2, 8, 0, seg.data());
    EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 1, 0, 0, 1, 0, 1, 2, 3, 0, 1}));
    const int64_t h = 2, d = 8;
    std::vector<double> f = {1.0, 0.1, 0.01, 0.001};
    Vec x = random_vec(16 * h * d, 76), out(x.size()), alone(3 * h * d);
    be()->rope(out.data(), x.data(), 2, 8, h, d, d, 0, f.data(), 1.0, pos.data());
    // the first document of row 1, tokens 8 .. 9, and the second, 10 .. 13, as sequences of their own
    for (auto [first, len] : {std::pair<int64_t, int64_t>{8, 2}, {10, 4}}) {
        Vec one(x.begin() + first * h * d, x.begin() + (first + len) * h * d), got(one.size());
        be()->rope(got.data(), one.data(), 1, len, h, d, d, 0, f.data(), 1.0, nullptr);
        EXPECT_EQ(got, Vec(out.begin() + first * h * d, out.begin() + (first + len) * h * d)) << first;
    }
}

// --- elementwise -------------------------------------------------------------------

TEST(BackendCpu, UnaryOpsMatchTheirDefinitions)
{
    Vec x = random_vec(203, 80, -8, 8);
    for (float e : {0.0f, -0.0f, 1e-30f, 50.0f, -50.0f, 100.0f, -100.0f, -1e4f, 1e4f})
        x.push_back(e);
    const int64_t n = (int64_t)x.size();
    DVec silu(n), gelu(n), gelu_erf(n), relu(n);
    const double pi = std::acos(-1.0);
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        silu[i] = v * (1.0 / (1.0 + std::exp(-v)));
        // 0.5 v (1 + tanh(u)) as v sigmoid(2u): the tanh form's 1 + tanh(u)
        // cancels in double for v << 0 (13 digits lost at v = -8)
        gelu[i] = v / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / pi) * (v + 0.044715 * v * v * v)));
        gelu_erf[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        relu[i] = v > 0 ? v : 0.0;
    }
    Vec out(n);
    // each is one float rounding of a double expression (plus libm's ulp)
    be()->unary(TP_UNARY_SILU, out.data(), x.data(), n);
    expect_close(out, silu, 1e-37, 2 * kU, "silu");
    for (float o : out)
        EXPECT_FALSE(std::isnan(o));
    be()->unary(TP_UNARY_GELU_TANH, out.data(), x.data(), n);
    expect_close(out, gelu, 1e-37, 2 * kU, "gelu");
    be()->unary(TP_UNARY_GELU_ERF, out.data(), x.data(), n);
    expect_close(out, gelu_erf, 1e-37, 2 * kU, "gelu (erf)");
    // the two differ by up to ~5e-4 near |x| = 2: a test that cannot tell
    // them apart would pass a model run with the wrong one
    double apart = 0;
    for (int64_t i = 0; i < n; i++)
        apart = std::max(apart, std::fabs(gelu[i] - gelu_erf[i]));
    EXPECT_GT(apart, 1e-4);
    be()->unary(TP_UNARY_RELU, out.data(), x.data(), n);
    expect_close(out, relu, 0, 0, "relu");
    float nan = std::nanf(""), r;
    be()->unary(TP_UNARY_RELU, &r, &nan, 1);
    EXPECT_TRUE(std::isnan(r)) << "relu propagates NaN, as torch does";
}

// silu_mul and its gradient are the unfused ops they replace, bit for bit
// (what lets -O1 fuse them without changing a result): silu then mul, and
// the gradients autodiff derives from that pair (dy * b through silu_grad,
// dy * silu(a)); also in place, and with one gradient not computed.
void expect_same_bits(const Vec &got, const Vec &want, const char *what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
}

// add_rmsnorm is the add then the rmsnorm it fuses, bit for bit (what lets
// -O1 fuse them without changing a result), for RMSNorm and Gemma's
// (1 + w); also with the sum over a and the norm over b, and with either
// output not wanted.
TEST(BackendCpu, AddRmsNormIsAddThenRmsNormBitForBit)
{
    const int64_t m = 7, n = 300;
    for (bool unit_offset : {false, true}) {
        Vec a = random_vec(m * n, 93, -3, 3), b = random_vec(m * n, 94, -3, 3), w = random_vec(n, 95, 0.5f, 1.5f);
        Vec sum(m * n), want(m * n), s(m * n), y(m * n);
        be()->binary(TP_BINARY_ADD, sum.data(), a.data(), m * n, b.data(), m * n);
        be()->rmsnorm(want.data(), sum.data(), w.data(), m, n, 1e-6f, unit_offset);
        be()->add_rmsnorm(s.data(), y.data(), a.data(), b.data(), w.data(), m, n, 1e-6f, unit_offset);
        expect_same_bits(s, sum, "add_rmsnorm's sum");
        expect_same_bits(y, want, "add_rmsnorm's norm");
        Vec only_y(m * n, 7.0f), only_s(m * n, 7.0f);
        be()->add_rmsnorm(nullptr, only_y.data(), a.data(), b.data(), w.data(), m, n, 1e-6f, unit_offset);
        expect_same_bits(only_y, want, "add_rmsnorm without the sum");
        be()->add_rmsnorm(only_s.data(), nullptr, a.data(), b.data(), w.data(), m, n, 1e-6f, unit_offset);
        expect_same_bits(only_s, sum, "add_rmsnorm without the norm");
        Vec ia = a, ib = b;
        be()->add_rmsnorm(ia.data(), ib.data(), ia.data(), ib.data(), w.data(), m, n, 1e-6f, unit_offset);
        expect_same_bits(ia, sum, "add_rmsnorm's sum over a");
        expect_same_bits(ib, want, "add_rmsnorm's norm over b");
    }
}

// bias_unary is the bias_add then the activation it fuses, bit for bit
// (what lets -O1 fuse GPT-2's c_fc bias with its gelu without changing a
// result): every activation, a bias scaled as on a Partial sum, rows whose
// length is no whole number of vectors; with the biased value not wanted,
// with the activation not wanted, written over x, and the activation
// written over x.
TEST(BackendCpu, BiasUnaryIsBiasAddThenTheActivationBitForBit)
{
    const int64_t m = 37, n = 301;
    const Vec x = random_vec(m * n, 96, -6, 6), b = random_vec(n, 97, -2, 2);
    for (tp_unary op : {TP_UNARY_GELU_TANH, TP_UNARY_GELU_ERF, TP_UNARY_SILU, TP_UNARY_RELU})
        for (float scale : {1.0f, 0.5f}) {
            const std::string what = "activation " + std::to_string((int)op) + " scale " + std::to_string(scale);
            Vec biased(m * n), want(m * n), h(m * n), y(m * n);
            be()->bias_add(biased.data(), x.data(), b.data(), m, n, scale);
            be()->unary(op, want.data(), biased.data(), m * n);
            be()->bias_unary(op, h.data(), y.data(), x.data(), b.data(), m, n, scale);
            expect_same_bits(h, biased, (what + ": h").c_str());
            expect_same_bits(y, want, (what + ": the activation").c_str());
            Vec only_y(m * n, 7.0f);
            be()->bias_unary(op, nullptr, only_y.data(), x.data(), b.data(), m, n, scale);
            expect_same_bits(only_y, want, (what + ": without h").c_str());
            Vec only_h(m * n, 7.0f);
            be()->bias_unary(op, only_h.data(), nullptr, x.data(), b.data(), m, n, scale);
            expect_same_bits(only_h, biased, (what + ": without the activation").c_str());
            Vec hx = x, yx(m * n);
            be()->bias_unary(op, hx.data(), yx.data(), hx.data(), b.data(), m, n, scale);
            expect_same_bits(hx, biased, (what + ": h over x").c_str());
            expect_same_bits(yx, want, (what + ": the activation, h over x").c_str());
            Vec over = x;
            be()->bias_unary(op, nullptr, over.data(), over.data(), b.data(), m, n, scale);
            expect_same_bits(over, want, (what + ": the activation over x").c_str());
        }
}

TEST(BackendCpu, SiluMulIsSiluThenMulBitForBit)
{
    Vec a = random_vec(5000, 90, -12, 12), b = random_vec(5000, 91), dy = random_vec(5000, 92);
    for (float e : {0.0f, -0.0f, 100.0f, -100.0f, -1e4f, 1e4f})
        a.push_back(e), b.push_back(0.5f), dy.push_back(-2.0f);
    const int64_t n = (int64_t)a.size();
    Vec silu(n), want(n), got(n);
    be()->unary(TP_UNARY_SILU, silu.data(), a.data(), n);
    be()->binary(TP_BINARY_MUL, want.data(), silu.data(), n, b.data(), n);
    be()->silu_mul(got.data(), a.data(), b.data(), n);
    expect_same_bits(got, want, "silu_mul");
    Vec in_place = a;
    be()->silu_mul(in_place.data(), in_place.data(), b.data(), n);
    expect_same_bits(in_place, want, "silu_mul in place");

    Vec dsilu(n), want_da(n), want_db(n), da(n), db(n);
    be()->binary(TP_BINARY_MUL, dsilu.data(), dy.data(), n, b.data(), n);
    be()->unary_grad(TP_UNARY_SILU, want_da.data(), a.data(), dsilu.data(), n);
    be()->binary(TP_BINARY_MUL, want_db.data(), dy.data(), n, silu.data(), n);
    be()->silu_mul_grad(da.data(), db.data(), a.data(), b.data(), dy.data(), n);
    expect_same_bits(da, want_da, "silu_mul_grad da");
    expect_same_bits(db, want_db, "silu_mul_grad db");
    Vec only_b(n, 7.0f);
    be()->silu_mul_grad(nullptr, only_b.data(), a.data(), b.data(), dy.data(), n);
    expect_same_bits(only_b, want_db, "silu_mul_grad db alone");
    Vec ga = a, gb = b;   // da over a, db over b
    be()->silu_mul_grad(ga.data(), gb.data(), ga.data(), gb.data(), dy.data(), n);
    expect_same_bits(ga, want_da, "silu_mul_grad da in place");
    expect_same_bits(gb, want_db, "silu_mul_grad db in place");
}

TEST(BackendCpu, BinaryOpsBroadcastOverLeadingDims)
{
    const int64_t n = 3 * 5 * 7;
    Vec a = random_vec(n, 90);
    for (int64_t nb : {n, (int64_t)35, (int64_t)7, (int64_t)1}) {
        Vec b = random_vec(nb, 91 + (unsigned)nb);
        DVec add(n), mul(n);
        for (int64_t i = 0; i < n; i++) {
            add[i] = (double)a[i] + b[i % nb];
            mul[i] = (double)a[i] * b[i % nb];
        }
        Vec out(n);
        // one float rounding of an exact result
        be()->binary(TP_BINARY_ADD, out.data(), a.data(), n, b.data(), nb);
        expect_close(out, add, 0, kU, "add");
        be()->binary(TP_BINARY_MUL, out.data(), a.data(), n, b.data(), nb);
        expect_close(out, mul, 0, kU, "mul");
    }
}

TEST(BackendCpu, ScaleMultiplies)
{
    Vec x = random_vec(19, 95), out(19);
    be()->scale(out.data(), x.data(), 19, 0.5f); // exact: a power of two
    for (int i = 0; i < 19; i++)
        EXPECT_EQ(out[i], x[i] * 0.5f);
}

// Gemma 2's final logit soft-capping, one float rounding of a double
TEST(BackendCpu, SoftcapIsCapTimesTanh)
{
    Vec x = random_vec(40, 96, -200, 200), out(40);
    DVec ref(40);
    for (int i = 0; i < 40; i++)
        ref[i] = 30.0 * std::tanh(x[i] / 30.0);
    be()->softcap(out.data(), x.data(), 40, 30.0f);
    expect_close(out, ref, 1e-37, 2 * kU, "softcap");
}

// --- layout ------------------------------------------------------------------------

// The [4, 6, 10] tensor the layout tests cut: each element holds its own
// flat index.
const int64_t kCutShape[3] = {4, 6, 10};

Vec cut_source()
{
    Vec x(4 * 6 * 10);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = (float)i;
    return x;
}

// out holds indices [start, start + length) of dim of cut_source(),
// checked coordinate by coordinate.
void expect_range(const Vec &out, int dim, int64_t start, int64_t length, const std::string &what)
{
    int64_t cs[3] = {kCutShape[0], kCutShape[1], kCutShape[2]};
    cs[dim] = length;
    for (int64_t i = 0; i < cs[0]; i++)
        for (int64_t j = 0; j < cs[1]; j++)
            for (int64_t l = 0; l < cs[2]; l++) {
                int64_t src[3] = {i, j, l};
                src[dim] += start;
                float want = (float)((src[0] * kCutShape[1] + src[1]) * kCutShape[2] + src[2]);
                ASSERT_EQ(out[(i * cs[1] + j) * cs[2] + l], want) << what;
            }
}

// torch.chunk(x, parts, dim)[index].
TEST(BackendCpu, SlicePicksTheRightChunkForEveryDim)
{
    const int64_t *shape = kCutShape;
    Vec x = cut_source();
    for (int dim = 0; dim < 3; dim++)
        for (int parts : {1, 2})
            for (int index = 0; index < parts; index++) {
                int64_t chunk = shape[dim] / parts;
                Vec out(x.size() / parts, -1.0f);
                be()->slice(out.data(), x.data(), shape, 3, dim, index, parts);
                expect_range(out, dim, index * chunk, chunk,
                             "dim " + std::to_string(dim) + " chunk " + std::to_string(index) + "/" +
                                 std::to_string(parts));
            }
    // odd splits: 3 of dim 1 (6), 5 of dim 2 (10); negative dims count from the end
    Vec a(4 * 2 * 10), bb(4 * 6 * 2), c(4 * 6 * 2);
    be()->slice(a.data(), x.data(), shape, 3, 1, 2, 3);
    EXPECT_EQ(a[0], 4 * 10.0f);
    EXPECT_EQ(a.back(), x.back());
    be()->slice(bb.data(), x.data(), shape, 3, 2, 4, 5);
    be()->slice(c.data(), x.data(), shape, 3, -1, 4, 5);
    EXPECT_EQ(bb, c);
    EXPECT_EQ(bb[0], 8.0f);
    EXPECT_EQ(bb[1], 9.0f);
    EXPECT_EQ(bb[2], 18.0f);
}

// x.narrow(dim, start, length): every range of every dim (the pieces of
// split(x, (a, b, c), dim)); dim 2 is passed as -1.
TEST(BackendCpu, NarrowKeepsTheRangeOfEveryDim)
{
    Vec x = cut_source();
    for (int dim = 0; dim < 3; dim++)
        for (int64_t start = 0; start < kCutShape[dim]; start++)
            for (int64_t length = 1; start + length <= kCutShape[dim]; length++) {
                Vec out(x.size() / kCutShape[dim] * length, -1.0f);
                be()->narrow(out.data(), x.data(), kCutShape, 3, dim - (dim == 2 ? 3 : 0), start, length);
                expect_range(out, dim, start, length,
                             "dim " + std::to_string(dim) + " start " + std::to_string(start) + " length " +
                                 std::to_string(length));
            }
}

TEST(BackendCpu, PositionsCountFromTheOffset)
{
    std::vector<int32_t> out(2 * 5, -1);
    be()->positions(out.data(), 2, 5, 10, nullptr);
    EXPECT_EQ(out, (std::vector<int32_t>{10, 11, 12, 13, 14, 10, 11, 12, 13, 14}));
}

// --- cross-entropy -----------------------------------------------------------------

// Hugging Face's ForCausalLMLoss: logits[:, :-1, :vocab] against labels[:, 1:],
// -100 ignored, mean over the rest.
double ref_cross_entropy(const Vec &logits, const std::vector<int32_t> &labels, int64_t b, int64_t s, int64_t v,
                         int64_t vocab)
{
    double total = 0;
    int64_t count = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t + 1 < s; t++) {
            int32_t y = labels[bi * s + t + 1];
            if (y == -100)
                continue;
            const float *row = &logits[(bi * s + t) * v];
            double mx = -INFINITY;
            for (int64_t c = 0; c < vocab; c++)
                mx = std::max(mx, (double)row[c]);
            double z = 0;
            for (int64_t c = 0; c < vocab; c++)
                z += std::exp(row[c] - mx);
            total += -(row[y] - mx - std::log(z));
            count++;
        }
    return total / count;
}

struct CeCase {
    int64_t b, s, vocab, padded;
};

void make_ce_inputs(const CeCase &c, unsigned seed, Vec &logits, std::vector<int32_t> &labels)
{
    logits = random_vec(c.b * c.s * c.padded, seed, -6, 6);
    // padding columns hold huge values: if any piece let them into the
    // softmax, the loss would move by ~1e4
    for (int64_t r = 0; r < c.b * c.s; r++)
        for (int64_t col = c.vocab; col < c.padded; col++)
            logits[r * c.padded + col] = 1e4f;
    std::mt19937 gen(seed + 1);
    std::uniform_int_distribution<int32_t> dist(0, (int32_t)c.vocab - 1);
    labels.resize(c.b * c.s);
    for (size_t i = 0; i < labels.size(); i++)
        labels[i] = i % 5 == 3 ? -100 : dist(gen);
}

// double accumulation throughout, one rounding at the end
TEST(BackendCpu, CrossEntropyMatchesHuggingFaceShiftedLoss)
{
    for (CeCase c : {CeCase{1, 2, 1, 1}, CeCase{1, 7, 13, 13}, CeCase{2, 9, 37, 40}, CeCase{3, 5, 1000, 1003}}) {
        Vec logits;
        std::vector<int32_t> labels;
        make_ce_inputs(c, 100 + (unsigned)c.vocab, logits, labels);
        float loss = NAN;
        be()->cross_entropy(&loss, logits.data(), labels.data(), c.b, c.s, c.padded, c.vocab, kHfLoss);
        double ref = ref_cross_entropy(logits, labels, c.b, c.s, c.padded, c.vocab);
        EXPECT_NEAR(loss, ref, 4 * kU * std::fabs(ref) + 1e-7) << "vocab " << c.vocab << " padded " << c.padded;
    }
}

TEST(BackendCpu, CrossEntropyIgnoresMinus100AndTheFirstLabel)
{
    const int64_t b = 1, s = 4, v = 3;
    Vec logits = {0, 0, 0, 1, 2, 3, 5, 5, 5, 9, 9, 9};
    // labels[0] is never a target (the shift); the -100 drops row 1
    std::vector<int32_t> labels = {2, 0, -100, 2};
    float loss = NAN;
    be()->cross_entropy(&loss, logits.data(), labels.data(), b, s, v, v, kHfLoss);
    double row0 = std::log(3.0);                                                   // uniform, label 0
    double row2 = std::log(3.0);                                                   // uniform, label 2
    EXPECT_NEAR(loss, (row0 + row2) / 2, 1e-6);
    // changing the label of the first position changes nothing
    labels[0] = -100;
    float again = NAN;
    be()->cross_entropy(&again, logits.data(), labels.data(), b, s, v, v, kHfLoss);
    EXPECT_EQ(loss, again);
    // everything ignored: 0/0, as torch's mean over no elements
    std::vector<int32_t> none = {5, -100, -100, -100};
    be()->cross_entropy(&loss, logits.data(), none.data(), b, s, v, v, kHfLoss);
    EXPECT_TRUE(std::isnan(loss));
}

// The executor's vocab-parallel loss over `ranks` simulated ranks: slice the
// logits by columns, ce_max, all-reduce MAX, ce_sumexp with the global max,
// all-reduce SUM, ce_target, all-reduce SUM, ce_loss.
float vocab_parallel_loss(const Vec &logits, const std::vector<int32_t> &labels, const CeCase &c, int ranks,
                          tp_ce_rule rule = kHfLoss)
{
    const int64_t rows = c.b * c.s, v = c.padded / ranks;
    const int64_t shape[3] = {c.b, c.s, c.padded};
    std::vector<Vec> local(ranks, Vec(rows * v));
    for (int r = 0; r < ranks; r++)
        be()->slice(local[r].data(), logits.data(), shape, 3, 2, r, ranks);

    Vec max(rows, -INFINITY), part(rows);
    for (int r = 0; r < ranks; r++) {
        be()->ce_max(part.data(), local[r].data(), rows, v, r * v, c.vocab);
        for (int64_t i = 0; i < rows; i++)
            max[i] = std::max(max[i], part[i]);
    }
    Vec sumexp(rows, 0.0f), target(rows, 0.0f);
    for (int r = 0; r < ranks; r++) {
        be()->ce_sumexp(part.data(), local[r].data(), max.data(), rows, v, r * v, c.vocab);
        for (int64_t i = 0; i < rows; i++)
            sumexp[i] += part[i];
        be()->ce_target(part.data(), local[r].data(), labels.data(), c.b, c.s, v, r * v, rule);
        for (int64_t i = 0; i < rows; i++)
            target[i] += part[i];
    }
    float loss = NAN;
    be()->ce_loss(&loss, sumexp.data(), max.data(), target.data(), labels.data(), c.b, c.s, rule);
    return loss;
}

// The composition stores the per-row sum of exponentials as a float (one
// rounding, ~u relative, i.e. ~u absolute after the log) and the float sums
// over at most 4 ranks add a few more u: well inside 1e-6 for O(1..10) losses.
TEST(BackendCpu, VocabParallelPiecesComposeToCrossEntropy)
{
    // 37 padded to 40 splits 2 x 20 and 4 x 10 with the padding on the last
    // rank; 7 padded to 12 over 4 ranks leaves the last rank only padding
    // (its ce_max is -inf, the identity of MAX); 1000 over 2 and 4 unpadded
    for (CeCase c : {CeCase{2, 9, 37, 40}, CeCase{1, 6, 7, 12}, CeCase{3, 5, 1000, 1000}, CeCase{1, 1, 8, 8}}) {
        Vec logits;
        std::vector<int32_t> labels;
        make_ce_inputs(c, 200 + (unsigned)c.vocab, logits, labels);
        float full = NAN;
        be()->cross_entropy(&full, logits.data(), labels.data(), c.b, c.s, c.padded, c.vocab, kHfLoss);
        for (int ranks : {1, 2, 4}) {
            float loss = vocab_parallel_loss(logits, labels, c, ranks);
            if (c.s == 1) { // no position has a target: both are NaN
                EXPECT_TRUE(std::isnan(loss));
                EXPECT_TRUE(std::isnan(full));
                continue;
            }
            EXPECT_NEAR(loss, full, 1e-6 * std::max(1.0f, std::fabs(full)))
                << "vocab " << c.vocab << " padded " << c.padded << " over " << ranks << " ranks";
        }
    }
}

// A loss over labels that are the next tokens already (tp_ce_rule shift 0)
// scores row (b, t) against labels[b, t]: on each row's next tokens, the
// last ignored, it is the shifted loss on the row itself, bit for bit,
// whole and vocab-parallel; a divisor replaces the count of labelled rows,
// in the loss and in its gradient.
TEST(BackendCpu, NextTokenLabelsAndADivisor)
{
    const CeCase c{2, 9, 37, 40};
    Vec logits;
    std::vector<int32_t> labels;
    make_ce_inputs(c, 300, logits, labels);
    std::vector<int32_t> next(labels.size());
    for (int64_t r = 0; r < c.b; r++)
        for (int64_t t = 0; t < c.s; t++)
            next[r * c.s + t] = t + 1 < c.s ? labels[r * c.s + t + 1] : -100;
    int64_t counted = 0;
    for (int32_t y : next)
        counted += y != -100;
    float shifted = NAN, unshifted = NAN, divided = NAN;
    be()->cross_entropy(&shifted, logits.data(), labels.data(), c.b, c.s, c.padded, c.vocab, kHfLoss);
    be()->cross_entropy(&unshifted, logits.data(), next.data(), c.b, c.s, c.padded, c.vocab, kNextTokenLoss);
    EXPECT_EQ(shifted, unshifted);
    for (int ranks : {1, 2, 4})
        EXPECT_EQ(vocab_parallel_loss(logits, next, c, ranks, kNextTokenLoss),
                  vocab_parallel_loss(logits, labels, c, ranks, kHfLoss)) << ranks << " ranks";
    const tp_ce_rule by_divisor = {0, 2.5};
    be()->cross_entropy(&divided, logits.data(), next.data(), c.b, c.s, c.padded, c.vocab, by_divisor);
    EXPECT_NEAR(divided, shifted * (float)counted / 2.5f, 1e-5 * divided);
    EXPECT_NEAR(vocab_parallel_loss(logits, next, c, 2, by_divisor), divided, 1e-5 * divided);

    Vec g1(logits.size()), g0(logits.size()), gd(logits.size());
    be()->cross_entropy_grad(g1.data(), logits.data(), labels.data(), c.b, c.s, c.padded, c.vocab, kHfLoss);
    be()->cross_entropy_grad(g0.data(), logits.data(), next.data(), c.b, c.s, c.padded, c.vocab, kNextTokenLoss);
    be()->cross_entropy_grad(gd.data(), logits.data(), next.data(), c.b, c.s, c.padded, c.vocab, by_divisor);
    EXPECT_EQ(g1, g0);
    for (size_t i = 0; i < g1.size(); i++)
        ASSERT_NEAR(gd[i], g1[i] * (float)counted / 2.5f, 1e-6) << i;
}

TEST(BackendCpu, CeTargetPicksTheShiftedLocalLabelElseZero)
{
    const int64_t b = 1, s = 4, v = 3; // this rank holds columns [3, 6)
    Vec logits = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
    std::vector<int32_t> labels = {4, 5, 1, -100};
    Vec out(s, -1.0f);
    be()->ce_target(out.data(), logits.data(), labels.data(), b, s, v, 3, kHfLoss);
    // row 0 -> label 5 (local col 2); row 1 -> label 1 (not local); row 2 ->
    // -100; row 3 has no next token
    EXPECT_EQ(out, (Vec{2, 0, 0, 0}));
}

} // namespace
