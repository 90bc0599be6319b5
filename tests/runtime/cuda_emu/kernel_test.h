// kernel_test.h: what the emulated kernel tests (test_kernels.cc, the
// forward; test_kernels_grad.cc, the backward) share: random inputs, the
// values a bf16 kernel sees, poisoned "device" buffers, and the comparison
// with the CPU backend's result.
#ifndef TP_KERNEL_TEST_H
#define TP_KERNEL_TEST_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/support/random_vec.h"
#include "runtime/kernels/kernels.h"
#include "runtime/kernels/launch.h"
extern "C" {
#include "runtime/backends/backend.h"
#include "tests/support/ce_rule.h"
#include "sched/workspace.h"
}

namespace tp_ktest {

using Vec = std::vector<float>;
using IVec = std::vector<int32_t>;

inline const tp_backend *cpu() { return tp_backend_cpu(); }

using tpcc_test::random_vec;

inline float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// The values a kernel of storage type t sees: bf16-rounded for bf16.
inline Vec as_stored(Vec v, tp_kernel_dtype t)
{
    if (t == TP_KERNEL_BF16)
        for (float &x : v)
            x = bf16_round(x);
    return v;
}

inline const char *dtype_name(tp_kernel_dtype t) { return t == TP_KERNEL_F32 ? "f32" : "bf16"; }




// ---- "device" buffers: poisoned on allocation, guards checked on release

class Dev {
  public:
    Dev(tp_kernel_dtype t, size_t n) : t_(t), n_(n), p_(tp_emu_alloc(n * esize())) {}
    Dev(tp_kernel_dtype t, const Vec &v) : Dev(t, v.size()) { upload(v); }
    ~Dev() { EXPECT_TRUE(tp_emu_free(p_)) << "a kernel wrote outside a buffer"; }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;

    void *ptr() const { return p_; }
    // element `off` on: one element off puts a buffer off 16 bytes, so an
    // elementwise kernel takes its element path (pack.cuh), not its 128-bit one
    void *at(int64_t off) const { return static_cast<char *>(p_) + off * (int64_t)esize(); }
    size_t esize() const { return t_ == TP_KERNEL_F32 ? 4 : 2; }

    void upload(const Vec &v)
    {
        ASSERT_EQ(v.size(), n_);
        for (size_t i = 0; i < n_; i++) {
            if (t_ == TP_KERNEL_F32)
                static_cast<float *>(p_)[i] = v[i];
            else
                static_cast<__nv_bfloat16 *>(p_)[i] = __float2bfloat16(v[i]);
        }
    }
    Vec download() const
    {
        Vec v(n_);
        for (size_t i = 0; i < n_; i++)
            v[i] = t_ == TP_KERNEL_F32 ? static_cast<const float *>(p_)[i]
                                       : __bfloat162float(static_cast<const __nv_bfloat16 *>(p_)[i]);
        return v;
    }

  private:
    tp_kernel_dtype t_;
    size_t n_;
    void *p_;
};

// int32 and float32-only buffers (ids, labels, positions, loss pieces)
template <typename E> class DevOf {
  public:
    explicit DevOf(size_t n) : n_(n), p_(static_cast<E *>(tp_emu_alloc(n * sizeof(E)))) {}
    explicit DevOf(const std::vector<E> &v) : DevOf(v.size())
    {
        if (!v.empty())
            std::memcpy(p_, v.data(), v.size() * sizeof(E));
    }
    ~DevOf() { EXPECT_TRUE(tp_emu_free(p_)) << "a kernel wrote outside a buffer"; }
    DevOf(const DevOf &) = delete;
    DevOf &operator=(const DevOf &) = delete;
    E *ptr() const { return p_; }
    std::vector<E> download() const { return std::vector<E>(p_, p_ + n_); }

  private:
    size_t n_;
    E *p_;
};

// ---- an attention's shape: batch, positions, query heads, kv heads, head
// dimension, the scores' scale and cap (0: none)
struct AttnCase {
    int64_t b, s, h, g, d;
    double scale, softcap;
    std::string name() const
    {
        return "b" + std::to_string(b) + " s" + std::to_string(s) + " h" + std::to_string(h) + " g" +
               std::to_string(g) + " d" + std::to_string(d) + (softcap > 0 ? " capped" : "");
    }
};

// Its q, k and v in bf16 from seeds seed, seed + 1 and seed + 2, the
// scores of a few units (the softmax neither flat nor one-hot).
struct AttnInputs {
    Vec q, k, v;
};
inline AttnInputs attn_inputs(const AttnCase &c, unsigned seed)
{
    const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d));
    return {as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), seed, -amp, amp), TP_KERNEL_BF16),
            as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), seed + 1, -amp, amp), TP_KERNEL_BF16),
            as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), seed + 2), TP_KERNEL_BF16)};
}

// The forward an attention's gradient reads (backend.h: its output o and
// log-sum-exp lse, [b, h, s]): the kernel's, on the device and copied to
// the host, so that the reference's backward reads what the kernel's does
// (the forward's own accuracy is the forward tests').
struct AttnSaved {
    Vec o, lse;
    std::unique_ptr<Dev> dev_o;
    std::unique_ptr<DevOf<float>> dev_lse;
};
inline AttnSaved attn_saved(tp_kernel_dtype t, const AttnCase &c, const Dev &dq, const Dev &dk, const Dev &dv,
                            const int32_t *dseg)
{
    const size_t rows = (size_t)(c.b * c.h * c.s);
    AttnSaved f{Vec(), Vec(), std::make_unique<Dev>(t, (size_t)(c.b * c.s * c.h * c.d)),
                std::make_unique<DevOf<float>>(rows)};
    tp_k_attention(nullptr, t, f.dev_o->ptr(), f.dev_lse->ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g,
                   c.d, (float)c.scale, (float)c.softcap, dseg, nullptr);
    f.o = f.dev_o->download();
    f.lse = f.dev_lse->download();
    return f;
}

