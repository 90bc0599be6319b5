// The tensor-core attention (runtime/kernels/attention_flash.cuh)
// under the emulator, and the emulator's sm_80 instructions
// (cuda_emu_mma.h) it runs on: the fragments in the PTX ISA's layout, the
// documented preconditions, cp.async's completion, and the hazard of a
// missing trailing __syncthreads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "attention_flash.cuh"

namespace {

using namespace tp_ktest;

// ==================================================================================
// The sm_80 instructions under the emulator (cuda_emu_mma.h)
// ==================================================================================

uint16_t bits(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }

// d = a b + c for a 16x16 (row-major), b 16x8 (row-major [k][n]) and c, d
// 16x8 (row-major), each lane building its fragments by the PTX ISA's
// documented mapping (mma_sm80.cuh) straight from memory
__global__ void mma_kernel(float *d, const __nv_bfloat16 *a, const __nv_bfloat16 *b, const float *c)
{
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    auto pair = [](const __nv_bfloat16 *x, int i, int j) {
        return (uint32_t)__bfloat16_as_ushort(x[i]) | (uint32_t)__bfloat16_as_ushort(x[j]) << 16;
    };
    const uint32_t fa[4] = {pair(a, g * 16 + 2 * t, g * 16 + 2 * t + 1),
                            pair(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1),
                            pair(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9),
                            pair(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9)};
    const uint32_t fb[2] = {pair(b, 2 * t * 8 + g, (2 * t + 1) * 8 + g),
                            pair(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g)};
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    tp_mma_bf16_16816(acc, fa, fb);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

TEST(CudaEmuMma, MmaIsTheMatrixProductInThePtxLayout)
{
    Vec a = as_stored(random_vec(256, 1), TP_KERNEL_BF16), b = as_stored(random_vec(128, 2), TP_KERNEL_BF16);
    Vec c = random_vec(128, 3);
    Dev da(TP_KERNEL_BF16, a), db(TP_KERNEL_BF16, b);
    DevOf<float> dc(c), dd(128);
    TP_LAUNCH(mma_kernel, 1, 32, 0, nullptr, dd.ptr(), static_cast<const __nv_bfloat16 *>(da.ptr()),
              static_cast<const __nv_bfloat16 *>(db.ptr()), static_cast<const float *>(dc.ptr()));
    Vec want(128);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double acc = c[(size_t)(i * 8 + j)];
            for (int k = 0; k < 16; k++)
                acc += (double)a[(size_t)(i * 16 + k)] * b[(size_t)(k * 8 + j)];
            want[(size_t)(i * 8 + j)] = (float)acc;
        }
    expect_close(dd.download(), want, {1e-6, 1e-6}, "mma d = a b + c");
}

// ldmatrix.x4.trans of a 16x16 tile (keys x dims, row-major, rows padded
// to 24 elements): lane l gives row l % 8 of block l / 8 (block 1 the next
// 8 rows, block 2 the next 8 columns), and register i must hold block i's
// elements [2t][g] and [2t + 1][g].
__global__ void ldmatrix_kernel(uint32_t *out, const __nv_bfloat16 *x)
{
    TP_SHARED(__nv_bfloat16, tile, 16 * 24);
    for (int i = (int)threadIdx.x; i < 16 * 16; i += 32)
        tile[i / 16 * 24 + i % 16] = x[i];
    __syncwarp();
    const int lane = threadIdx.x, block = lane / 8;
    uint32_t r[4];
    tp_ldmatrix_x4_trans(r, tile + (block % 2 * 8 + lane % 8) * 24 + block / 2 * 8);
    for (int i = 0; i < 4; i++)
        out[lane * 4 + i] = r[i];
}

TEST(CudaEmuMma, LdmatrixTransGivesTheDocumentedRegisters)
{
    Vec x(256);
    for (int i = 0; i < 256; i++)
        x[(size_t)i] = (float)i; // exact in bf16
    Dev dx(TP_KERNEL_BF16, x);
    DevOf<uint32_t> dout(128);
    TP_LAUNCH(ldmatrix_kernel, 1, 32, 0, nullptr, dout.ptr(), static_cast<const __nv_bfloat16 *>(dx.ptr()));
    std::vector<uint32_t> got = dout.download();
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            const int g = lane / 4, t = lane % 4, r0 = i % 2 * 8, c0 = i / 2 * 8;
            const uint32_t want = (uint32_t)bits(x[(size_t)((r0 + 2 * t) * 16 + c0 + g)]) |
                                  (uint32_t)bits(x[(size_t)((r0 + 2 * t + 1) * 16 + c0 + g)]) << 16;
            EXPECT_EQ(got[(size_t)(lane * 4 + i)], want) << "lane " << lane << " register " << i;
        }
}

