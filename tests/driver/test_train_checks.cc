// The training-only checks beside unreduced-grad: partial-grad (a
// gradient each rank holds a share of, carried on as whole), grad-placements
// (to_local()'s label of a whole gradient wrong), data-split
// (train { sampler_dims } handing the ranks of a tp group different
// batches), grad-clip (train { max_grad_norm } over parameters
// clip_grad_norm_ cannot take together). The bad plans are tests/bad/train-*.plan (BadPlan checks their
// expectations and FixableBadPlan that their fix-its remove the errors);
// their fixes are tests/good/train-*.plan, which train with the warnings
// they state and nothing else.
#include <gtest/gtest.h>
#include <fstream>
#include <string>
#include <vector>
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using namespace tpcc_test;

namespace {

// Every good plan compiles to a training schedule with exactly the
// findings it states.
TEST(TrainChecks, GoodPlansTrainWithTheirStatedFindingsOnly)
{
    std::vector<std::string> good = files_in("tests/good", ".plan");
    ASSERT_GE(good.size(), 2u);
    TempDir dir;
    for (const auto &plan : good) {
        tp_unit u;
        compile(&u, plan, {}, true);
        EXPECT_EQ(findings(&u), expectations(plan)) << plan << "\n" << rendered(&u);
        tp_unit_free(&u);
        Proc r = run_tpcc({"--train", plan, "-o", dir.path + "/s.sched"});
        EXPECT_EQ(r.code(), 0) << r.describe();
    }
}

// A hook-less local style is fine for a forward step (inference); only a
// training step has the unsummed gradient.
TEST(TrainChecks, PartialGradOnlyUnderTrain)
{
    const std::string bad = source_path("tests/bad/train-partial-grad.plan");
    EXPECT_EQ(run_tpcc({"--check", bad}).code(), 0);
    Proc r = run_tpcc({"--check", "--train", bad});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "\"local_colwise\" (transformers 4.56: ColwiseParallel(use_dtensor=False)) has no "
                                "hook")) << r.err;
    EXPECT_TRUE(contains(r.err, "Partial(sum)")) << r.err;
    EXPECT_TRUE(contains(r.err, "to_local(grad_placements=[Partial()])")) << r.err;
}

// to_local()'s gradient label: only a training step has a gradient, and
// the finding is at the call in the model, in every output format.
TEST(TrainChecks, ToLocalGradPlacementsAtTheModelCall)
{
    const std::string bad = source_path("tests/bad/train-to-local-default-label.plan");
    EXPECT_EQ(run_tpcc({"--check", bad}).code(), 0);
    EXPECT_EQ(run_tpcc({"--check", "--train", bad, "-D", "tp=1"}).code(), 0);   // one rank's share is the whole
    Proc r = run_tpcc({"--check", "--train", bad});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "local_mlp_default_label.model:32:29: error: a gradient left Partial but treated as "
                                "Replicate()")) << r.err;
    EXPECT_TRUE(contains(r.err, "to_local(..., grad_placements=(Partial(),))")) << r.err;

    Proc j = run_tpcc({"--check", "--train", "--diagnostics-format=json", bad});
    EXPECT_EQ(j.code(), 1) << j.describe();
    EXPECT_TRUE(contains(j.out, "\"check\": \"partial-grad\"")) << j.out;
    EXPECT_TRUE(contains(j.out, "tests/bad/local_mlp_default_label.model\",\n      \"line\": 32,\n"
                                "      \"column\": 29,")) << j.out;

    const std::string whole = source_path("tests/bad/train-to-local-whole-as-partial.plan");
    Proc s = run_tpcc({"--check", "--train", "--diagnostics-format=sarif", whole});
    EXPECT_EQ(s.code(), 1) << s.describe();
    EXPECT_TRUE(contains(s.out, "\"ruleId\": \"grad-placements\"")) << s.out;
    EXPECT_TRUE(contains(s.out, "models/local_mlp.model")) << s.out;
    EXPECT_TRUE(contains(s.out, "\"startLine\": 40")) << s.out;
}

