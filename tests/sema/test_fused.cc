// Fused projections: tuple unpacking, split()/chunk() with torch's sizes,
// packed=, "packed_colwise", and the fused-shard check, on a small model
// written next to each plan (one fused qkv and one fused gate/up).
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::replaced;
using tpcc_test::TempDir;

namespace {

// A fused model whose body lines can be replaced: @ATTN@ (the attention
// body after qkv = qkv_proj(x)), @MLP@ (the MLP body after gu =
// gate_up_proj(x)) and @QKV@ (the qkv_proj declaration's extra arguments).
// Without plan entries the model runs replicated.
const char *const kModel = R"(config {
    hidden = 64
    heads = 4
    kv_heads = 2
    head_dim = 16
    ffn = 128
    seq = 8
    batch = 1
    tp = 2
}
module Fused {
    qkv_proj = Linear(hidden, heads * head_dim + 2 * kv_heads * head_dim, bias=False@QKV@)
    o_proj = Linear(heads * head_dim, hidden, bias=False)
    gate_up_proj = Linear(hidden, 2 * ffn, bias=False, packed=(ffn, ffn))
    down_proj = Linear(ffn, hidden, bias=False)
    def forward(x: [batch, seq, hidden]) {
        qkv = qkv_proj(x)
        @ATTN@
        gu = gate_up_proj(x + o_proj(merge_heads(a)))
        @MLP@
    }
}
)";

const char *const kAttn =
    "q, k, v = split(qkv, (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)\n"
    "        a = attention(view_heads(q, head_dim), view_heads(k, head_dim), view_heads(v, head_dim))";
const char *const kMlp = "gate, up = chunk(gu, 2, dim=-1)\n        return down_proj(silu(gate) * up)";
const char *const kPacked = ", packed=(heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)";

struct Case {
    std::string attn = kAttn, mlp = kMlp, qkv = kPacked;
    // q, k and v differ in size: tpcc's per-segment style; gate and up are
    // two equal halves, transformers' packed_colwise
    std::string qkv_style = "ColwiseParallel(tpcc_packed=True)", gate_up_style = "\"packed_colwise\"";
    int tp = 2;
};

// The diagnostics of the plan over the model the case describes.
std::string diagnostics(const Case &c, int *errors = nullptr, int *warnings = nullptr)
{
    TempDir dir;
    std::string model = replaced(replaced(replaced(kModel, "@ATTN@", c.attn), "@MLP@", c.mlp), "@QKV@", c.qkv);
    dir.write("fused.model", model);
    std::string entries;
    if (!c.qkv_style.empty())
        entries += "    \"qkv_proj\": " + c.qkv_style + ",\n    \"o_proj\": RowwiseParallel(),\n";
    if (!c.gate_up_style.empty())
        entries += "    \"gate_up_proj\": " + c.gate_up_style + ",\n    \"down_proj\": RowwiseParallel(),\n";
    std::string plan =
        dir.write("fused.plan", "model \"fused.model\"\nmesh(tp = tp)\nparallelize \"\" {\n" + entries + "}\n");
    tp_unit u;
    tpcc_test::compile(&u, plan, {"tp=" + std::to_string(c.tp)});
    std::string text = tpcc_test::rendered(&u);
    if (errors)
        *errors = u.diags.errors;
    if (warnings)
        *warnings = u.diags.warnings;
    tp_unit_free(&u);
    return text;
}

TEST(Fused, PackedColwiseChecksClean)
{
    int errors = -1, warnings = -1;
    std::string text = diagnostics(Case{}, &errors, &warnings);
    EXPECT_EQ(errors, 0) << text;
    EXPECT_EQ(warnings, 0) << text;
}

// The diagnostics of the case mention every one of `parts`.
void expect_mentions(const Case &c, std::initializer_list<std::string> parts)
{
    std::string text = diagnostics(c);
    for (const std::string &p : parts)
        EXPECT_TRUE(contains(text, p)) << p << "\n" << text;
}

