// rope inside the tensor-core attention and its gradient
// (runtime/kernels/attention_flash.cuh, attention_flash_grad.cuh) under
// the emulator: the same bits as the composition it replaces on the CUDA
// backend (rope, then attention, then for the gradient rope's inverse on
// dq and dk), for each head dimension's kernels, GQA (dk through the
// query heads' sums) and one query head a kv head (dk stored by the
// block), positions from an offset and by document, partial rotary and a
// rotated half that is not a whole number of fragment columns; and a
// missing barrier after a key tile's rotation caught.
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

constexpr int64_t kPosOffset = 5;
constexpr double kCosSinScale = 1.125; // yarn's attention factor: cos and sin scaled, not 1

struct RopeCase {
    AttnCase c;
    int64_t rotary;
    bool documents;
    std::string name() const
    {
        return c.name() + " rotary " + std::to_string(rotary) + (documents ? " documents" : "");
    }
};

// A case's inputs on the device, and rope both ways: the rope kernel's
// (the composition's) and the table the attention kernels read.
class RopeData {
  public:
    explicit RopeData(const RopeCase &r)
        : r_(r), x_(attn_inputs(r.c, 31)), seg_(r.documents ? attn_documents(r.c.b, r.c.s) : IVec(1, 0)),
          q(TP_KERNEL_BF16, x_.q), k(TP_KERNEL_BF16, x_.k), v(TP_KERNEL_BF16, x_.v),
          dy(TP_KERNEL_BF16, as_stored(random_vec(x_.q.size(), 34), TP_KERNEL_BF16)), dseg_(seg_),
          dpos_(seg_.size())
    {
        for (int64_t i = 0; i < r.rotary / 2; i++) {
            freq_.push_back(std::pow(10000.0, -2.0 * (double)i / (double)r.rotary));
            back_.push_back(-freq_.back());
        }
        if (r.documents)
            tp_k_positions(nullptr, dpos_.ptr(), r.c.b, r.c.s, kPosOffset, dseg_.ptr());
    }
    const AttnCase &c() const { return r_.c; }
    const int32_t *segments() const { return r_.documents ? dseg_.ptr() : nullptr; }
    // x ([b, s, heads, d]) rotated into out by the rope kernel, or back
    void rope(Dev &out, const void *x, int64_t heads, bool inverse) const
    {
        tp_k_rope(nullptr, TP_KERNEL_BF16, out.ptr(), x, c().b, c().s, heads, c().d, r_.rotary, kPosOffset,
                  inverse ? back_.data() : freq_.data(), kCosSinScale, positions());
    }
    // the table into scratch sized as the backend sizes it
    tp_k_rope_in table(DevOf<float> &t) const
    {
        tp_k_rope_table(nullptr, t.ptr(), c().b, c().s, r_.rotary, kPosOffset, freq_.data(), kCosSinScale,
                        positions());
        return tp_k_rope_in{t.ptr(), r_.rotary, r_.documents};
    }
    size_t table_floats() const
    {
        return (size_t)tp_cuda_rope_attention_scratch(true, c().b, c().s, c().h, c().g, c().d, r_.rotary, false);
    }
    size_t q_elems() const { return x_.q.size(); }
    size_t k_elems() const { return x_.k.size(); }
    size_t rows() const { return (size_t)(c().b * c().h * c().s); }

  private:
    const int32_t *positions() const { return r_.documents ? dpos_.ptr() : nullptr; }
    RopeCase r_;
    AttnInputs x_;
    IVec seg_;
    std::vector<double> freq_, back_;

  public:
    Dev q, k, v, dy;

  private:
    DevOf<int32_t> dseg_, dpos_;
};

// The elements whose bits differ.
size_t differing(const Vec &a, const Vec &b)
{
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++)
        n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return a.size() == b.size() ? n : a.size() + b.size();
}

// The composition's forward: q and k rotated into qr and kr, then attention.
void composed_forward(const RopeData &x, Dev &qr, Dev &kr, Dev &out, DevOf<float> &lse)
{
    const AttnCase &c = x.c();
    x.rope(qr, x.q.ptr(), c.h, false);
    x.rope(kr, x.k.ptr(), c.g, false);
    tp_k_attention(nullptr, TP_KERNEL_BF16, out.ptr(), lse.ptr(), qr.ptr(), kr.ptr(), x.v.ptr(), c.b, c.s, c.h, c.g,
                   c.d, (float)c.scale, (float)c.softcap, x.segments(), nullptr);
}

const RopeCase kCases[] = {
    {{1, 70, 2, 2, 64, 0.125, 0}, 64, false},   {{2, 40, 4, 2, 64, 0.125, 0}, 32, true},
    {{1, 19, 2, 1, 64, 0.125, 2.0}, 24, false}, {{1, 40, 2, 1, 128, 0.09, 0}, 128, true},
    {{2, 33, 2, 2, 128, 0.09, 0}, 64, true},    {{1, 21, 3, 1, 96, 0.1, 0}, 96, false},
    {{1, 20, 2, 1, 256, 0.0625, 0}, 256, true}, {{1, 18, 1, 1, 256, 0.0625, 0}, 128, false},
};