// A plan on `mesh` whose one block is on the mesh's "tp", and `train`.
std::string write_plan(const TempDir &dir, const std::string &mesh, const std::string &train)
{
    std::string path = dir.path + "/p.plan";
    std::ofstream f(path);
    f << "model \"" << source_path("models/llama.model") << "\"\nconfig { tp = 2 }\n" << mesh << "\n"
      << "parallelize \"\" on \"tp\" { \"model.embed_tokens\": RowwiseParallel(input_layouts=Replicate()) }\n"
      << train << "\n";
    return path;
}

// On a tp-only mesh the data must not be split at all: the fix is the
// empty tuple. Splitting over dp only is the default and what tprun does.
TEST(TrainChecks, DataSplitOnATpOnlyMeshWantsNoSplit)
{
    TempDir dir;
    Proc r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { sampler_dims = \"tp\" }")});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "[data-split]")) << r.err;
    EXPECT_TRUE(contains(r.err, "sampler_dims = () (every rank reads the same batch)")) << r.err;
    EXPECT_EQ(run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { sampler_dims = () }")}).code(), 0);
    EXPECT_EQ(run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "")}).code(), 0);
}

// Leaving a data-parallel dimension out works in PyTorch (a warning): the
// replicas repeat each other.
TEST(TrainChecks, DataSplitWarnsOfReplicasReadingTheSameBatches)
{
    TempDir dir;
    Proc r = run_tpcc({"--check", "--train", write_plan(dir, "mesh(dp = 2, tp = tp)", "train { sampler_dims = () }")});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "warning: sampler_dims leaves out the data-parallel dimension 'dp': its 2 replicas "
                                "read the same batches")) << r.err;
    EXPECT_TRUE(contains(r.err, "[data-split]")) << r.err;
}

// train { } names only what it knows, and belongs in the plan.
TEST(TrainChecks, TrainBlockRefusesWhatItDoesNotKnow)
{
    TempDir dir;
    Proc r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { sampler_dim = \"tp\" }")});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "train { } has no key 'sampler_dim'")) << r.err;
    EXPECT_TRUE(contains(r.err, "did you mean 'sampler_dims'?")) << r.err;
    r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { sampler_dims = 2 }")});
    EXPECT_TRUE(contains(r.err, "sampler_dims names mesh dimensions")) << r.err;
    r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { sampler_dims = \"dp\" } train { }")});
    EXPECT_TRUE(contains(r.err, "sampler_dims names 'dp', which is no dimension of the mesh")) << r.err;
    EXPECT_TRUE(contains(r.err, "the plan has a train { } block already")) << r.err;
}

// --export writes the parallelize plan; the train { } block has no place
// in either format, and is not dropped unseen.
TEST(TrainChecks, ExportSaysTheTrainBlockIsNotCarried)
{
    // (transformers' tp_plan has no SequenceParallel: the hf export takes the Megatron-style plan, one replica)
    for (const std::vector<std::string> &args :
         {std::vector<std::string>{"--export", "pytorch", source_path("tests/good/train-grad-clip.plan")},
          std::vector<std::string>{"--export", "hf", source_path("tests/good/train-data-split.plan"), "-D", "dp=1"}}) {
        Proc r = run_tpcc(args);
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(r.err, "warning: the export carries the parallelize plan only, not train { }")) << r.err;
        EXPECT_TRUE(contains(r.err, "as the block says [export]")) << r.err;
    }
}

// Mixed DTensor and plain parameters: torch's own error, the first of each
// kind, where the plain ones come from, and what makes them DTensors. One
// device has nothing to mix.
TEST(TrainChecks, GradClipNamesBothKindsOfParameter)
{
    const std::string bad = source_path("tests/bad/train-grad-clip.plan");
    Proc r = run_tpcc({"--check", "--train", bad});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "gets DTensor parameters ('model.embed_tokens.weight') and plain ones "
                                "('model.layers.0.input_layernorm.weight', which no style distributed)")) << r.err;
    EXPECT_TRUE(contains(r.err, "'aten._foreach_norm.Scalar got mixed torch.Tensor and DTensor'")) << r.err;
    EXPECT_TRUE(contains(r.err, "'model.layers.0.input_layernorm' keeps its parameters plain")) << r.err;
    EXPECT_TRUE(contains(r.err, "SequenceParallel() on the norms")) << r.err;
    EXPECT_EQ(run_tpcc({"--check", "--train", bad, "-D", "tp=1"}).code(), 0);
}

