// torchtitan's Llama 3 (models/llama-torchtitan.model) under torchtitan's
// own tensor-parallel plan, pasted from its Python (plans/llama-torchtitan.plan),
// computes models/llama.model's logits on the same weights: a checkpoint
// written once under Hugging Face's names and once under torchtitan's
// (tools/make_checkpoint.py --names torchtitan), the Llama one run at tp 1
// as the reference, the torchtitan one at tp 1, 2 and 4 and with either
// loss_parallel.
#include <gtest/gtest.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using namespace tpcc_test;

namespace {

using tpcc_test::kTpcc;
using tpcc_test::kTprun;
const std::vector<std::string> kEnv = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"};
const std::string kTokens = "5,17,250,3,99,100,0,255,42,42,7,8,9,10,11,12,200,201,13,1,2,3,4,5,6,7,8,9,10,11,12,13";

// The sizes both models take; torchtitan's norm_eps (1e-5) and its RoPE
// without RoPEScalingArgs, so that the two files compute the same function.
const std::vector<std::string> kSizes = {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4",
                                         "ffn=128", "seq=16", "batch=2", "rope_theta=10000.0"};

std::string checkpoint(const TempDir &dir, const std::string &names)
{
    std::string py = python_with_numpy();
    EXPECT_FALSE(py.empty()) << kInstallNumpy;
    std::string out = dir.path + "/" + names + ".safetensors";
    Proc p = run_program(py, {source_path("tools/make_checkpoint.py"), "--family", "llama", "--names", names,
                              "--out", out, "--seed", "3", "--config", "vocab=256", "hidden=64", "layers=2",
                              "heads=8", "kv_heads=4", "ffn=128"});
    EXPECT_EQ(p.code(), 0) << p.describe();
    return out;
}

std::string compile(const TempDir &dir, const std::string &plan, int tp, const std::vector<std::string> &extra)
{
    static int count;
    std::string out = dir.path + "/" + std::to_string(++count) + ".sched";
    std::vector<std::string> args = {source_path(plan), "-o", out, "-D", "tp=" + std::to_string(tp)};
    for (const auto &d : kSizes)
        args.insert(args.end(), {"-D", d});
    for (const auto &d : extra)
        args.insert(args.end(), {"-D", d});
    Proc p = run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    return out;
}

Proc tprun(int ranks, const std::string &sched, std::vector<std::string> args)
{
    std::vector<std::string> a;
    if (ranks > 1)
        a = {"-n", std::to_string(ranks)};
    a.push_back(sched);
    a.insert(a.end(), args.begin(), args.end());
    return run_program(kTprun, a, kEnv, 120);
}

TEST(Torchtitan, SameLogitsAsLlamaOnTheSameWeights)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string hf = checkpoint(dir, "hf"), titan = checkpoint(dir, "torchtitan");
    std::string ref = dir.path + "/llama.npy";
    Proc one = tprun(1, compile(dir, "plans/llama-megatron.plan", 1, {"rms_norm_eps=1e-5"}),
                     {"--weights", hf, "--tokens", kTokens, "--labels", "tokens", "--out", ref, "-q"});
    ASSERT_EQ(one.code(), 0) << one.describe();
    for (const char *loss_parallel : {"loss_parallel=true", "loss_parallel=false"})
        for (int tp : {1, 2, 4}) {
            std::string sched = compile(dir, "plans/llama-torchtitan.plan", tp,
                                        {"use_rope_scaling=false", loss_parallel});
            Proc p = tprun(tp, sched, {"--weights", titan, "--tokens", kTokens, "--compare", ref, "--tolerance", "1e-4"});
            EXPECT_EQ(p.code(), 0) << loss_parallel << " tp=" << tp << "\n" << p.describe();
            EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
        }
}

// torchtitan's plan as pasted: exit status 0, the two keys for the
// Identity q_norm/k_norm reported as PyTorch reports them, nothing else.
TEST(Torchtitan, PlanChecksWithPyTorchsWarningsOnly)
{
    Proc p = run_program(kTpcc, {"--check", source_path("plans/llama-torchtitan.plan")});
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "Parallelize plan key 'q_norm' could not be resolved: no submodule matching token "
                                "'q_norm' in module Attention(...), skipping this plan entry.")) << p.err;
    EXPECT_TRUE(contains(p.err, "2 warnings generated.")) << p.err;
    EXPECT_FALSE(contains(p.err, "error")) << p.err;
}

// The same model with the wrong projection order (torchtitan's w3 is up,
// w2 down) would not match: the test above can fail.
TEST(Torchtitan, SwappedUpAndGateDiffer)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir, variant;
    std::string hf = checkpoint(dir, "hf"), titan = checkpoint(dir, "torchtitan");
    std::string ref = dir.path + "/llama.npy";
    Proc one = tprun(1, compile(dir, "plans/llama-megatron.plan", 1, {"rms_norm_eps=1e-5"}),
                     {"--weights", hf, "--tokens", kTokens, "--labels", "tokens", "--out", ref, "-q"});
    ASSERT_EQ(one.code(), 0) << one.describe();
    std::string model = slurp(source_path("models/llama-torchtitan.model"));
    size_t at = model.find("return w2(silu(w1(x)) * w3(x))");
    ASSERT_NE(at, std::string::npos);
    model.replace(at, 30, "return w2(silu(w3(x)) * w1(x))");
    variant.write("llama-torchtitan.model", model);
    std::string plan = slurp(source_path("plans/llama-torchtitan.plan"));
    at = plan.find("\"../models/llama-torchtitan.model\"");
    ASSERT_NE(at, std::string::npos);
    plan.replace(at, 34, "\"llama-torchtitan.model\"");
    std::string path = variant.write("swapped.plan", plan);
    std::string sched = variant.path + "/swapped.sched";
    std::vector<std::string> args = {path, "-o", sched, "-D", "tp=1", "-D", "use_rope_scaling=false"};
    for (const auto &d : kSizes)
        args.insert(args.end(), {"-D", d});
    ASSERT_EQ(run_program(kTpcc, args).code(), 0);
    Proc p = tprun(1, sched, {"--weights", titan, "--tokens", kTokens, "--compare", ref, "--tolerance", "1e-4"});
    EXPECT_NE(p.code(), 0) << p.describe();
}

}  // namespace
