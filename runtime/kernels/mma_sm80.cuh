// mma_sm80.cuh: the warp-level tensor-core and copy instructions of sm_80
// that the attention uses, as PTX. Unlike nvcuda::wmma, PTX documents which
// lane holds which element of a fragment, so scores can stay in registers
// from the Q K^T product through the softmax into the P V product.
//
// With g = lane / 4 and t = lane % 4, the fragments of
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type") are:
//   A, 16x16 bf16, 4 registers of 2 values (the lower column in the low half):
//     a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
//     a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
//   B, 16x8 bf16, 2 registers:  b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, +9][g]
//   C and D, 16x8 fp32:         c[0..1] = C[g][2t, 2t+1]   c[2..3] = C[g+8][2t, 2t+1]
// so the C fragments of two adjacent 8-column tiles, rounded to bf16, are
// the A fragment of the 16 columns they cover.
//
// Under TP_CUDA_EMULATION the same functions come from the emulator
// (tests/runtime/cuda_emu/cuda_emu_mma.h), as warp collectives that check
// their preconditions.
// defines: tp_pack_bf16x2, tp_mma_bf16_16816, tp_ldmatrix_x4_trans, tp_cp_async_16, tp_cp_async_commit,
// tp_cp_async_wait
#ifndef TPRUN_KERNELS_MMA_SM80_CUH
#define TPRUN_KERNELS_MMA_SM80_CUH

#include "common.cuh"

#if defined(TP_CUDA_EMULATION)
#include "cuda_emu_mma.h"
#else

// d = a b + d for one 16x8x16 tile
__device__ __forceinline__ void tp_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 bf16 matrices of shared memory, transposed: lanes 8i .. 8i+7
// give the addresses of matrix i's eight rows (16 bytes each, 16-byte
// aligned), and r[i] gets M_i[2t][g] and M_i[2t+1][g], the B fragment
// register of a row-major [k][n] tile.
__device__ __forceinline__ void tp_ldmatrix_x4_trans(uint32_t (&r)[4], const void *row)
{
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// An asynchronous copy of 16 bytes from global to shared memory (both
// 16-byte aligned): the first src_bytes (0 or 16) are read, the rest of
// the 16 are zeros. It belongs to the group the next commit closes.
__device__ __forceinline__ void tp_cp_async_16(void *dst, const void *src, unsigned src_bytes)
{
    const unsigned addr = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void tp_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most `pending` of this thread's committed groups are still
// in flight (the most recent ones). Other threads' copies need a barrier.
template <int pending> __device__ __forceinline__ void tp_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

#endif

// Two floats rounded to bf16 in one register, lo in the low half.
__device__ __forceinline__ uint32_t tp_pack_bf16x2(float lo, float hi)
{
    const uint32_t l = __bfloat16_as_ushort(__float2bfloat16(lo)), h = __bfloat16_as_ushort(__float2bfloat16(hi));
    return l | h << 16;
}

#endif // TPRUN_KERNELS_MMA_SM80_CUH
