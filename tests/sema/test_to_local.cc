// to_local(x, grad_placements=(...)) in a forward body: its arguments, a
// plain tensor refused as PyTorch refuses it, and its gradient label
// checked under --train against what the ops on the local tensor make the
// gradient, on tests/models/local_mlp.model with its to_local() line
// replaced (tests/plans/local-mlp.plan's hook-less projections; or the MLP
// run replicated on a sequence shard).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"
#include "tests/support/train_harness.h"

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

namespace {

const char *const kCall = "to_local(x, grad_placements=(Partial(),))";

// The hook-less plan of tests/plans/local-mlp.plan; the sequence-sharded
// one hands the MLP its input as a Shard(1) DTensor and shards nothing
// (the replicated weights' gradients summed as transformers does).
const char *const kSequencePlan = R"(model "local_mlp.model"
config { tp = 2 }
mesh(tp = tp)
parallelize "" {
    "mlp": PrepareModuleInputOutput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                    use_local_input=False, output_layouts=(Shard(1),),
                                    desired_output_layouts=(Replicate(),)),
    "mlp.up": "replicated_with_grad_allreduce",
    "mlp.down": "replicated_with_grad_allreduce",
}
)";

// tpcc's result on the model with `call` in place of the to_local() call,
// under `plan` (the hook-less one when empty).
Proc compile(const std::string &call, const std::vector<std::string> &flags, const std::string &plan = "")
{
    TempDir d;
    std::string model = tpcc_test::slurp(tpcc_test::source_path("tests/models/local_mlp.model"));
    tpcc_test::replace_once(model, kCall, call);
    d.write("local_mlp.model", model);
    std::string text = plan;
    if (text.empty()) {
        text = tpcc_test::slurp(tpcc_test::source_path("tests/plans/local-mlp.plan"));
        tpcc_test::replace_once(text, "../models/local_mlp.model", "local_mlp.model");
    }
    std::vector<std::string> args = {"--check", d.write("p.plan", text)};
    args.insert(args.end(), flags.begin(), flags.end());
    return tpcc_test::run_tpcc(args);
}

TEST(ToLocal, ArgumentsAsPyTorchTakesThem)
{
    const std::pair<const char *, const char *> bad[] = {
        {"to_local(x, grad_placements=Partial())", "grad_placements is a tuple of placements"},
        {"to_local(x, grad_placements=(Partial(), Replicate()))", "exactly one placement"},
        {"to_local(x, grad_placements=(Shard(3),))", "Shard dimension out of range"},
        {"to_local(x, grad_placements=(Shard(dim=3),))", "Shard dimension out of range"},
        {"to_local(x, grad_placements=(Shard(dims=1),))", "holds Replicate(), Shard(dim) or Partial()"},
        {"to_local(x, grad_placements=(Partial(reduce_op=\"max\"),))", "tpcc models Partial sums only"},
        {"to_local(x, grad_placements=(Sum(),))", "holds Replicate(), Shard(dim) or Partial()"},
        {"to_local(x, placements=(Partial(),))", "to_local() has one keyword: grad_placements"},
        {"to_local(x, x)", "takes the DTensor and a keyword only"},
        {"to_local(to_local(x))", "to_local() of a plain tensor: it is no DTensor here (PyTorch raises "
                                  "AttributeError: 'Tensor' object has no attribute 'to_local')"},
    };
    for (const auto &[call, message] : bad) {
        Proc r = compile(call, {});
        EXPECT_EQ(r.code(), 1) << call << "\n" << r.describe();
        EXPECT_TRUE(contains(r.err, message)) << call << "\n" << r.err;
    }
    EXPECT_EQ(compile("to_local(x, grad_placements=None)", {}).code(), 0);
}

// A forward step has no gradient to label; one rank's share is the whole.
TEST(ToLocal, LabelCheckedOnlyWhenTrainingOnRanks)
{
    EXPECT_EQ(compile("to_local(x)", {}).code(), 0);
    EXPECT_EQ(compile("to_local(x)", {"--train", "-D", "tp=1"}).code(), 0);
    EXPECT_EQ(compile(kCall, {"--train"}).code(), 0);
    for (const char *call : {"to_local(x)", "to_local(x, grad_placements=(Replicate(),))",
                             "to_local(x, grad_placements=(Shard(1),))"}) {
        Proc r = compile(call, {"--train", "-D", "tp=4"});
        EXPECT_EQ(r.code(), 1) << call;
        EXPECT_TRUE(contains(r.err, "[partial-grad]")) << call << "\n" << r.err;
        EXPECT_FALSE(contains(r.err, "\"local_colwise\" (transformers 4.56")) << "one finding, at the call\n" << r.err;
    }
}

// The local tensor of a Shard(1) DTensor run through replicated weights:
// each rank's gradient is its shard of the whole, the default label.
// PyTorch raises on Replicate() (the gradient's shape) and on Partial().
TEST(ToLocal, ShardedInputKeepsItsShardLabel)
{
    EXPECT_EQ(compile("to_local(x)", {"--train"}, kSequencePlan).code(), 0);
    EXPECT_EQ(compile("to_local(x, grad_placements=(Shard(1),))", {"--train"}, kSequencePlan).code(), 0);
    for (const char *p : {"Replicate()", "Partial()", "Shard(2)"}) {
        Proc r = compile(std::string("to_local(x, grad_placements=(") + p + ",))", {"--train"}, kSequencePlan);
        EXPECT_EQ(r.code(), 1) << p;
        EXPECT_TRUE(contains(r.err, "is Shard(1), its shard of the whole gradient")) << p << "\n" << r.err;
        EXPECT_TRUE(contains(r.err, "[grad-placements]")) << p << "\n" << r.err;
    }
}

}  // namespace
