// The tensor-core attention (runtime/backends/cuda/kernels/attention_flash.cuh)
// under the emulator, and the emulator's nvcuda::wmma (cuda_emu_wmma.h) it
// runs on: the fragments' products, the documented preconditions, and the
// hazards a warp-level kernel can have (a missing __syncwarp after a store,
// a missing trailing __syncthreads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "attention_flash.cuh"

namespace {

using namespace tp_ktest;
using namespace nvcuda;

// ==================================================================================
// nvcuda::wmma under the emulator
// ==================================================================================

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// d = a b + c for 16x16 a (row-major), b (column-major), c and d (row-major)
__global__ void mma_kernel(float *d, const __nv_bfloat16 *a, const __nv_bfloat16 *b, const float *c)
{
    FragA fa;
    FragBCol fb;
    FragAcc acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

TEST(CudaEmuWmma, MmaIsTheMatrixProduct)
{
    Vec a = as_stored(random_vec(256, 1), TP_KERNEL_BF16), b = as_stored(random_vec(256, 2), TP_KERNEL_BF16);
    Vec c = random_vec(256, 3);
    Dev da(TP_KERNEL_BF16, a), db(TP_KERNEL_BF16, b);
    DevOf<float> dc(c), dd(256);
    TP_LAUNCH(mma_kernel, 1, 32, 0, nullptr, dd.ptr(), static_cast<const __nv_bfloat16 *>(da.ptr()),
              static_cast<const __nv_bfloat16 *>(db.ptr()), static_cast<const float *>(dc.ptr()));
    Vec want(256);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double acc = c[(size_t)(i * 16 + j)];
            for (int k = 0; k < 16; k++)
                acc += (double)a[(size_t)(i * 16 + k)] * b[(size_t)(j * 16 + k)]; // b column-major
            want[(size_t)(i * 16 + j)] = (float)acc;
        }
    expect_close(dd.download(), want, {1e-6, 1e-6}, "wmma d = a b + c");
}

// The element-to-lane mapping is unspecified: the emulation uses different
// ones for matrix_a and accumulators, so a kernel may not mix them.
__global__ void mapping_kernel(float *out, const __nv_bfloat16 *a, const float *c)
{
    FragA fa;
    FragAcc acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    for (int i = 0; i < FragA::num_elements; i++)
        out[threadIdx.x * 8 + i] = __bfloat162float(fa.x[i]) - acc.x[i];
}

TEST(CudaEmuWmma, FragmentMappingsDiffer)
{
    Vec m(256);
    for (int i = 0; i < 256; i++)
        m[(size_t)i] = (float)i; // exact in bf16
    Dev da(TP_KERNEL_BF16, m);
    DevOf<float> dc(m), dout(256);
    TP_LAUNCH(mapping_kernel, 1, 32, 0, nullptr, dout.ptr(), static_cast<const __nv_bfloat16 *>(da.ptr()),
              static_cast<const float *>(dc.ptr()));
    int differ = 0;
    for (float x : dout.download())
        differ += x != 0.0f;
    EXPECT_GT(differ, 128) << "matrix_a and accumulator fragments hold the same elements";
}

TEST(CudaEmuWmma, MisalignedPointerOrStrideFails)
{
    __nv_bfloat16 *a = static_cast<__nv_bfloat16 *>(tp_emu_alloc(512 * sizeof(__nv_bfloat16)));
    for (auto [offset, ldm] : {std::pair<int, unsigned>{1, 16}, {0, 20}}) {
        cudaError_t err = tp_emu_launch("misaligned", dim3(1), dim3(32), 0, [a, offset = offset, ldm = ldm] {
            FragA fa;
            wmma::load_matrix_sync(fa, a + offset, ldm);
        });
        EXPECT_EQ(err, cudaErrorLaunchFailure);
        (void)cudaGetLastError();
        EXPECT_NE(std::string(tp_emu_last_failure()).find(offset ? "256-bit aligned" : "ldm 20"), std::string::npos)
            << tp_emu_last_failure();
    }
    EXPECT_TRUE(tp_emu_free(a));
}

TEST(CudaEmuWmma, DivergentLanesFail)
{
    float *c = static_cast<float *>(tp_emu_alloc(256 * sizeof(float)));
    cudaError_t err = tp_emu_launch("divergent_wmma", dim3(1), dim3(32), 0, [c] {
        FragAcc acc;
        wmma::fill_fragment(acc, 0.0f);
        if (threadIdx.x < 16)
            wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
        else
            wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_NE(std::string(tp_emu_last_failure()).find("wmma::"), std::string::npos) << tp_emu_last_failure();
    EXPECT_TRUE(tp_emu_free(c));
}

// Each lane stores its elements after the store's rendezvous, at its own
// pace: reading another lane's element needs a __syncwarp first.
template <bool kSyncwarp> __global__ void store_then_read_kernel(float *out)
{
    TP_SHARED(float, tile, 256);
    FragAcc acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
    if (kSyncwarp)
        __syncwarp();
    for (int i = 0; i < 8; i++)
        out[threadIdx.x * 8 + i] = tile[(threadIdx.x * 8 + i + 128) % 256];
}

TEST(CudaEmuWmma, MissingSyncwarpAfterStoreIsCaught)
{
    DevOf<float> out(256);
    int caught = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        tp_emu_set_seed(seed);
        TP_LAUNCH(store_then_read_kernel<false>, 1, 32, 0, nullptr, out.ptr());
        bool wrong = false;
        for (float x : out.download())
            wrong |= x != 1.0f;
        caught += wrong;
        tp_emu_set_seed(seed);
        TP_LAUNCH(store_then_read_kernel<true>, 1, 32, 0, nullptr, out.ptr());
        for (float x : out.download())
            ASSERT_EQ(x, 1.0f) << "seed " << seed << ": with the __syncwarp it is correct";
    }
    EXPECT_GE(caught, 6) << "of 8 seeds, the hazard showed in " << caught;
}

// ==================================================================================
// The attention on tensor cores against the CPU backend
// ==================================================================================

struct AttnCase {
    int64_t b, s, h, g, d;
    double scale, softcap;
    std::string name() const
    {
        return "b" + std::to_string(b) + " s" + std::to_string(s) + " h" + std::to_string(h) + " g" +
               std::to_string(g) + " d" + std::to_string(d) + (softcap > 0 ? " capped" : "");
    }
};

struct AttnData {
    Vec q, k, v, want;
};

AttnData attn_data(const AttnCase &c)
{
    const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d)); // scores of a few units
    AttnData x;
    x.q = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 9, -amp, amp), TP_KERNEL_BF16);
    x.k = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 10, -amp, amp), TP_KERNEL_BF16);
    x.v = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 11), TP_KERNEL_BF16);
    x.want.resize(x.q.size());
    cpu()->attention(x.want.data(), x.q.data(), x.k.data(), x.v.data(), c.b, c.s, c.h, c.g, c.d, c.scale, c.softcap);
    return x;
}

