// tpcc --train through the command line: the backward's collectives per
// phase against PyTorch's own count (tests/fixtures/train/comm_counts.json,
// CommDebugMode on the same plans, tools/comm_counts.py), against the
// Megatron bound at -O1, none at tp 1, a gradient for every weight, and a
// located error for what cannot be differentiated.
#include <gtest/gtest.h>

#include <jansson.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"
#include "tests/support/train_harness.h"
extern "C" {
#include "sched/load.h"
}

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

// The tiny Llama of tests/fixtures/train/llama (2 layers), at `tp`.
std::vector<std::string> tiny(int tp)
{
    return {"-D", "layers=2", "-D", "hidden=32", "-D", "heads=4", "-D", "kv_heads=4", "-D", "ffn=64",
            "-D", "vocab=128", "-D", "seq=16", "-D", "batch=2", "-D", "tp=" + std::to_string(tp)};
}

// phase -> collective -> count, from rank 0 of a compiled schedule.
using Counts = std::map<std::string, std::map<std::string, int>>;

struct Compiled {
    Proc proc;
    json_t *root = nullptr;
    ~Compiled() { json_decref(root); }
};

void compile(Compiled &c, const TempDir &tmp, const std::string &plan, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {source_path(plan), "--train", "-o", tmp.path + "/t.sched"};
    args.insert(args.end(), extra.begin(), extra.end());
    c.proc = tpcc_test::run_program(kTpcc, args);
    ASSERT_EQ(c.proc.code(), 0) << c.proc.err;
    json_error_t err;
    c.root = json_load_file((tmp.path + "/t.sched").c_str(), 0, &err);
    ASSERT_NE(c.root, nullptr) << err.text;
}

json_t *rank0_ops(const Compiled &c)
{
    return json_object_get(json_array_get(json_object_get(c.root, "ranks"), 0), "ops");
}

Counts collectives(const Compiled &c)
{
    Counts out;
    size_t i;
    json_t *op;
    json_array_foreach(rank0_ops(c), i, op) {
        std::string kind = json_string_value(json_object_get(op, "op"));
        json_t *phase = json_object_get(op, "phase");
        if (kind == "all_reduce" || kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all")
            out[phase ? json_string_value(phase) : "forward"][kind]++;
    }
    return out;
}

// PyTorch's names for the same collectives.
std::string torch_name(const std::string &kind)
{
    if (kind == "all_gather_into_tensor") return "all_gather";
    if (kind == "reduce_scatter_tensor") return "reduce_scatter";
    return kind;
}

Counts torch_counts(const std::string &plan)
{
    Counts out;
    json_error_t err;
    json_t *root = json_load_file(source_path("tests/fixtures/train/comm_counts.json").c_str(), 0, &err);
    EXPECT_NE(root, nullptr) << err.text;
    json_t *entry = json_object_get(root, plan.c_str());
    EXPECT_NE(entry, nullptr) << plan;
    for (const char *phase : {"forward", "backward", "grad_sync"}) {
        const char *key;
        json_t *n;
        json_object_foreach(json_object_get(entry, phase), key, n) out[phase][torch_name(key)] = (int)json_integer_value(n);
    }
    json_decref(root);
    return out;
}

class TorchCounts : public testing::TestWithParam<const char *> {};

// -O0 keeps every collective PyTorch runs: the same count in every phase.
TEST_P(TorchCounts, MinusO0MatchesCommDebugModePerPhase)
{
    TempDir tmp;
    Compiled c;
    std::vector<std::string> args = tiny(2);
    args.push_back("-O0");
    compile(c, tmp, std::string("plans/") + GetParam() + ".plan", args);
    if (c.root) {
        EXPECT_EQ(collectives(c), torch_counts(GetParam()));
    }
}

INSTANTIATE_TEST_SUITE_P(Plans, TorchCounts, testing::Values("llama-megatron", "llama-sp", "llama-tiny"));

// PyTorch's test Transformer (tests/models/torch_transformer.model) returns
// its logits, and PyTorch's tests train it with output.sum().backward():
// --loss sum, against CommDebugMode on Transformer.parallelize (the same
// counts at tp 2 and 4: tools/comm_counts.py checks both).
class TorchTransformerCounts : public testing::TestWithParam<const char *> {};

TEST_P(TorchTransformerCounts, LossSumAtMinusO0MatchesCommDebugModePerPhase)
{
    for (const char *tp : {"tp=2", "tp=4"}) {
        TempDir tmp;
        Compiled c;
        compile(c, tmp, std::string("tests/plans/") + GetParam() + ".plan", {"--loss", "sum", "-O0", "-D", tp});
        if (c.root) {
            EXPECT_EQ(collectives(c), torch_counts(GetParam())) << tp;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Plans, TorchTransformerCounts, testing::Values("torch-transformer-sp", "torch-transformer-tp"));

// -O1 sums every gradient's partial shares before the one reduction:
// Megatron's bound, two all-reduces per layer in the backward (the
// attention's and the MLP's input gradients), plus the head's input.
TEST(TrainCompile, MinusO1ReachesTheMegatronBound)
{
    TempDir tmp;
    Compiled c;
    compile(c, tmp, "plans/llama-megatron.plan", tiny(2));
    if (!c.root)
        return;
    Counts n = collectives(c);
    EXPECT_EQ(n["backward"], (std::map<std::string, int>{{"all_reduce", 2 * 2 + 1}}));
    EXPECT_TRUE(n["grad_sync"].empty()) << "every weight is sharded or sees replicated activations";
}

// Sequence parallelism: the norms' weights see sequence shards, so each
// rank's gradient is a share; they are all-reduced after the backward.
TEST(TrainCompile, SequenceParallelNormWeightsAreAllReduced)
{
    TempDir tmp;
    Compiled c;
    compile(c, tmp, "plans/llama-sp.plan", tiny(2));
    if (!c.root)
        return;
    json_t *grads = json_object_get(json_object_get(c.root, "outputs"), "grads");
    json_t *weights = json_object_get(json_array_get(json_object_get(c.root, "ranks"), 0), "weights");
    ASSERT_EQ(json_array_size(grads), json_array_size(weights));
    std::map<int, std::string> synced;   // buffer -> weight
    size_t i;
    json_t *op;
    json_array_foreach(rank0_ops(c), i, op) {
        json_t *phase = json_object_get(op, "phase");
        if (phase && std::string(json_string_value(phase)) == "grad_sync")
            synced[(int)json_integer_value(json_object_get(op, "out"))] = "";
    }
    std::vector<std::string> names;
    for (size_t w = 0; w < json_array_size(grads); w++)
        if (synced.count((int)json_integer_value(json_array_get(grads, w))))
            names.push_back(json_string_value(json_object_get(json_array_get(weights, w), "name")));
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.input_layernorm.weight",
                                                "model.layers.0.post_attention_layernorm.weight",
                                                "model.layers.1.input_layernorm.weight",
                                                "model.layers.1.post_attention_layernorm.weight",
                                                "model.norm.weight"}));
}

