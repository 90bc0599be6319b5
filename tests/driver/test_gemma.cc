// The Gemma family through the tpcc command line: published configs
// against models/gemma.model and plans/gemma-sp.plan (and Gemma 2's), what
// the schedule computes (GELU form, (1 + w) norms, the embedding normaliser
// in the schedule's dtype, soft-capping), and the config.json values it
// refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;
const std::string kPlan = source_path("plans/gemma-sp.plan");
const std::string kGemma7b = source_path("tests/fixtures/published/gemma-7b/config.json");

Proc tpcc(const std::vector<std::string> &args) { return tpcc_test::run_program(kTpcc, args); }

// Gemma-7B's config.json with `from` replaced by `to`, written into dir.
std::string gemma7b_with(const TempDir &dir, const std::string &from, const std::string &to)
{
    std::string text = slurp(kGemma7b);
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
        text.replace(at, from.size(), to);
    return dir.write("config.json", text);
}

// tpcc --check of the Gemma plan on Gemma-7B's config.json edited so.
Proc check_with(const TempDir &dir, const std::string &from, const std::string &to)
{
    return tpcc({"--check", kPlan, "--hf-config", gemma7b_with(dir, from, to)});
}

// The schedule of one layer of Gemma-7B as `dtype`, as text.
std::string schedule(const TempDir &dir, const std::string &config, const std::string &dtype)
{
    const std::string out = dir.path + "/gemma-" + dtype + ".sched";
    Proc r = tpcc({kPlan, "--hf-config", config, "-D", "layers=1", "-D", "seq=16", "--dtype", dtype, "-o", out});
    EXPECT_EQ(r.code(), 0) << r.describe();
    return r.code() == 0 ? slurp(out) : "";
}

// The first op of `kind` in a schedule's text: its JSON object, "" if none.
std::string first_op(const std::string &sched, const std::string &kind)
{
    size_t at = sched.find("{\"op\": \"" + kind + "\"");
    return at == std::string::npos ? "" : sched.substr(at, sched.find('}', at) - at + 1);
}

// What the schedule computes: the tanh GELU for the legacy "gelu" (as
// GemmaConfig reads it), Gemma's (1 + w) norms, and the normaliser
// sqrt(3072) rounded to the dtype (55.5 in bf16, as transformers' own
// comment on Gemma notes).
TEST(GemmaHf, ScheduleComputesGemmasNumerics)
{
    TempDir dir;
    std::string f32 = schedule(dir, kGemma7b, "fp32");
    EXPECT_TRUE(contains(first_op(f32, "gelu"), "\"tanh\": true")) << first_op(f32, "gelu");
    EXPECT_TRUE(contains(first_op(f32, "rmsnorm"), "\"eps\": 1e-06, \"unit_offset\": true"))
        << first_op(f32, "rmsnorm");
    EXPECT_TRUE(contains(first_op(f32, "scale"), "\"scale\": 55.42562484741211,"))
        << "float32(sqrt(3072)): " << first_op(f32, "scale");
    std::string bf16 = schedule(dir, kGemma7b, "bf16");
    EXPECT_TRUE(contains(first_op(bf16, "scale"), "\"scale\": 55.5,"))
        << "bf16(sqrt(3072)): " << first_op(bf16, "scale");
    // gelu_python is transformers' exact GELU
    std::string exact = schedule(dir, gemma7b_with(dir, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu_python\""),
                                 "fp32");
    EXPECT_TRUE(contains(first_op(exact, "gelu"), "\"tanh\": false")) << first_op(exact, "gelu");
}

// transformers computes quick_gelu and tpcc does not yet: unsupported; a
// name transformers does not define either is an error (ACT2FN raises).
TEST(GemmaHf, AnActivationTpccDoesNotComputeIsNamed)
{
    TempDir dir;
    Proc r = check_with(dir, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"quick_gelu\"");
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: activation(): transformers' activation \"quick_gelu\": tpcc would need "
                                "its kernel (it computes silu")) << r.describe();
    EXPECT_TRUE(contains(r.err, "note: 'hidden_act' is defined here")) << r.describe();
    Proc none = check_with(dir, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"quick_gleu\"");
    EXPECT_EQ(none.code(), 1) << none.describe();
    EXPECT_TRUE(contains(none.err, "error: activation(): \"quick_gleu\" is no activation transformers defines "
                                   "(ACT2FN raises KeyError)")) << none.describe();
}

