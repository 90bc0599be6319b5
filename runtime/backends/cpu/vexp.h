/* vexp.h: e^x in fp32 written so that a loop calling it vectorises: no
 * libm call, no branch, no table; every special case is a select.
 *
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split in a
 * part with 9 significant bits, so n ln2_hi is exact for |n| < 2^15, and
 * the rest: Cody and Waite), e^r by Cephes' expf polynomial (degree 7,
 * minimax on that interval), then times 2^n built in the exponent bits, in
 * two halves so that 2^n's below 2^-126 (the denormal results) and up to
 * 2^128 (overflow to inf) need no other path. x is clamped to [-104, 89]
 * first: beyond it e^x rounds to 0 or to inf in fp32 anyway, and n stays
 * small. -inf gives 0, +inf gives inf, NaN gives NaN.
 *
 * Error: within 1 ulp of e^x (in double) over every float, the denormal
 * results included (tests/runtime/test_vec.cc sweeps them). Only
 * additions, multiplications and exact bit operations: the result is the
 * same on every ISA provided the multiply-adds are not fused, which
 * vec.c's build (-ffp-contract=off) ensures. */
#ifndef TPRUN_CPU_VEXP_H
#define TPRUN_CPU_VEXP_H

#include <stdint.h>
#include <string.h>

static inline float tp_vexpf(float x)
{
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    /* clamped (NaN passes through both selects unchanged) */
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    /* n = round(xc log2e), as a float and, from t's low mantissa bits, as an int */
    const float t = xc * log2e + round_magic;
    const float n = t - round_magic;
    uint32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    const int32_t ni = (int32_t)(tbits - 0x4b400000u); /* t's bits minus round_magic's: n */
    const float r = (xc - n * ln2_hi) - n * ln2_lo;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    /* 2^n = 2^n1 2^n2, n1 = floor(n / 2), each in [-75, 65]: a normal float */
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    const float e = p * s1 * s2;
    return x != x ? x : e;
}

#endif /* TPRUN_CPU_VEXP_H */