// Documents for b rows of s positions (tpcc --segments, s >= 12): row 0
// three padding tokens, a document to s / 2, one of a single token, one to
// the end; row 1 (and the rest) one of a single token, one to s - 4, then
// right padding. Padding queries see nothing; most keys are another
// document's to some query.
inline IVec attn_documents(int64_t b, int64_t s)
{
    IVec seg((size_t)(b * s));
    for (int64_t r = 0; r < b; r++)
        for (int64_t t = 0; t < s; t++)
            seg[(size_t)(r * s + t)] = r == 0 ? (t < 3 ? -1 : t < s / 2 ? 0 : t == s / 2 ? 1 : 2)
                                              : (t < 1 ? 0 : t < s - 4 ? 1 : -1);
    return seg;
}

// Documents for the tensor-core kernels' blocks of 64 queries (s >= 150):
// row 0 starts with more than a block of padding, then a document of one
// token and two crossing blocks and tiles; row 1 ends with a block of
// padding; row 2 (and the rest) pads the middle of its first document
// (80 positions: whole tiles of queries and of keys, which its tokens
// after the pad still see across).
inline IVec attn_block_documents(int64_t b, int64_t s)
{
    IVec seg((size_t)(b * s));
    for (int64_t r = 0; r < b; r++)
        for (int64_t t = 0; t < s; t++)
            seg[(size_t)(r * s + t)] = r == 0   ? (t < 70 ? -1 : t < 71 ? 0 : t < 140 ? 1 : 2)
                                       : r == 1 ? (t < 1 ? 0 : t < 100 ? 1 : t < s - 64 ? 2 : -1)
                                                : (t < 30 ? 0 : t < 110 ? -1 : t < 130 ? 0 : 1);
    return seg;
}

// ---- comparison

struct Tol {
    double atol, rtol;
};

// 2^-8: the kernel's one rounding of an fp32 result to bf16 at the store
constexpr double kBf16Store = 1.0 / 256.0;

// The tensor-core attention (attention_flash.cuh) rounds the probabilities
// to bf16 for the P V product: each weight is within 2^-8 relative of the
// softmax's (2^-9 from the rounding; the denominator sums the rounded
// weights), and the values lie in [-1, 1], so the output is within 2^-8
// absolute; then the store's rounding.
constexpr Tol kFlashTol = {1.0 / 256.0, kBf16Store};

inline Tol stored(Tol f32, tp_kernel_dtype t) { return t == TP_KERNEL_BF16 ? Tol{f32.atol, f32.rtol + kBf16Store} : f32; }

// An attention's log-sum-exp (fp32 whatever the dtype): within fp32's
// rounding of the scores, sums and log, or on tensor cores, whose
// denominator sums probabilities rounded to bf16 (2^-8 relative), within
// log(1 + 2^-8) ~ 2^-8 absolute.
inline Tol lse_tol(tp_kernel_dtype t, int64_t d)
{
    return t == TP_KERNEL_BF16 && tp_cuda_flash_head_dim(d) ? Tol{1.0 / 256.0, 1e-6} : Tol{1e-5, 1e-6};
}

// |got - want| <= atol + rtol |want|; NaN must meet NaN, inf the same inf.
inline void expect_close(const Vec &got, const Vec &want, Tol tol, const std::string &what)
{
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; i++) {
        const double g = got[i], w = want[i];
        bool ok;
        if (std::isnan(w) || std::isnan(g))
            ok = std::isnan(w) && std::isnan(g);
        else if (std::isinf(w) || std::isinf(g))
            ok = g == w;
        else
            ok = std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
        if (!ok) {
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
            bad++;
        }
    }
}

// The largest |got - want|, NaN counting as infinite (for the record of
// what the tolerances leave).
inline double max_error(const Vec &got, const Vec &want)
{
    double e = 0.0;
    for (size_t i = 0; i < got.size() && i < want.size(); i++) {
        const double d = got[i] == want[i] ? 0.0 : std::fabs((double)got[i] - (double)want[i]); // inf meets inf
        e = std::isnan(d) ? INFINITY : std::max(e, d);
        if (std::isinf(e))
            break;
    }
    return e;
}

// expect_close, and the largest error printed ("max error ...")
inline void compare(const Vec &got, const Vec &want, Tol tol, const std::string &what)
{
    expect_close(got, want, tol, what);
    std::printf("max error %-60s %.3g\n", what.c_str(), max_error(got, want));
}

inline void expect_equal(const Vec &got, const Vec &want, const std::string &what) { expect_close(got, want, {0, 0}, what); }

inline std::string label(tp_kernel_dtype t, const std::string &shape) { return std::string(dtype_name(t)) + " " + shape; }

} // namespace tp_ktest

// gtest prints a parameter with PrintTo: the dtype's name, not its number.
// In tp_kernel_dtype's namespace (the global one), where gtest looks.
inline void PrintTo(tp_kernel_dtype t, std::ostream *os) { *os << tp_ktest::dtype_name(t); }

#endif // TP_KERNEL_TEST_H
