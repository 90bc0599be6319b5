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

} // namespace
