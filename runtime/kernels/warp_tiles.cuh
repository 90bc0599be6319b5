// warp_tiles.cuh: a warp's bf16 matrix products of 16 rows on tensor cores
// (mma_sm80.cuh's m16n8k16), in the fragment layouts mma_sm80.cuh lists,
// for the attention's forward (attention_flash.cuh) and its gradients
// (attention_flash_grad.cuh). A 16 x K operand is held as K / 16 A
// fragments, a 16 x N fp32 result as N / 8 C fragments; the B operand is
// read from memory (shared, 16-byte aligned rows), stored either way round.
// defines: warp_load_a, warp_zero, warp_mma_abt, warp_mma_ab, warp_c_to_a, warp_store_pair, warp_store_c,
// warp_add_c
#ifndef TPRUN_KERNELS_WARP_TILES_CUH
#define TPRUN_KERNELS_WARP_TILES_CUH

#include "mma_sm80.cuh"

// The A fragments of rows [0, 16) of a row-major bf16 matrix (`stride`
// elements a row), zeros for the rows from `valid` on: two consecutive
// elements a register, read as one 32-bit word.
template <int K>
__device__ __forceinline__ void warp_load_a(uint32_t (&a)[K / 16][4], const __nv_bfloat16 *rows, int64_t stride,
                                            int64_t valid)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int c = 0; c < K / 16; c++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) { // rows g and g + 8, columns 2t and 2t + 8
            const int row = g + 8 * (i % 2);
            a[c][i] = row < valid
                          ? *reinterpret_cast<const uint32_t *>(rows + row * stride + c * 16 + 2 * t + 8 * (i / 2))
                          : 0u;
        }
}

template <int N> __device__ __forceinline__ void warp_zero(float (&c)[N / 8][4])
{
    TP_UNROLL
    for (int n = 0; n < N / 8; n++)
        c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

// c += a b^T, with b row-major [N][K] (`stride` elements a row): the B
// fragment of columns 8n .. 8n + 7 is two consecutive k of row 8n + g,
// one 32-bit word a register.
template <int N, int K>
__device__ __forceinline__ void warp_mma_abt(float (&c)[N / 8][4], const uint32_t (&a)[K / 16][4],
                                             const __nv_bfloat16 *b, int stride)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int k = 0; k < K / 16; k++)
        TP_UNROLL
        for (int n = 0; n < N / 8; n++) {
            const __nv_bfloat16 *row = b + (n * 8 + g) * stride + k * 16 + 2 * t;
            const uint32_t frag[2] = {*reinterpret_cast<const uint32_t *>(row),
                                      *reinterpret_cast<const uint32_t *>(row + 8)};
            tp_mma_bf16_16816(c[n], a[k], frag);
        }
}

// c += a b, with b row-major [K][N] in shared memory: ldmatrix .trans
// reads four 8x8 blocks, the B fragments of two 8-column tiles of c for 16
// k.
template <int K, int N>
__device__ __forceinline__ void warp_mma_ab(float (&c)[N / 8][4], const uint32_t (&a)[K / 16][4],
                                            const __nv_bfloat16 *b, int stride)
{
    const int lane = threadIdx.x % 32, block = lane / 8, row = lane % 8;
    TP_UNROLL
    for (int k = 0; k < K / 16; k++)
        TP_UNROLL
        for (int n = 0; n < N / 16; n++) {
            // block 0: k 16k .. +7, columns 16n .. +7; 1: k +8; 2: columns +8; 3: both
            uint32_t frag[4];
            tp_ldmatrix_x4_trans(frag, b + (k * 16 + block % 2 * 8 + row) * stride + n * 16 + block / 2 * 8);
            const uint32_t lo[2] = {frag[0], frag[1]}, hi[2] = {frag[2], frag[3]};
            tp_mma_bf16_16816(c[2 * n], a[k], lo);
            tp_mma_bf16_16816(c[2 * n + 1], a[k], hi);
        }
}

// A 16 x K result as the A operand of the next product, rounded to bf16:
// columns 16k .. 16k + 15 are C fragments 2k and 2k + 1.
template <int K> __device__ __forceinline__ void warp_c_to_a(uint32_t (&a)[K / 16][4], const float (&c)[K / 8][4])
{
    TP_UNROLL
    for (int k = 0; k < K / 16; k++) {
        a[k][0] = tp_pack_bf16x2(c[2 * k][0], c[2 * k][1]);
        a[k][1] = tp_pack_bf16x2(c[2 * k][2], c[2 * k][3]);
        a[k][2] = tp_pack_bf16x2(c[2 * k + 1][0], c[2 * k + 1][1]);
        a[k][3] = tp_pack_bf16x2(c[2 * k + 1][2], c[2 * k + 1][3]);
    }
}

// Two consecutive elements of a result row, one store: bf16 rounded and
// packed (32 bits), or fp32 (64 bits).
__device__ __forceinline__ void warp_store_pair(__nv_bfloat16 *at, float lo, float hi)
{
    *reinterpret_cast<uint32_t *>(at) = tp_pack_bf16x2(lo, hi);
}
__device__ __forceinline__ void warp_store_pair(float *at, float lo, float hi)
{
    *reinterpret_cast<float2 *>(at) = make_float2(lo, hi);
}

// Rows [0, min(16, valid)) of a 16 x N result, row r of the fragment's
// two (g and g + 8) times row_scale[r], into a row-major bf16 or fp32
// matrix (`stride` elements a row).
template <int N, typename T>
__device__ __forceinline__ void warp_store_c(T *rows, int64_t stride, int64_t valid, const float (&c)[N / 8][4],
                                             const float (&row_scale)[2])
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        if (g + 8 * r >= valid)
            continue;
        T *row = rows + (g + 8 * r) * stride;
        TP_UNROLL
        for (int n = 0; n < N / 8; n++)
            warp_store_pair(row + n * 8 + 2 * t, c[n][2 * r] * row_scale[r], c[n][2 * r + 1] * row_scale[r]);
    }
}

// Rows [0, min(16, valid)) of a 16 x N result added into a row-major fp32
// matrix (`stride` elements a row), two elements a load and a store.
template <int N>
__device__ __forceinline__ void warp_add_c(float *rows, int64_t stride, int64_t valid, const float (&c)[N / 8][4])
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        if (g + 8 * r >= valid)
            continue;
        float *row = rows + (g + 8 * r) * stride;
        TP_UNROLL
        for (int n = 0; n < N / 8; n++) {
            float2 *at = reinterpret_cast<float2 *>(row + n * 8 + 2 * t);
            const float2 was = *at;
            *at = make_float2(was.x + c[n][2 * r], was.y + c[n][2 * r + 1]);
        }
    }
}

#endif // TPRUN_KERNELS_WARP_TILES_CUH
