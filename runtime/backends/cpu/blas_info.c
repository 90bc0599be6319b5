/* blas_info.c: see blas_info.h. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "runtime/backends/cpu/blas_info.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

tp_cpu_simd tp_cpu_simd_detect(void)
{
    tp_cpu_simd cpu = {TP_SIMD_SSE, false};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        cpu.level = TP_SIMD_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cpu.level = TP_SIMD_AVX2;
    else if (__builtin_cpu_supports("avx"))
        cpu.level = TP_SIMD_AVX;
    cpu.amd = __builtin_cpu_is("amd");
    return cpu;
}

/* OpenBLAS's x86-64 core names (driver/others/dynamic.c) by the kernels
 * they run; the Bulldozer family's AVX kernels count as AVX. */
static const struct {
    const char *name;
    tp_simd level;
} cores[] = {
    {"SapphireRapids", TP_SIMD_AVX512}, {"Cooperlake", TP_SIMD_AVX512}, {"SkylakeX", TP_SIMD_AVX512},
    {"Haswell", TP_SIMD_AVX2},          {"Zen", TP_SIMD_AVX2},          {"Excavator", TP_SIMD_AVX2},
    {"Sandybridge", TP_SIMD_AVX},       {"Bulldozer", TP_SIMD_AVX},     {"Piledriver", TP_SIMD_AVX},
    {"Steamroller", TP_SIMD_AVX},       {"Nehalem", TP_SIMD_SSE},       {"Dunnington", TP_SIMD_SSE},
    {"Penryn", TP_SIMD_SSE},            {"Core2", TP_SIMD_SSE},         {"Atom", TP_SIMD_SSE},
    {"Prescott", TP_SIMD_SSE},          {"Northwood", TP_SIMD_SSE},     {"Coppermine", TP_SIMD_SSE},
    {"Katmai", TP_SIMD_SSE},            {"Banias", TP_SIMD_SSE},        {"Barcelona", TP_SIMD_SSE},
    {"Opteron_SSE3", TP_SIMD_SSE},      {"Opteron", TP_SIMD_SSE},       {"Athlon", TP_SIMD_SSE},
    {"Nano", TP_SIMD_SSE},
};

tp_simd tp_blas_core_simd(const char *core)
{
    for (size_t i = 0; core && i < sizeof cores / sizeof *cores; i++)
        if (!strcasecmp(core, cores[i].name))
            return cores[i].level;
    return TP_SIMD_UNKNOWN;
}

const char *tp_simd_name(tp_simd level)
{
    switch (level) {
    case TP_SIMD_SSE: return "SSE";
    case TP_SIMD_AVX: return "AVX";
    case TP_SIMD_AVX2: return "AVX2";
    case TP_SIMD_AVX512: return "AVX-512";
    default: return "unknown";
    }
}

/* The strongest core OpenBLAS 0.3.21 has for the CPU's level. */
static const char *suggested_core(tp_cpu_simd cpu)
{
    switch (cpu.level) {
    case TP_SIMD_AVX512: return "SkylakeX";
    case TP_SIMD_AVX2: return cpu.amd ? "Zen" : "Haswell";
    case TP_SIMD_AVX: return "Sandybridge";
    default: return NULL;
    }
}

bool tp_blas_core_warning(tp_cpu_simd cpu, const char *core, const char *coretype_env, char *msg, size_t len)
{
    const tp_simd have = tp_blas_core_simd(core);
    const char *fix = suggested_core(cpu);
    msg[0] = '\0';
    if (have == TP_SIMD_UNKNOWN || have >= cpu.level || !fix)
        return false;
    if (coretype_env && *coretype_env)
        snprintf(msg, len,
                 "OPENBLAS_CORETYPE=%s makes OpenBLAS run its %s kernels (%s), but this CPU supports %s: "
                 "set OPENBLAS_CORETYPE=%s, or unset it",
                 coretype_env, core, tp_simd_name(have), tp_simd_name(cpu.level), fix);
    else
        snprintf(msg, len,
                 "OpenBLAS detected this CPU as %s and runs %s kernels, but the CPU supports %s: "
                 "set OPENBLAS_CORETYPE=%s",
                 core, tp_simd_name(have), tp_simd_name(cpu.level), fix);
    return true;
}

/* OpenBLAS's own queries, looked up at run time: the BLAS the program
 * runs on is whichever library the loader chose (libblas.so.3 is an
 * alternative on Debian), not necessarily the one it was linked with. */
void tp_blas_describe(char *line, size_t linelen, char *warn, size_t warnlen)
{
    char *(*config)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_config");
    char *(*corename)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    warn[0] = '\0';
    if (!config || !corename) {
        snprintf(line, linelen, "not OpenBLAS (openblas_get_config not found): kernels unknown");
        return;
    }
    const char *core = corename();
    snprintf(line, linelen, "%s (core %s)", config(), core);
    tp_blas_core_warning(tp_cpu_simd_detect(), core, getenv("OPENBLAS_CORETYPE"), warn, warnlen);
}
