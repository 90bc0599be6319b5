/* bf16.h: bfloat16 to and from float32, the one rounding of the project.
 *
 * Inline in a header, not a function of tp_util: the CUDA module
 * (tprun_cuda.so) carries none of tprun's libraries, and its host-staged
 * communicator reduces bf16 through float32 with the same rounding the
 * executor and the loader use. */
#ifndef TP_UTIL_BF16_H
#define TP_UTIL_BF16_H

#include <stdint.h>
#include <string.h>

/* exact: a bf16 is the upper half of a float32 */
static inline float tp_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* rounding to nearest even; a NaN stays a quiet NaN */
static inline uint16_t tp_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif /* TP_UTIL_BF16_H */