// Plain parameters only, some of them a rank's slice (transformers 4.56's
// local styles on every Linear, nothing else styled): each rank's norm is
// its own.
TEST(TrainChecks, GradClipOverPlainSlicesIsPerRank)
{
    TempDir dir;
    std::string plan = dir.write("p.plan", "model \"" + source_path("models/llama.model") +
                                               "\"\nconfig { tp = 2 }\n"
                                               "parallelize \"model.layers.*.mlp\" { \"gate_proj\": \"local_colwise\", "
                                               "\"up_proj\": \"local_colwise\", \"down_proj\": \"local_rowwise\" }\n"
                                               "parallelize \"model.layers.*\" { \"mlp\": \"gather\" }\n"
                                               "train { max_grad_norm = 1.0 }\n");
    Proc r = run_tpcc({"--check", plan});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "sees plain tensors only, and 'model.layers.0.mlp.gate_proj.weight' is this rank's "
                                "slice")) << r.err;
    EXPECT_TRUE(contains(r.err, "[grad-clip]")) << r.err;
}

// max_grad_norm is a number of at least 0; 0 clips nothing, so it mixes
// nothing.
TEST(TrainChecks, MaxGradNormIsANonNegativeNumber)
{
    TempDir dir;
    for (const char *bad : {"-1.0", "\"one\""}) {
        Proc r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", std::string("train { max_grad_norm = ") +
                                                                           bad + " }")});
        EXPECT_TRUE(contains(r.err, "max_grad_norm is clip_grad_norm_'s max_norm")) << bad << "\n" << r.err;
    }
    EXPECT_EQ(run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", "train { max_grad_norm = 0 }")}).code(), 0);
}

// The optimizer's and the schedule's keys (tests/bad/train-optimizer-values.plan,
// train-schedule-contradictions.plan, train-schedule-wsd-no-decay.plan): each
// error at the value, or the key, saying what the key is, what it takes and
// how to fix it; --fix applies the schedule a misspelling meant.
TEST(TrainChecks, OptimizerAndScheduleKeysSayWhatTheyTake)
{
    struct Case {
        std::string plan;
        std::vector<std::string> expect;
    } cases[] = {
        {"train-optimizer-values",
         {":31:10: error: lr is AdamW's peak learning rate: a number of at least 0 [plan]",
          ":32:19: error: betas is AdamW's betas (beta1, beta2): a pair of numbers (a, b), each from 0 to 1 "
          "(excluded) [plan]",
          ":33:11: error: eps is AdamW's eps: a number of at least 0 [plan]",
          ":35:20: error: train { } gives weight_decay twice [plan]", ":34:20: note: first given here",
          ":36:17: error: decay_all is whether weight decay applies to every parameter, norms and biases too, not "
          "only matrices: True or False [plan]",
          ":37:21: error: max_grad_norm is clip_grad_norm_'s max_norm (0: no clipping): a number of at least 0",
          ":38:16: error: schedule is the learning-rate schedule: \"cosine\", \"constant\", \"linear\" or \"wsd\"",
          "fix: did you mean \"cosine\"?",
          ":39:20: error: warmup_steps is the linear warm-up's length in steps: a whole number of steps of at least 0",
          ":40:20: error: start_factor is the warm-up's first rate as a fraction of lr (LinearLR's start_factor): a "
          "number from 0 to 1 (included)",
          ":41:5: error: train { } has no key 'eta_min' [plan]",
          "fix: did you mean 'min_lr'? that is train { }'s name for eta_min: the rate the decay falls to",
          "fix: did you mean 'warmup_steps'? that is train { }'s name for num_warmup_steps",
          ":43:5: error: train { } has no key 'beta' [plan]", "fix: did you mean 'betas'?", "12 errors generated"}},
        {"train-schedule-contradictions",
         {":30:14: error: min_lr 0.001 is above lr 0.0001: the schedule decays from lr to min_lr [plan]",
          ":29:10: note: lr is given here",
          "fix: min_lr is a rate, not a fraction of lr: for a tenth of lr write min_lr = 1e-05",
          ":32:19: error: decay_steps shapes the decay of schedule \"wsd\" (warmup-stable-decay), and the block's "
          "schedule is \"linear\" [plan]",
          "fix: say schedule = \"wsd\", or remove decay_steps", ":33:18: error: decay_type shapes the decay"}},
        {"train-data-values",
         {":29:16: error: no_decay names the parameters without weight decay, and decay_all = True decays every one "
          "[plan]",
          ":30:17: note: decay_all is given here",
          ":31:20: error: ignore_index is the label value the loss ignores (CrossEntropyLoss's ignore_index): a whole "
          "number from -2147483648 to 2147483647 (included) [plan]",
          ":33:14: error: eos_id 3 is pad_id too: a token cannot both end a document and be padding [plan]",
          "fix: pad with another id, or give only eos_id",
          ":34:5: error: train { } has no key 'pad_token_id' [plan]",
          "fix: did you mean 'pad_id'? that is train { }'s name for pad_token_id", "4 errors generated"}},
        {"train-schedule-wsd-no-decay",
         {":28:16: error: schedule \"wsd\" needs decay_steps: the steps at the end that decay to min_lr "
          "(get_wsd_schedule's num_decay_steps) [plan]",
          "fix: add decay_steps = N to the block: the rate holds at lr from the warm-up's end until the last N "
          "steps"}},
    };
    for (const Case &c : cases) {
        Proc r = run_tpcc({"--check", "--train", source_path("tests/bad/" + c.plan + ".plan")});
        EXPECT_EQ(r.code(), 1) << r.describe();
        for (const std::string &e : c.expect)
            EXPECT_TRUE(contains(r.err, e)) << c.plan << ": " << e << "\n" << r.err;
    }
    TempDir dir;
    for (const char *bad : {"()", "(\"bias\", \"\")", "\"bias,norm\"", "(1,)"}) {   // names, none empty or with a comma
        Proc r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", std::string("train { no_decay = ") + bad + " }")});
        EXPECT_EQ(r.code(), 1) << bad;
        EXPECT_TRUE(contains(r.err, "no_decay is the name parts of the parameters without weight decay (all others "
                                    "take it): a name or a tuple of names")) << bad << "\n" << r.err;
    }
    std::string plan = write_plan(dir, "mesh(tp = tp)", "train { schedule = \"wsdd\", decay_steps = 10 }");
    EXPECT_EQ(run_tpcc({"--fix", plan}).code(), 0);
    EXPECT_TRUE(contains(slurp(plan), "train { schedule = \"wsd\", decay_steps = 10 }")) << slurp(plan);
    EXPECT_EQ(run_tpcc({"--check", "--train", plan}).code(), 0);
}

