/* norm_stats.h: a norm's row statistics, one definition for the forward
 * kernels (backend_cpu.c: rmsnorm, add_rmsnorm, layernorm) and the
 * backward ones (backward.c), which recompute them from the saved input.
 *
 * RMSNorm and LayerNorm both compute y = xhat * w' (+ b) with xhat =
 * (x - mean) * inv, inv = 1 / sqrt(var + eps): RMSNorm is the uncentred
 * case (mean 0, var the mean square). LayerNorm takes two passes (mean,
 * then the mean of squared deviations) rather than E[x^2] - E[x]^2, which
 * cancels badly when |mean| >> std; the variance is the biased one, as in
 * nn.LayerNorm. Sums in double (vec.h). */
#ifndef TPRUN_CPU_NORM_STATS_H
#define TPRUN_CPU_NORM_STATS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include "runtime/backends/cpu/vec.h"

typedef struct tp_row_norm {
    double mean, inv;
} tp_row_norm;

static inline tp_row_norm tp_cpu_norm_stats(const float *xr, int64_t n, float eps, bool centered)
{
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    tp_row_norm st = {0.0, 0.0};
    if (centered)
        st.mean = vec->sum(xr, n) / (double)n;
    st.inv = 1.0 / sqrt(vec->sum_squares(xr, n, st.mean) / (double)n + (double)eps);
    return st;
}

#endif /* TPRUN_CPU_NORM_STATS_H */
