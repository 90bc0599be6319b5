// rope.cuh: rope's rotation of one pair, and its cos and sin, shared by the
// rope kernel (rope.cu) and by the attention kernels that rotate q and k
// as they read them (attention_flash.cuh, attention_flash_grad.cuh): both
// paths compute the same bits, so moving rope into attention (tpcc -O1)
// changes none.
// defines: rope_cos_sin, rope_rotate, rope_back, rope_unpack_lo, rope_unpack_hi, rope_rotate_words
#ifndef TPRUN_KERNELS_ROPE_CUH
#define TPRUN_KERNELS_ROPE_CUH

#include "common.cuh"
#include "mma_sm80.cuh"

// cos and sin of pos * inv_freq, times scale (yarn's attention_factor).
// The angle and its sin/cos are double, as on the CPU: in float, p f at
// p ~ 8k is off by ~5e-4 rad. sincospi(ang / pi): its argument reduction
// is exact and needs no local memory, where sin/cos carry a slow path for
// huge angles.
__device__ __forceinline__ void rope_cos_sin(double pos, double inv_freq, double scale, float &c, float &sn)
{
    const double turns = pos * inv_freq / 3.141592653589793;
    double sd, cd;
    sincospi(turns, &sd, &cd);
    c = (float)(cd * scale);
    sn = (float)(sd * scale);
}

// The pair (x1, x2) rotated: (x1 c - x2 sn, x2 c + x1 sn), each product
// and sum rounded on its own, so that no kernel's contraction into fma
// changes a bit between the paths that share it.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float sn, float &o1, float &o2)
{
    o1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, sn));
    o2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn));
}

// The element of a pair that `own` is (the second half's if `second`,
// `other` its partner), rotated back: rope's inverse, by minus the angle
// (cos stays, sin flips), as rope with negated frequencies computes it.
__device__ __forceinline__ float rope_back(float own, float other, float2 cs, bool second)
{
    float o1, o2;
    if (second) {
        rope_rotate(other, own, cs.x, -cs.y, o1, o2);
        return o2;
    }
    rope_rotate(own, other, cs.x, -cs.y, o1, o2);
    return o1;
}

__device__ __forceinline__ float rope_unpack_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float rope_unpack_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Two pairs at once, as the tensor-core kernels hold bf16 (two consecutive
// elements a 32-bit word): w1 the first halves' elements j and j + 1, w2
// their partners, cs their (cos, sin) one after the other.
__device__ __forceinline__ void rope_rotate_words(uint32_t &w1, uint32_t &w2, float4 cs)
{
    float a0, a1, b0, b1;
    rope_rotate(rope_unpack_lo(w1), rope_unpack_lo(w2), cs.x, cs.y, a0, b0);
    rope_rotate(rope_unpack_hi(w1), rope_unpack_hi(w2), cs.z, cs.w, a1, b1);
    w1 = tp_pack_bf16x2(a0, a1);
    w2 = tp_pack_bf16x2(b0, b1);
}

#endif // TPRUN_KERNELS_ROPE_CUH