TEST(GemmaHf, BidirectionalAttentionIsAnError)
{
    TempDir dir;
    Proc r = check_with(dir, "\"use_cache\": true,", "\"use_cache\": true, \"use_bidirectional_attention\": true,");
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "sets use_bidirectional_attention to true, which changes what the model computes"))
        << r.describe();
    Proc off = check_with(dir, "\"use_cache\": true,", "\"use_cache\": true, \"use_bidirectional_attention\": null,");
    EXPECT_EQ(off.code(), 0) << "null is GemmaConfig's default\n" << off.describe();
}

// gelu(x, approximate=) takes torch's two values; anything else is an error
// at the argument, as torch raises.
TEST(GemmaLanguage, GeluApproximateIsTorchs)
{
    TempDir dir;
    std::string model = slurp(source_path("models/gemma.model"));
    const std::string call = "activation(gate_proj(x), hidden_act)";
    size_t at = model.find(call);
    ASSERT_NE(at, std::string::npos);
    model.replace(at, call.size(), "gelu(gate_proj(x), approximate=\"tanhh\")");
    dir.write("gemma.model", model);
    std::string plan = slurp(kPlan);
    at = plan.find("../models/gemma.model");
    ASSERT_NE(at, std::string::npos);
    plan.replace(at, 21, "gemma.model");
    Proc r = tpcc({"--check", dir.write("gemma-sp.plan", plan)});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "gelu(): approximate must be \"none\" or \"tanh\", as in torch")) << r.describe();
}

// Gemma-2-2B: soft-capping and the attention scale in the schedule; its
// 4096 window is exact at seq 4096 and refused above (the published-configs
// sweep checks it at tp 2, 4, 8).
TEST(Gemma2Hf, PublishedConfigComputesCappingAndAShortWindowIsUnsupported)
{
    const std::string plan = source_path("plans/gemma2-sp.plan");
    const std::string cfg = source_path("tests/fixtures/published/gemma-2-2b/config.json");
    TempDir dir;
    const std::string out = dir.path + "/gemma2.sched";
    Proc r = tpcc({plan, "--hf-config", cfg, "-D", "layers=1", "-D", "seq=4096", "-o", out});
    ASSERT_EQ(r.code(), 0) << r.describe();
    std::string sched = slurp(out);
    EXPECT_TRUE(contains(first_op(sched, "rope_attention"), "\"scale\": 0.0625, \"softcap\": 50.0"))
        << "query_pre_attn_scalar 256: " << first_op(sched, "rope_attention");
    EXPECT_TRUE(contains(first_op(sched, "softcap"), "\"cap\": 30.0")) << first_op(sched, "softcap");
    Proc longer = tpcc({"--check", plan, "--hf-config", cfg, "-D", "seq=4098"});
    EXPECT_EQ(longer.code(), 0) << longer.describe();
    EXPECT_TRUE(contains(longer.err, "unsupported: attention(): sliding_window 4096 is below seq 4098"))
        << longer.describe();
    EXPECT_TRUE(contains(longer.err, "-D seq=4096 or less")) << longer.describe();
}

// Gemma's head is tied to its embedding: a plan that shards them
// differently (the embedding by columns, the head by rows of the same
// weight) is a tied-weights error, as on GPT-2.
TEST(GemmaLanguage, TiedHeadAndEmbeddingMustAgree)
{
    TempDir dir;
    std::string plan = slurp(kPlan);
    const std::string row = "\"model.embed_tokens\": RowwiseParallel(";
    size_t at = plan.find(row);
    ASSERT_NE(at, std::string::npos);
    plan.replace(at, row.size(), "\"model.embed_tokens\": ColwiseParallel(");
    at = plan.find("../models/gemma.model");
    ASSERT_NE(at, std::string::npos);
    plan.replace(at, 21, source_path("models/gemma.model"));
    Proc r = tpcc({"--check", dir.write("gemma-sp.plan", plan)});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "'lm_head.weight' is tied to 'model.embed_tokens.weight'")) << r.describe();
    EXPECT_TRUE(contains(r.err, "[tied-weights]")) << r.describe();
}

}  // namespace