// Ragged sequences (one query, less than a tile, not a multiple of the 64
// queries of a block or of a key tile), GQA and MQA, both head dimensions,
// capped and uncapped scores.
TEST(FlashAttention, MatchesTheCpuBackend)
{
    for (AttnCase c : {AttnCase{1, 1, 1, 1, 64, 0.125, 0}, AttnCase{2, 19, 4, 2, 64, 0.125, 0},
                       AttnCase{1, 130, 2, 1, 64, 0.2, 2.0}, AttnCase{1, 67, 3, 3, 128, 1 / std::sqrt(128.0), 0},
                       AttnCase{1, 1, 2, 1, 128, 0.2, 2.0}, AttnCase{1, 40, 4, 1, 128, 0.2, 2.0}}) {
        AttnData x = attn_data(c);
        Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
        tp_k_attention(nullptr, TP_KERNEL_BF16, dout.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g, c.d,
                       (float)c.scale, (float)c.softcap);
        compare(dout.download(), x.want, kFlashTol, "tensor-core attention " + c.name());
    }
}

// Operands not 16-byte aligned (the tensor-core kernel stages 16 bytes at a
// time) take the fp32 kernel: its tolerance, not the tensor cores'.
TEST(FlashAttention, MisalignedOperandsTakeTheFp32Kernel)
{
    const AttnCase c{1, 19, 2, 1, 64, 0.125, 0};
    AttnData x = attn_data(c);
    Vec q1(x.q.size() + 1, 0.0f);
    std::copy(x.q.begin(), x.q.end(), q1.begin() + 1);
    Dev dq(TP_KERNEL_BF16, q1), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
    const void *q = static_cast<const __nv_bfloat16 *>(dq.ptr()) + 1;
    ASSERT_FALSE(flash_attention_supports(c.d, q, dk.ptr(), dv.ptr()));
    tp_k_attention(nullptr, TP_KERNEL_BF16, dout.ptr(), q, dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g, c.d, (float)c.scale,
                   (float)c.softcap);
    compare(dout.download(), x.want, stored({3e-6, 1e-5}, TP_KERNEL_BF16), "misaligned attention " + c.name());
}

// Without the barrier after a key tile's use, a warp that runs ahead
// stages the next tile over the one slower warps still multiply.
TEST(FlashAttention, MissingTrailingBarrierIsCaught)
{
    const AttnCase c{1, 130, 1, 1, 64, 0.125, 0};
    AttnData x = attn_data(c);
    Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
    auto bq = static_cast<const __nv_bfloat16 *>(dq.ptr()), bk = static_cast<const __nv_bfloat16 *>(dk.ptr()),
         bv = static_cast<const __nv_bfloat16 *>(dv.ptr());
    int caught = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        tp_emu_set_seed(seed);
        flash_attention_launch<64, false>(nullptr, static_cast<__nv_bfloat16 *>(dout.ptr()), bq, bk, bv, c.b, c.s,
                                          c.h, c.g, (float)c.scale, (float)c.softcap);
        caught += max_error(dout.download(), x.want) > kFlashTol.atol + kFlashTol.rtol; // |want| <= 1
    }
    EXPECT_GE(caught, 2) << "of 4 seeds, the hazard showed in " << caught;
}

} // namespace
