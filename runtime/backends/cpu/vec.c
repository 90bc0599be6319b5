/* vec.c: vec.h's loops for each x86 ISA level, and the choice of one.
 *
 * vec_loops.h is included once per level, each copy's functions carrying
 * that level's target attribute, so the compiler vectorises each for its
 * ISA while the rest of the binary stays portable (no -march). The build
 * compiles this file with -O3 (the loop vectoriser), -fno-trapping-math
 * (without it the exp's clamps stay branches and the AVX2 copy does not
 * vectorise) and -ffp-contract=off: an FMA rounds once where a multiply
 * and an add round twice, so the AVX-512 and AVX2 copies would otherwise
 * differ from the baseline's in the last bit (tests/runtime/test_vec.cc
 * compares them). */
#include "runtime/backends/cpu/vec.h"

#include <math.h>
#include <string.h>

#include "runtime/backends/cpu/vexp.h"

/* ------------------------------------------------------------------------ */
/* the element functions, the same in every copy                             */
/* ------------------------------------------------------------------------ */

/* e^a for a double a: the fp32 exp of a rounded to float times e^(a -
 * that) = 1 + (a - that), so that the argument's rounding (up to 1e-6 at
 * |a| ~ 20, a relative error of e^a as large) costs nothing. a is clamped
 * as tp_vexpf clamps, so that the float is finite. */
static inline double exp_of_double(double a)
{
    const double ac = a < -104.0 ? -104.0 : a > 89.0 ? 89.0 : a;
    const float af = (float)ac;
    return (double)tp_vexpf(af) * (1.0 + (ac - (double)af));
}

/* x sigmoid(a) from e = e^-|a| in (0, 1], which never overflows: x / (1 +
 * e) or x e / (1 + e) by a's sign, so that for a << 0 the result is the
 * tiny (or denormal) value it should be, not the -0 of x / (1 + inf); one
 * division. */
static inline double times_sigmoid(double x, double a, double e) { return (a >= 0 ? x : x * e) / (1.0 + e); }

/* x sigmoid(x), in double, so the only fp32 rounding before the result's
 * is the exp's (whose argument, -|x|, is exact) */
static inline float silu1(float x) { return (float)times_sigmoid(x, x, tp_vexpf(-fabsf(x))); }

/* sqrt(2/pi) (x + 0.044715 x^3), in double */
static inline double gelu_tanh_u(double x) { return 0.7978845608028654 * (x + 0.044715 * x * x * x); }

/* 0.5 x (1 + tanh(u)) = x sigmoid(2u): no 1 + tanh(u) to cancel for x << 0 */
static inline float gelu_tanh1(float x)
{
    const double a = 2.0 * gelu_tanh_u(x);
    return (float)times_sigmoid(x, a, exp_of_double(-fabs(a)));
}

/* sigmoid(a) and 1 - sigmoid(a) from e = e^-|a|, neither as a difference
 * that cancels */
typedef struct sigmoid_pair {
    double s, one_minus_s;
} sigmoid_pair;

static inline sigmoid_pair sigmoid_of(double a)
{
    const double e = exp_of_double(-fabs(a)), r = 1.0 / (1.0 + e);
    return (sigmoid_pair){a >= 0 ? r : e * r, a >= 0 ? e * r : r};
}

/* silu' = s (1 + x (1 - s)), s = sigmoid(x) */
static inline float silu_grad1(float x, float dy)
{
    const sigmoid_pair sg = sigmoid_of(x);
    return (float)((double)dy * (sg.s * (1.0 + (double)x * sg.one_minus_s)));
}

/* gelu_new' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u', u' = sqrt(2/pi)
 * (1 + 3 0.044715 x^2), with 1 + tanh u = 2 s and 1 - tanh^2 u = 4 s (1 -
 * s), s = sigmoid(2u) */
static inline float gelu_tanh_grad1(float x, float dy)
{
    const double xd = x;
    const sigmoid_pair sg = sigmoid_of(2.0 * gelu_tanh_u(xd));
    const double grad = sg.s + 2.0 * xd * sg.s * sg.one_minus_s * 0.7978845608028654 *
                        (1.0 + 3.0 * 0.044715 * xd * xd);
    return (float)((double)dy * grad);
}

/* (x - mean) inv w' (+ b), the operations in the order the norms always
 * did them */
static inline float norm1(float x, float w, double mean, double inv, bool unit_offset)
{
    return (float)(((double)x - mean) * inv * (unit_offset ? 1.0 + (double)w : (double)w));
}

static inline float norm_bias1(float x, float w, float b, double mean, double inv)
{
    return (float)(((double)x - mean) * inv * (double)w + (double)b);
}

/* A sum's VEC_LANES partial sums in double, element j in lane j %
 * VEC_LANES: two vectors of 8 (GCC's and clang's vector extension, which
 * each copy maps onto its own registers; an array of 16 doubles is kept in
 * scalar registers instead), added in lane order at the end. */
typedef double vec_d8 __attribute__((vector_size(8 * sizeof(double))));
typedef struct lanes {
    vec_d8 lo, hi;
} lanes;

/* lanes 0 .. VEC_LANES - 1 += v[0 ..] */
static inline void lanes_add(lanes *acc, const double v[VEC_LANES])
{
    vec_d8 lo, hi;
    for (int l = 0; l < 8; l++) {
        lo[l] = v[l];
        hi[l] = v[l + 8];
    }
    acc->lo += lo;
    acc->hi += hi;
}

/* lane l += v, for a sum's tail */
static inline void lane_add(lanes *acc, int l, double v)
{
    if (l < 8)
        acc->lo[l] += v;
    else
        acc->hi[l - 8] += v;
}

static inline double lanes_total(const lanes *acc)
{
    double total = 0.0;
    for (int l = 0; l < 8; l++)
        total += acc->lo[l];
    for (int l = 0; l < 8; l++)
        total += acc->hi[l];
    return total;
}

/* ------------------------------------------------------------------------ */
/* the copies                                                                */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
#define VEC_ISA "avx512f"
#define VEC_TARGET __attribute__((target("avx512f")))
#define VEC_FN(name) name##_avx512f
#include "runtime/backends/cpu/vec_loops.h"
#undef VEC_ISA
#undef VEC_TARGET
#undef VEC_FN

#define VEC_ISA "avx2"
#define VEC_TARGET __attribute__((target("avx2")))
#define VEC_FN(name) name##_avx2
#include "runtime/backends/cpu/vec_loops.h"
#undef VEC_ISA
#undef VEC_TARGET
#undef VEC_FN
#endif

#define VEC_ISA "baseline"
#define VEC_TARGET
#define VEC_FN(name) name##_baseline
#include "runtime/backends/cpu/vec_loops.h"
#undef VEC_ISA
#undef VEC_TARGET
#undef VEC_FN

int tp_cpu_vec_all(const tp_cpu_vec *list[3])
{
    int n = 0;
#if defined(__x86_64__) || defined(__i386__)
    /* __builtin_cpu_supports reads what libgcc's start-up code found */
    if (__builtin_cpu_supports("avx512f"))
        list[n++] = &table_avx512f;
    if (__builtin_cpu_supports("avx2"))
        list[n++] = &table_avx2;
#endif
    list[n++] = &table_baseline;
    return n;
}

const tp_cpu_vec *tp_cpu_vec_host(void)
{
    const tp_cpu_vec *list[3];
    tp_cpu_vec_all(list);
    return list[0];
}