TEST(CudaEmuMma, MisalignedLdmatrixAndDivergentMmaFail)
{
    __nv_bfloat16 *x = static_cast<__nv_bfloat16 *>(tp_emu_alloc(512 * sizeof(__nv_bfloat16)));
    cudaError_t err = tp_emu_launch("misaligned_ldmatrix", dim3(1), dim3(32), 0, [x] {
        uint32_t r[4];
        tp_ldmatrix_x4_trans(r, x + 1 + threadIdx.x * 8);
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_NE(std::string(tp_emu_last_failure()).find("16-byte aligned"), std::string::npos) << tp_emu_last_failure();
    err = tp_emu_launch("divergent_mma", dim3(1), dim3(32), 0, [] {
        float d[4] = {0, 0, 0, 0};
        const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        if (threadIdx.x < 16)
            tp_mma_bf16_16816(d, a, b);
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_NE(std::string(tp_emu_last_failure()).find("mma.sync"), std::string::npos) << tp_emu_last_failure();
    EXPECT_TRUE(tp_emu_free(x));
}

// Each thread copies 16 bytes into shared memory with cp.async (the last
// thread asks for zeros: src-size 0) and reads its neighbour's piece:
// correct only after its wait and a barrier.
template <bool kWait> __global__ void cp_async_kernel(float *out, const float *x)
{
    TP_SHARED(float, tile, 32 * 4);
    const int i = (int)threadIdx.x;
    tp_cp_async_16(tile + i * 4, x + i * 4, i == 31 ? 0u : 16u);
    tp_cp_async_commit();
    if (kWait)
        tp_cp_async_wait<0>();
    __syncthreads();
    for (int j = 0; j < 4; j++)
        out[i * 4 + j] = tile[(i + 1) % 32 * 4 + j];
}

TEST(CudaEmuMma, CpAsyncLandsAtItsWaitWithZeroFill)
{
    Vec x = random_vec(128, 4);
    DevOf<float> dx(x), dout(128);
    int caught = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        tp_emu_set_seed(seed);
        TP_LAUNCH(cp_async_kernel<true>, 1, 32, 0, nullptr, dout.ptr(), static_cast<const float *>(dx.ptr()));
        Vec got = dout.download();
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 4; j++) {
                const int from = (i + 1) % 32;
                ASSERT_EQ(got[(size_t)(i * 4 + j)], from == 31 ? 0.0f : x[(size_t)(from * 4 + j)])
                    << "seed " << seed << ", thread " << i;
            }
        TP_LAUNCH(cp_async_kernel<false>, 1, 32, 0, nullptr, dout.ptr(), static_cast<const float *>(dx.ptr()));
        bool poisoned = false;
        for (float v : dout.download())
            poisoned |= std::isnan(v);
        caught += poisoned;
    }
    EXPECT_EQ(caught, 4) << "reads without the wait saw the poison in " << caught << " of 4 seeds";
}

// ==================================================================================
// The attention on tensor cores against the CPU backend
// ==================================================================================

struct AttnData : AttnInputs {
    Vec want, want_lse;
};

AttnData attn_data(const AttnCase &c)
{
    AttnData x;
    static_cast<AttnInputs &>(x) = attn_inputs(c, 9);
    x.want.resize(x.q.size());
    x.want_lse.resize((size_t)(c.b * c.h * c.s));
    cpu()->attention(x.want.data(), x.want_lse.data(), x.q.data(), x.k.data(), x.v.data(), c.b, c.s, c.h, c.g, c.d,
                     c.scale, c.softcap, nullptr, nullptr);
    return x;
}

// Ragged sequences (one query, less than a tile, not a multiple of the 64
// queries of a block or of a key tile: 64 keys, 16 at d 256), GQA and MQA,
// each head dimension, capped and uncapped scores.
TEST(FlashAttention, MatchesTheCpuBackend)
{
    for (AttnCase c : {AttnCase{1, 1, 1, 1, 64, 0.125, 0}, AttnCase{2, 19, 4, 2, 64, 0.125, 0},
                       AttnCase{1, 130, 2, 1, 64, 0.2, 2.0}, AttnCase{1, 67, 3, 3, 128, 1 / std::sqrt(128.0), 0},
                       AttnCase{1, 1, 2, 1, 128, 0.2, 2.0}, AttnCase{1, 40, 4, 1, 128, 0.2, 2.0},
                       AttnCase{1, 70, 3, 1, 96, 1 / std::sqrt(96.0), 0}, AttnCase{2, 33, 2, 2, 96, 0.2, 2.0},
                       AttnCase{1, 70, 2, 1, 256, 1 / std::sqrt(256.0), 0}, AttnCase{2, 9, 2, 2, 256, 0.2, 2.0}}) {
        AttnData x = attn_data(c);
        Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
        DevOf<float> dlse(x.want_lse.size());
        const size_t runs = tp_emu_launches_of("flash_attention_kernel");
        tp_k_attention(nullptr, TP_KERNEL_BF16, dout.ptr(), dlse.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h,
                       c.g, c.d, (float)c.scale, (float)c.softcap, nullptr, nullptr);
        EXPECT_EQ(tp_emu_launches_of("flash_attention_kernel"), runs + 1) << c.name();
        compare(dout.download(), x.want, kFlashTol, "tensor-core attention " + c.name());
        compare(dlse.download(), x.want_lse, lse_tol(TP_KERNEL_BF16, c.d), "tensor-core attention lse " + c.name());
    }
}

// Documents (tpcc --segments, attn_block_documents) on tensor cores: a
// block of padding queries is 0 and walks no tile.
TEST(FlashAttention, DocumentsMatchTheCpuBackend)
{
    for (AttnCase c : {AttnCase{3, 200, 2, 1, 64, 0.125, 0}, AttnCase{2, 200, 4, 2, 128, 0.2, 2.0},
                       AttnCase{3, 150, 2, 2, 256, 1 / std::sqrt(256.0), 0}}) {
        AttnInputs x = attn_inputs(c, 16);
        const IVec seg = attn_block_documents(c.b, c.s);
        Vec want(x.q.size()), want_lse((size_t)(c.b * c.h * c.s));
        cpu()->attention(want.data(), want_lse.data(), x.q.data(), x.k.data(), x.v.data(), c.b, c.s, c.h, c.g, c.d,
                         c.scale, c.softcap, seg.data(), nullptr);
        Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
        DevOf<int32_t> dseg(seg);
        DevOf<float> dlse(want_lse.size());
        const size_t runs = tp_emu_launches_of("flash_attention_kernel");
        tp_k_attention(nullptr, TP_KERNEL_BF16, dout.ptr(), dlse.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h,
                       c.g, c.d, (float)c.scale, (float)c.softcap, dseg.ptr(), nullptr);
        EXPECT_EQ(tp_emu_launches_of("flash_attention_kernel"), runs + 1) << c.name();
        compare(dout.download(), want, kFlashTol, "tensor-core attention within documents " + c.name());
        // a padding query's is +inf on both
        compare(dlse.download(), want_lse, lse_tol(TP_KERNEL_BF16, c.d),
                "tensor-core attention lse within documents " + c.name());
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
    const size_t runs = tp_emu_launches_of("flash_attention_kernel");
    tp_k_attention(nullptr, TP_KERNEL_BF16, dout.ptr(), nullptr, q, dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g, c.d,
                   (float)c.scale, (float)c.softcap, nullptr, nullptr);
    EXPECT_EQ(tp_emu_launches_of("flash_attention_kernel"), runs) << "the tensor-core kernel ran";
    compare(dout.download(), x.want, stored({3e-6, 1e-5}, TP_KERNEL_BF16), "misaligned attention " + c.name());
}

// Without the barrier after a key tile's use, a warp that runs ahead
// stages the next tile over the one slower warps still multiply: tiles of
// 64 keys at d 64, of 16 at d 256.
template <int D> void expect_missing_trailing_barrier_caught()
{
    const AttnCase c{1, 130, 1, 1, D, 1 / std::sqrt((double)D), 0};
    AttnData x = attn_data(c);
    Dev dq(TP_KERNEL_BF16, x.q), dk(TP_KERNEL_BF16, x.k), dv(TP_KERNEL_BF16, x.v), dout(TP_KERNEL_BF16, x.q.size());
    auto bq = static_cast<const __nv_bfloat16 *>(dq.ptr()), bk = static_cast<const __nv_bfloat16 *>(dk.ptr()),
         bv = static_cast<const __nv_bfloat16 *>(dv.ptr());
    int caught = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        tp_emu_set_seed(seed);
        flash_attention_launch<D, FLASH_NO_TRAILING_BARRIER>(nullptr, static_cast<__nv_bfloat16 *>(dout.ptr()),
                                                             nullptr, bq, bk, bv, c.b, c.s, c.h, c.g, (float)c.scale,
                                                             (float)c.softcap, nullptr, nullptr);
        caught += max_error(dout.download(), x.want) > kFlashTol.atol + kFlashTol.rtol; // |want| <= 1
    }
    EXPECT_GE(caught, 2) << "d " << D << ": of 4 seeds, the hazard showed in " << caught;
}

TEST(FlashAttention, MissingTrailingBarrierIsCaught)
{
    expect_missing_trailing_barrier_caught<64>();
    expect_missing_trailing_barrier_caught<256>();
}

} // namespace
