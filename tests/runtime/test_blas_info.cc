// tprun --profile's BLAS report (runtime/backends/cpu/blas_info.h): the
// decision whether OpenBLAS's core is weaker than the CPU, as a pure
// function of the CPU's vector level, the core name and OPENBLAS_CORETYPE;
// and what a run prints.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "runtime/backends/cpu/blas_info.h"
#include "runtime/backends/cpu/vec.h"
}

#include "tests/support/process.h"

namespace {

using tpcc_test::contains;

const tp_cpu_simd kAvx512 = {TP_SIMD_AVX512, false}, kIntelAvx2 = {TP_SIMD_AVX2, false},
                  kZen = {TP_SIMD_AVX2, true}, kSse = {TP_SIMD_SSE, false};

std::string warning(tp_cpu_simd cpu, const char *core, const char *env)
{
    char msg[600];
    bool warned = tp_blas_core_warning(cpu, core, env, msg, sizeof msg);
    EXPECT_EQ(warned, msg[0] != '\0') << "a warning comes with its message, and only then";
    return msg;
}

TEST(BlasCore, DetectionWeakerThanTheCpuWarnsWithTheFix)
{
    // OpenBLAS 0.3.21 on an AVX-512 Xeon VM: Prescott
    std::string w = warning(kAvx512, "Prescott", nullptr);
    EXPECT_TRUE(contains(w, "detected this CPU as Prescott")) << w;
    EXPECT_TRUE(contains(w, "AVX-512")) << w;
    EXPECT_TRUE(contains(w, "set OPENBLAS_CORETYPE=SkylakeX")) << w;
    // an empty variable is an unset one
    EXPECT_EQ(warning(kAvx512, "Prescott", ""), w);
    // AMD with AVX2 gets Zen, Intel Haswell
    EXPECT_TRUE(contains(warning(kZen, "Sandybridge", nullptr), "OPENBLAS_CORETYPE=Zen"));
    EXPECT_TRUE(contains(warning(kIntelAvx2, "Nehalem", nullptr), "OPENBLAS_CORETYPE=Haswell"));
}

TEST(BlasCore, ForcedWeakerCoreNamesTheVariable)
{
    std::string w = warning(kAvx512, "Haswell", "Haswell");
    EXPECT_TRUE(contains(w, "OPENBLAS_CORETYPE=Haswell makes OpenBLAS run its Haswell kernels (AVX2)")) << w;
    EXPECT_TRUE(contains(w, "set OPENBLAS_CORETYPE=SkylakeX")) << w;
}

TEST(BlasCore, MatchingOrUnknownCoresAreQuiet)
{
    EXPECT_EQ(warning(kAvx512, "SkylakeX", nullptr), "");
    EXPECT_EQ(warning(kAvx512, "skylakex", "skylakex"), "");    // OpenBLAS takes any case
    EXPECT_EQ(warning(kAvx512, "Cooperlake", nullptr), "");
    EXPECT_EQ(warning(kZen, "Zen", nullptr), "");
    EXPECT_EQ(warning(kIntelAvx2, "Haswell", nullptr), "");
    EXPECT_EQ(warning(kSse, "Prescott", nullptr), "");           // nothing better to run
    EXPECT_EQ(warning(kAvx512, "SomeFutureCore", nullptr), "");  // no judgement on a name not in the table
    EXPECT_EQ(warning(kAvx512, nullptr, nullptr), "");
}

TEST(BlasCore, CoreNamesByVectorLevel)
{
    EXPECT_EQ(tp_blas_core_simd("SkylakeX"), TP_SIMD_AVX512);
    EXPECT_EQ(tp_blas_core_simd("HASWELL"), TP_SIMD_AVX2);
    EXPECT_EQ(tp_blas_core_simd("Sandybridge"), TP_SIMD_AVX);
    EXPECT_EQ(tp_blas_core_simd("Prescott"), TP_SIMD_SSE);
    EXPECT_EQ(tp_blas_core_simd("Unknown"), TP_SIMD_UNKNOWN);
}

// This build links OpenBLAS: the report names it and its core.
TEST(BlasCore, DescribesTheLinkedOpenBlas)
{
    char line[600], warn[600];
    tp_blas_describe(line, sizeof line, warn, sizeof warn);
    EXPECT_TRUE(contains(line, "OpenBLAS")) << line;
    EXPECT_TRUE(contains(line, "(core ")) << line;
}

// tprun --profile prints the line; a core forced below the CPU's level
// (Prescott on any CPU with AVX) is warned about on stderr.
TEST(BlasCore, ProfilePrintsTheLibraryAndWarnsAboutAForcedWeakCore)
{
    tpcc_test::TempDir d;
    const std::string sched = d.path + "/t.sched";
    tpcc_test::Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "-o", sched, "-D",
                                            "tp=1", "-D", "vocab=128", "-D", "hidden=32", "-D", "layers=1", "-D",
                                            "heads=4", "-D", "kv_heads=2", "-D", "ffn=64", "-D", "seq=8"});
    ASSERT_EQ(c.code(), 0) << c.describe();
    const std::string &tprun = tpcc_test::kTprun;
    tpcc_test::Proc r =
        tpcc_test::run_program(tprun, {sched, "--labels", "tokens", "--profile", "-q"}, {"OPENBLAS_CORETYPE=Prescott"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "profile: BLAS OpenBLAS")) << r.out;
    EXPECT_TRUE(contains(r.out, "(core Prescott)")) << r.out;
    EXPECT_TRUE(contains(r.out, std::string("; CPU loops ") + tp_cpu_vec_host()->isa + ";")) << r.out;
    if (tp_cpu_simd_detect().level > TP_SIMD_SSE) {
        EXPECT_TRUE(contains(r.err, "warning: OPENBLAS_CORETYPE=Prescott makes OpenBLAS run its Prescott kernels"))
            << r.err;
    }
}

}  // namespace
