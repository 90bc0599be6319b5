// The gradients of the tensor-core attention
// (runtime/kernels/attention_flash_grad.cuh) under the
// emulator: against attention's backward in double, element by element
// within the rounding the kernels make, on ragged sequences, GQA and MQA,
// each head dimension, capped scores, and each gradient alone; the same
// bits whatever the order the emulator runs warps and blocks in, which
// only dq's turns give; and operands it cannot take going to the fp32
// kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "attention_flash_grad.cuh"

namespace {

using namespace tp_ktest;

// The inputs (bf16 values) and, for dq, dk and dv in turn, the gradient
// and the size of its terms, element by element: |P dy| for dv; for dq
// and dk, |dS k| and |dS q| with |dS| counted as the size of its own
// terms, P (|dP| + sum_j P_j sum_e |dy_e v_je|), since dS = P (dP - D)
// cancels, and D = dy . O is a sum over the keys and the columns.
struct GradData : AttnInputs {
    Vec dy;
    std::vector<double> want[3], terms[3];
};

// seg: documents ([b, s], tpcc --segments), or nullptr for none
GradData grad_data(const AttnCase &c, const int32_t *seg = nullptr)
{
    GradData x;
    static_cast<AttnInputs &>(x) = attn_inputs(c, 21);
    x.dy = as_stored(random_vec(x.q.size(), 24), TP_KERNEL_BF16);
    for (int i = 0; i < 3; i++) {
        const size_t n = i == 0 ? x.q.size() : x.k.size();
        x.want[i].assign(n, 0.0);
        x.terms[i].assign(n, 0.0);
    }
    const int64_t s = c.s, d = c.d;
    std::vector<double> p((size_t)s), dp((size_t)s), ds((size_t)s), ds_size((size_t)s), score((size_t)s);
    for (int64_t bi = 0; bi < c.b; bi++)
        for (int64_t hi = 0; hi < c.h; hi++) {
            const int64_t kh = hi / (c.h / c.g);
            auto qrow = [&](const Vec &m, int64_t t) { return &m[(size_t)(((bi * s + t) * c.h + hi) * d)]; };
            auto krow = [&](const Vec &m, int64_t j) { return &m[(size_t)(((bi * s + j) * c.g + kh) * d)]; };
            auto at = [&](int64_t row, int64_t heads, int64_t head) { return (size_t)(((bi * s + row) * heads + head) * d); };
            auto sees = [&](int64_t t, int64_t j) {
                return !seg || (seg[bi * s + t] >= 0 && seg[bi * s + j] == seg[bi * s + t]);
            };
            for (int64_t t = 0; t < s; t++) {
                const float *qt = qrow(x.q, t), *dyt = qrow(x.dy, t);
                double mx = -INFINITY, denom = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    double dot = 0.0;
                    for (int64_t e = 0; e < d; e++)
                        dot += (double)qt[e] * krow(x.k, j)[e];
                    const double raw = dot * c.scale;
                    score[(size_t)j] = c.softcap > 0 ? c.softcap * std::tanh(raw / c.softcap) : raw;
                    if (sees(t, j))
                        mx = std::max(mx, score[(size_t)j]);
                }
                if (mx == -INFINITY)
                    continue; // a padding query: no gradient
                for (int64_t j = 0; j <= t; j++)
                    denom += sees(t, j) ? std::exp(score[(size_t)j] - mx) : 0.0;
                for (int64_t j = 0; j <= t; j++)
                    p[(size_t)j] = sees(t, j) ? std::exp(score[(size_t)j] - mx) / denom : 0.0;
                // D = dy . O = sum_j P_j dP_j, and the size of its terms,
                // P_j dy_e v_je each: the kernels take it from O
                double dsum = 0.0, dsize = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    double size = 0.0;
                    dp[(size_t)j] = 0.0;
                    for (int64_t e = 0; e < d; e++) {
                        dp[(size_t)j] += (double)dyt[e] * krow(x.v, j)[e];
                        size += std::fabs((double)dyt[e] * krow(x.v, j)[e]);
                    }
                    dsum += p[(size_t)j] * dp[(size_t)j];
                    dsize += p[(size_t)j] * size;
                }
                for (int64_t j = 0; j <= t; j++) {
                    const double sc = score[(size_t)j] / (c.softcap > 0 ? c.softcap : INFINITY);
                    ds[(size_t)j] = p[(size_t)j] * (dp[(size_t)j] - dsum) * (1.0 - sc * sc);
                    ds_size[(size_t)j] = p[(size_t)j] * (std::fabs(dp[(size_t)j]) + dsize) * (1.0 - sc * sc);
                }
                for (int64_t j = 0; j <= t; j++)
                    for (int64_t e = 0; e < d; e++) {
                        const size_t tq = at(t, c.h, hi) + (size_t)e, jk = at(j, c.g, kh) + (size_t)e;
                        const double kj = krow(x.k, j)[e], dv = p[(size_t)j] * dyt[e];
                        x.want[0][tq] += c.scale * ds[(size_t)j] * kj;
                        x.terms[0][tq] += c.scale * ds_size[(size_t)j] * std::fabs(kj);
                        x.want[1][jk] += c.scale * ds[(size_t)j] * qt[e];
                        x.terms[1][jk] += c.scale * ds_size[(size_t)j] * std::fabs(qt[e]);
                        x.want[2][jk] += dv, x.terms[2][jk] += std::fabs(dv);
                    }
            }
        }
    return x;
}

