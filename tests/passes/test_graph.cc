// The global graph the forward pass records (compiler/ir/graph.h) and the
// passes over it (compiler/passes/): every redistribution is a node with
// its placements; values carry global and local shapes; -O1 merging
// (merge.c) on hand-built graphs; -O1 never changes a diagnostic; dead
// code (dce.c) and lowering (lower.c) on the shipped plans.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/plan_harness.h"

extern "C" {
#include "compiler/ir/graph.h"
#include "compiler/passes/passes.h"
#include "util/xalloc.h"
}

using namespace tpcc_test;

namespace {

struct Unit {
    tp_unit u;
    explicit Unit(const std::string &plan, const std::vector<std::string> &defines = {}, bool optimize = true)
    {
        std::vector<const char *> d;
        for (const auto &s : defines)
            d.push_back(s.c_str());
        tp_compile_opts opts = {d.data(), int(d.size()), nullptr, optimize, TP_F32, true, false, TP_LOSS_NONE, nullptr, 0, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
        tp_compile(&u, source_path(plan).c_str(), &opts);
        EXPECT_TRUE(u.built) << rendered(&u);
    }
    ~Unit() { tp_unit_free(&u); }
    const tp_graph &g() const { return u.analysis.graph; }
};

// A hand-built graph: values of rank 2, [8, 4] globally.
struct Graph {
    tp_graph g;
    Graph() { tp_graph_init(&g, 2); }
    ~Graph() { tp_graph_free(&g); }
    int value(const char *name)
    {
        tp_gvalue v = {};
        v.rank = 2;
        v.shape[0] = v.local[0] = 8;
        v.shape[1] = v.local[1] = 4;
        v.alias_of = v.redirect = -1;
        v.name = tp_xstrdup(name);
        return tp_graph_add_value(&g, &v);
    }
    // redistribute value `in` (forward-pass id src) into a new value (id result)
    int redist(int in, int src, int result, tp_placement from, tp_placement to, const char *name)
    {
        int out = value(name);
        tp_gnode *n = tp_graph_add_node(&g, TP_GNODE_REDIST, TP_OP_ALL_GATHER);
        n->op.in[n->op.nin++] = in;
        n->op.out = out;
        n->from = from;
        n->to = to;
        n->src_id = src;
        n->result_id = result;
        return out;
    }
    void use(std::vector<int> ins, bool output = false)
    {
        int out = value("use");
        g.values[out].output = output;
        tp_gnode *n = tp_graph_add_node(&g, TP_GNODE_OP, TP_OP_ADD);
        for (int v : ins)
            n->op.in[n->op.nin++] = v;
        n->op.out = out;
    }
    int removed() const
    {
        int n = 0;
        for (int i = 0; i < g.nnodes; i++)
            n += g.nodes[i].removed;
        return n;
    }
};

}  // namespace

TEST(Graph, EveryCommunicatingRedistributionIsANodeWithItsPlacements)
{
    for (const char *plan : {"plans/llama-sp.plan", "plans/llama-megatron.plan", "plans/gpt2-sp-tied.plan"}) {
        Unit u(plan, {"tp=2"}, false);
        int redists = 0;
        for (int i = 0; i < u.g().nnodes; i++) {
            const tp_gnode &n = u.g().nodes[i];
            if (n.kind != TP_GNODE_REDIST)
                continue;
            redists++;
            EXPECT_FALSE(tp_placement_eq(n.from, n.to, u.g().values[n.op.in[0]].rank)) << plan;
            EXPECT_EQ(u.g().values[n.op.out].pl[0].kind, n.to.kind) << plan;
        }
        // the checker's record of layout changes and the graph agree
        EXPECT_EQ(redists, u.u.analysis.ncomms) << plan;
        EXPECT_GT(redists, 0) << plan;
    }
}

TEST(Graph, ValuesCarryGlobalAndLocalShapes)
{
    Unit u("plans/llama-sp.plan", {"tp=2"});
    bool seen = false;
    for (int v = 0; v < u.g().nvalues; v++) {
        const tp_gvalue &x = u.g().values[v];
        ASSERT_EQ(x.nmesh, 1);
        for (int d = 0; d < x.rank; d++) {
            bool sharded = x.pl[0].kind == TP_SHARD && x.pl[0].dim == d;
            EXPECT_EQ(x.local[d], sharded ? x.shape[d] / 2 : x.shape[d]) << x.name << " dim " << d;
        }
        if (std::string(x.name) == "model.layers.0.self_attn.q_proj.out") {
            seen = true;
            EXPECT_EQ(x.pl[0].kind, TP_SHARD);
            EXPECT_EQ(x.pl[0].dim, 2);
            // the Linear computes a DTensor; the output hook's to_local
            // (use_local_output=True) is a plain view of the same storage
            EXPECT_TRUE(x.dtensor);
        }
    }
    EXPECT_TRUE(seen);
}

TEST(MergePass, ARedistributionOfTheSameTensorToTheSameLayoutIsReused)
{
    Graph t;
    int x = t.value("x");
    int a = t.redist(x, 0, 1, tp_shard(1), tp_replicate(), "a");
    int b = t.redist(x, 0, 2, tp_shard(1), tp_replicate(), "b");
    t.use({a, b}, true);
    tp_pass_merge(&t.g);
    EXPECT_EQ(t.removed(), 1);
    EXPECT_TRUE(t.g.nodes[1].removed);
    EXPECT_EQ(tp_graph_resolve(&t.g, b), a);
}

TEST(MergePass, ARelabelledCopyIsAnotherTensor)
{
    // ids 0 and 5 share storage x (a label copies the tensor, not the data):
    // their histories differ, so their redistributions are not merged
    Graph t;
    int x = t.value("x");
    int a = t.redist(x, 0, 1, tp_shard(1), tp_replicate(), "a");
    int b = t.redist(x, 5, 2, tp_shard(1), tp_replicate(), "b");
    t.use({a, b}, true);
    tp_pass_merge(&t.g);
    EXPECT_EQ(t.removed(), 0);
}

TEST(MergePass, MovingBackToWhereItCameFromReturnsTheOriginal)
{
    Graph t;
    int x = t.value("x");
    int r = t.redist(x, 0, 1, tp_shard(1), tp_replicate(), "r");
    int back = t.redist(r, 1, 2, tp_replicate(), tp_shard(1), "back");
    t.use({back}, true);
    tp_pass_merge(&t.g);
    EXPECT_TRUE(t.g.nodes[1].removed);
    EXPECT_EQ(tp_graph_resolve(&t.g, back), x);
    // the gather now has no reader left: dead code
    tp_pass_dce(&t.g);
    EXPECT_TRUE(t.g.nodes[0].op.dead);
    EXPECT_FALSE(t.g.nodes[2].op.dead);
}

TEST(MergePass, MergesChainThroughMergedResults)
{
    // b merged into a; a later redistribution of b is the same as one of a
    Graph t;
    int x = t.value("x");
    int a = t.redist(x, 0, 1, tp_shard(1), tp_replicate(), "a");
    int b = t.redist(x, 0, 2, tp_shard(1), tp_replicate(), "b");
    int a2 = t.redist(a, 1, 3, tp_replicate(), tp_shard(0), "a2");
    int b2 = t.redist(b, 2, 4, tp_replicate(), tp_shard(0), "b2");
    t.use({a2, b2}, true);
    tp_pass_merge(&t.g);
    EXPECT_EQ(t.removed(), 2);
    EXPECT_EQ(tp_graph_resolve(&t.g, b2), a2);
}

// An op with several outputs lives while one is read and stops computing
// the others; with none read it is dead, and so is what only it read.
TEST(DcePass, AnOpWithSeveralOutputsKeepsThoseReadAndDiesWithNone)
{
    Graph t;
    int x = t.value("x"), dy = t.value("dy");
    int sq = t.value("sq");
    tp_gnode *n = tp_graph_add_node(&t.g, TP_GNODE_OP, TP_OP_MUL);   // sq = x * x, read only by the dead op below
    n->op.in[n->op.nin++] = x;
    n->op.in[n->op.nin++] = x;
    n->op.out = sq;
    int grads[2][3];
    for (int k = 0; k < 2; k++) {
        n = tp_graph_add_node(&t.g, TP_GNODE_OP, TP_OP_ATTENTION_GRAD);
        for (int v : {k ? sq : x, x, x, dy})
            n->op.in[n->op.nin++] = v;
        for (int o = 0; o < 3; o++)
            n->op.outs[o] = grads[k][o] = t.value("grad");
    }
    t.use({grads[0][0], grads[0][2]}, true);   // the first's dq and dv are read, its dk not; the second's none
    tp_pass_dce(&t.g);
    const tp_gnode &first = t.g.nodes[1], &second = t.g.nodes[2];
    EXPECT_FALSE(first.op.dead);
    EXPECT_EQ(first.op.outs[0], grads[0][0]);
    EXPECT_EQ(first.op.outs[1], -1);
    EXPECT_EQ(first.op.outs[2], grads[0][2]);
    EXPECT_TRUE(second.op.dead);
    EXPECT_TRUE(t.g.nodes[0].op.dead);
}

TEST(LowerPass, MergedValuesGetNoBufferAndPassOnWhatWasSaidOfThem)
{
    Graph t;
    int x = t.value("x");
    int a = t.redist(x, 0, 1, tp_shard(1), tp_replicate(), "a");
    int b = t.redist(x, 0, 2, tp_shard(1), tp_replicate(), "b");
    t.g.values[b].output = true;
    t.g.values[b].f32_only = true;
    t.use({a});
    tp_ir ir;
    tp_passes_opts o = {true, TP_BF16, false, TP_RECOMPUTE_NONE, 1, TP_DP_SHARD_NONE, false};
    tp_autodiff_error err;
    ASSERT_EQ(tp_passes_run(&t.g, &o, &ir, &err), 0);
    ASSERT_EQ(ir.nbufs, t.g.nvalues - 1);
    EXPECT_STREQ(ir.bufs[1].name, "a");
    EXPECT_TRUE(ir.bufs[1].output);
    EXPECT_EQ(ir.bufs[1].dtype, TP_F32) << "f32_only moved to the kept value";
    EXPECT_EQ(ir.bufs[0].dtype, TP_BF16);
    EXPECT_EQ(ir.nops, 2);
    tp_ir_free(&ir);
}

// Checks do not depend on the optimisation level: -O1 is a pass after them.
TEST(Passes, DiagnosticsAreTheSameAtO0AndO1)
{
    std::vector<std::string> plans = files_in("tests/bad", ".plan");
    for (const auto &p : files_in("plans", ".plan"))
        plans.push_back(p);
    for (const auto &plan : plans) {
        tp_unit a, b;
        std::vector<const char *> none;
        bool train = is_train_plan(plan);
        tp_compile_opts o1 = {none.data(), 0, nullptr, true, TP_F32, true, train, TP_LOSS_NONE, nullptr, 0, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
        tp_compile_opts o0 = {none.data(), 0, nullptr, false, TP_F32, true, train, TP_LOSS_NONE, nullptr, 0, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
        tp_compile(&a, plan.c_str(), &o1);
        tp_compile(&b, plan.c_str(), &o0);
        EXPECT_EQ(rendered(&a), rendered(&b)) << plan;
        tp_unit_free(&a);
        tp_unit_free(&b);
    }
}
