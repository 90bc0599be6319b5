// silu.cuh: SiLU and its derivative in fp32, shared by the activation
// (elementwise.cu), its gradient (elementwise_grad.cu) and the fused
// silu_mul (swiglu.cu), so a fused op computes what the ops it replaces do.
// defines: tp_silu, tp_silu_grad
#ifndef TPRUN_KERNELS_SILU_CUH
#define TPRUN_KERNELS_SILU_CUH

#include "common.cuh"

// x / (1 + e^-x): for x << 0, e^-x is inf and the result -0, the right
// limit, where x * sigmoid(x) would give inf * 0 = NaN
__device__ __forceinline__ float tp_silu(float x) { return x / (1.0f + expf(-x)); }

// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) = 1 / (1 + e^-x): for x << 0,
// s is 0 and the product 0, never inf * 0
__device__ __forceinline__ float tp_silu_grad(float x)
{
    const float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

#endif // TPRUN_KERNELS_SILU_CUH