TEST(TrainCompile, OneRankHasNoCollectives)
{
    TempDir tmp;
    Compiled c;
    compile(c, tmp, "plans/llama-sp.plan", tiny(1));
    if (c.root) {
        EXPECT_TRUE(collectives(c).empty());
    }
}

// Every shipped plan whose model computes a loss compiles a training step.
TEST(TrainCompile, EveryShippedPlanWithALossTrains)
{
    for (const char *plan : {"llama-sp", "llama-megatron", "llama-tiny", "qwen2-sp", "mistral-sp", "qwen3-sp",
                             "phi3-sp", "gemma-sp", "gemma2-sp", "gpt2-sp-tied", "gpt2-hf-sp"}) {
        TempDir tmp;
        Proc p = tpcc_test::run_program(kTpcc, {source_path(std::string("plans/") + plan + ".plan"), "--train", "-o",
                                                tmp.path + "/t.sched"});
        EXPECT_EQ(p.code(), 0) << plan << ": " << p.err;
    }
}

TEST(TrainCompile, AModelWithoutALossIsALocatedError)
{
    TempDir tmp;
    Proc p = tpcc_test::run_program(kTpcc, {source_path("plans/llama-torchtitan.plan"), "--train", "-o",
                                            tmp.path + "/t.sched"});
    EXPECT_EQ(p.code(), 1);
    EXPECT_TRUE(contains(p.err, "llama-torchtitan.plan:")) << p.err;
    EXPECT_TRUE(contains(p.err, "the model computes no loss")) << p.err;
    EXPECT_TRUE(contains(p.err, "add --loss sum")) << p.err;
    EXPECT_TRUE(contains(p.err, "[backward]")) << p.err;
}

// --loss is the caller's loss on logits the model returns: with --train
// only, one of two, and never on a model that computes its own.
TEST(TrainCompile, LossOutsideTheModelIsCheckedWhereItIsGiven)
{
    TempDir tmp;
    std::string sched = tmp.path + "/t.sched";
    Proc alone = tpcc_test::run_program(kTpcc, {source_path("plans/llama-torchtitan.plan"), "--loss", "sum", "-o", sched});
    EXPECT_EQ(alone.code(), 2);
    EXPECT_TRUE(contains(alone.err, "--loss goes with --train")) << alone.err;
    Proc other = tpcc_test::run_program(kTpcc, {source_path("plans/llama-torchtitan.plan"), "--train", "--loss", "mse",
                                                "-o", sched});
    EXPECT_EQ(other.code(), 2);
    EXPECT_TRUE(contains(other.err, "--loss must be sum or cross_entropy, not 'mse'")) << other.err;
    Proc own = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--train", "--loss", "sum", "-o", sched});
    EXPECT_EQ(own.code(), 1);
    EXPECT_TRUE(contains(own.err, "the model computes its own loss")) << own.err;
    // llama-torchtitan's logits are vocab shards (loss_parallel): a sum of them would be a partial sum
    Proc sharded = tpcc_test::run_program(kTpcc, {source_path("plans/llama-torchtitan.plan"), "--train", "--loss",
                                                  "sum", "-o", sched});
    EXPECT_EQ(sharded.code(), 1);
    EXPECT_TRUE(contains(sharded.err, "--loss sum needs the logits whole on every rank")) << sharded.err;
    EXPECT_FALSE(std::filesystem::exists(sched));
}