const char *kNames[3] = {"dq", "dk", "dv"};

// Each gradient is a product with an operand rounded to bf16 (P for dv, dS
// for dq and dk: 2^-9 relative a term), of P and dS from a log-sum-exp and
// D = dy . O that the forward computed with rounded weights (P, and each
// term of D, within 2^-8 relative of the softmax's): within 2^-7 of the
// size of its terms, then the store's rounding.
constexpr double kTermsTol = 1.0 / 128.0;

void expect_within_rounding(const Vec &got, const std::vector<double> &want, const std::vector<double> &terms,
                            const std::string &what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0.0; // the largest error in units of the tolerance
    int bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double tol = kTermsTol * terms[i] + kBf16Store * std::fabs(want[i]) + 1e-7;
        const double err = std::fabs((double)got[i] - want[i]);
        worst = std::isnan(err) ? INFINITY : std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i] << " (terms "
                          << terms[i] << ")";
    }
    std::printf("max error %-60s %.3g of the tolerance\n", what.c_str(), worst);
}

// dq, dk and dv of c (those `which` selects) from the kernels
std::vector<Vec> run_grad(const AttnCase &c, const GradData &x, const bool which[3], const IVec *seg = nullptr)
{
    DevOf<int32_t> dseg(seg ? *seg : IVec(1));
    Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), ddy(TP_KERNEL_BF16, x.dy);
    Dev gq(TP_KERNEL_BF16, x.q.size()), gk(TP_KERNEL_BF16, x.k.size()), gv(TP_KERNEL_BF16, x.k.size());
    DevOf<float> scratch((size_t)tp_cuda_attention_grad_scratch(true, c.b, c.s, c.h, c.g, c.d));
    const AttnSaved f = attn_saved(TP_KERNEL_BF16, c, dq, dk, dv, seg ? dseg.ptr() : nullptr);
    const size_t grad_runs = tp_emu_launches_of("flash_attention_grad_kernel"),
                 dq_runs = tp_emu_launches_of("flash_dq_store_kernel"),
                 reduce_runs = tp_emu_launches_of("flash_kv_reduce_kernel");
    tp_k_attention_grad(nullptr, TP_KERNEL_BF16, which[0] ? gq.ptr() : nullptr, which[1] ? gk.ptr() : nullptr,
                        which[2] ? gv.ptr() : nullptr, dq.ptr(), dk.ptr(), dv.ptr(), ddy.ptr(), f.dev_o->ptr(),
                        f.dev_lse->ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d, (float)c.scale, (float)c.softcap,
                        seg ? dseg.ptr() : nullptr, nullptr);
    // the tensor-core kernel ran, then the stores the gradients asked for;
    // dk and dv split by query head where a kv head has several
    const bool kv = which[1] || which[2];
    // one launch for all three; at d 256 dv in one, dk and dq in another
    const size_t launches = c.d <= 128 ? 1u : (which[2] ? 1u : 0u) + (which[0] || which[1] ? 1u : 0u);
    EXPECT_EQ(tp_emu_launches_of("flash_attention_grad_kernel") - grad_runs, launches);
    EXPECT_EQ(tp_emu_launches_of("flash_dq_store_kernel") - dq_runs, which[0] ? 1u : 0u);
    EXPECT_EQ(tp_emu_launches_of("flash_kv_reduce_kernel") - reduce_runs, kv && c.h > c.g ? 1u : 0u);
    return {gq.download(), gk.download(), gv.download()};
}

