// Layout propagation semantics through the public pipeline (tp_compile):
// the collectives a plan costs (tp_unit.analysis.comms), what crosses each
// module boundary (analysis.rows), PyTorch's style defaults and the relabel
// check's message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/sema/check.h"
#include "compiler/driver/compile.h"
#include "sched/layout.h"
}

namespace fs = std::filesystem;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

// A scratch tree shaped like the source tree: plans/ for the plans a test
// writes, models/ and tests/models/ linked to the source tree, so that
// `model "../models/llama.model"` resolves as in a shipped plan.
class Tree {
public:
    Tree() : root(dir.path)
    {
        fs::create_directories(root + "/plans");
        fs::create_directory_symlink(source_path("models"), root + "/models");
    }
    std::string write(const std::string &name, const std::string &text) const
    {
        return dir.write("plans/" + name, text);
    }
    // A shipped plan with textual edits; every `from` must occur.
    std::string variant(const std::string &shipped, const std::vector<std::pair<std::string, std::string>> &edits) const
    {
        std::string text = slurp(source_path(shipped));
        for (const auto &e : edits) {
            size_t at = text.find(e.first);
            EXPECT_NE(at, std::string::npos) << "'" << e.first << "' is not in " << shipped;
            if (at != std::string::npos)
                text.replace(at, e.first.size(), e.second);
        }
        return write(fs::path(shipped).filename().string(), text);
    }
    TempDir dir;
    std::string root;
};

struct Unit {
    explicit Unit(const std::string &plan, const std::vector<std::string> &defines = {})
    {
        tpcc_test::compile(&u, plan, defines);
    }
    ~Unit() { tp_unit_free(&u); }
    Unit(const Unit &) = delete;
    Unit &operator=(const Unit &) = delete;

    std::string text() { return tpcc_test::rendered(&u); }
    const tp_analysis &a() const { return u.analysis; }

    const tp_boundary *row(const std::string &fqn) const
    {
        for (int i = 0; i < u.analysis.nrows; i++)
            if (fqn == u.analysis.rows[i].fqn)
                return &u.analysis.rows[i];
        return nullptr;
    }
    std::string inputs(const std::string &fqn) const
    {
        const tp_boundary *r = row(fqn);
        return r && r->inputs ? r->inputs : "(no row)";
    }
    std::string outputs(const std::string &fqn) const
    {
        const tp_boundary *r = row(fqn);
        return r && r->outputs ? r->outputs : "(no row)";
    }
    // Error and warning diagnostics of one check.
    std::vector<const tp_diag *> diags(const char *check) const
    {
        std::vector<const tp_diag *> out;
        for (int i = 0; i < u.diags.count; i++)
            if (u.diags.items[i].level != TP_NOTE && !strcmp(u.diags.items[i].check, check))
                out.push_back(&u.diags.items[i]);
        return out;
    }
    tp_unit u;
};

std::string comm_str(const tp_redist_record &c)
{
    char f[24], t[24];
    return std::string(tp_redist_name(c.kind)) + " " + tp_placement_str(tp_placement_norm(c.from, c.rank), f, sizeof f) +
           "->" + tp_placement_str(tp_placement_norm(c.to, c.rank), t, sizeof t) + " @" +
           (c.module ? c.module->fqn : "?") + " <- " + (c.cause ? c.cause->pattern : "(none)");
}

std::string all_comms(const tp_analysis &a)
{
    std::string s;
    for (int i = 0; i < a.ncomms; i++)
        s += "  " + comm_str(a.comms[i]) + " elems=" + std::to_string(a.comms[i].elems) + "\n";
    return s;
}

// Only the collectives that communicate.
std::vector<const tp_redist_record *> communicating(const tp_analysis &a)
{
    std::vector<const tp_redist_record *> out;
    for (int i = 0; i < a.ncomms; i++)
        if (tp_redist_communicates(a.comms[i].kind))
            out.push_back(&a.comms[i]);
    return out;
}

bool starts_with(const std::string &s, const std::string &p) { return s.compare(0, p.size(), p) == 0; }

