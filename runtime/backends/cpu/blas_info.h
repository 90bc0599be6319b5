/* blas_info.h: which BLAS the CPU backend runs on, which of its kernels,
 * and whether they are the best this CPU can run (tprun --profile).
 *
 * OpenBLAS picks its kernels ("core") once, at load: from
 * OPENBLAS_CORETYPE when set, else from its own CPU detection. Both can
 * pick a weaker core than the CPU supports: an inherited OPENBLAS_CORETYPE
 * (some environments set Haswell), or a detection that does not know the
 * CPU (OpenBLAS 0.3.21 takes a virtual machine's "Intel Xeon Processor"
 * with AVX-512 for a Prescott, SSE3 only: 28.8 against 153 GFLOP/s). */
#ifndef TPRUN_CPU_BLAS_INFO_H
#define TPRUN_CPU_BLAS_INFO_H

#include <stdbool.h>
#include <stddef.h>

/* the widest vector instructions a CPU, or a BLAS core, uses (ordered) */
typedef enum tp_simd {
    TP_SIMD_UNKNOWN = -1, /* a core name not in the table: no judgement */
    TP_SIMD_SSE,
    TP_SIMD_AVX,
    TP_SIMD_AVX2,         /* with FMA */
    TP_SIMD_AVX512,       /* F, BW, VL and DQ: what OpenBLAS's SkylakeX kernels need */
} tp_simd;

typedef struct tp_cpu_simd {
    tp_simd level;
    bool amd;             /* the core to suggest for AVX2 is Zen, not Haswell */
} tp_cpu_simd;

/* This CPU's, from cpuid (and the OS's register support) */
tp_cpu_simd tp_cpu_simd_detect(void);
/* An OpenBLAS core name's (openblas_get_corename, case ignored) */
tp_simd tp_blas_core_simd(const char *core);
const char *tp_simd_name(tp_simd level);

/* Whether the core OpenBLAS runs is weaker than the CPU supports; if so, a
 * warning that says why (coretype_env: OPENBLAS_CORETYPE, NULL or "" when
 * unset) and the fix is written to msg. A pure function of its
 * arguments. */
bool tp_blas_core_warning(tp_cpu_simd cpu, const char *core, const char *coretype_env, char *msg, size_t len);

/* The BLAS library in use, found at run time: "OpenBLAS 0.3.21 ... (core
 * Prescott)", or a line saying it is not OpenBLAS. Writes a warning as
 * tp_blas_core_warning's into warn ("" when none). */
void tp_blas_describe(char *line, size_t linelen, char *warn, size_t warnlen);

#endif /* TPRUN_CPU_BLAS_INFO_H */