TEST(FlashRope, ForwardIsTheBitsOfRopeThenAttention)
{
    for (const RopeCase &r : kCases) {
        RopeData x(r);
        const AttnCase &c = x.c();
        Dev qr(TP_KERNEL_BF16, x.q_elems()), kr(TP_KERNEL_BF16, x.k_elems()), want(TP_KERNEL_BF16, x.q_elems()),
            got(TP_KERNEL_BF16, x.q_elems());
        DevOf<float> want_lse(x.rows()), got_lse(x.rows()), table(x.table_floats());
        composed_forward(x, qr, kr, want, want_lse);
        const tp_k_rope_in in = x.table(table);
        const size_t runs = tp_emu_launches_of("rope_kernel");
        tp_k_attention(nullptr, TP_KERNEL_BF16, got.ptr(), got_lse.ptr(), x.q.ptr(), x.k.ptr(), x.v.ptr(), c.b, c.s,
                       c.h, c.g, c.d, (float)c.scale, (float)c.softcap, x.segments(), &in);
        EXPECT_EQ(tp_emu_launches_of("rope_kernel"), runs) << "a rotated copy was made";
        EXPECT_EQ(differing(got.download(), want.download()), 0u) << r.name();
        EXPECT_EQ(differing(got_lse.download(), want_lse.download()), 0u) << "lse " << r.name();
    }
}

TEST(FlashRope, GradientIsTheBitsOfRopeAttentionGradientInverseRope)
{
    static const char *const kNames[] = {"dq", "dk", "dv"};
    for (const RopeCase &r : kCases) {
        RopeData x(r);
        const AttnCase &c = x.c();
        const size_t nq = x.q_elems(), nk = x.k_elems();
        Dev qr(TP_KERNEL_BF16, nq), kr(TP_KERNEL_BF16, nk), o(TP_KERNEL_BF16, nq), dqr(TP_KERNEL_BF16, nq),
            dkr(TP_KERNEL_BF16, nk);
        Dev want_dq(TP_KERNEL_BF16, nq), want_dk(TP_KERNEL_BF16, nk), want_dv(TP_KERNEL_BF16, nk);
        Dev got_dq(TP_KERNEL_BF16, nq), got_dk(TP_KERNEL_BF16, nk), got_dv(TP_KERNEL_BF16, nk);
        DevOf<float> lse(x.rows()), table(x.table_floats());
        DevOf<float> scratch((size_t)tp_cuda_attention_grad_scratch(true, c.b, c.s, c.h, c.g, c.d));
        composed_forward(x, qr, kr, o, lse);
        tp_k_attention_grad(nullptr, TP_KERNEL_BF16, dqr.ptr(), dkr.ptr(), want_dv.ptr(), qr.ptr(), kr.ptr(),
                            x.v.ptr(), x.dy.ptr(), o.ptr(), lse.ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d,
                            (float)c.scale, (float)c.softcap, x.segments(), nullptr);
        x.rope(want_dq, dqr.ptr(), c.h, true);
        x.rope(want_dk, dkr.ptr(), c.g, true);
        const tp_k_rope_in in = x.table(table);
        tp_k_attention_grad(nullptr, TP_KERNEL_BF16, got_dq.ptr(), got_dk.ptr(), got_dv.ptr(), x.q.ptr(), x.k.ptr(),
                            x.v.ptr(), x.dy.ptr(), o.ptr(), lse.ptr(), scratch.ptr(), c.b, c.s, c.h, c.g, c.d,
                            (float)c.scale, (float)c.softcap, x.segments(), &in);
        const Dev *want[3] = {&want_dq, &want_dk, &want_dv}, *got[3] = {&got_dq, &got_dk, &got_dv};
        for (int i = 0; i < 3; i++)
            EXPECT_EQ(differing(got[i]->download(), want[i]->download()), 0u) << kNames[i] << " " << r.name();
    }
}

// Without the barrier after a key tile's rotation, a warp that runs ahead
// scores keys other warps have not rotated yet.
TEST(FlashRope, MissingBarrierAfterTheRotationIsCaught)
{
    const RopeCase r{{1, 130, 1, 1, 64, 0.125, 0}, 64, false};
    RopeData x(r);
    const AttnCase &c = x.c();
    Dev qr(TP_KERNEL_BF16, x.q_elems()), kr(TP_KERNEL_BF16, x.k_elems()), want(TP_KERNEL_BF16, x.q_elems()),
        got(TP_KERNEL_BF16, x.q_elems());
    DevOf<float> lse(x.rows()), table(x.table_floats());
    composed_forward(x, qr, kr, want, lse);
    const tp_k_rope_in in = x.table(table);
    const Vec want_out = want.download();
    int caught = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        tp_emu_set_seed(seed);
        flash_attention_launch<64, FLASH_NO_ROPE_BARRIER>(
            nullptr, static_cast<__nv_bfloat16 *>(got.ptr()), nullptr, static_cast<const __nv_bfloat16 *>(x.q.ptr()),
            static_cast<const __nv_bfloat16 *>(x.k.ptr()), static_cast<const __nv_bfloat16 *>(x.v.ptr()), c.b, c.s,
            c.h, c.g, (float)c.scale, (float)c.softcap, nullptr, &in);
        caught += differing(got.download(), want_out) > 0;
    }
    EXPECT_GE(caught, 2) << "of 4 seeds, the hazard showed in " << caught;
}

} // namespace
