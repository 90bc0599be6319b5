// ColwiseParallel(tpcc_replicate_heads=H): the value is a head count, and
// the divisibility help offers the option only where it can work. The
// wrong head counts are bad plans (tests/bad/replicate-heads-*.plan); these
// are the cases whose errors drop a plan entry and so bring consequences.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::TempDir;

namespace {

// The diagnostics of a Llama plan (8 heads, 4 kv heads at head_dim 64)
// whose k_proj and v_proj entries are `kv_style`, at `tp`; `config` is
// added to the plan's config block.
std::string diagnostics(const std::string &kv_style, int tp, const std::string &config = "")
{
    TempDir dir;
    std::string plan = dir.write(
        "llama.plan", "model \"" + tpcc_test::source_path("models/llama.model") + "\"\n"
                      "config {\n    heads = 8\n    kv_heads = 4\n    hidden = 512\n" + config + "}\n"
                      "mesh(tp = tp)\nparallelize \"model.layers.*\" {\n"
                      "    \"self_attn.q_proj\": ColwiseParallel(),\n"
                      "    \"self_attn.k_proj\": " + kv_style + ",\n"
                      "    \"self_attn.v_proj\": " + kv_style + ",\n"
                      "    \"self_attn.o_proj\": RowwiseParallel(),\n"
                      "}\n");
    tp_unit u;
    tpcc_test::compile(&u, plan, {"tp=" + std::to_string(tp)});
    std::string text = tpcc_test::rendered(&u);
    tp_unit_free(&u);
    return text;
}

const char *const kNotABool = "tpcc_replicate_heads takes the number of heads the projection's output holds "
                              "(such as kv_heads), not True or False";

// True is 1 in Python: it would replicate one head over every rank.
TEST(ReplicateHeads, TrueIsNotAHeadCount)
{
    std::string text = diagnostics("ColwiseParallel(tpcc_replicate_heads=True)", 2);
    EXPECT_TRUE(contains(text, kNotABool)) << text;
    text = diagnostics("ColwiseParallel(tpcc_replicate_heads=replicate)", 2, "    replicate = True\n");
    EXPECT_TRUE(contains(text, kNotABool)) << text;
}

TEST(ReplicateHeads, TheRightCountChecksCleanAtEveryTp)
{
    for (int tp : {1, 2, 4, 8}) {
        std::string text = diagnostics("ColwiseParallel(tpcc_replicate_heads=kv_heads)", tp);
        EXPECT_FALSE(contains(text, "error")) << "tp=" << tp << "\n" << text;
    }
}

// Replicating kv heads lines them up with the query heads on each rank
// only when the query heads split: the help offers it exactly then.
TEST(ReplicateHeads, OfferedForKvHeadsBesideQueryHeadsThatSplit)
{
    std::string text = diagnostics("ColwiseParallel()", 8);   // 8 heads split, 4 kv heads do not
    EXPECT_TRUE(contains(text, "4 kv_heads do not split over 8 ranks")) << text;
    EXPECT_TRUE(contains(text, "ColwiseParallel(tpcc_replicate_heads=kv_heads) on this projection")) << text;
}

// With the query heads indivisible too, replicating them would leave
// o_proj whole heads on every rank, and replicating k and v alone does
// not line them up: no help names the option.
TEST(ReplicateHeads, NotOfferedWhenTheQueryHeadsDoNotSplit)
{
    std::string text = diagnostics("ColwiseParallel()", 16);
    EXPECT_TRUE(contains(text, "8 heads do not split over 16 ranks")) << text;
    EXPECT_FALSE(contains(text, "tpcc_replicate_heads")) << text;
}

// The k piece of Phi-3's packed qkv_proj is named after its section
// (kv_heads * head_dim), and packed_colwise takes no tpcc_replicate_heads.
TEST(ReplicateHeads, NotOfferedForAPackedProjection)
{
    tp_unit u;
    tpcc_test::compile(&u, tpcc_test::source_path("plans/phi3-sp.plan"),
                       {"tp=4", "heads=8", "kv_heads=2", "hidden=256"});
    std::string text = tpcc_test::rendered(&u);
    tp_unit_free(&u);
    EXPECT_TRUE(contains(text, "2 kv_heads do not split over 4 ranks")) << text;
    EXPECT_FALSE(contains(text, "tpcc_replicate_heads")) << text;
}

} // namespace