// One query; less than a tile; ragged tails of the 64-query blocks, the
// 64- and 32-key tiles of dq and the 64-, 32- and 16-query tiles of dk and
// dv; GQA (dk and dv summed over two, three and four query heads) and MQA;
// capped scores; head dimensions 64, 96, 128 and 256 (dv and dk with dq in
// two launches); an odd b h s (D's floats before the per-head sums in the
// scratch, which must still start on 8 bytes for their stores); four key
// blocks adding into dq's last tiles.
const AttnCase kCases[] = {{1, 1, 1, 1, 64, 0.125, 0},  {2, 19, 4, 2, 64, 0.125, 0},
                           {1, 130, 2, 1, 64, 0.2, 2.0}, {1, 67, 3, 3, 128, 1 / std::sqrt(128.0), 0},
                           {1, 1, 2, 1, 128, 0.2, 2.0},  {1, 40, 4, 1, 128, 0.2, 2.0},
                           {2, 100, 2, 1, 128, 0.09, 0}, {1, 70, 3, 1, 96, 1 / std::sqrt(96.0), 0},
                           {2, 45, 4, 2, 96, 0.2, 2.0},  {1, 45, 3, 1, 64, 0.125, 0},
                           {2, 200, 2, 1, 128, 0.09, 0},  {1, 70, 2, 1, 256, 0.0625, 0},
                           {2, 33, 2, 2, 256, 0.0625, 50.0}};

TEST(FlashAttentionGrad, MatchesAttentionsBackwardInDouble)
{
    for (const AttnCase &c : kCases) {
        GradData x = grad_data(c);
        // all three, then each alone (the others null)
        for (int only = -1; only < 3; only++) {
            const bool which[3] = {only < 0 || only == 0, only < 0 || only == 1, only < 0 || only == 2};
            std::vector<Vec> got = run_grad(c, x, which);
            for (int i = 0; i < 3; i++)
                if (which[i])
                    expect_within_rounding(got[(size_t)i], x.want[i], x.terms[i],
                                           "tensor-core attention " + c.name() + " " + kNames[i] +
                                               (only < 0 ? "" : " alone"));
        }
    }
}

// Documents (tpcc --segments, attn_block_documents): the blocks skip the
// tiles outside their documents, and padding passes no gradient.
TEST(FlashAttentionGrad, DocumentsMatchTheirBackwardInDouble)
{
    for (const AttnCase &c : {AttnCase{3, 200, 2, 1, 64, 0.125, 0}, AttnCase{2, 200, 4, 2, 128, 0.2, 2.0},
                              AttnCase{3, 160, 2, 1, 96, 0.1, 0}, AttnCase{3, 150, 2, 1, 256, 0.0625, 0}}) {
        const IVec seg = attn_block_documents(c.b, c.s);
        GradData x = grad_data(c, seg.data());
        const bool all[3] = {true, true, true};
        std::vector<Vec> got = run_grad(c, x, all, &seg);
        for (int i = 0; i < 3; i++)
            expect_within_rounding(got[(size_t)i], x.want[i], x.terms[i],
                                   "tensor-core attention within documents " + c.name() + " " + kNames[i]);
    }
}

