// The back end end to end: schedules emitted by `tpcc PLAN -o` and read
// back (collective counts per layer, bytes, merging at -O1, the bound
// ratio of --report, op attributes from --hf-config and -D), properties of
// every shipped plan's program at
// tp = 1, 2, 4, 8 (arena, def-before-use, identical collectives on every
// rank), determinism, and the runtime's loader accepting what tpcc writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <jansson.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "sched/write.h"
#include "sched/memplan.h"
#include "sched/format.h"
#include "sched/load.h"
}

using namespace tpcc_test;
namespace fs = std::filesystem;

namespace {

using tpcc_test::kTpcc;

// A schedule compiled by the tpcc binary, parsed with jansson.
struct Schedule {
    Schedule(const TempDir &dir, const std::string &plan, const std::vector<std::string> &flags)
    {
        path = dir.path + "/" + fs::path(plan).stem().string() + ".sched";
        std::vector<std::string> args = {source_path(plan), "-o", path};
        args.insert(args.end(), flags.begin(), flags.end());
        Proc p = run_program(kTpcc, args);
        EXPECT_EQ(p.code(), 0) << p.describe();
        json_error_t e;
        root = json_load_file(path.c_str(), 0, &e);
        EXPECT_NE(root, nullptr) << e.text;
    }
    ~Schedule() { json_decref(root); }
    json_t *ops(int rank) const
    {
        return json_object_get(json_array_get(json_object_get(root, "ranks"), (size_t)rank), "ops");
    }
    // Collectives of one rank whose module lies in `prefix` (e.g. one layer).
    std::map<std::string, int> count(int rank, const std::string &prefix) const
    {
        std::map<std::string, int> n;
        size_t i;
        json_t *op;
        json_array_foreach(ops(rank), i, op)
        {
            std::string kind = json_string_value(json_object_get(op, "op"));
            std::string module = json_string_value(json_object_get(op, "module"));
            if (json_object_get(op, "bytes") && module.rfind(prefix, 0) == 0)
                n[kind]++;
        }
        return n;
    }
    std::string path;
    json_t *root = nullptr;
};

const std::vector<std::string> kLayers2 = {"-D", "layers=2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string> &b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TEST(Collectives, MegatronIsTwoAllReducesPerLayer)
{
    TempDir dir;
    Schedule s(dir, "plans/llama-megatron.plan", kLayers2);
    for (int r = 0; r < 2; r++) {
        auto n = s.count(r, "model.layers.1.");
        EXPECT_EQ(n["all_reduce"], 2);
        EXPECT_EQ(n.size(), 1u);
    }
}

TEST(Collectives, SequenceParallelIsTwoGathersAndTwoScattersPerLayer)
{
    TempDir dir;
    Schedule s(dir, "plans/llama-sp.plan", kLayers2);
    auto n = s.count(0, "model.layers.0.");
    EXPECT_EQ(n["all_gather"], 2);
    EXPECT_EQ(n["reduce_scatter"], 2);
    EXPECT_EQ(n.size(), 2u);
}

TEST(Collectives, PerProjectionGathersMergeAtO1)
{
    TempDir dir;
    Schedule o0(dir, "plans/llama-sp-input-layouts.plan", with(kLayers2, {"-O0"}));
    auto n0 = o0.count(0, "model.layers.0.");
    EXPECT_EQ(n0["all_gather"], 5);       // q, k, v, gate, up each gather
    EXPECT_EQ(n0["reduce_scatter"], 2);
    TempDir dir1;
    Schedule o1(dir1, "plans/llama-sp-input-layouts.plan", kLayers2);
    auto n1 = o1.count(0, "model.layers.0.");
    EXPECT_EQ(n1["all_gather"], 2);
    EXPECT_EQ(n1["reduce_scatter"], 2);
}

// How many ops of each kind rank `rank` of a schedule runs.
std::map<std::string, int> kinds(const Schedule &s, int rank)
{
    std::map<std::string, int> n;
    size_t i;
    json_t *op;
    json_array_foreach(s.ops(rank), i, op) n[json_string_value(json_object_get(op, "op"))]++;
    return n;
}

// -O1 fuses a Llama MLP's silu(gate) * up into one silu_mul per layer (and
// --train differentiates it as one silu_mul_grad); -O0 keeps the pair.
TEST(Fusion, SiluMulAtO1ThePairAtO0)
{
    for (const char *plan : {"plans/llama-sp.plan", "plans/qwen3-sp.plan", "plans/llama-tiny.plan"}) {
        TempDir d1, d0, dt1, dt0;
        Schedule o1(d1, plan, kLayers2), o0(d0, plan, with(kLayers2, {"-O0"}));
        Schedule t1(dt1, plan, with(kLayers2, {"--train"})), t0(dt0, plan, with(kLayers2, {"--train", "-O0"}));
        for (int r = 0; r < 2 && json_array_get(json_object_get(o1.root, "ranks"), (size_t)r); r++) {
            auto f1 = kinds(o1, r), f0 = kinds(o0, r), g1 = kinds(t1, r), g0 = kinds(t0, r);
            EXPECT_EQ(f1["silu_mul"], 2) << plan;
            EXPECT_EQ(f1["silu"], 0) << plan;
            EXPECT_EQ(f1["mul"], f0["mul"] - 2) << plan;
            EXPECT_EQ(f0["silu"], 2) << plan;
            EXPECT_EQ(f0["silu_mul"], 0) << plan;
            EXPECT_EQ(g1["silu_mul_grad"], 2) << plan;
            EXPECT_EQ(g1["silu_grad"], 0) << plan;
            EXPECT_EQ(g0["silu_grad"], 2) << plan;
            EXPECT_EQ(g0["silu_mul_grad"], 0) << plan;
        }
    }
    // GELU MLPs are left as they are
    TempDir dg;
    Schedule g(dg, "plans/gemma-sp.plan", kLayers2);
    EXPECT_EQ(kinds(g, 0)["silu_mul"], 0);
}

// Each plan compiled with 2 layers at -O1 and at -O0, forward and with
// --train: check(the -O1 schedule, rank 0's op kinds at -O1 and at -O0,
// what to call the case, whether it trains).
template <typename Check> void at_o1_and_o0(std::initializer_list<const char *> plans, Check check)
{
    for (const char *plan : plans)
        for (bool train : {false, true}) {
            TempDir d1, d0;
            std::vector<std::string> o1 = train ? with(kLayers2, {"--train"}) : kLayers2;
            Schedule s1(d1, plan, o1), s0(d0, plan, with(o1, {"-O0"}));
            check(s1, kinds(s1, 0), kinds(s0, 0), std::string(plan) + (train ? " --train" : ""), train);
        }
}

// -O1 fuses each residual add with the RMSNorm right after it (both norms
// of every layer but the first layer's input norm, and the final norm),
// forward and training alike, RMSNorm and Gemma's (1 + w); -O0 keeps the
// pairs, and LayerNorm models have none.
TEST(Fusion, AddRmsNormAtO1ThePairAtO0)
{
    at_o1_and_o0({"plans/llama-sp.plan", "plans/llama-megatron.plan", "plans/gemma-sp.plan"},
                 [](const Schedule &, std::map<std::string, int> f1, std::map<std::string, int> f0,
                    const std::string &what, bool train) {
                     EXPECT_EQ(f1["add_rmsnorm"], 4) << what;   // 2 layers x 2 norms + the final one - the first
                     EXPECT_EQ(f1["rmsnorm"], 1) << what;
                     // training: and the backward's 4 into rmsnorm_dx (below)
                     EXPECT_EQ(f1["add"], f0["add"] - 4 - (train ? 4 : 0)) << what;
                     EXPECT_EQ(f0["rmsnorm"], 5) << what;
                     EXPECT_EQ(f0["add_rmsnorm"], 0) << what;
                 });
    TempDir dg;
    Schedule g(dg, "plans/gpt2-hf-sp.plan", kLayers2);
    EXPECT_EQ(kinds(g, 0)["add_rmsnorm"], 0);
}

// rmsnorm_dx's (of rank 0) with a third input, the gradient they add.
int adding_norm_grads(const Schedule &s)
{
    int n = 0;
    size_t i;
    json_t *op;
    json_array_foreach(s.ops(0), i, op) n += std::string(json_string_value(json_object_get(op, "op"))) == "rmsnorm_dx" &&
                                             json_array_size(json_object_get(op, "in")) == 3;
    return n;
}

// -O1 fuses the backward's add of each layer norm's input gradient to the
// residual stream's into the rmsnorm_dx (both norms of every layer; the
// final norm's gradient has another reader, its all-gather or the last
// layer's projections), RMSNorm and Gemma's (1 + w); the sum is written
// where the add wrote it, and nothing reads the norm's own gradient. -O0,
// forward schedules and LayerNorm models have none.
TEST(Fusion, RmsNormDxAddAtO1ThePairAtO0)
{
    at_o1_and_o0({"plans/llama-sp.plan", "plans/llama-megatron.plan", "plans/gemma-sp.plan"},
                 [](const Schedule &s1, std::map<std::string, int> f1, std::map<std::string, int>,
                    const std::string &what, bool train) {
                     EXPECT_EQ(adding_norm_grads(s1), train ? 4 : 0) << what;
                     EXPECT_EQ(f1["rmsnorm_dx"], train ? 5 : 0) << what;
                 });
    TempDir d0, dg;
    Schedule o0(d0, "plans/llama-sp.plan", with(kLayers2, {"--train", "-O0"}));
    EXPECT_EQ(adding_norm_grads(o0), 0);
    Schedule g(dg, "plans/gpt2-hf-sp.plan", with(kLayers2, {"--train"}));
    EXPECT_EQ(adding_norm_grads(g), 0);
}

// -O1 fuses each GPT-2 MLP's c_fc bias with the gelu after it. A forward
// schedule drops the biased value (out[0] null: nothing else reads it); a
// training one keeps it in the buffer gelu_grad reads. -O0 keeps the pair,
// and models whose activation has no bias before it have none.
TEST(Fusion, BiasGeluAtO1ThePairAtO0)
{
    at_o1_and_o0({"plans/gpt2-hf-sp.plan", "plans/gpt2-sp-tied.plan"},
                 [](const Schedule &s1, std::map<std::string, int> f1, std::map<std::string, int> f0,
                    const std::string &what, bool train) {
                     EXPECT_EQ(f1["bias_gelu"], 2) << what;
                     EXPECT_EQ(f1["gelu"], 0) << what;
                     EXPECT_EQ(f1["bias_add"], f0["bias_add"] - 2) << what;
                     EXPECT_EQ(f0["gelu"], 2) << what;
                     EXPECT_EQ(f0["bias_gelu"], 0) << what;
                     // the buffers gelu_grad reads, and each bias_gelu's biased output
                     std::set<json_int_t> grad_reads;
                     std::vector<json_t *> biased;
                     size_t i;
                     json_t *op;
                     json_array_foreach(s1.ops(0), i, op)
                     {
                         const std::string kind = json_string_value(json_object_get(op, "op"));
                         if (kind == "gelu_grad")
                             grad_reads.insert(json_integer_value(json_array_get(json_object_get(op, "in"), 0)));
                         if (kind == "bias_gelu")
                             biased.push_back(json_array_get(json_object_get(op, "out"), 0));
                     }
                     for (json_t *h : biased) {
                         if (train)
                             EXPECT_TRUE(json_is_integer(h) && grad_reads.count(json_integer_value(h))) << what;
                         else
                             EXPECT_TRUE(json_is_null(h)) << what;
                     }
                 });
    for (const char *plan : {"plans/gemma-sp.plan", "plans/llama-sp.plan", "plans/qwen2-sp.plan"}) {
        TempDir d;
        Schedule s(d, plan, kLayers2);
        EXPECT_EQ(kinds(s, 0)["bias_gelu"], 0) << plan;
    }
}

// The bytes of a collective are those of the full tensor it moves: for a
// block boundary, batch * seq * hidden * 4.
TEST(Collectives, BytesAreTheFullTensor)
{
    TempDir dir;
    Schedule s(dir, "plans/llama-sp.plan", with(kLayers2, {"-D", "seq=128", "-D", "hidden=256", "-D", "heads=4",
                                                           "-D", "kv_heads=2", "-D", "ffn=512", "-D", "vocab=512"}));
    size_t i;
    json_t *op;
    int seen = 0;
    json_array_foreach(s.ops(1), i, op)
    {
        std::string module = json_string_value(json_object_get(op, "module"));
        if (json_object_get(op, "bytes") && module.rfind("model.layers.", 0) == 0) {
            EXPECT_EQ(json_integer_value(json_object_get(op, "bytes")), 1 * 128 * 256 * 4) << module;
            seen++;
        }
    }
    EXPECT_EQ(seen, 8);
}

double report_ratio(const std::string &plan, const std::vector<std::string> &flags, const char *key = "ratio")
{
    std::vector<std::string> args = {"--report", "--report-format=json", source_path(plan)};
    args.insert(args.end(), flags.begin(), flags.end());
    Proc p = run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *j = json_loads(p.out.c_str(), 0, &e);
    EXPECT_NE(j, nullptr) << e.text << "\n" << p.out;
    double r = j ? json_number_value(json_object_get(j, key)) : -1;
    json_decref(j);
    return r;
}

TEST(Report, RatioToTheMegatronBound)
{
    EXPECT_NEAR(report_ratio("plans/llama-megatron.plan", kLayers2), 1.0, 1e-9);
    EXPECT_NEAR(report_ratio("plans/llama-sp.plan", kLayers2), 1.0, 1e-9);
    EXPECT_NEAR(report_ratio("plans/llama-sp-input-layouts.plan", kLayers2), 1.0, 1e-9);
    EXPECT_NEAR(report_ratio("plans/llama-sp-input-layouts.plan", kLayers2, "ratio_O0"), 1.75, 1e-9);
    EXPECT_GT(report_ratio("plans/llama-replicated-attention.plan", kLayers2), 1.0);
    EXPECT_NEAR(report_ratio("plans/llama-megatron.plan", with(kLayers2, {"-D", "tp=4"})), 1.0, 1e-9);
}

TEST(Report, NoRatioAtTp1)
{
    Proc p = run_program(kTpcc, {"--report", "--report-format=json", source_path("plans/llama-sp.plan"), "-D", "tp=1",
                                 "-D", "layers=2"});
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_FALSE(contains(p.out, "\"ratio\"")) << p.out;
    EXPECT_FALSE(contains(p.out, "\"all_gather\"")) << p.out;
}

TEST(Schedule, TwoCompilesAreByteIdentical)
{
    TempDir a, b;
    Schedule s1(a, "plans/llama-sp.plan", kLayers2), s2(b, "plans/llama-sp.plan", kLayers2);
    EXPECT_EQ(slurp(s1.path), slurp(s2.path));
}

// A schedule without the two lines that identify its plan file: the path
// and the hash of its bytes.
std::string without_plan_identity(const std::string &sched)
{
    std::string out, line;
    std::istringstream in(sched);
    while (std::getline(in, line))
        if (line.rfind("  \"plan\": ", 0) && line.rfind("  \"input_hash\": ", 0))
            out += line + "\n";
    return out;
}

// A mesh dimension of one device adds no ranks: mesh(dp = 1, tp = tp) is
// mesh(tp = tp), byte for byte apart from naming another plan file.
TEST(Schedule, SizeOneMeshDimensionChangesNothing)
{
    for (const char *tp : {"tp=1", "tp=2", "tp=4"}) {
        SCOPED_TRACE(tp);
        TempDir a, b;
        std::vector<std::string> flags = {"-D", "layers=2", "-D", tp};
        Schedule one_d(a, "plans/llama-megatron.plan", flags);
        Schedule two_d(b, "tests/plans/llama-megatron-dp1.plan", flags);
        std::string x = slurp(one_d.path), y = slurp(two_d.path);
        EXPECT_EQ(without_plan_identity(x), without_plan_identity(y));
        auto lines = [](const std::string &t) { return std::count(t.begin(), t.end(), '\n'); };
        EXPECT_EQ(lines(without_plan_identity(x)), lines(x) - 2) << "exactly the two header lines are left out";
    }
}

TEST(Schedule, NothingIsWrittenForAPlanWithErrors)
{
    TempDir dir;
    std::string out = dir.path + "/x.sched";
    Proc p = run_program(kTpcc, {source_path("tests/bad/relabel-rowwise-embedding.plan"), "-o", out});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(fs::is_empty(dir.path));
}

// --- op attributes: from the model's config, never from C constants ------------------

// The values of `key` over every op of kind `op` on every rank.
std::vector<double> attribute(const Schedule &s, const std::string &op, const char *key)
{
    std::vector<double> v;
    for (size_t r = 0; r < json_array_size(json_object_get(s.root, "ranks")); r++) {
        size_t i;
        json_t *o;
        json_array_foreach(s.ops((int)r), i, o)
        {
            if (json_string_value(json_object_get(o, "op")) != op)
                continue;
            json_t *x = json_object_get(o, key);
            EXPECT_TRUE(json_is_real(x)) << op << "." << key;
            v.push_back(json_real_value(x));
        }
    }
    return v;
}

TEST(Schedule, OpAttributesFromTheHfConfig)
{
    TempDir dir;
    Schedule s(dir, "plans/llama-sp.plan",
               with(kLayers2, {"--hf-config", source_path("tests/fixtures/llama3-attrs.config.json")}));
    std::vector<double> eps = attribute(s, "rmsnorm", "eps"), theta = attribute(s, "rope_attention", "theta");
    for (double e : attribute(s, "add_rmsnorm", "eps"))   // -O1 fuses every norm but the first with its add
        eps.push_back(e);
    EXPECT_EQ(eps, std::vector<double>(2 * (2 * 2 + 1), 1e-5)) << "2 ranks x (2 layers x 2 norms + the final norm)";
    EXPECT_EQ(theta, std::vector<double>(2 * 2, 500000.0)) << "2 ranks x 2 layers: -O1 rotates q and k in attention";
    std::string text = slurp(s.path);
    EXPECT_TRUE(contains(text, "\"eps\": 1e-05")) << "written as the shortest exact real";
    EXPECT_TRUE(contains(text, "\"theta\": 500000.0"));
    json_t *cfg = json_object_get(s.root, "config");
    EXPECT_TRUE(json_is_real(json_object_get(cfg, "rms_norm_eps")));
    EXPECT_EQ(json_real_value(json_object_get(cfg, "rms_norm_eps")), 1e-5);
    EXPECT_EQ(json_real_value(json_object_get(cfg, "rope_theta")), 500000.0);
    EXPECT_TRUE(contains(text, "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"rope_scaling\": \"default\""));
    EXPECT_TRUE(contains(text, "\"scaling\": \"default\", \"factor\": 1.0")) << "no rope_scaling: the default";
}

TEST(Schedule, OpAttributesDefaultToHuggingFaces)
{
    TempDir dir;
    Schedule llama(dir, "plans/llama-sp.plan", kLayers2);
    for (double e : attribute(llama, "rmsnorm", "eps"))
        EXPECT_EQ(e, 1e-6);
    for (double t : attribute(llama, "rope_attention", "theta"))
        EXPECT_EQ(t, 10000.0);
    EXPECT_FALSE(attribute(llama, "rope_attention", "theta").empty());
    Schedule gpt2(dir, "plans/gpt2-sp-tied.plan", kLayers2);
    std::vector<double> eps = attribute(gpt2, "layernorm", "eps");
    EXPECT_EQ(eps, std::vector<double>(2 * (2 * 2 + 1), 1e-5));
}

TEST(Schedule, OpAttributesFromDefines)
{
    TempDir dir;
    Schedule llama(dir, "plans/llama-sp.plan", with(kLayers2, {"-D", "rms_norm_eps=1e-5", "-D", "rope_theta=1e6"}));
    for (double e : attribute(llama, "rmsnorm", "eps"))
        EXPECT_EQ(e, 1e-5);
    for (double t : attribute(llama, "rope_attention", "theta"))
        EXPECT_EQ(t, 1e6);
    Schedule gpt2(dir, "plans/gpt2-sp-tied.plan", with(kLayers2, {"-D", "layer_norm_epsilon=1e-3"}));
    for (double e : attribute(gpt2, "layernorm", "eps"))
        EXPECT_EQ(e, 1e-3);
    EXPECT_EQ(json_real_value(json_object_get(json_object_get(gpt2.root, "config"), "layer_norm_epsilon")), 1e-3);
}

// --- properties of every shipped plan's program -----------------------------------

struct PlanCase {
    std::string plan;
    int tp;
};

// gtest prints a parameter with PrintTo: {plan: llama-tiny, tp: 4}, not bytes
void PrintTo(const PlanCase &c, std::ostream *os)
{
    *os << "{plan: " << fs::path(c.plan).stem().string() << ", tp: " << c.tp << "}";
}

// Every shipped plan at every tp of 1, 2, 4, 8 that divides its sizes. At
// a tp that does not, the plan has errors and no program, as
// Plans/ShippedPlan.ChecksCleanAtEveryDividingTp (test_plans.cc) checks.
// (A plan that cannot even be configured is kept, to fail here too.)
std::vector<PlanCase> plan_cases()
{
    std::vector<PlanCase> v;
    for (const auto &p : files_in("plans", ".plan"))
        for (int tp : {1, 2, 4, 8}) {
            tp_unit u;
            configure(&u, p, {"tp=" + std::to_string(tp), "layers=2"});
            if (u.diags.errors || tp_divides_sizes(&u, tp))
                v.push_back({p, tp});
            tp_unit_free(&u);
        }
    return v;
}

class Program : public ::testing::TestWithParam<PlanCase> {};

TEST_P(Program, ArenaDefBeforeUseAndMatchingCollectives)
{
    const PlanCase &c = GetParam();
    tp_unit u;
    compile(&u, c.plan, {"tp=" + std::to_string(c.tp), "layers=2"});
    ASSERT_EQ(u.diags.errors, 0) << rendered(&u);
    tp_ir *ir = &u.ir;
    tp_memplan(ir);
    char err[512];
    EXPECT_TRUE(tp_memplan_verify(ir, err, sizeof err)) << err;
    // every input of an op is a model input or written by an earlier op
    std::vector<bool> written((size_t)ir->nbufs);
    for (int b = 0; b < ir->nbufs; b++)
        written[(size_t)b] = ir->bufs[b].input;
    auto root = [&](int b) {
        while (ir->bufs[b].alias_of >= 0)
            b = ir->bufs[b].alias_of;
        return b;
    };
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op &op = ir->ops[i];
        if (op.dead)
            continue;
        for (int k = 0; k < op.nin; k++)
            EXPECT_TRUE(written[(size_t)root(op.in[k])]) << "op " << i << " " << tp_op_names[op.kind] << " reads b"
                                                         << op.in[k] << " before it is written";
        for (int o = 0; o < tp_ops[op.kind].nout; o++)   // every output of a kind with several
            if (op.outs[o] >= 0)
                written[(size_t)root(op.outs[o])] = true;
    }
    // the per-rank programs the runtime loads issue the same collectives in the same order
    TempDir dir;
    std::string path = dir.path + "/p.sched";
    int nsettings;
    tp_setting *settings = tp_config_settings(&u.config, &nsettings);
    tp_schedule_meta meta = {"tpcc test", 0, TP_F32, settings, nsettings, c.plan.c_str(), 1, nullptr, TP_DP_SHARD_NONE};
    ASSERT_EQ(tp_schedule_write(ir, &meta, path.c_str(), err, sizeof err), 0) << err;
    free(settings);
    std::vector<std::vector<std::string>> seq((size_t)c.tp);
    for (int r = 0; r < c.tp; r++) {
        tr_schedule s;
        ASSERT_EQ(tr_schedule_load(&s, path.c_str(), r, c.tp, err, sizeof err), 0) << err;
        for (int i = 0; i < s.nops; i++)
            if (tp_op_is_collective(s.ops[i].kind))
                seq[(size_t)r].push_back(std::string(tp_op_names[s.ops[i].kind]) + "/" + std::to_string(s.ops[i].elems) +
                                         "/" + std::to_string(s.ops[i].dim));
        tr_schedule_free(&s);
    }
    for (int r = 1; r < c.tp; r++)
        EXPECT_EQ(seq[(size_t)r], seq[0]) << "rank " << r;
    if (c.tp == 1) {
        EXPECT_TRUE(seq[0].empty());
    }
    tp_unit_free(&u);
}

INSTANTIATE_TEST_SUITE_P(Shipped, Program, ::testing::ValuesIn(plan_cases()), [](const auto &info) {
    std::string s = fs::path(info.param.plan).stem().string() + "_tp" + std::to_string(info.param.tp);
    for (auto &ch : s)
        if (!isalnum((unsigned char)ch))
            ch = '_';
    return s;
});

}  // namespace
