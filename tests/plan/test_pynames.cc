// Python pasted as written (compiler/plan/pynames.c): what import lines and
// top-level names bind, that a binding shadows the bare class name and
// holds from its line on, that conditions read the configuration (-D
// included), and that a model file refuses imports. The errors themselves
// are in tests/bad/python-*.plan.
#include <gtest/gtest.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using namespace tpcc_test;

namespace {

// A Llama plan whose entries for q_proj and o_proj are `q` and `o`, after
// the lines `head`.
std::string plan_text(const std::string &head, const std::string &q, const std::string &o,
                      const std::string &lm_head = "ColwiseParallel(output_layouts=Replicate())")
{
    return "model \"" + source_path("models/llama.model") + "\"\n" + head +
           "\nconfig { tp = 2 loss_parallel = True layers = 2 }\n"
           "parallelize \"model.layers.*\" {\n"
           "    \"self_attn.q_proj\": " + q + ",\n"
           "    \"self_attn.k_proj\": ColwiseParallel(),\n"
           "    \"self_attn.v_proj\": ColwiseParallel(),\n"
           "    \"self_attn.o_proj\": " + o + ",\n"
           "    \"mlp.gate_proj\": ColwiseParallel(),\n"
           "    \"mlp.up_proj\": ColwiseParallel(),\n"
           "    \"mlp.down_proj\": RowwiseParallel(),\n"
           "}\n"
           "parallelize \"\" {\n"
           "    \"model.embed_tokens\": RowwiseParallel(input_layouts=Replicate()),\n"
           "    \"lm_head\": " + lm_head + ",\n"
           "}\n";
}

struct Checked {
    int errors = 0, warnings = 0;
    std::string text;
    std::string q_style, o_style;   // the style each entry became
    int undefined_fixits = -1;      // fix-its of the "is not defined" error, if there is one
};

Checked check(const std::string &text, const std::vector<std::string> &defines = {})
{
    TempDir dir;
    std::string path = dir.write("p.plan", text);
    tp_unit u;
    compile(&u, path, defines);
    Checked c;
    c.errors = u.diags.errors;
    c.warnings = u.diags.warnings;
    c.text = rendered(&u);
    for (int i = 0; i < u.diags.count; i++)
        if (std::string(u.diags.items[i].message).find("is not defined") != std::string::npos)
            c.undefined_fixits = u.diags.items[i].nfixits;
    for (int i = 0; i < u.plan.nstyles; i++) {
        const tp_style *s = u.plan.styles[i];
        if (std::string(s->pattern) == "model.layers.*.self_attn.q_proj")
            c.q_style = s->name;
        if (std::string(s->pattern) == "model.layers.*.self_attn.o_proj")
            c.o_style = s->name;
    }
    tp_unit_free(&u);
    return c;
}

// Shard(dim=1) is PyTorch's own spelling of Shard(1) (seed scripts write
// it); any other keyword is no placement.
TEST(PlanPlacements, ShardTakesItsDimensionByKeywordAsPyTorchDoes)
{
    Checked by_keyword = check(plan_text("", "ColwiseParallel(output_layouts=Shard(dim=-1))", "RowwiseParallel()"));
    Checked positional = check(plan_text("", "ColwiseParallel(output_layouts=Shard(-1))", "RowwiseParallel()"));
    EXPECT_EQ(by_keyword.errors, 0) << by_keyword.text;
    EXPECT_EQ(by_keyword.warnings, positional.warnings) << by_keyword.text << positional.text;
    Checked wrong = check(plan_text("", "ColwiseParallel(output_layouts=Shard(dims=-1))", "RowwiseParallel()"));
    EXPECT_GE(wrong.errors, 1) << wrong.text;     // the entry dropped: its neighbours disagree with it too
    EXPECT_NE(wrong.text.find("expected Replicate(), Shard(d) or Partial()"), std::string::npos) << wrong.text;
    // Partial's reduce op, positional or by keyword: a sum is all tpcc models
    for (const char *sum : {"Partial()", "Partial(\"sum\")", "Partial(reduce_op=\"sum\")"}) {
        Checked c = check(plan_text("", "ColwiseParallel()", std::string("RowwiseParallel(input_layouts=") + sum + ")"));
        Checked plain = check(plan_text("", "ColwiseParallel()", "RowwiseParallel(input_layouts=Partial())"));
        EXPECT_EQ(c.errors, plain.errors) << sum << c.text;
        EXPECT_EQ(c.warnings, plain.warnings) << sum << c.text;
    }
    Checked avg = check(plan_text("", "ColwiseParallel()", "RowwiseParallel(input_layouts=Partial(reduce_op=\"avg\"))"));
    EXPECT_NE(avg.text.find("Partial(reduce_op=\"avg\"): tpcc models sums only"), std::string::npos) << avg.text;
}

TEST(PyNames, AliasesFromImportLinesAndAssignments)
{
    Checked c = check(plan_text("from torch.distributed.tensor.parallel import ColwiseParallel as colwise_parallel, "
                                "RowwiseParallel\n"
                                "from torch.distributed.tensor import (\n    Shard,\n    Replicate,\n)\n"
                                "import torch.distributed.tensor.parallel as tp\n"
                                "rowwise_parallel, prepare = (tp.RowwiseParallel, tp.PrepareModuleInput)\n",
                                "colwise_parallel()", "rowwise_parallel()"));
    EXPECT_EQ(c.errors, 0) << c.text;
    EXPECT_EQ(c.q_style, "ColwiseParallel");
    EXPECT_EQ(c.o_style, "RowwiseParallel");
}

TEST(PyNames, OldAndPlacementModulesImport)
{
    Checked c = check(plan_text("from torch.distributed._tensor import Replicate as R\n"
                                "from torch.distributed.tensor.placement_types import Shard\n"
                                "import torch\n",
                                "torch.distributed.tensor.parallel.ColwiseParallel(input_layouts=R())",
                                "RowwiseParallel(input_layouts=Shard(-1))"));
    EXPECT_EQ(c.errors, 0) << c.text;
    EXPECT_EQ(c.q_style, "ColwiseParallel");
}

// As in Python, a name bound in the file hides the class of that name.
TEST(PyNames, ABindingShadowsTheBareName)
{
    Checked c = check(plan_text("from torch.distributed.tensor.parallel import ColwiseParallel as RowwiseParallel\n",
                                "ColwiseParallel()", "RowwiseParallel()"));
    EXPECT_EQ(c.o_style, "ColwiseParallel") << c.text;
    EXPECT_GT(c.errors, 0) << "o_proj colwise breaks the layer";
}

// loss_parallel, mesh, model and config are words of the plan language;
// in an import line they are Python's names: imported, or an alias that
// then names the style.
TEST(PyNames, KeywordsAsImportedNamesAndAliases)
{
    Checked c = check(plan_text("from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel\n"
                                "from torch.distributed.tensor.parallel import ColwiseParallel as mesh, "
                                "RowwiseParallel as model\n"
                                "from torch.distributed.tensor.parallel.style import PrepareModuleInput as config\n"
                                "import torch.distributed.tensor.parallel as hf\n",
                                "mesh()", "model()"));
    EXPECT_EQ(c.errors, 0) << c.text;
    EXPECT_EQ(c.q_style, "ColwiseParallel");
    EXPECT_EQ(c.o_style, "RowwiseParallel");
}

// Every module of torch 2.15's torch.distributed.tensor and _tensor
// imports; a name it does not have, or a module it does not have, is
// Python's error.
TEST(PyNames, TorchSubmodulesImport)
{
    Checked c = check(plan_text("from torch.distributed.tensor.parallel.style import ColwiseParallel as C\n"
                                "from torch.distributed.tensor.parallel.api import parallelize_module\n"
                                "from torch.distributed.tensor.parallel.loss import loss_parallel\n"
                                "from torch.distributed.tensor.parallel.input_reshard import input_reshard\n"
                                "import torch.distributed.tensor.parallel.ddp\n"
                                "from torch.distributed.tensor.parallel import fsdp, ddp, input_reshard\n"
                                "from torch.distributed.tensor.parallel.fsdp import DTensorExtensions\n"
                                "from torch.distributed.tensor.experimental import local_map, context_parallel\n"
                                "from torch.distributed.tensor.debug import CommDebugMode, visualize_sharding\n"
                                "from torch.distributed.tensor._api import DTensor\n"
                                "from torch.distributed.tensor import _api, experimental, debug\n"
                                "from torch.distributed.tensor._ops._view_ops import view_groups\n"
                                "from torch.distributed._tensor.api import distribute_tensor\n"
                                "from torch.distributed._tensor.experimental import implicit_replication\n"
                                "import torch.distributed._tensor._utils as u\n"
                                "from torch.distributed.tensor.parallel import style\n",
                                "C()", "style.RowwiseParallel()"));
    EXPECT_EQ(c.errors, 0) << c.text;
    EXPECT_EQ(c.q_style, "ColwiseParallel");

    Checked bad = check(plan_text("from torch.distributed.tensor.debug import ColwiseParallel\n"
                                  "from torch.distributed._tensor.debug import CommDebugMode\n"
                                  "from torch.distributed.tensor.parallel.api import RowwiseParallel\n"
                                  "from torch.distributed.tensor._api import X as Y\n",
                                  "Y()", "RowwiseParallel()"));
    EXPECT_NE(bad.text.find("cannot import name 'ColwiseParallel' from 'torch.distributed.tensor.debug'"),
              std::string::npos) << bad.text;
    EXPECT_NE(bad.text.find("No module named 'torch.distributed._tensor.debug'"), std::string::npos) << bad.text;
    EXPECT_NE(bad.text.find("cannot import name 'RowwiseParallel' from 'torch.distributed.tensor.parallel.api'"),
              std::string::npos) << bad.text;
    EXPECT_NE(bad.text.find("X comes from torch.distributed.tensor._api, which tpcc does not read"),
              std::string::npos) << bad.text;
}

// colwise_parallel -> ColwiseParallel is a sure fix only while
// ColwiseParallel means PyTorch's class: here the file rebinds it.
TEST(PyNames, NoRenameToAClassNameTheFileRebinds)
{
    Checked plain = check(plan_text("from torch.distributed.tensor.parallel import ColwiseParallel\n",
                                    "colwise_parallel()", "RowwiseParallel()"));
    EXPECT_EQ(plain.undefined_fixits, 1) << plain.text;

    for (const char *head : {"from torch.distributed.tensor.parallel import RowwiseParallel as ColwiseParallel\n",
                             "from mylib import ColwiseParallel\n",
                             "ColwiseParallel, = (RowwiseParallel,)\n"}) {
        Checked c = check(plan_text(head, "colwise_parallel()", "RowwiseParallel()"));
        EXPECT_EQ(c.undefined_fixits, 0) << head << c.text;
        EXPECT_NE(c.text.find("did you mean 'ColwiseParallel'?"), std::string::npos) << c.text;
        EXPECT_NE(c.text.find("--fix leaves it: this file binds 'ColwiseParallel' to something else"),
                  std::string::npos) << c.text;
    }
    // a rebinding after the use counts too: the file means something else by the name
    Checked after = check(plan_text("", "colwise_parallel()", "RowwiseParallel()") +
                          "ColwiseParallel = RowwiseParallel\n");
    EXPECT_EQ(after.undefined_fixits, 0) << after.text;
}

// Python's unpacking without parentheses and of one element.
TEST(PyNames, TupleUnpackingForms)
{
    Checked c = check(plan_text("q, o = ColwiseParallel, RowwiseParallel\n"
                                "one, = (ColwiseParallel,)\n"
                                "x, y, = ColwiseParallel, RowwiseParallel\n",
                                "q()", "o()"));
    EXPECT_EQ(c.errors, 0) << c.text;
    EXPECT_EQ(c.q_style, "ColwiseParallel");
    EXPECT_EQ(c.o_style, "RowwiseParallel");
    Checked one = check(plan_text("one, = (ColwiseParallel,)\n", "one()", "RowwiseParallel()"));
    EXPECT_EQ(one.errors, 0) << one.text;
    EXPECT_EQ(one.q_style, "ColwiseParallel");

    Checked single = check(plan_text("q, = ColwiseParallel\n", "ColwiseParallel()", "RowwiseParallel()"));
    EXPECT_NE(single.text.find("cannot unpack a single value into 1 name"), std::string::npos) << single.text;
    Checked more = check(plan_text("q, o = ColwiseParallel, RowwiseParallel, ColwiseParallel\n",
                                   "ColwiseParallel()", "RowwiseParallel()"));
    EXPECT_NE(more.text.find("too many values to unpack (expected 2)"), std::string::npos) << more.text;
}

TEST(PyNames, ConditionsReadTheConfigAndDefines)
{
    const std::string lm_head =
        "ColwiseParallel(output_layouts=Shard(-1) if loss_parallel else Replicate(), "
        "use_local_output=not loss_parallel)";
    std::string text = plan_text("", "ColwiseParallel()", "RowwiseParallel()", lm_head) + "loss_parallel()\n";
    Checked on = check(text);
    EXPECT_EQ(on.errors, 0) << on.text;
    EXPECT_EQ(on.warnings, 0) << on.text;
    // off: lm_head's output is a plain Replicate tensor, which loss_parallel() leaves alone
    Checked off = check(text, {"loss_parallel=false"});
    EXPECT_EQ(off.errors, 0) << off.text;
    EXPECT_NE(off.text.find("loss_parallel() has no effect"), std::string::npos) << off.text;
}

TEST(PyNames, ConditionChoosesTheTupleABindingGets)
{
    std::string head = "from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel, Float8RowwiseParallel\n"
                       "colwise, rowwise = (Float8ColwiseParallel, Float8RowwiseParallel) if float8 "
                       "else (ColwiseParallel, RowwiseParallel)\n";
    std::string text = plan_text(head, "colwise()", "rowwise()");
    text.replace(text.find("layers = 2 }"), 12, "layers = 2 float8 = False }");
    Checked plain = check(text);
    EXPECT_EQ(plain.errors, 0) << plain.text;
    Checked float8 = check(text, {"float8=true"});
    EXPECT_NE(float8.text.find("Float8ColwiseParallel comes from torchao.float8.float8_tensor_parallel"),
              std::string::npos)
        << float8.text;
}

TEST(PyNames, ModelFilesTakeNoImports)
{
    TempDir dir;
    std::string model = slurp(source_path("tests/models/torch_transformer.model"));
    dir.write("m.model", "from torch.distributed.tensor import Shard\n" + model);
    std::string plan = dir.write("p.plan", "model \"m.model\"\n");
    tp_unit u;
    compile(&u, plan);
    EXPECT_EQ(u.diags.errors, 1) << rendered(&u);
    EXPECT_NE(rendered(&u).find("imports and names for PyTorch's classes belong in plan files"), std::string::npos)
        << rendered(&u);
    tp_unit_free(&u);
}

}  // namespace
