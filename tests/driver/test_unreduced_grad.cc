// The unreduced-grad check (tpcc --train): a replicated weight whose
// gradient each rank only computes its share of, held by PyTorch as a plain
// tensor. The shipped plans train without it at -O0 and -O1; the bad plans
// (tests/bad/train-unreduced-grad*.plan, whose expectations BadPlan checks)
// name the weight, the sharded input and the fix; every mode of --train
// reports it.
#include <gtest/gtest.h>
#include <string>
#include <vector>
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using namespace tpcc_test;

namespace {

const std::string kBad = source_path("tests/bad/train-unreduced-grad.plan");

std::vector<std::string> shipped_plans()
{
    std::vector<std::string> v = files_in("plans", ".plan");
    for (const auto &p : files_in("plans/hf", ".plan"))
        v.push_back(p);
    return v;
}

int unreduced(const tp_unit &u)
{
    int n = 0;
    for (int i = 0; i < u.diags.count; i++)
        n += std::string(u.diags.items[i].check) == "unreduced-grad";
    return n;
}

// Every shipped plan (the SP ones: norms, Qwen3's q/k norms under
// SequenceParallel; Hugging Face's with "replicated_with_grad_allreduce")
// leaves PyTorch no weight with an unsummed gradient, and what --train
// reports does not depend on the optimisation level.
TEST(UnreducedGrad, ShippedPlansHaveNoneAtO0AndO1)
{
    for (const auto &plan : shipped_plans()) {
        tp_unit a, b;
        std::vector<const char *> none;
        tp_compile_opts o1 = {none.data(), 0, nullptr, true, TP_F32, true, true, TP_LOSS_NONE, nullptr, 0, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
        tp_compile_opts o0 = {none.data(), 0, nullptr, false, TP_F32, true, true, TP_LOSS_NONE, nullptr, 0, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
        tp_compile(&a, plan.c_str(), &o1);
        tp_compile(&b, plan.c_str(), &o0);
        EXPECT_EQ(unreduced(a), 0) << plan << "\n" << rendered(&a);
        EXPECT_EQ(rendered(&a), rendered(&b)) << plan;
        tp_unit_free(&a);
        tp_unit_free(&b);
    }
}

// The message says which weight, which sharded tensor it meets, and how
// PyTorch would sum its gradient.
TEST(UnreducedGrad, NamesTheWeightTheShardedInputAndTheFix)
{
    Proc r = run_tpcc({"--check", "--train", kBad});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "'model.norm.weight' is a plain tensor in PyTorch")) << r.err;
    EXPECT_TRUE(contains(r.err, "'model.layers.0.input_layernorm' runs on 'model.embed_tokens.reduce_scatter', "
                                "which is Shard(1)")) << r.err;
    EXPECT_TRUE(contains(r.err, "put SequenceParallel()")) << r.err;
}

// Only a training step has the check: the forward plan is fine, and -o and
// --report with --train refuse it as --check --train does.
TEST(UnreducedGrad, OnlyUnderTrainAndInEveryTrainMode)
{
    EXPECT_EQ(run_tpcc({"--check", kBad}).code(), 0);
    TempDir dir;
    for (std::vector<std::string> mode : {std::vector<std::string>{"-o", dir.path + "/s.json"},
                                          std::vector<std::string>{"--report"}}) {
        mode.push_back("--train");
        mode.push_back(kBad);
        Proc r = run_tpcc(mode);
        EXPECT_NE(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(r.err, "[unreduced-grad]")) << r.describe();
    }
}

}  // namespace