// Communicating collectives run by modules of layer `l`, per kind.
std::map<tp_redist_kind, int> layer_kinds(const tp_analysis &a, int l)
{
    std::map<tp_redist_kind, int> n;
    std::string prefix = "model.layers." + std::to_string(l) + ".";
    for (const tp_redist_record *c : communicating(a))
        if (c->module && starts_with(std::string(c->module->fqn) + ".", prefix))
            n[c->kind]++;
    return n;
}

const int64_t kBatch = 1, kSeq = 2048, kHidden = 4096, kVocab = 32000;

// --- Megatron --------------------------------------------------------------------------

TEST(Megatron, TwoAllReducesPerLayerPlusEmbeddingAndHead)
{
    Unit u(source_path("plans/llama-megatron.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    auto comms = communicating(u.a());
    ASSERT_EQ(comms.size(), 6u) << all_comms(u.a());
    // the vocab-sharded embedding: a masked partial sum, all-reduced
    EXPECT_EQ(comms[0]->kind, TP_REDIST_ALL_REDUCE);
    EXPECT_EQ(comms[0]->from.kind, TP_MASK_PARTIAL);
    EXPECT_EQ(comms[0]->to.kind, TP_REPLICATE);
    ASSERT_TRUE(comms[0]->module);
    EXPECT_STREQ(comms[0]->module->fqn, "model.embed_tokens");
    ASSERT_TRUE(comms[0]->cause);
    EXPECT_STREQ(comms[0]->cause->pattern, "model.embed_tokens");
    // per layer: o_proj then down_proj, each P -> R
    const char *want[] = {"model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj",
                          "model.layers.1.self_attn.o_proj", "model.layers.1.mlp.down_proj"};
    const char *cause[] = {"model.layers.*.self_attn.o_proj", "model.layers.*.mlp.down_proj"};
    for (int i = 0; i < 4; i++) {
        const tp_redist_record *c = comms[1 + i];
        SCOPED_TRACE(comm_str(*c));
        EXPECT_EQ(c->kind, TP_REDIST_ALL_REDUCE);
        EXPECT_EQ(c->from.kind, TP_PARTIAL);
        EXPECT_EQ(c->to.kind, TP_REPLICATE);
        ASSERT_TRUE(c->module);
        EXPECT_STREQ(c->module->fqn, want[i]);
        ASSERT_TRUE(c->cause);
        EXPECT_STREQ(c->cause->pattern, cause[i % 2]);
        EXPECT_EQ(c->elems, kBatch * kSeq * kHidden);
        EXPECT_FALSE(c->implicit);
    }
    // lm_head gathers the vocab-sharded logits
    const tp_redist_record *h = comms[5];
    EXPECT_EQ(h->kind, TP_REDIST_ALL_GATHER);
    EXPECT_EQ(h->from.kind, TP_SHARD);
    EXPECT_EQ(tp_placement_norm(h->from, h->rank).dim, 2);
    EXPECT_EQ(h->dim, 2);
    EXPECT_EQ(h->to.kind, TP_REPLICATE);
    ASSERT_TRUE(h->module);
    EXPECT_STREQ(h->module->fqn, "lm_head");
    EXPECT_EQ(h->elems, kBatch * kSeq * kVocab);
    EXPECT_EQ(comms[0]->elems, kBatch * kSeq * kHidden);
}

TEST(Megatron, ScalesWithLayers)
{
    for (int layers : {1, 3}) {
        Unit u(source_path("plans/llama-megatron.plan"), {"layers=" + std::to_string(layers)});
        ASSERT_TRUE(u.u.built) << u.text();
        int reduces = 0;
        for (const tp_redist_record *c : communicating(u.a()))
            reduces += c->kind == TP_REDIST_ALL_REDUCE;
        EXPECT_EQ(reduces, 2 * layers + 1) << all_comms(u.a());
    }
}

TEST(Megatron, ElementCountsFollowBatchSeqHidden)
{
    Unit u(source_path("plans/llama-megatron.plan"), {"layers=2", "batch=3", "seq=256", "hidden=1024"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    auto comms = communicating(u.a());
    ASSERT_EQ(comms.size(), 6u) << all_comms(u.a());
    for (size_t i = 0; i + 1 < comms.size(); i++)
        EXPECT_EQ(comms[i]->elems, 3 * 256 * 1024) << comm_str(*comms[i]);
    EXPECT_EQ(comms.back()->elems, 3 * 256 * kVocab);
}

TEST(Megatron, BoundaryRows)
{
    Unit u(source_path("plans/llama-megatron.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    // ColwiseParallel: replicated input, output Shard(-1) handed back as a plain tensor
    EXPECT_EQ(u.inputs("model.layers.0.self_attn.q_proj"), "Replicate() plain [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.layers.0.self_attn.q_proj"), "Shard(2) plain [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.layers.1.self_attn.k_proj"), "Shard(2) plain [1, 2048, 1024]");
    EXPECT_EQ(u.outputs("model.layers.1.mlp.gate_proj"), "Shard(2) plain [1, 2048, 11008]");
    // RowwiseParallel: sharded input, all-reduced replicated output
    EXPECT_EQ(u.inputs("model.layers.0.mlp.down_proj"), "Shard(2) plain [1, 2048, 11008]");
    EXPECT_EQ(u.outputs("model.layers.0.mlp.down_proj"), "Replicate() plain [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.layers.0.self_attn"), "hidden_states=Replicate() plain [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.embed_tokens"), "Replicate() plain [1, 2048]");
    EXPECT_EQ(u.outputs("model.embed_tokens"), "Replicate() plain [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("lm_head"), "Replicate() plain [1, 2048, 32000]");
    const tp_boundary *q = u.row("model.layers.0.self_attn.q_proj");
    ASSERT_TRUE(q && q->style);
    EXPECT_EQ(q->style->kind, TP_STYLE_COLWISE);
    EXPECT_STREQ(q->type, "Linear");
    const tp_boundary *n = u.row("model.layers.0.input_layernorm");
    ASSERT_TRUE(n);
    EXPECT_EQ(n->style, nullptr);
    EXPECT_FALSE(u.row("model.layers.2")) << "layers=2";
}

// --- sequence parallelism -----------------------------------------------------------------

TEST(SequenceParallel, TwoGathersAndTwoReduceScattersPerLayer)
{
    Unit u(source_path("plans/llama-sp.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    for (int l = 0; l < 2; l++) {
        auto n = layer_kinds(u.a(), l);
        EXPECT_EQ(n[TP_REDIST_ALL_GATHER], 2) << "layer " << l << "\n" << all_comms(u.a());
        EXPECT_EQ(n[TP_REDIST_REDUCE_SCATTER], 2) << "layer " << l << "\n" << all_comms(u.a());
        EXPECT_EQ(n[TP_REDIST_ALL_REDUCE], 0) << "layer " << l << "\n" << all_comms(u.a());
        EXPECT_EQ(n[TP_REDIST_ALL_TO_ALL], 0) << "layer " << l << "\n" << all_comms(u.a());
    }
    // every per-layer collective moves the whole activation [batch, seq, hidden] along the sequence
    for (const tp_redist_record *c : communicating(u.a())) {
        if (!c->module || !starts_with(c->module->fqn, "model.layers."))
            continue;
        SCOPED_TRACE(comm_str(*c));
        EXPECT_EQ(c->elems, kBatch * kSeq * kHidden);
        EXPECT_EQ(c->dim, 1);
        if (c->kind == TP_REDIST_ALL_GATHER) {
            EXPECT_EQ(c->from.kind, TP_SHARD);
            EXPECT_EQ(tp_placement_norm(c->from, c->rank).dim, 1);
        } else {
            EXPECT_EQ(c->from.kind, TP_PARTIAL);
            EXPECT_EQ(c->to.kind, TP_SHARD);
        }
    }
    // the embedding reduce-scatters its masked partial sum onto the sequence
    auto comms = communicating(u.a());
    ASSERT_FALSE(comms.empty());
    EXPECT_EQ(comms[0]->kind, TP_REDIST_REDUCE_SCATTER);
    EXPECT_EQ(comms[0]->from.kind, TP_MASK_PARTIAL);
    EXPECT_STREQ(comms[0]->module->fqn, "model.embed_tokens");
    // the gathers are the PrepareModuleInput of self_attn and mlp
    int attn = 0, mlp = 0;
    for (const tp_redist_record *c : comms) {
        if (c->kind != TP_REDIST_ALL_GATHER || !c->cause)
            continue;
        attn += !strcmp(c->cause->pattern, "model.layers.*.self_attn");
        mlp += !strcmp(c->cause->pattern, "model.layers.*.mlp");
    }
    EXPECT_EQ(attn, 2) << all_comms(u.a());
    EXPECT_EQ(mlp, 2) << all_comms(u.a());
}

TEST(SequenceParallel, PerProjectionInputLayoutsGatherFiveTimesPerLayer)
{
    Unit u(source_path("plans/llama-sp-input-layouts.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    for (int l = 0; l < 2; l++) {
        auto n = layer_kinds(u.a(), l);
        EXPECT_EQ(n[TP_REDIST_ALL_GATHER], 5) << "layer " << l << "\n" << all_comms(u.a());
        EXPECT_EQ(n[TP_REDIST_REDUCE_SCATTER], 2) << "layer " << l << "\n" << all_comms(u.a());
    }
    // and the repeated gathers are pointed out once per plan entry
    EXPECT_EQ(u.diags("repeated-gather").size(), 3u) << u.text();
}

TEST(SequenceParallel, NormOutputStaysDTensorByDefault)
{
    Unit u(source_path("plans/llama-sp.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.outputs("model.layers.0.input_layernorm"), "Shard(1) DTensor [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.layers.1.post_attention_layernorm"), "Shard(1) DTensor [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.norm"), "Shard(1) DTensor [1, 2048, 4096]");
    // the embedding scatters onto the sequence and hands over a plain tensor
    EXPECT_EQ(u.outputs("model.embed_tokens"), "Shard(1) plain [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.layers.0.input_layernorm"), "Shard(1) plain [1, 2048, 4096]");
}

TEST(SequenceParallel, UseLocalOutputMakesTheNormOutputPlain)
{
    Tree t;
    std::string plan = t.variant("plans/llama-sp.plan",
                                 {{"\"input_layernorm\": SequenceParallel()",
                                   "\"input_layernorm\": SequenceParallel(use_local_output=True)"}});
    Unit u(plan, {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    EXPECT_EQ(u.outputs("model.layers.0.input_layernorm"), "Shard(1) plain [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.layers.0.post_attention_layernorm"), "Shard(1) DTensor [1, 2048, 4096]");
}

TEST(PrepareModuleInput, OutputStaysDTensorByDefault)
{
    // llama-sp.plan leaves use_local_output at its default (False): q/k/v get a Replicate DTensor
    Unit u(source_path("plans/llama-sp.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.inputs("model.layers.0.self_attn"), "hidden_states=Shard(1) DTensor [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.layers.0.self_attn.q_proj"), "Replicate() DTensor [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.layers.1.mlp.gate_proj"), "Replicate() DTensor [1, 2048, 4096]");
}

TEST(PrepareModuleInput, UseLocalOutputTrueHandsOverPlainTensors)
{
    Tree t;
    std::string plan = t.variant("plans/llama-sp.plan",
                                 {{"desired_input_kwarg_layouts={\"hidden_states\": Replicate()},",
                                   "desired_input_kwarg_layouts={\"hidden_states\": Replicate()}, use_local_output=True,"}});
    Unit u(plan, {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    EXPECT_EQ(u.inputs("model.layers.0.self_attn.q_proj"), "Replicate() plain [1, 2048, 4096]");
    EXPECT_EQ(u.inputs("model.layers.0.mlp.gate_proj"), "Replicate() DTensor [1, 2048, 4096]");
}

// A keyword layout for a keyword the module is not called with: PyTorch
// skips it; the warning names the call and what the value costs downstream.
TEST(PrepareModuleInput, KeywordNotPassedIsSkippedWithAWarning)
{
    Unit u(source_path("tests/bad/ignored-layout-keyword-sharded.plan"), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    const tp_diag *g = nullptr;
    for (const tp_diag *d : u.diags("ignored-layout"))
        g = d;
    ASSERT_TRUE(g) << u.text();
    EXPECT_EQ(g->level, TP_WARNING);
    std::string m = g->message;
    EXPECT_NE(m.find("'model.layers.0.mlp' is called with 1 positional argument and no keywords ('x' arrives "
                     "positionally)"), std::string::npos) << m;
    bool cost = false;
    for (int i = 0; i < g->nnotes; i++)
        cost |= std::string(g->notes[i].message).find("'x' stays a DTensor Shard(1) instead of becoming "
                                                      "Replicate()") != std::string::npos;
    EXPECT_TRUE(cost) << u.text();
    // the value enters the MLP unconverted
    EXPECT_EQ(u.inputs("model.layers.0.mlp.gate_proj"), "Shard(1) DTensor [1, 2048, 4096]");
}

// --- ColwiseParallel use_local_output -----------------------------------------------------

TEST(Colwise, UseLocalOutputFalseKeepsTheDTensor)
{
    Tree t;
    std::string plan = t.variant("plans/llama-megatron.plan",
                                 {{"\"lm_head\": ColwiseParallel(output_layouts=Replicate())",
                                   "\"lm_head\": ColwiseParallel(use_local_output=False)"}});
    {
        std::ofstream(plan, std::ios::app) << "\nloss_parallel()\n";
    }
    Unit u(plan, {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    EXPECT_EQ(u.outputs("lm_head"), "Shard(2) DTensor [1, 2048, 32000]");
    EXPECT_EQ(u.outputs("model.layers.0.self_attn.q_proj"), "Shard(2) plain [1, 2048, 4096]");
    for (const tp_redist_record *c : communicating(u.a()))
        EXPECT_FALSE(c->module && !strcmp(c->module->fqn, "lm_head")) << "loss-parallel logits are not gathered: "
                                                                      << comm_str(*c);
}

TEST(Colwise, UseLocalOutputFalseOnAProjection)
{
    Tree t;
    std::string plan = t.variant("plans/llama-megatron.plan",
                                 {{"\"self_attn.q_proj\": ColwiseParallel()",
                                   "\"self_attn.q_proj\": ColwiseParallel(use_local_output=False)"}});
    Unit u(plan, {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.outputs("model.layers.0.self_attn.q_proj"), "Shard(2) DTensor [1, 2048, 4096]");
    EXPECT_EQ(u.outputs("model.layers.0.self_attn.k_proj"), "Shard(2) plain [1, 2048, 1024]");
}

// --- relabelling -------------------------------------------------------------------------------

// llama-sp.plan without an embedding entry: the embedding's plain replicated
// output is labelled Shard(1) by the first SequenceParallel norm.
std::string plain_embedding_plan(const Tree &t)
{
    return t.variant("plans/llama-sp.plan",
                     {{"\"model.embed_tokens\": RowwiseParallel(\n        input_layouts=Replicate(),\n"
                       "        output_layouts=Shard(1),\n    ),",
                       ""}});
}

const tp_diag *only(const std::vector<const tp_diag *> &v, Unit &u)
{
    EXPECT_EQ(v.size(), 1u) << u.text();
    return v.size() == 1 ? v[0] : nullptr;
}

TEST(Relabel, PlainReplicateLabelledShardGrowsTheSequence)
{
    Tree t;
    std::string plan = plain_embedding_plan(t);
    struct {
        int tp;
        const char *seq, *grown;
    } cases[] = {{2, "2048", "from 2048 to 4096"}, {4, "2048", "from 2048 to 8192"}, {2, "512", "from 512 to 1024"}};
    for (const auto &k : cases) {
        SCOPED_TRACE("tp=" + std::to_string(k.tp) + " seq=" + k.seq);
        Unit u(plan, {"layers=2", "tp=" + std::to_string(k.tp), std::string("seq=") + k.seq});
        ASSERT_TRUE(u.u.built) << u.text();
        const tp_diag *g = only(u.diags("relabel"), u);
        ASSERT_TRUE(g);
        EXPECT_EQ(g->level, TP_ERROR);
        std::string m = g->message;
        EXPECT_NE(m.find(k.grown), std::string::npos) << m;
        EXPECT_NE(m.find("dimension 1 (seq)"), std::string::npos) << m;
        EXPECT_NE(m.find("Shard(1)"), std::string::npos) << m;
        EXPECT_NE(m.find("model.layers.0.input_layernorm"), std::string::npos) << m;
        // what PyTorch then believes: a Shard(1) DTensor whose global sequence is tp times too long
        std::string grown = std::to_string(k.tp * std::stoll(k.seq));
        EXPECT_EQ(u.outputs("model.layers.0.input_layernorm"), "Shard(1) DTensor [1, " + grown + ", 4096]");
    }
}

TEST(Relabel, RowwiseEmbeddingWithoutInputLayoutsLabelsTokenIds)
{
    for (int tp : {2, 4}) {
        Unit u(source_path("tests/bad/relabel-rowwise-embedding.plan"), {"layers=2", "tp=" + std::to_string(tp)});
        ASSERT_TRUE(u.u.built) << u.text();
        const tp_diag *g = only(u.diags("relabel"), u);
        ASSERT_TRUE(g);
        std::string m = g->message;
        EXPECT_NE(m.find("token ids"), std::string::npos) << m;
        EXPECT_NE(m.find("model.embed_tokens"), std::string::npos) << m;
        EXPECT_NE(m.find(tp == 2 ? "from 2048 to 4096" : "from 2048 to 8192"), std::string::npos) << m;
        // the fix is to declare the ids replicated
        ASSERT_GE(g->nfixits, 1);
        EXPECT_NE(std::string(g->fixits[0].replacement).find("input_layouts=Replicate()"), std::string::npos)
            << g->fixits[0].replacement;
    }
}

// The message says where PyTorch then fails in this model: the first op
// that meets the grown length next to the true one.
TEST(Relabel, MessageNamesTheFirstOpThatMeetsTheTrueLength)
{
    const std::pair<const char *, const char *> cases[] = {
        {"tests/bad/relabel-sp-plain-embedding.plan", "fails at rope(), whose cos/sin cover the true 2048 positions"},
        {"tests/bad/relabel-prepare-input.plan", "fails at an add with a tensor of the true length (2048)"},
        {"tests/bad/relabel-rowwise-embedding.plan", "fails at cross_entropy() with labels of the true length (2048)"},
    };
    for (const auto &[plan, downstream] : cases) {
        SCOPED_TRACE(plan);
        Unit u(source_path(plan), {"layers=2"});
        ASSERT_TRUE(u.u.built) << u.text();
        const tp_diag *g = only(u.diags("relabel"), u);
        ASSERT_TRUE(g);
        EXPECT_NE(std::string(g->message).find(downstream), std::string::npos) << g->message;
    }
}

// Nothing after the growth meets the true length: the message cannot say more.
TEST(Relabel, MessageWithoutADownstreamMismatch)
{
    Tree t;
    t.write("tiny.model", "config {\n    vocab = 64\n    hidden = 16\n    seq = 8\n    batch = 1\n    tp = 2\n}\n"
                          "module Tiny {\n    embed = Embedding(vocab, hidden)\n    norm = RMSNorm(hidden)\n"
                          "    def forward(input_ids: [batch, seq]) {\n        return norm(embed(input_ids))\n    }\n}\n");
    std::string plan = t.write("grown.plan", "model \"tiny.model\"\nmesh(tp = tp)\nparallelize \"\" {\n"
                                             "    \"embed\": RowwiseParallel(input_layouts=Replicate()),\n"
                                             "    \"norm\": SequenceParallel(),\n}\n");
    Unit u(plan);
    ASSERT_TRUE(u.u.built) << u.text();
    const tp_diag *g = only(u.diags("relabel"), u);
    ASSERT_TRUE(g);
    std::string m = g->message;
    EXPECT_NE(m.find("grows from 8 to 16; it may fail later or compute on the wrong sequence"), std::string::npos)
        << m;
}

TEST(Relabel, CorrectLabelsAreSilent)
{
    // the same plans with the embedding declared right have no relabel error
    for (const char *p : {"plans/llama-sp.plan", "plans/llama-megatron.plan", "plans/llama-sp-input-layouts.plan"}) {
        Unit u(source_path(p), {"layers=2", "tp=4"});
        ASSERT_TRUE(u.u.built) << u.text();
        EXPECT_TRUE(u.diags("relabel").empty()) << p << "\n" << u.text();
    }
}

// --- tp = 1 ------------------------------------------------------------------------------------------

std::vector<std::string> shipped_plans()
{
    auto v = tpcc_test::files_in("plans", ".plan");
    if (fs::is_directory(source_path("tests/plans"))) {
        auto t = tpcc_test::files_in("tests/plans", ".plan");
        v.insert(v.end(), t.begin(), t.end());
    }
    return v;
}

TEST(SingleDevice, NoPlanCommunicatesAtTp1)
{
    auto plans = shipped_plans();
    ASSERT_FALSE(plans.empty());
    for (const auto &p : plans) {
        // layers=2 keeps it fast; a family whose config has no `layers` runs at full depth
        std::vector<std::string> d = {"layers=2", "tp=1"};
        {
            Unit probe(p, d);
            if (probe.u.io_error)
                d = {"tp=1"};
        }
        Unit u(p, d);
        ASSERT_TRUE(u.u.built) << p << "\n" << u.text();
        EXPECT_EQ(u.u.diags.errors, 0) << p << "\n" << u.text();
        EXPECT_TRUE(communicating(u.a()).empty())
            << p << ": a mesh of one device has nothing to communicate, yet:\n" << all_comms(u.a());
    }
}

TEST(SingleDevice, RowsAreStillComplete)
{
    Unit u(source_path("plans/llama-sp.plan"), {"layers=2", "tp=1"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_NE(u.row("model.layers.1.mlp.down_proj"), nullptr);
    EXPECT_NE(u.outputs("lm_head"), "(no row)");
}

// --- sizes the pass must not accept ---------------------------------------------------------------

int64_t min_elems(const tp_analysis &a)
{
    int64_t m = 0;
    for (int i = 0; i < a.ncomms; i++)
        m = std::min(m, a.comms[i].elems);
    return m;
}

TEST(InputShapes, NegativeModelInputSizesAreErrors)
{
    // Module sizes must be positive; so must the [batch, seq] of the model inputs.
    for (const char *d : {"batch=-1", "seq=-4"}) {
        Unit u(source_path("plans/llama-megatron.plan"), {"layers=2", d});
        EXPECT_GT(u.u.diags.errors, 0) << d << ": accepted, with these element counts:\n" << all_comms(u.a());
        EXPECT_GE(min_elems(u.a()), 0) << d << "\n" << all_comms(u.a());
    }
}

TEST(InputShapes, ElementCountsDoNotWrap)
{
    // 1 x 2048 x (2^63 - 1) elements does not fit in int64: report it, never a negative count
    Unit u(source_path("plans/llama-megatron.plan"), {"layers=1", "hidden=9223372036854775807"});
    EXPECT_GE(min_elems(u.a()), 0) << all_comms(u.a());
    EXPECT_GT(u.u.diags.errors, 0) << "an activation of more than 2^63 elements was accepted\n" << all_comms(u.a());
}

// --- every row is completed on a clean plan ------------------------------------------------------

TEST(Rows, EveryModuleCallHasAnOutputOnCleanPlans)
{
    for (const char *p : {"plans/llama-megatron.plan", "plans/llama-sp.plan"}) {
        Unit u(source_path(p), {"layers=2"});
        ASSERT_TRUE(u.u.built) << u.text();
        ASSERT_GT(u.a().nrows, 0);
        for (int i = 0; i < u.a().nrows; i++)
            EXPECT_NE(u.a().rows[i].outputs, nullptr) << p << ": " << u.a().rows[i].fqn;
        // one row per module call: 2 layers x 12 modules + root, model, embed, norm, lm_head
        EXPECT_EQ(u.a().nrows, 2 * 12 + 5) << p;
        EXPECT_STREQ(u.a().rows[0].fqn, "(root)");
    }
}

// --- the third model family (tests/models, tests/plans) ------------------------------------------

TEST(ThirdFamily, PlansCheckClean)
{
    ASSERT_FALSE(tpcc_test::files_in("tests/plans", ".plan").empty()) << "tests/plans/*.plan are missing";
    ASSERT_FALSE(tpcc_test::files_in("tests/models", ".model").empty()) << "tests/models/*.model are missing";
    for (const auto &p : tpcc_test::files_in("tests/plans", ".plan")) {
        Unit u(p);
        EXPECT_TRUE(u.u.built) << p << "\n" << u.text();
        EXPECT_EQ(u.u.diags.errors, 0) << p << "\n" << u.text();
        EXPECT_GT(u.a().nrows, 0) << p;
    }
}


// --- repeat() with several arguments ------------------------------------------------

// HF's layer(hidden_states, position_embeddings=...): the list threads the
// first argument through its layers and hands each layer the others as
// they were. Each layer's PrepareModuleInput slices the position
// embeddings it is given; had one layer's slice reached the next layer,
// that layer's Replicate() label would lie (a relabel error).
const char kThreadedModel[] = R"(
config {
    vocab = 64
    hidden = 16
    layers = 3
    seq = 8
    batch = 2
    tp = 2
}

module Root {
    embed     = Embedding(vocab, hidden)
    pos_embed = Embedding(seq, hidden)
    layers    = repeat(Block(), layers)
    head      = Linear(hidden, vocab, bias=False)

    def forward(input_ids: [batch, seq]) {
        p = pos_embed(arange(seq))
        return head(layers(embed(input_ids), position_embeddings=p))
    }
}

module Block {
    proj = Linear(hidden, hidden, bias=False)

    def forward(hidden_states, position_embeddings) {
        return hidden_states + proj(hidden_states + position_embeddings)
    }
}
)";

const char kThreadedPlan[] = R"(
model "threaded.model"
mesh(tp = tp)
parallelize "" {
    "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
    "pos_embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
    "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
}
parallelize "layers.*" {
    "": PrepareModuleInput(input_kwarg_layouts={"position_embeddings": Replicate()},
                           desired_input_kwarg_layouts={"position_embeddings": Shard(0)},
                           use_local_output=True),
}
)";

TEST(Repeat, ThreadsTheFirstArgumentAndPassesTheOthersUnchanged)
{
    Tree t;
    t.write("threaded.model", kThreadedModel);
    Unit u(t.write("threaded.plan", kThreadedPlan));
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    for (int l = 0; l < 3; l++) {
        std::string fqn = "layers." + std::to_string(l);
        EXPECT_EQ(u.inputs(fqn), "Shard(1) plain [2, 8, 16], position_embeddings=Replicate() plain [8, 16]")
            << fqn << "\n" << u.text();
        EXPECT_EQ(u.outputs(fqn), "Shard(1) plain [2, 8, 16]") << fqn;
    }
    int slices = 0;
    for (int i = 0; i < u.a().ncomms; i++)
        slices += u.a().comms[i].kind == TP_REDIST_LOCAL_SLICE && u.a().comms[i].rank == 2;
    EXPECT_EQ(slices, 3) << all_comms(u.a());
}

// A list needs the value it threads.
TEST(Repeat, NoArgumentIsAnError)
{
    Tree t;
    std::string model = kThreadedModel;
    model.replace(model.find("layers(embed(input_ids), position_embeddings=p)"),
                  strlen("layers(embed(input_ids), position_embeddings=p)"), "layers(position_embeddings=p)");
    t.write("threaded.model", model);
    Unit u(t.write("threaded.plan", kThreadedPlan));
    EXPECT_GT(u.u.diags.errors, 0);
    EXPECT_NE(u.text().find("a repeat() list is applied to the value it threads through its modules"),
              std::string::npos) << u.text();
}

}  // namespace