// The reference above is attention's backward: the CPU backend's (fp32,
// checked against PyTorch's autograd elsewhere) agrees with it.
TEST(FlashAttentionGrad, TheDoubleReferenceIsTheCpuBackends)
{
    for (const AttnCase &c : {kCases[1], kCases[2], kCases[5]}) {
        GradData x = grad_data(c);
        std::vector<Vec> cpu_grad = {Vec(x.q.size()), Vec(x.k.size()), Vec(x.k.size())};
        Vec o(x.q.size()), lse((size_t)(c.b * c.h * c.s));
        cpu()->attention(o.data(), lse.data(), x.q.data(), x.k.data(), x.v.data(), c.b, c.s, c.h, c.g, c.d, c.scale,
                         c.softcap, nullptr, nullptr);
        cpu()->attention_grad(cpu_grad[0].data(), cpu_grad[1].data(), cpu_grad[2].data(), x.q.data(), x.k.data(),
                              x.v.data(), x.dy.data(), o.data(), lse.data(), c.b, c.s, c.h, c.g, c.d, (float)c.scale,
                              (float)c.softcap, nullptr, nullptr);
        for (int i = 0; i < 3; i++)
            compare(cpu_grad[(size_t)i], Vec(x.want[i].begin(), x.want[i].end()), {1e-5, 1e-5},
                    "cpu backend " + c.name() + " " + kNames[i]);
    }
}

// Four key blocks add into dq's last tiles (of 16 queries, at d 128), more
// than enough for the order of an fp32 sum to show in its bits.
const AttnCase kOrderCase = {2, 200, 2, 1, 128, 1 / std::sqrt(128.0), 0};

// dq's fp32 sum, before its rounding to bf16, from the tensor-core kernel
// run with each seed in turn (kTakeTurns as the kernel's).
template <bool kTakeTurns>
std::vector<Vec> dq_sums(const AttnCase &c, const GradData &x, uint64_t seeds, const IVec *seg = nullptr)
{
    DevOf<int32_t> dseg(seg ? *seg : IVec(1));
    const int32_t *segments = seg ? dseg.ptr() : nullptr;
    Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), ddy(TP_KERNEL_BF16, x.dy);
    Dev gq(TP_KERNEL_BF16, x.q.size());
    const AttnSaved f = attn_saved(TP_KERNEL_BF16, c, dq, dk, dv, segments);
    Vec dsum((size_t)(c.b * c.h * c.s));
    for (int64_t row = 0; row < c.b * c.s * c.h; row++) { // D = dy . O, [b, h, s]
        double dot = 0.0;
        for (int64_t e = 0; e < c.d; e++)
            dot += (double)x.dy[(size_t)(row * c.d + e)] * f.o[(size_t)(row * c.d + e)];
        dsum[(size_t)((row / c.h / c.s * c.h + row % c.h) * c.s + row / c.h % c.s)] = (float)dot;
    }
    DevOf<float> ddsum(dsum);
    DevOf<float> work((size_t)tp_cuda_attention_grad_scratch(true, c.b, c.s, c.h, c.g, c.d));
    // the sum follows the split dk and dv where a kv head has several query heads
    const size_t n = x.q.size(), at = c.h > c.g ? 2 * n : 0;
    std::vector<Vec> sums;
    for (uint64_t seed = 1; seed <= seeds; seed++) {
        tp_emu_set_seed(seed);
        flash_attention_grad_launch<128, kTakeTurns>(
            nullptr, (__nv_bfloat16 *)gq.ptr(), nullptr, nullptr, (const __nv_bfloat16 *)dq.ptr(),
            (const __nv_bfloat16 *)dk.ptr(), (const __nv_bfloat16 *)dv.ptr(), (const __nv_bfloat16 *)ddy.ptr(),
            f.dev_lse->ptr(), ddsum.ptr(), work.ptr(), c.b, c.s, c.h, c.g, (float)c.scale, (float)c.softcap, segments,
            nullptr);
        const Vec all = work.download();
        sums.emplace_back(all.begin() + (std::ptrdiff_t)at, all.begin() + (std::ptrdiff_t)(at + n));
    }
    return sums;
}

bool same_bits(const Vec &a, const Vec &b) { return a.size() == b.size() && !std::memcmp(a.data(), b.data(), a.size() * 4); }

