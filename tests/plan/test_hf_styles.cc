// Hugging Face's tp_plan strings one at a time, on Llama: what each does
// to the values at its module (--explain) and which collectives it adds,
// as transformers' class for the name does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

// --explain of Llama (1 layer, tp 2) under `entries` in the root block,
// with transformers' own layer plan unless `layers` replaces it.
Proc explain(const std::string &entries, const std::string &layers = "", const std::string &config = "")
{
    TempDir dir;
    const std::string hf_layers = R"(
    "model.layers.*.self_attn.q_proj": "colwise",
    "model.layers.*.self_attn.k_proj": "colwise",
    "model.layers.*.self_attn.v_proj": "colwise",
    "model.layers.*.self_attn.o_proj": "rowwise",
    "model.layers.*.mlp.gate_proj": "colwise",
    "model.layers.*.mlp.up_proj": "colwise",
    "model.layers.*.mlp.down_proj": "rowwise",)";
    std::string plan = "model \"" + source_path("models/llama.model") + "\"\nconfig { tp = 2\nlayers = 1\n" +
                       config + "}\nparallelize \"\" {" + (layers.empty() ? hf_layers : layers) + "\n" +
                       entries + "\n}\n";
    return tpcc_test::run_program(kTpcc, {"--explain", dir.write("p.plan", plan)});
}

// The --explain row of a module: "fqn  style  inputs -> output".
std::string row(const Proc &p, const std::string &fqn)
{
    size_t at = p.out.find("\n" + fqn + " ");
    return at == std::string::npos ? "" : p.out.substr(at + 1, p.out.find('\n', at + 1) - at - 1);
}

TEST(HfStyles, EmbeddingRowwiseAllReducesTheMaskedLookups)
{
    Proc p = explain(R"("model.embed_tokens": "embedding_rowwise",)");
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(row(p, "model.embed_tokens"), "-> Replicate() plain")) << p.out;
    EXPECT_TRUE(contains(p.out, "all_reduce      MaskPartial()")) << p.out;
    EXPECT_TRUE(contains(p.out, "EmbeddingParallel(shard_dim=0)")) << p.out;
}

TEST(HfStyles, EmbeddingColwiseGathersTheEmbeddingDim)
{
    Proc p = explain(R"("model.embed_tokens": "embedding_colwise",)");
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "all_gather      Shard(2)     -> Replicate()")) << p.out;
    EXPECT_TRUE(contains(row(p, "model.embed_tokens"), "-> Replicate() plain")) << p.out;
}

TEST(HfStyles, RowwiseSplitInputSlicesLocallyThenAllReduces)
{
    Proc p = explain("", R"(
    "model.layers.*.mlp.down_proj": "rowwise_split_input",)");
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "local_slice     Replicate()  -> Shard(2)")) << p.out;
    EXPECT_TRUE(contains(p.out, "all_reduce      Partial()    -> Replicate()")) << p.out;
}

// SequenceParallel(use_local_output=True): a plain output, where PyTorch's
// SequenceParallel() hands over a DTensor. Its input, the whole hidden
// states, is labelled a sequence shard: the relabel error.
TEST(HfStyles, SequenceParallelLabelsAndReturnsPlain)
{
    Proc p = explain(R"("model.norm": "sequence_parallel",)");
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "\"sequence_parallel\" on 'model.norm' labels its input as Shard(1)")) << p.err;
    EXPECT_TRUE(contains(p.err, "[relabel]")) << p.err;
}

// AllReduceParallel labels the output Partial: right after local_rowwise's
// partial sums, tp times the value after a rowwise that already reduced.
TEST(HfStyles, AllReduceSumsPartialOutputsAndRelabelsWholeOnes)
{
    Proc ok = explain("", R"(
    "model.layers.*.mlp": "all_reduce",
    "model.layers.*.mlp.gate_proj": "local_colwise",
    "model.layers.*.mlp.up_proj": "local_colwise",
    "model.layers.*.mlp.down_proj": "local_rowwise",)");
    ASSERT_EQ(ok.code(), 0) << ok.describe();
    EXPECT_TRUE(contains(row(ok, "model.layers.0.mlp"), "-> Replicate() plain")) << ok.out;
    EXPECT_TRUE(contains(ok.out, "model.layers.0.mlp  <- model.layers.*.mlp")) << ok.out;
    Proc bad = explain(R"("model.layers.*.mlp": "all_reduce",)");
    EXPECT_EQ(bad.code(), 1) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "\"all_reduce\" on 'model.layers.0.mlp' (its output) labels its input Partial()"))
        << bad.err;
}

// No forward hook: the module computes as if it had no entry, and its
// parameters stay whole.
TEST(HfStyles, HooklessStylesChangeNothingInTheForwardPass)
{
    for (const char *style : {"replicate", "local_params", "replicated_with_grad_allreduce"}) {
        Proc p = explain(std::string(R"("lm_head": ")") + style + "\",");
        ASSERT_EQ(p.code(), 0) << style << ": " << p.describe();
        EXPECT_TRUE(contains(row(p, "lm_head"), "Replicate() plain [1, 2048, 4096] -> Replicate() plain")) << p.out;
        EXPECT_FALSE(contains(p.out, "<- lm_head")) << p.out;   // no collective
    }
}

TEST(HfStyles, MlaKvAProjIsAnIdentityWhereTheConfigHasItsKey)
{
    Proc p = explain(R"("model.layers.*.self_attn.q_proj": "mla_kv_a_proj",)", "\n", "qk_rope_head_dim = 8\n");
    EXPECT_EQ(p.code(), 0) << p.describe();
    Proc q = explain(R"("model.layers.*.self_attn.q_proj": "mla_kv_a_proj",)", "\n");
    EXPECT_EQ(q.code(), 1) << q.describe();
    EXPECT_TRUE(contains(q.err, "reads the config's qk_rope_head_dim")) << q.err;
}

// IsolatedParallel on a module without parameters: a DTensor input becomes
// local, so its children see a plain tensor.
TEST(HfStyles, LocalMakesADTensorInputLocal)
{
    const std::string dtensor_norm = R"(
    "model.layers.*.post_attention_layernorm": PrepareModuleOutput(output_layouts=Replicate(),
        desired_output_layouts=Replicate(), use_local_output=False),)";
    Proc p = explain(R"("model.layers.*.mlp": "local",)", "", "");
    ASSERT_EQ(p.code(), 0) << p.describe();
    Proc q = explain(dtensor_norm + "\n\"model.layers.*.mlp\": \"local\",");
    ASSERT_EQ(q.code(), 0) << q.describe();
    EXPECT_TRUE(contains(row(q, "model.layers.0.mlp"), "local")) << q.out;
    EXPECT_TRUE(contains(row(q, "model.layers.0.mlp"), "Replicate() DTensor")) << q.out;
    EXPECT_TRUE(contains(row(q, "model.layers.0.mlp.gate_proj"), "Replicate() plain [1, 2048, 4096] ->")) << q.out;
    Proc r = explain(R"("model.layers.*.input_layernorm": "local",)");
    EXPECT_EQ(r.code(), 1) << r.describe();   // it would divide the norm's weight by tp
    EXPECT_TRUE(contains(r.err, "divides the module's own parameters by tp")) << r.err;
}

}  // namespace
