// Activation recomputation (compiler/passes/recompute.c): what each mode
// keeps of a layer's forward for the backward, where the recomputed ops
// go, and the activation arena tpcc --report --train gives for each mode.
#include <gtest/gtest.h>

#include <jansson.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/passes/passes.h"
}

using namespace tpcc_test;

namespace {

using tpcc_test::kTpcc;

// The tiny Llama with sequence parallelism, 4 layers, compiled --train
// --recompute mode at tp 2 (-O1 unless `optimize` is false), in fp32
// unless `dtype` says otherwise.
struct Step {
    tp_unit u;
    explicit Step(tp_recompute mode, bool optimize = true, tp_dtype dtype = TP_F32)
    {
        const char *d[] = {"layers=4"};
        const std::string plan = "plans/llama-tiny.plan";
        tp_compile_opts opts = {d, 1, nullptr, optimize, dtype, true, true, TP_LOSS_NONE, nullptr, 0, true, mode, false, nullptr, nullptr, 0};
        tp_compile(&u, source_path(plan).c_str(), &opts);
        EXPECT_TRUE(u.built && !u.diags.errors) << rendered(&u);
    }
    ~Step() { tp_unit_free(&u); }
    const tp_ir &ir() const { return u.ir; }
};

int root(const tp_ir &ir, int b)
{
    while (b >= 0 && ir.bufs[b].alias_of >= 0)
        b = ir.bufs[b].alias_of;
    return b;
}

bool live(const tp_ir_op &op) { return !op.dead; }

// An attention's forward: its own, or with q and k rotated in it (-O1)
bool forward_attention(tp_op_kind k) { return k == TP_OP_ATTENTION || k == TP_OP_ROPE_ATTENTION; }

int outs(const tp_ir_op &op) { return tp_ops[op.kind].nout; }

// What the backward reads of the layers' forward: per buffer (alias
// root) a forward op of a layer wrote, and which layers' forward ops read
// it, whether a matmul wrote it, and whether a backward op (not a
// recomputed one) reads it.
struct LayerValue {
    std::string layer;
    bool matmul = false, read_elsewhere = false, backward_reads = false;
};

std::map<int, LayerValue> layer_values(const tp_ir &ir)
{
    std::map<int, LayerValue> v;
    for (int i = 0; i < ir.nops; i++) {
        const tp_ir_op &op = ir.ops[i];
        if (!live(op) || op.phase != TP_PHASE_FORWARD)
            continue;
        for (int k = 0; k < op.nin; k++) {
            auto it = v.find(root(ir, op.in[k]));
            if (it != v.end() && (!op.layer || it->second.layer != op.layer))
                it->second.read_elsewhere = true;
        }
        for (int o = 0; o < outs(op); o++) {
            int b = root(ir, op.outs[o]);
            if (!op.layer || b < 0 || v.count(b))
                continue;
            v[b].layer = op.layer;
            v[b].matmul = op.kind == TP_OP_MATMUL || op.kind == TP_OP_CONV1D;
        }
    }
    for (int i = 0; i < ir.nops; i++) {
        const tp_ir_op &op = ir.ops[i];
        if (!live(op) || op.phase != TP_PHASE_BACKWARD || op.recompute)
            continue;
        for (int k = 0; k < op.nin; k++) {
            auto it = v.find(root(ir, op.in[k]));
            if (it != v.end())
                it->second.backward_reads = true;
        }
    }
    return v;
}

int recomputed(const tp_ir &ir)
{
    int n = 0;
    for (int i = 0; i < ir.nops; i++)
        n += live(ir.ops[i]) && ir.ops[i].recompute;
    return n;
}

// Full: the backward reads nothing a layer computed but what crosses
// its boundary (the next layer's input); selective: that and the outputs
// of its matmuls; none: the matmuls' inputs, norms and activations too.
// At -O0: -O1 fuses a layer's last residual add with the next layer's
// norm into one add_rmsnorm, an op of the next layer writing this one's
// output, which would hide which layer computed what.
TEST(Recompute, EachModeKeepsWhatItSays)
{
    for (tp_recompute mode : {TP_RECOMPUTE_NONE, TP_RECOMPUTE_FULL, TP_RECOMPUTE_SELECTIVE}) {
        Step s(mode, false);
        int inside = 0, matmuls = 0;
        for (const auto &[b, v] : layer_values(s.ir())) {
            if (!v.backward_reads || v.read_elsewhere)
                continue;
            if (mode == TP_RECOMPUTE_FULL || (mode == TP_RECOMPUTE_SELECTIVE && !v.matmul))
                ADD_FAILURE() << tp_recompute_names[mode] << ": the backward reads " << s.ir().bufs[b].name
                              << " of the forward of " << v.layer;
            inside++;
            matmuls += v.matmul;
        }
        if (mode == TP_RECOMPUTE_NONE) {
            EXPECT_EQ(recomputed(s.ir()), 0);
            EXPECT_GT(inside, matmuls) << "without recomputation the backward reads norms' and activations' outputs";
        }
        if (mode == TP_RECOMPUTE_SELECTIVE) {
            EXPECT_GT(matmuls, 0) << "selective keeps the matmuls' outputs";
        }
    }
}

// The recomputed ops are backward ops of a layer, after the forward's
// last op and before any op that reads what they write, every layer
// recomputing as many as the others; full recomputes more than selective.
TEST(Recompute, RecomputedOpsComeBeforeTheirReadersInTheBackward)
{
    std::map<tp_recompute, int> counts;
    for (tp_recompute mode : {TP_RECOMPUTE_FULL, TP_RECOMPUTE_SELECTIVE}) {
        Step s(mode);
        const tp_ir &ir = s.ir();
        std::map<int, int> written_at;   // buffer -> the first recomputed op writing it
        std::map<std::string, int> per_layer;
        int last_forward = -1;
        for (int i = 0; i < ir.nops; i++) {
            const tp_ir_op &op = ir.ops[i];
            if (live(op) && op.phase == TP_PHASE_FORWARD)
                last_forward = i;
            if (!live(op) || !op.recompute)
                continue;
            for (int o = 0; o < outs(op); o++)
                if (op.outs[o] >= 0)
                    written_at.emplace(root(ir, op.outs[o]), i);
        }
        for (int i = 0; i < ir.nops; i++) {
            const tp_ir_op &op = ir.ops[i];
            if (!live(op))
                continue;
            for (int k = 0; k < op.nin; k++) {
                auto w = written_at.find(root(ir, op.in[k]));
                if (w != written_at.end()) {
                    EXPECT_LT(w->second, i) << ir.bufs[op.in[k]].name << " is read before it is recomputed";
                }
            }
            if (!op.recompute)
                continue;
            EXPECT_EQ(op.phase, TP_PHASE_BACKWARD);
            ASSERT_NE(op.layer, nullptr) << "only a layer's ops are recomputed";
            EXPECT_GT(i, last_forward);
            per_layer[op.layer]++;
        }
        ASSERT_EQ(per_layer.size(), 4u) << tp_recompute_names[mode];
        for (const auto &[layer, n] : per_layer)
            EXPECT_EQ(n, per_layer.begin()->second) << layer;
        counts[mode] = recomputed(ir);
    }
    EXPECT_GT(counts[TP_RECOMPUTE_FULL], counts[TP_RECOMPUTE_SELECTIVE]);
}

json_t *report(const std::string &plan, const std::vector<std::string> &sizes, const std::string &mode)
{
    std::vector<std::string> args = {source_path(plan), "--train", "--report", "--report-format=json", "--recompute",
                                     mode};
    for (const std::string &s : sizes)
        args.insert(args.end(), {"-D", s});
    Proc p = run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *root = json_loads(p.out.c_str(), 0, &e);
    EXPECT_NE(root, nullptr) << e.text << "\n" << p.out;
    return root;
}

// The arena falls with recomputation: full below selective below none,
// on models of 8 layers (Llama with sequence parallelism at tp 2 and 1,
// GPT-2); the report names the mode and counts the recomputed ops, their
// FLOPs (in the backward's) and what their collectives send.
TEST(Recompute, ReportedArenaFallsFullBelowSelectiveBelowNone)
{
    struct Model { std::string plan; std::vector<std::string> sizes; };
    const std::vector<Model> models = {
        {"plans/llama-tiny.plan", {"layers=8", "seq=256", "batch=4"}},
        {"plans/llama-tiny.plan", {"layers=8", "seq=256", "batch=4", "tp=1"}},
        {"plans/gpt2-sp-tied.plan", {"layers=8", "hidden=128", "heads=4", "seq=256", "positions=256", "vocab=256",
                                     "batch=4"}}};
    for (const Model &m : models) {
        std::map<std::string, json_int_t> arena;
        std::map<std::string, double> backward;
        for (const char *mode : {"none", "full", "selective"}) {
            json_t *root = report(m.plan, m.sizes, mode);
            ASSERT_NE(root, nullptr);
            json_t *t = json_object_get(root, "training"), *r = json_object_get(t, "recompute");
            EXPECT_STREQ(json_string_value(json_object_get(r, "mode")), mode);
            json_int_t ops = json_integer_value(json_object_get(r, "ops"));
            double flops = json_real_value(json_object_get(r, "flops"));
            EXPECT_EQ(ops == 0, std::string(mode) == "none") << m.plan << " " << mode;
            EXPECT_EQ(flops == 0, std::string(mode) == "none") << m.plan << " " << mode;
            arena[mode] = json_integer_value(json_object_get(root, "arena_bytes"));
            backward[mode] = json_real_value(json_object_get(json_object_get(t, "flops"), "backward")) - flops;
            json_decref(root);
        }
        std::string what = m.plan + " " + m.sizes.back();
        EXPECT_LT(arena["full"], arena["selective"]) << what;
        EXPECT_LT(arena["selective"], arena["none"]) << what;
        // the backward's own FLOPs are the same; recomputation only adds
        EXPECT_DOUBLE_EQ(backward["full"], backward["none"]) << what;
        EXPECT_DOUBLE_EQ(backward["selective"], backward["none"]) << what;
    }
    Proc text = run_program(kTpcc, {source_path("plans/llama-tiny.plan"), "--train", "--report", "--recompute", "full"});
    EXPECT_TRUE(contains(text.out, "  recompute         full: 26 forward ops run again in the backward")) << text.out;
    EXPECT_TRUE(contains(text.out, "ratio 1.00 (-O0: 1.00); the recomputed forward's collectives left out")) << text.out;
}

// train { recompute } sets the mode, --recompute overrides it.
TEST(Recompute, ThePlanSetsItAndTheCommandLineOverrides)
{
    TempDir d;
    std::string text = slurp(source_path("plans/llama-tiny.plan"));
    text.replace(text.find("\"../models/"), 11, "\"" + source_path("models") + "/");
    std::string plan = d.write("p.plan", text + "train { recompute = \"selective\" }\n");
    Proc p = run_program(kTpcc, {plan, "--train", "--report"});
    EXPECT_TRUE(contains(p.out, "  recompute         selective: 14 forward ops")) << p.describe();
    p = run_program(kTpcc, {plan, "--train", "--report", "--recompute", "none"});
    EXPECT_TRUE(contains(p.out, "  recompute         none: 0 forward ops")) << p.describe();
}

// The schedule marks the recomputed ops, and --dump says so beside the
// forward op's provenance.
TEST(Recompute, TheScheduleAndItsDumpMarkTheRecomputedOps)
{
    TempDir d;
    const std::string sched = d.path + "/full.sched";
    Proc c = run_program(kTpcc, {source_path("plans/llama-tiny.plan"), "--train", "--recompute", "full", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    EXPECT_TRUE(contains(slurp(sched), "\"module\": \"model.layers.1.input_layernorm\", \"recompute\": true, "
                                       "\"phase\": \"backward\"}"));
    Proc dump = run_program(kTpcc, {"--dump", sched, "--rank", "1"});
    ASSERT_EQ(dump.code(), 0) << dump.describe();
    EXPECT_TRUE(contains(dump.out, "[backward] (recompute; model.layers.0.self_attn <- model.layers.*.self_attn)"))
        << dump.out;
}

// Attention's saved statistics (compiler/passes/attention_stats.c): every
// attention_grad reads, after q, k, v and dy, the output of the last
// attention before it on the same q, k and v (in the backward, the
// recomputed one, where recomputation repeats the attention) and that
// attention's log-sum-exp, a float32 [batch, heads, seq] buffer whatever
// the dtype, which nothing else reads; an attention no gradient follows
// writes none.
TEST(Recompute, EachAttentionGradientReadsItsOwnAttentionsOutputAndLogSumExp)
{
    for (tp_recompute mode : {TP_RECOMPUTE_NONE, TP_RECOMPUTE_SELECTIVE, TP_RECOMPUTE_FULL}) {
        Step step(mode, true, TP_BF16);
        const tp_ir &ir = step.ir();
        int grads = 0;
        std::map<int, int> readers;
        for (int i = 0; i < ir.nops; i++) {
            const tp_ir_op &op = ir.ops[i];
            for (int k = 0; live(op) && k < op.nin; k++)
                readers[op.in[k]]++;
            if (!live(op) || (op.kind != TP_OP_ATTENTION_GRAD && op.kind != TP_OP_ROPE_ATTENTION_GRAD))
                continue;
            grads++;
            ASSERT_EQ(op.nin, 6) << "op " << i;
            int f = i - 1;
            while (f >= 0 && !(live(ir.ops[f]) && forward_attention(ir.ops[f].kind) && ir.ops[f].in[0] == op.in[0] &&
                               ir.ops[f].in[1] == op.in[1] && ir.ops[f].in[2] == op.in[2]))
                f--;
            ASSERT_GE(f, 0) << "op " << i << ": no attention on its q, k and v before it";
            const tp_ir_op &fwd = ir.ops[f];
            EXPECT_EQ(op.in[4], fwd.outs[0]) << "op " << i;
            EXPECT_EQ(op.in[5], fwd.outs[1]) << "op " << i;
            EXPECT_EQ(fwd.recompute, mode != TP_RECOMPUTE_NONE) << "op " << f;
            const tp_ir_buf &lse = ir.bufs[fwd.outs[1]];
            EXPECT_EQ(lse.dtype, TP_F32);
            ASSERT_EQ(lse.rank, 3);
            EXPECT_EQ(tp_ir_buf_elems(&lse), tp_ir_buf_elems(&ir.bufs[fwd.outs[0]]) / fwd.k) << "a float a query, head";
        }
        EXPECT_EQ(grads, 4);
        int saved = 0;
        for (int i = 0; i < ir.nops; i++)
            if (live(ir.ops[i]) && forward_attention(ir.ops[i].kind) && ir.ops[i].outs[1] >= 0) {
                saved++;
                EXPECT_EQ(readers[ir.ops[i].outs[1]], 1) << "op " << i;
            }
        EXPECT_EQ(saved, 4) << "an attention no gradient reads (recomputation's original) writes no lse";
    }
}

}  // namespace