// Every sum runs in a fixed order, dq's by the blocks' turns: the bits do
// not depend on the order the emulator runs warps and blocks in, which it
// draws from its seed; dq's fp32 sum's included, before its rounding.
TEST(FlashAttentionGrad, SameBitsWhateverTheWarpAndBlockOrder)
{
    GradData x = grad_data(kOrderCase);
    const bool all[3] = {true, true, true};
    tp_emu_set_seed(1);
    std::vector<Vec> first = run_grad(kOrderCase, x, all);
    for (uint64_t seed = 2; seed <= 3; seed++) {
        tp_emu_set_seed(seed);
        std::vector<Vec> again = run_grad(kOrderCase, x, all);
        for (int i = 0; i < 3; i++)
            EXPECT_TRUE(same_bits(again[(size_t)i], first[(size_t)i])) << kNames[i] << ", seed " << seed;
    }
    std::vector<Vec> sums = dq_sums<true>(kOrderCase, x, 3);
    for (size_t r = 1; r < sums.size(); r++)
        EXPECT_TRUE(same_bits(sums[r], sums[0])) << "dq's sum, seed " << r + 1;
    // with documents, where the blocks adding into a tile start at its
    // first document's key block
    const AttnCase docs = {3, 200, 2, 1, 128, kOrderCase.scale, 0};
    const IVec seg = attn_block_documents(docs.b, docs.s);
    sums = dq_sums<true>(docs, grad_data(docs, seg.data()), 3, &seg);
    for (size_t r = 1; r < sums.size(); r++)
        EXPECT_TRUE(same_bits(sums[r], sums[0])) << "dq's sum within documents, seed " << r + 1;
}

// Without the turns, the key blocks add into dq's sum in the order they
// run in, and its bits change with the emulator's seed: the test above
// catches a kernel that does not wait for its turn.
TEST(FlashAttentionGrad, AddingOutOfTurnChangesTheBits)
{
    GradData x = grad_data(kOrderCase);
    std::vector<Vec> sums = dq_sums<false>(kOrderCase, x, 4);
    bool differ = false;
    for (size_t r = 1; r < sums.size(); r++)
        differ |= !same_bits(sums[r], sums[0]);
    EXPECT_TRUE(differ) << "dq's sum did not depend on the order the blocks ran in";
}

// An operand not 16-byte aligned (here dy, one element off) takes the fp32
// kernels: their tolerance, not the tensor cores'.
TEST(FlashAttentionGrad, MisalignedOperandsTakeTheFp32Kernels)
{
    const AttnCase c = kCases[1];
    GradData x = grad_data(c);
    Vec dy1(x.dy.size() + 1, 0.0f);
    std::copy(x.dy.begin(), x.dy.end(), dy1.begin() + 1);
    Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), ddy(TP_KERNEL_BF16, dy1);
    Dev gq(TP_KERNEL_BF16, x.q.size()), gk(TP_KERNEL_BF16, x.k.size()), gv(TP_KERNEL_BF16, x.k.size());
    DevOf<float> scratch((size_t)tp_cuda_attention_grad_scratch(true, c.b, c.s, c.h, c.g, c.d));
    const void *dy = ddy.at(1);
    const AttnSaved f = attn_saved(TP_KERNEL_BF16, c, dq, dk, dv, nullptr);
    const size_t flash_runs = tp_emu_launches_of("flash_attention");
    tp_k_attention_grad(nullptr, TP_KERNEL_BF16, gq.ptr(), gk.ptr(), gv.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), dy,
                        f.dev_o->ptr(), f.dev_lse->ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d, (float)c.scale,
                        (float)c.softcap, nullptr, nullptr);
    EXPECT_EQ(tp_emu_launches_of("flash_attention"), flash_runs) << "a tensor-core kernel ran";
    // against the CPU backend's backward of the same forward (the
    // tensor-core one's output and log-sum-exp)
    std::vector<Vec> want = {Vec(x.q.size()), Vec(x.k.size()), Vec(x.k.size())};
    cpu()->attention_grad(want[0].data(), want[1].data(), want[2].data(), x.q.data(), x.k.data(), x.v.data(),
                          x.dy.data(), f.o.data(), f.lse.data(), c.b, c.s, c.h, c.g, c.d, c.scale, c.softcap, nullptr, nullptr);
    Dev *got[3] = {&gq, &gk, &gv};
    for (int i = 0; i < 3; i++)
        compare(got[i]->download(), want[(size_t)i], stored({1e-5, 1e-5}, TP_KERNEL_BF16),
                "misaligned attention " + c.name() + " " + kNames[i]);
}

} // namespace