Case with_gate_up(const std::string &style, const std::string &mlp = kMlp)
{
    Case c;
    c.gate_up_style = style;
    c.mlp = mlp;
    return c;
}

TEST(Fused, ChunkOfAContiguousShardIsAnError)
{
    expect_mentions(with_gate_up("ColwiseParallel()"),
                    {"ColwiseParallel shards 'gate_up_proj' contiguously", "the pieces are silently wrong",
                     "[fused-shard]", "\"packed_colwise\"", "if every op after split() takes DTensors"});
}

// At tp 1 the contiguous shard is the whole tensor: split() and chunk() of
// it are right, and PyTorch runs the plan.
TEST(Fused, ContiguousShardAtTpOneIsRight)
{
    Case c;
    c.qkv_style = c.gate_up_style = "ColwiseParallel()";
    c.tp = 1;
    int errors = -1, warnings = -1;
    std::string text = diagnostics(c, &errors, &warnings);
    EXPECT_EQ(errors, 0) << text;
    EXPECT_EQ(warnings, 0) << text;
    c.gate_up_style = "ColwiseParallel(use_local_output=False)";   // no all-gather to warn about
    text = diagnostics(c, &errors, &warnings);
    EXPECT_EQ(errors, 0) << text;
    EXPECT_EQ(warnings, 0) << text;
}

TEST(Fused, SplitOfAContiguousShardIsAnErrorEvenWithoutPacked)
{
    Case c;
    c.qkv = "";
    c.qkv_style = "ColwiseParallel()";
    expect_mentions(c, {"split_with_sizes expects split_sizes to sum exactly to 64", "declare the segments in the model"});
}

// DTensor's split rule replicates the split dim: PyTorch gathers and
// computes the right pieces, at the cost of an all-gather.
TEST(Fused, SplitOfADTensorShardGathersWithAWarning)
{
    int errors = -1, warnings = -1;
    std::string text = diagnostics(with_gate_up("ColwiseParallel(use_local_output=False)"), &errors, &warnings);
    EXPECT_EQ(errors, 0) << text;
    EXPECT_TRUE(contains(text, "DTensor replicates that dimension first, an all_gather")) << text;
    EXPECT_TRUE(contains(text, "[implicit-redistribute]")) << text;
}

// transformers' PackedColwiseParallel cuts the weight in two equal halves
// (_StridedShard(dim=0, split_factor=2)): on q/k/v (3 segments of
// different sizes) each rank would hold rows of the wrong pieces.
TEST(Fused, PackedColwiseOnUnequalSegmentsIsAnError)
{
    Case c;
    c.qkv_style = "\"packed_colwise\"";
    int errors = -1;
    std::string text = diagnostics(c, &errors);
    EXPECT_EQ(errors, 1) << text;
    for (const char *p : {"\"packed_colwise\" on 'qkv_proj'", "_StridedShard(dim=0, split_factor=2)",
                          "not two equal ones", "[hf-style]", "ColwiseParallel(tpcc_packed=True)"})
        EXPECT_TRUE(contains(text, p)) << p << "\n" << text;
}

// ... and a bias would be sharded contiguously, not by halves
TEST(Fused, PackedHalvesAreTwoEqualSegmentsWithoutABias)
{
    tp_param bias = {};
    bias.name = const_cast<char *>("bias");
    tp_module m = {};
    m.nsegments = 2;
    m.segments[0] = m.segments[1] = 64;
    EXPECT_TRUE(tp_packed_halves(&m));
    EXPECT_STREQ(tp_packed_style_for(&m), "\"packed_colwise\"");
    m.params = &bias;
    m.nparams = 1;
    EXPECT_FALSE(tp_packed_halves(&m));
    m.nparams = 0;
    m.segments[1] = 32;
    EXPECT_FALSE(tp_packed_halves(&m));
    EXPECT_STREQ(tp_packed_style_for(&m), "ColwiseParallel(tpcc_packed=True)");
    m.nsegments = 3;
    m.segments[1] = m.segments[2] = 64;
    EXPECT_FALSE(tp_packed_halves(&m));
}