TEST(TrainCompile, ReplicatedHeadsAreRefusedAtTheirEntry)
{
    TempDir tmp;
    std::string text = tpcc_test::slurp(source_path("plans/llama-megatron.plan"));
    for (const std::string proj : {"k_proj", "v_proj"}) {
        const std::string from = "\"self_attn." + proj + "\": ColwiseParallel(),";
        size_t at = text.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        text.replace(at, from.size(), "\"self_attn." + proj + "\": ColwiseParallel(tpcc_replicate_heads=kv_heads),");
    }
    text.replace(text.find("model \""), 7, "model \"" + source_path("plans") + "/");   // ../models from plans/
    std::string plan = tmp.write("kv.plan", text);
    Proc p = tpcc_test::run_program(kTpcc, {plan, "--train", "-o", tmp.path + "/t.sched", "-D", "tp=4", "-D",
                                            "kv_heads=2", "-D", "heads=8"});
    EXPECT_EQ(p.code(), 3) << p.err;
    EXPECT_TRUE(contains(p.err, "unsupported: weight ")) << p.err;
    EXPECT_TRUE(contains(p.err, "replicated over 2 ranks")) << p.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.path + "/t.sched"));
}

// bf16 training: weights, activations and gradients bf16, the loss and
// its pieces fp32 (the master weights are tprun's, not the schedule's)
TEST(TrainCompile, Bf16TrainingStoresGradientsInBf16AndGoesWithCompiling)
{
    TempDir tmp;
    std::string sched = tmp.path + "/bf16.sched";
    Proc bf16 = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--train", "--dtype", "bf16",
                                               "-o", sched, "-D", "tp=2"});
    ASSERT_EQ(bf16.code(), 0) << bf16.err;
    tr_schedule s;
    char err[800] = "";
    ASSERT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 0, err, sizeof err), 0) << err;
    EXPECT_EQ(s.dtype, TP_BF16);
    ASSERT_NE(s.grads, nullptr);
    for (int i = 0; i < s.nweights; i++)
        EXPECT_EQ(s.bufs[s.grads[i]].dtype, TP_BF16) << s.weights[i].name;
    EXPECT_EQ(s.bufs[s.loss].dtype, TP_F32);
    tr_schedule_free(&s);
    Proc explain = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--train", "--explain"});
    EXPECT_EQ(explain.code(), 2);
}

}  // namespace

