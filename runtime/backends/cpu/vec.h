/* vec.h: the CPU backend's vectorised loops (exp and what uses it, the
 * row reductions of the norms and softmaxes, the adds), compiled once per x86 ISA
 * level (AVX-512, AVX2, the baseline) in vec.c and picked for the host at
 * run time, so a portable binary runs AVX-512 code where the CPU has it.
 *
 * Every variant computes the same bits: the element functions use only
 * IEEE additions, multiplications, divisions, conversions and selects
 * (tp_vexpf, vexp.h), vec.c is built without contracting a * b + c into
 * an FMA (-ffp-contract=off), and the sums are split into VEC_LANES
 * partial sums in a fixed order (element j into lane j % VEC_LANES, the
 * lanes added in order at the end) whatever the vector width. So results
 * depend neither on the CPU nor on --threads (the callers split rows, not
 * these sums). The sums accumulate in double, as the backend's header
 * comment asks of every reduction that grows with the model. */
#ifndef TPRUN_CPU_VEC_H
#define TPRUN_CPU_VEC_H

#include <stdbool.h>
#include <stdint.h>

#define VEC_LANES 16

typedef struct tp_cpu_vec {
    const char *isa; /* "avx512f", "avx2", "baseline" */
    /* out[i] = x / (1 + e^-x), in place allowed */
    void (*silu)(float *out, const float *x, int64_t n);
    /* GPT-2's gelu_new, 0.5 x (1 + tanh(u)) = x / (1 + e^-2u),
     * u = sqrt(2/pi) (x + 0.044715 x^3); in place allowed */
    void (*gelu_tanh)(float *out, const float *x, int64_t n);
    /* dx = dy * f'(x) for SiLU and gelu_new, in place allowed */
    void (*silu_grad)(float *dx, const float *x, const float *dy, int64_t n);
    void (*gelu_tanh_grad)(float *dx, const float *x, const float *dy, int64_t n);
    /* out[j] = x[j] + s * b[j] (a bias row; s = 1 gives the bits of x + b,
     * 1 * b being b); in place allowed */
    void (*add_scaled)(float *out, const float *x, const float *b, int64_t n, float s);
    /* max over x[0, n) (NaNs skipped); -inf for n = 0 */
    float (*max)(const float *x, int64_t n);
    /* out[j] = e^(x[j] - shift) (out may be x; NULL: not stored); returns
     * the sum of the out[j] */
    double (*exp_sum)(float *out, const float *x, int64_t n, float shift);
    /* the sum of e^(x[j] - shift), and into *dot that of e^(x[j] - shift) y[j] */
    double (*exp_dot)(const float *x, const float *y, int64_t n, float shift, double *dot);
    /* the sum of x[j] and that of (x[j] - mean)^2 */
    double (*sum)(const float *x, int64_t n);
    double (*sum_squares)(const float *x, int64_t n, double mean);
    /* a norm's row: out[j] = (x[j] - mean) inv w'[j] (+ b[j] unless b is
     * NULL), w' = 1 + w (unit_offset) or w, in double; in place allowed */
    void (*norm_row)(float *out, const float *x, const float *w, const float *b, int64_t n, double mean, double inv,
                     bool unit_offset);
} tp_cpu_vec;

/* The variant for this CPU: the widest it supports. */
const tp_cpu_vec *tp_cpu_vec_host(void);

/* The variants this CPU can run, widest first, into list; returns how many
 * (at most 3). For tests: they must agree bit for bit. */
int tp_cpu_vec_all(const tp_cpu_vec *list[3]);

#endif /* TPRUN_CPU_VEC_H */