// tpcc_packed is ColwiseParallel's only: RowwiseParallel does not take it
TEST(Fused, TpccPackedIsForColwiseOnly)
{
    Case c;
    c.qkv_style = "RowwiseParallel(tpcc_packed=True)";
    EXPECT_TRUE(contains(diagnostics(c), "tpcc_packed")) << diagnostics(c);
}

TEST(Fused, PackedColwiseNeedsALinearWithSegments)
{
    Case c;
    c.qkv = "";
    expect_mentions(c, {"ColwiseParallel does not support 'qkv_proj'", "tpcc_packed=True shards the segments",
                        "packed=(...)"});
    c.qkv_style = "\"packed_colwise\"";
    expect_mentions(c, {"packed_colwise does not support 'qkv_proj'", "packed=(...)"});
}

TEST(Fused, UnknownHuggingFaceStyleSuggestsOne)
{
    Case c;
    c.qkv_style = "\"packed_colwse\"";
    expect_mentions(c, {"\"packed_colwse\" is not a Hugging Face tp_plan style",
                        "did you mean \"packed_colwise\"?"});
}

TEST(Fused, PackedOutputsAreReadOnlyBySplittingIntoTheirSegments)
{
    const std::string packed = "\"packed_colwise\"";
    expect_mentions(with_gate_up(packed, "return down_proj(silu(gu))"),
                    {"the packed output of 'gate_up_proj'", "reaches silu"});
    expect_mentions(with_gate_up(packed, "a, b, d, e = chunk(gu, 4, dim=-1)\n        return down_proj(silu(a))"),
                    {"chunk() cuts the packed output of 'gate_up_proj' into 4 pieces, but it packs 2"});
    // cut along the sequence, each half is still packed
    expect_mentions(with_gate_up(packed, "a, b = chunk(gu, 2, dim=1)\n        return down_proj(silu(a))"),
                    {"the packed output of 'gate_up_proj'", "reaches silu"});
}

TEST(Fused, UnpackingCountsAndSizesFollowPython)
{
    const std::string packed = "\"packed_colwise\"";
    expect_mentions(with_gate_up(packed, "gate, up, extra = chunk(gu, 2, dim=-1)\n        return down_proj(gate)"),
                    {"3 names unpack 2 tensors: Python raises ValueError (not enough values"});
    expect_mentions(with_gate_up(packed, "gate, up = split(gu, (100, 100), dim=-1)\n        return down_proj(gate)"),
                    {"the sections add up to 200, but the dimension has 256"});
    expect_mentions(with_gate_up(packed, "gate, up = gu\n        return down_proj(gate)"),
                    {"only the tuples split() and chunk() return can be unpacked"});
    expect_mentions(with_gate_up(packed, "gate, up = chunk(gu, 2, dims=-1)\n        return down_proj(gate)"),
                    {"chunk() has no argument 'dims'; it takes chunks, dim"});
    expect_mentions(with_gate_up(packed, "gate, up = chunk(gu, 2, dim=3)\n        return down_proj(gate)"),
                    {"chunk(): dim 3 is outside the tensor's 3 dimensions (-3 to 2)"});
}

// torch.chunk: pieces of ceil(n / chunks), the last smaller; torch.split
// with an int: pieces of that size. Replicated here (no plan entries).
TEST(Fused, ChunkAndSplitSizesAreTorchs)
{
    Case c;
    c.qkv_style = c.gate_up_style = "";
    c.mlp = "a, b, d = chunk(gu, 3, dim=-1)\n        return down_proj(silu(a) * b)";
    expect_mentions(c, {"'down_proj' expects 128 input features, gets 86"});   // 256 in 3: 86, 86, 84
    c.mlp = "a, b, d = split(gu, 100, dim=-1)\n        return down_proj(d)";
    expect_mentions(c, {"'down_proj' expects 128 input features, gets 56"});
}

} // namespace