namespace {

// The integer fields of --report-format=json's "training" (with the
// workspace's bytes as "workspace_bytes") of tpcc on `args`.
std::map<std::string, json_int_t> training_bytes(const std::vector<std::string> &args)
{
    std::map<std::string, json_int_t> bytes;
    Proc p = tpcc_test::run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.err;
    json_t *root = json_loads(p.out.c_str(), 0, nullptr);
    EXPECT_NE(root, nullptr) << p.out;
    const char *key;
    json_t *value;
    json_t *training = json_object_get(root, "training");
    json_object_foreach(training, key, value)
        if (json_is_integer(value))
            bytes[key] = json_integer_value(value);
    bytes["workspace_bytes"] = json_integer_value(json_object_get(json_object_get(training, "workspace"), "bytes"));
    json_decref(root);
    return bytes;
}

// --report --train --dtype bf16 against fp32: half the bytes for the
// weights, gradients and activations, the same fp32 moments, and tprun's
// fp32 master weights beside them (the fp32 weights' size).
TEST(TrainReport, Bf16CountsTheFp32MasterWeights)
{
    std::map<std::string, std::map<std::string, json_int_t>> bytes;
    for (std::string dtype : {"fp32", "bf16"}) {
        std::vector<std::string> args = tiny(2);
        args.insert(args.begin(), {source_path("plans/llama-megatron.plan"), "--train", "--report",
                                   "--report-format=json", "--dtype", dtype});
        bytes[dtype] = training_bytes(args);
    }
    std::map<std::string, json_int_t> &f = bytes["fp32"], &b = bytes["bf16"];
    EXPECT_EQ(b["param_bytes"] * 2, f["param_bytes"]);
    EXPECT_EQ(b["grad_bytes"] * 2, f["grad_bytes"]);
    EXPECT_EQ(b["optimizer_bytes"], f["optimizer_bytes"]);
    EXPECT_EQ(b["master_bytes"], f["param_bytes"]);
    EXPECT_EQ(f.count("master_bytes"), 0u);
    EXPECT_EQ(b["total_bytes"], b["param_bytes"] + b["grad_bytes"] + b["optimizer_bytes"] + b["master_bytes"] +
                                    b["activation_bytes"] + b["workspace_bytes"]);
    std::vector<std::string> text = tiny(2);
    text.insert(text.begin(), {source_path("plans/llama-megatron.plan"), "--train", "--report", "--dtype", "bf16"});
    EXPECT_TRUE(contains(tpcc_test::run_program(kTpcc, text).out, "master weights"));
}

// train { micro_batches = 4 }: tprun sums the micro-batches' gradients in
// an fp32 accumulator the size of the gradients (runtime/train/accum.h),
// which the report counts in the total; one micro-batch has none.
TEST(TrainReport, MicroBatchesAddAnFp32GradientAccumulator)
{
    TempDir d;
    std::string text = tpcc_test::slurp(source_path("plans/llama-megatron.plan"));
    tpcc_test::replace_once(text, "model \"../models/", "model \"" + std::string(TPCC_SOURCE_DIR) + "/models/");
    const std::string accum = d.write("accum.plan", text + "\ntrain {\n    micro_batches = 4\n}\n");
    std::map<std::string, json_int_t> one, four;
    for (auto [plan, bytes] : {std::pair{source_path("plans/llama-megatron.plan"), &one}, std::pair{accum, &four}}) {
        std::vector<std::string> args = tiny(2);
        args.insert(args.begin(), {plan, "--train", "--report", "--report-format=json", "--dtype", "bf16"});
        *bytes = training_bytes(args);
    }
    EXPECT_EQ(one.count("accumulator_bytes"), 0u);
    EXPECT_EQ(four["accumulator_bytes"], four["grad_bytes"] * 2);   // fp32 sums of bf16 gradients
    EXPECT_EQ(four["total_bytes"], one["total_bytes"] + four["accumulator_bytes"]);
    std::vector<std::string> args = tiny(2);
    args.insert(args.begin(), {accum, "--train", "--report"});
    EXPECT_TRUE(contains(tpcc_test::run_program(kTpcc, args).out, "the fp32 sum of the gradients of 4 micro-batches"));
}

// --report --train: memory per rank (weights, gradients, AdamW's moments,
// activations, the workspace: the staging of the largest collective,
// cuBLAS's and the CUDA kernels' scratch), backward FLOPs, communication
// per phase against the bound.
TEST(TrainReport, MemoryFlopsAndCommunicationPerPhase)
{
    std::vector<std::string> args = {source_path("plans/llama-megatron.plan"), "--train", "--report",
                                     "--report-format=json", "--device-memory", "1MiB"};
    std::vector<std::string> sizes = tiny(2);
    args.insert(args.end(), sizes.begin(), sizes.end());
    Proc p = tpcc_test::run_program(kTpcc, args);
    ASSERT_EQ(p.code(), 0) << p.err;
    json_error_t err;
    json_t *root = json_loads(p.out.c_str(), 0, &err);
    ASSERT_NE(root, nullptr) << err.text;
    json_t *t = json_object_get(root, "training");
    ASSERT_NE(t, nullptr) << p.out;
    json_int_t params = json_integer_value(json_object_get(root, "param_bytes"));
    EXPECT_EQ(json_integer_value(json_object_get(t, "grad_bytes")), params);
    EXPECT_EQ(json_integer_value(json_object_get(t, "optimizer_bytes")), 2 * params);
    json_t *workspace = json_object_get(t, "workspace");
    json_int_t staging = json_integer_value(json_object_get(workspace, "staging_bytes"));
    json_int_t blas = json_integer_value(json_object_get(workspace, "cuda_blas_bytes"));
    json_int_t scratch = json_integer_value(json_object_get(workspace, "cuda_scratch_bytes"));
    EXPECT_EQ(json_integer_value(json_object_get(workspace, "bytes")), staging + blas + scratch);
    EXPECT_EQ(json_integer_value(json_object_get(t, "total_bytes")),
              params * 4 + json_integer_value(json_object_get(t, "activation_bytes")) + staging + blas + scratch);
    // the largest collective: the logits' all-gather, [2, 16, 128] fp32 (tiny()), twice
    EXPECT_EQ(staging, 2 * (2 * 16 * 128 * 4));
    EXPECT_EQ(blas, 32 << 20);
    // fp32: attention's gradient's D = dy . O, b h s floats for 2 query heads
    // a rank (256 bytes), then rope_attention_grad's rotated q and k and
    // their gradients, b s h d floats each for 2 heads of 8
    EXPECT_EQ(scratch, 2 * 2 * 16 * 4 + 4 * (2 * 16 * 2 * 8) * 4);
    EXPECT_TRUE(json_is_true(json_object_get(t, "fits")) ==
                (json_integer_value(json_object_get(t, "total_bytes")) <= (1 << 20)));
    json_t *flops = json_object_get(t, "flops");
    // the backward takes two matmuls per forward matmul, and three attention products per forward one
    EXPECT_GT(json_real_value(json_object_get(flops, "backward")), 1.9 * json_real_value(json_object_get(flops, "forward")));
    json_t *phases = json_object_get(t, "phases");
    double bound = json_real_value(json_object_get(json_object_get(phases, "forward"), "bound_bytes"));
    EXPECT_GT(bound, 0);
    // Megatron's plan at -O1: the backward moves exactly the forward's layer traffic, plus the head's input gradient
    EXPECT_GE(json_real_value(json_object_get(json_object_get(phases, "backward"), "sent_bytes")), bound);
    EXPECT_DOUBLE_EQ(json_real_value(json_object_get(root, "ratio")), 1.0);
    json_decref(root);
}

// tests/plans/llama-megatron-dp1.plan with dp replicas, written into tmp
// (the model path made absolute).
std::string megatron_on_dp(const TempDir &tmp, int dp, const std::string &shard = "")
{
    std::string text = tpcc_test::slurp(source_path("tests/plans/llama-megatron-dp1.plan"));
    tpcc_test::replace_once(text, "\"../../models/", "\"" + source_path("models") + "/");
    tpcc_test::replace_once(text, "mesh(dp = 1,", "mesh(dp = " + std::to_string(dp) + ",");
    if (!shard.empty())
        text += "\ntrain {\n    shard = \"" + shard + "\",\n}\n";
    return tmp.write("dp" + std::to_string(dp) + shard + ".plan", text);
}

// tpcc --train --report in `format` of the tiny Megatron Llama on
// mesh(dp, tp = 2), its train { shard } `shard` (none when empty).
Proc dp_report(const TempDir &tmp, int dp, const std::string &format, const std::string &shard = "",
               const std::string &dtype = "fp32")
{
    std::vector<std::string> args = {megatron_on_dp(tmp, dp, shard), "--train", "--report", "--report-format=" + format,
                                     "--dtype", dtype};
    std::vector<std::string> sizes = tiny(2);
    args.insert(args.end(), sizes.begin(), sizes.end());
    return tpcc_test::run_program(kTpcc, args);
}

// --dump (rank 0) of the tiny Megatron Llama compiled for training on
// mesh(dp = 2, tp = 2) with train { shard } `shard`.
std::string dp2_dump(const TempDir &tmp, const std::string &shard)
{
    std::vector<std::string> args = {megatron_on_dp(tmp, 2, shard), "--train", "-o", tmp.path + "/" + shard + ".sched"};
    std::vector<std::string> sizes = tiny(2);
    args.insert(args.end(), sizes.begin(), sizes.end());
    Proc c = tpcc_test::run_program(kTpcc, args);
    EXPECT_EQ(c.code(), 0) << c.err;
    return tpcc_test::run_program(kTpcc, {"--dump", tmp.path + "/" + shard + ".sched", "--rank", "0"}).out;
}

// The "training" object of dp_report's bf16 JSON (*root: the document, to
// free), failing the test when the report fails.
json_t *dp_training(const TempDir &tmp, int dp, const std::string &shard, json_t **root)
{
    Proc p = dp_report(tmp, dp, "json", shard, "bf16");
    EXPECT_EQ(p.code(), 0) << p.describe();
    json_error_t err;
    *root = json_loads(p.out.c_str(), 0, &err);
    return json_object_get(*root, "training");
}

// The text report of dp 2 with train { shard } `shard` (bf16) says each of `lines`.
void expect_dp2_report_says(const TempDir &tmp, const std::string &shard, std::initializer_list<const char *> lines)
{
    Proc text = dp_report(tmp, 2, "text", shard, "bf16");
    ASSERT_EQ(text.code(), 0) << text.describe();
    for (const char *line : lines)
        EXPECT_TRUE(contains(text.out, line)) << line << "\n" << text.out;
}

// --dump says how many replicas of the tp group a dp x tp schedule runs.
TEST(TrainCompile, DumpShowsTheDataParallelReplicas)
{
    TempDir tmp;
    std::vector<std::string> args = {megatron_on_dp(tmp, 2), "--train", "-o", tmp.path + "/dp.sched"};
    std::vector<std::string> sizes = tiny(2);
    args.insert(args.end(), sizes.begin(), sizes.end());
    Proc c = tpcc_test::run_program(kTpcc, args);
    ASSERT_EQ(c.code(), 0) << c.err;
    Proc d = tpcc_test::run_program(kTpcc, {"--dump", tmp.path + "/dp.sched", "--rank", "0"});
    ASSERT_EQ(d.code(), 0) << d.err;
    EXPECT_TRUE(contains(d.out, "  data parallel  2 replicas of the 2 ranks above (tprun -n 4)\n")) << d.out;
}

// On a dp x tp mesh each rank holds what it holds at dp = 1 (the optimizer
// state is replicated over dp) and sends, besides the tp collectives, one
// all-reduce of each gradient over the dp replicas: 2 (dp-1)/dp of the
// gradients' bytes with a ring.
TEST(TrainReport, DataParallelAddsTheGradientAverage)
{
    TempDir tmp;
    auto report = [&](int dp, const std::string &format) { return dp_report(tmp, dp, format); };
    Proc one = report(1, "json"), two = report(2, "json"), text = report(2, "text");
    ASSERT_EQ(one.code(), 0) << one.err;
    ASSERT_EQ(two.code(), 0) << two.err;
    ASSERT_EQ(text.code(), 0) << text.err;
    EXPECT_TRUE(contains(text.out, "(tp=2, dp=2: 4 ranks, f32)")) << text.out;
    EXPECT_TRUE(contains(text.out, "each gradient all-reduced over the 2 dp replicas")) << text.out;
    json_error_t err;
    json_t *a = json_loads(one.out.c_str(), 0, &err), *b = json_loads(two.out.c_str(), 0, &err);
    ASSERT_TRUE(a && b) << err.text;
    EXPECT_EQ(json_integer_value(json_object_get(a, "data_parallel")), 1);
    EXPECT_EQ(json_integer_value(json_object_get(b, "data_parallel")), 2);
    json_t *ta = json_object_get(a, "training"), *tb = json_object_get(b, "training");
    EXPECT_EQ(json_integer_value(json_object_get(ta, "total_bytes")), json_integer_value(json_object_get(tb, "total_bytes")));
    EXPECT_EQ(json_object_get(json_object_get(ta, "phases"), "dp_average"), nullptr);
    json_t *avg = json_object_get(json_object_get(tb, "phases"), "dp_average");
    ASSERT_NE(avg, nullptr) << two.out;
    double grads = double(json_integer_value(json_object_get(tb, "grad_bytes")));
    EXPECT_DOUBLE_EQ(json_real_value(json_object_get(avg, "sent_bytes")), 2 * grads * (2 - 1) / 2);
    // one all-reduce per weight: 2 layers x (7 projections + 2 norms) + embedding, final norm, head
    EXPECT_EQ(json_integer_value(json_object_get(json_object_get(json_object_get(avg, "totals"), "all_reduce"), "count")),
              2 * 9 + 3);
    json_decref(a);
    json_decref(b);
}

// A dp x tp report states the rank layout tprun runs it in, tp fastest:
// rank r is replica r / tp, tp rank r % tp.
TEST(TrainReport, DataParallelStatesTheRankLayout)
{
    TempDir tmp;
    auto report = [&](int dp, const std::string &format) { return dp_report(tmp, dp, format); };
    Proc two = report(2, "text"), eight = report(8, "text"), json = report(2, "json");
    ASSERT_EQ(two.code(), 0) << two.err;
    EXPECT_TRUE(contains(two.out, "\nranks: tp fastest, rank = dp index x 2 + tp index: dp 0 = ranks 0-1, dp 1 = "
                                  "ranks 2-3; a node holding a multiple of 2 consecutive ranks keeps each tp group "
                                  "inside it\n")) << two.out;
    ASSERT_EQ(eight.code(), 0) << eight.err;
    EXPECT_TRUE(contains(eight.out, ": dp 0 = ranks 0-1, dp 1 = ranks 2-3, ..., dp 7 = ranks 14-15;")) << eight.out;
    ASSERT_EQ(json.code(), 0) << json.err;
    json_error_t err;
    json_t *root = json_loads(json.out.c_str(), 0, &err);
    ASSERT_TRUE(root) << err.text;
    json_t *ranks = json_object_get(root, "ranks");
    ASSERT_EQ(json_array_size(ranks), 4u) << json.out;
    for (int r = 0; r < 4; r++) {
        json_t *rank = json_array_get(ranks, size_t(r));
        EXPECT_EQ(json_integer_value(json_object_get(rank, "rank")), r);
        EXPECT_EQ(json_integer_value(json_object_get(rank, "dp")), r / 2);
        EXPECT_EQ(json_integer_value(json_object_get(rank, "tp")), r % 2);
    }
    json_decref(root);
}

// train { shard = "optimizer" } (ZeRO-1): per rank, AdamW's moments and
// the bf16 schedule's fp32 masters fall as 1/dp (each weight's runs
// rounded up to 8 elements), parameters and gradients stay; the dp traffic
// is a reduce-scatter of each gradient and an all-gather of each weight,
// (dp-1)/dp of the padded bytes each, an all-reduce's in all; --dump says
// the mode.
TEST(TrainReport, ZeroOneDividesTheOptimizerStateByDp)
{
    TempDir tmp;
    auto training = [&](int dp, const std::string &shard, const std::string &format) {
        return dp_report(tmp, dp, format, shard, "bf16");
    };
    auto field = [](json_t *o, const char *key) { return double(json_integer_value(json_object_get(o, key))); };
    json_error_t err;
    Proc base = training(1, "", "json");
    ASSERT_EQ(base.code(), 0) << base.describe();
    json_t *b = json_loads(base.out.c_str(), 0, &err);
    ASSERT_TRUE(b) << err.text;
    json_t *tb = json_object_get(b, "training");
    const double moments = field(tb, "optimizer_bytes"), masters = field(tb, "master_bytes");
    const double grads = field(tb, "grad_bytes"), params = field(tb, "param_bytes");
    const int weights = 2 * 9 + 3;    // 2 layers x (7 projections + 2 norms), embedding, final norm, head
    EXPECT_EQ(masters * 2, moments);
    for (int dp : {2, 4}) {
        Proc p = training(dp, "optimizer", "json");
        ASSERT_EQ(p.code(), 0) << p.describe();
        json_t *root = json_loads(p.out.c_str(), 0, &err);
        ASSERT_TRUE(root) << err.text;
        json_t *t = json_object_get(root, "training");
        EXPECT_STREQ(json_string_value(json_object_get(t, "dp_shard")), "optimizer");
        EXPECT_EQ(field(t, "param_bytes"), params) << dp;
        EXPECT_EQ(field(t, "grad_bytes"), grads) << dp;
        // 1/dp, and at most 8 elements of padding a weight and a rank more
        EXPECT_GE(field(t, "optimizer_bytes") * dp, moments) << dp;
        EXPECT_LE(field(t, "optimizer_bytes") * dp, moments + 2.0 * 4 * 8 * dp * weights) << dp;
        EXPECT_EQ(field(t, "master_bytes") * 2, field(t, "optimizer_bytes")) << dp;
        EXPECT_GT(field(json_object_get(t, "workspace"), "dp_shard_bytes"), 0) << dp;
        json_t *phase = json_object_get(json_object_get(t, "phases"), "dp_sharded");
        ASSERT_NE(phase, nullptr) << p.out;
        double padded = field(t, "optimizer_bytes") / 8 * dp * 2;    // the runs' elements x dp, in bf16
        for (const char *kind : {"reduce_scatter", "all_gather"}) {
            json_t *k = json_object_get(json_object_get(phase, "totals"), kind);
            EXPECT_EQ(json_integer_value(json_object_get(k, "count")), weights) << kind;
            EXPECT_DOUBLE_EQ(json_real_value(json_object_get(k, "sent_bytes")), padded * (dp - 1) / dp) << kind;
        }
        EXPECT_EQ(json_object_get(json_object_get(t, "phases"), "dp_average"), nullptr);
        json_decref(root);
    }
    json_decref(b);
    expect_dp2_report_says(tmp, "optimizer",
                           {"AdamW's two moments, fp32; 1/dp of them, ZeRO-1",
                            "each gradient reduce-scattered over the 2 dp ranks, then / 2: ZeRO-1",
                            "each updated weight all-gathered over the 2 dp ranks: ZeRO-1",
                            "its state is sharded over dp"});

    std::string dump = dp2_dump(tmp, "optimizer");
    EXPECT_TRUE(contains(dump, "  dp shard    optimizer state, 1/2 on each replica\n")) << dump;
}

// train { shard = "gradients" } (ZeRO-2): the gradients fall as 1/dp too,
// since the schedule reduce-scatters each one into its run right after the
// backward computes it (one dp_reduce_scatter a weight, in the backward's
// order, over the dp group), and the run is what the schedule leaves; the
// whole gradient is an activation of the backward. The optimizer state
// and the dp traffic are ZeRO-1's.
TEST(TrainReport, ZeroTwoDividesTheGradientsByDpInTheSchedule)
{
    TempDir tmp;
    auto field = [](json_t *o, const char *key) { return double(json_integer_value(json_object_get(o, key))); };
    auto training_of = [&](int dp, const std::string &shard, json_t **root) { return dp_training(tmp, dp, shard, root); };
    const int weights = 2 * 9 + 3;
    json_t *b, *o, *g;
    json_t *base = training_of(1, "", &b);
    for (int dp : {2, 4}) {
        json_t *one = training_of(dp, "optimizer", &o), *two = training_of(dp, "gradients", &g);
        ASSERT_TRUE(one && two);
        EXPECT_STREQ(json_string_value(json_object_get(two, "dp_shard")), "gradients");
        EXPECT_EQ(field(two, "param_bytes"), field(base, "param_bytes"));
        EXPECT_EQ(field(two, "optimizer_bytes"), field(one, "optimizer_bytes")) << dp;
        EXPECT_EQ(field(two, "master_bytes"), field(one, "master_bytes")) << dp;
        // the runs: 1/dp of the gradients, at most 8 elements of padding a weight
        EXPECT_EQ(field(one, "grad_bytes"), field(base, "grad_bytes")) << dp;
        EXPECT_GE(field(two, "grad_bytes") * dp, field(base, "grad_bytes")) << dp;
        EXPECT_LE(field(two, "grad_bytes") * dp, field(base, "grad_bytes") + 2.0 * 8 * dp * weights) << dp;
        EXPECT_EQ(field(two, "grad_bytes") * 2, field(two, "master_bytes")) << dp;   // bf16 runs, fp32 masters
        json_t *phases = json_object_get(two, "phases"), *one_phases = json_object_get(one, "phases");
        EXPECT_TRUE(json_equal(json_object_get(phases, "dp_sharded"), json_object_get(one_phases, "dp_sharded")));
        // the tensor-parallel phases count no data-parallel collective
        EXPECT_TRUE(json_equal(json_object_get(phases, "grad_sync"), json_object_get(one_phases, "grad_sync")));
        json_decref(o);
        json_decref(g);
    }
    json_decref(b);

    expect_dp2_report_says(tmp, "gradients",
                           {"(1/dp of them, ZeRO-2: each rank's run of each, reduce-scattered in the backward)",
                            "AdamW's two moments, fp32; 1/dp of them, ZeRO-2",
                            "each gradient reduce-scattered over the 2 dp ranks, then / 2: ZeRO-2"});

    std::string dump = dp2_dump(tmp, "gradients");
    EXPECT_TRUE(contains(dump, "  dp shard    gradients and optimizer state, 1/2 on each replica\n")) << dump;
    size_t n = 0;
    for (size_t at = dump.find("dp_reduce_scatter"); at != std::string::npos; at = dump.find("dp_reduce_scatter", at + 1))
        n++;
    EXPECT_EQ(n, size_t(weights)) << dump;
    // the first one comes before the backward's last op: the reductions run
    // as the gradients become final, not after the whole backward
    EXPECT_LT(dump.find("dp_reduce_scatter"), dump.rfind("backward")) << dump;
}

// train { shard = "parameters" } (FSDP, ZeRO-3): the parameters fall as
// 1/dp too; the schedule gathers each weight over dp before its first
// reader in the forward and again in the backward, and once a weight
// outside the layers (the embedding, the final norm, the head: FSDP2's
// root), every reader of a weight reading the gathered buffer; the dp
// traffic is 1.5 times ZeRO-1's all-reduce (the paper's ZeRO-3 bound,
// here exactly: the root's weights are gathered once).
TEST(TrainReport, FsdpDividesTheParametersByDpAndGathersThemInTheSchedule)
{
    TempDir tmp;
    auto field = [](json_t *o, const char *key) { return double(json_integer_value(json_object_get(o, key))); };
    auto training_of = [&](int dp, const std::string &shard, json_t **root) { return dp_training(tmp, dp, shard, root); };
    const int layer_weights = 2 * 9, root_weights = 3;
    json_t *b, *z, *f;
    json_t *base = training_of(1, "", &b);
    for (int dp : {2, 4}) {
        json_t *two = training_of(dp, "gradients", &z), *three = training_of(dp, "parameters", &f);
        ASSERT_TRUE(two && three);
        EXPECT_STREQ(json_string_value(json_object_get(three, "dp_shard")), "parameters");
        EXPECT_EQ(field(three, "grad_bytes"), field(two, "grad_bytes")) << dp;
        EXPECT_EQ(field(three, "optimizer_bytes"), field(two, "optimizer_bytes")) << dp;
        EXPECT_EQ(field(three, "param_bytes"), field(two, "grad_bytes")) << dp;   // bf16 runs, both
        EXPECT_GE(field(three, "param_bytes") * dp, field(base, "param_bytes")) << dp;
        EXPECT_LE(field(three, "param_bytes") * dp, field(base, "param_bytes") + 2.0 * 8 * dp * 21) << dp;
        json_t *sharded = json_object_get(json_object_get(three, "phases"), "dp_sharded");
        json_t *totals = json_object_get(sharded, "totals");
        json_t *gathers = json_object_get(totals, "all_gather"), *reduces = json_object_get(totals, "reduce_scatter");
        EXPECT_EQ(json_integer_value(json_object_get(gathers, "count")), 2 * layer_weights + root_weights);
        EXPECT_EQ(json_integer_value(json_object_get(reduces, "count")), layer_weights + root_weights);
        double rs = json_real_value(json_object_get(reduces, "sent_bytes")),
               ag = json_real_value(json_object_get(gathers, "sent_bytes"));
        EXPECT_GT(ag, 1.5 * rs) << dp;   // all but the root's three weights twice
        EXPECT_LT(ag, 2.0 * rs) << dp;
        json_decref(z);
        json_decref(f);
    }
    json_decref(b);

    expect_dp2_report_says(tmp, "parameters",
                           {"(1/dp of them, ZeRO-3: each rank's run of each, gathered for each layer, as activations)",
                            "each weight all-gathered over the 2 dp ranks for the forward, again for the backward: "
                            "ZeRO-3"});

    std::string dump = dp2_dump(tmp, "parameters");
    EXPECT_TRUE(contains(dump, "  dp shard    parameters, gradients and optimizer state, 1/2 on each replica\n"))
        << dump;
    // every matmul reads its weight from a gathered buffer: "x NAME (bN)"
    std::istringstream lines(dump);
    int matmuls = 0;
    for (std::string line; std::getline(lines, line);)
        if (contains(line, " matmul ")) {
            matmuls++;
            EXPECT_TRUE(std::regex_search(line, std::regex(R"(\.weight \(b[0-9]+\))"))) << line;
        }
    EXPECT_GT(matmuls, 0) << dump;
}

// --device-memory goes with any report: a forward step's memory, or with
// --train a training step's
TEST(TrainReport, DeviceMemoryGoesWithAReport)
{
    Proc p = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--report", "--device-memory", "12GiB"});
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "forward step, memory per rank")) << p.out;
    EXPECT_TRUE(contains(p.out, "total             11.96 GiB  fits in 12.00 GiB of device memory")) << p.out;
    Proc small = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--report", "--device-memory",
                                                "11GiB"});
    EXPECT_TRUE(contains(small.out, "DOES NOT FIT in 11.00 GiB")) << small.out;
    TempDir tmp;
    Proc compile = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "-o", tmp.path + "/s.sched",
                                                  "--device-memory", "80GiB"});
    EXPECT_EQ(compile.code(), 2);
    EXPECT_TRUE(contains(compile.err, "--device-memory goes with --report")) << compile.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.path + "/s.sched"));
    Proc bad = tpcc_test::run_program(kTpcc, {source_path("plans/llama-sp.plan"), "--train", "--report",
                                              "--device-memory", "lots"});
    EXPECT_EQ(bad.code(), 2);
    EXPECT_TRUE(contains(bad.err, "80GiB")) << bad.err;
}

}  // namespace