// recompute is "none", "full" or "selective": anything else is an error at
// the value, with the mode a misspelling meant as a fix-it; --recompute
// goes with --train and takes the same names.
TEST(TrainChecks, RecomputeIsNoneFullOrSelective)
{
    TempDir dir;
    std::string plan = write_plan(dir, "mesh(tp = tp)", "train { recompute = \"ful\" }");
    Proc r = run_tpcc({"--check", plan});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "p.plan:5:21: error: recompute is the activation checkpointing of the transformer "
                                "layers: \"none\", \"full\" or \"selective\"")) << r.err;
    EXPECT_TRUE(contains(r.err, "did you mean \"full\"?")) << r.err;
    EXPECT_EQ(run_tpcc({"--fix", plan}).code(), 0);
    EXPECT_TRUE(contains(slurp(plan), "train { recompute = \"full\" }"));
    for (const char *bad : {"\"partial\"", "1", "True"}) {
        r = run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", std::string("train { recompute = ") + bad + " }")});
        EXPECT_EQ(r.code(), 1) << bad;
        EXPECT_TRUE(contains(r.err, "\"selective\" keeps its matmuls' outputs too")) << bad << "\n" << r.err;
    }
    for (const char *good : {"none", "full", "selective"})
        EXPECT_EQ(run_tpcc({"--check", write_plan(dir, "mesh(tp = tp)", std::string("train { recompute = \"") + good +
                                                                               "\" }")}).code(), 0) << good;
    r = run_tpcc({"--check", "--recompute", "full", plan});
    EXPECT_EQ(r.code(), 2);
    EXPECT_TRUE(contains(r.err, "--recompute goes with --train")) << r.err;
    r = run_tpcc({"--check", "--train", "--recompute", "fulll", plan});
    EXPECT_EQ(r.code(), 2);
    EXPECT_TRUE(contains(r.err, "--recompute must be none, full or selective, not 'fulll'")) << r.err;
}

}  // namespace
