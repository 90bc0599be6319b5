/* cuda_emu_mma.h: the sm_80 PTX instructions of
 * runtime/kernels/mma_sm80.cuh under the emulation, with the
 * fragment layouts the PTX ISA documents (mma_sm80.cuh lists them):
 *   - tp_mma_bf16_16816 and tp_ldmatrix_x4_trans are collectives of the
 *     whole warp (every lane must call them, as .sync.aligned requires);
 *     the product adds the exact bf16 x bf16 terms in fp32 in k order (the
 *     hardware's order is unspecified);
 *   - ldmatrix rows must be 16-byte aligned;
 *   - cp.async copies are done at the wait that lets them complete, as late
 *     as the hardware may, so a read that does not wait (or that reads
 *     another thread's copy without a barrier after the wait) sees the
 *     poison of fresh shared memory. */
#ifndef TP_CUDA_EMU_MMA_H
#define TP_CUDA_EMU_MMA_H

#include "cuda_emu.h"

namespace tp_emu {
/* cp.async of the running thread: a copy of n bytes of which the first
 * src_bytes come from src and the rest are zeros, done when a wait lets it
 * complete; commit closes the open group; wait completes all but the
 * `pending` most recent committed groups. */
void cp_async(void *dst, const void *src, size_t n, size_t src_bytes);
void cp_async_commit(void);
void cp_async_wait(int pending);

namespace mma {
inline int lane() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32; }
inline float lo(uint32_t x) { return __uint_as_float(x << 16); }
inline float hi(uint32_t x) { return __uint_as_float(x & 0xffff0000u); }

struct product_args {
    const uint32_t *a, *b;
    float *d;
};

inline void product_all(void *const lanes[32])
{
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const product_args &m = *static_cast<const product_args *>(lanes[l]);
        const int g = l / 4, t = l % 4;
        for (int half = 0; half < 2; half++) { // rows g and g + 8, columns 2t and 2t + 8
            A[g + 8 * half][2 * t] = lo(m.a[half]);
            A[g + 8 * half][2 * t + 1] = hi(m.a[half]);
            A[g + 8 * half][2 * t + 8] = lo(m.a[2 + half]);
            A[g + 8 * half][2 * t + 9] = hi(m.a[2 + half]);
            B[2 * t + 8 * half][g] = lo(m.b[half]);
            B[2 * t + 8 * half + 1][g] = hi(m.b[half]);
            C[g + 8 * half][2 * t] = m.d[2 * half];
            C[g + 8 * half][2 * t + 1] = m.d[2 * half + 1];
        }
    }
    for (int l = 0; l < 32; l++) {
        const product_args &m = *static_cast<const product_args *>(lanes[l]);
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            const int r = g + 8 * (i / 2), c = 2 * t + i % 2;
            float acc = C[r][c];
            for (int k = 0; k < 16; k++)
                acc += A[r][k] * B[k][c];
            m.d[i] = acc;
        }
    }
}

struct ldmatrix_args {
    const void *row;
    uint32_t *r;
};

inline void ldmatrix_trans_all(void *const lanes[32])
{
    unsigned short M[4][8][8]; /* matrix i, row, column: read before any lane's result is written */
    for (int l = 0; l < 32; l++) {
        const ldmatrix_args &m = *static_cast<const ldmatrix_args *>(lanes[l]);
        std::memcpy(M[l / 8][l % 8], m.row, 16);
    }
    for (int l = 0; l < 32; l++) {
        const ldmatrix_args &m = *static_cast<const ldmatrix_args *>(lanes[l]);
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++)
            m.r[i] = (uint32_t)M[i][2 * t][g] | (uint32_t)M[i][2 * t + 1][g] << 16;
    }
}
} // namespace mma
} // namespace tp_emu

inline void tp_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    tp_emu::mma::product_args args = {a, b, d};
    tp_emu::warp_call("mma.sync.m16n8k16", &args, tp_emu::mma::product_all);
}

inline void tp_ldmatrix_x4_trans(uint32_t (&r)[4], const void *row)
{
    if ((uintptr_t)row % 16)
        tp_emu::fail_in_kernel("ldmatrix: row address %p of lane %d is not 16-byte aligned", row, tp_emu::mma::lane());
    tp_emu::mma::ldmatrix_args args = {row, r};
    tp_emu::warp_call("ldmatrix.x4.trans", &args, tp_emu::mma::ldmatrix_trans_all);
}

inline void tp_cp_async_16(void *dst, const void *src, unsigned src_bytes) { tp_emu::cp_async(dst, src, 16, src_bytes); }
inline void tp_cp_async_commit() { tp_emu::cp_async_commit(); }
template <int pending> inline void tp_cp_async_wait() { tp_emu::cp_async_wait(pending); }

#endif /* TP_CUDA_EMU_MMA_H */
