// runtime/exec/limits_check.c: a schedule against a backend's limits
// (tp_backend.limits), checked before anything is allocated. A backend
// whose limits sit one below a size of a tiny Llama (forward and training
// schedules of plans/llama-sp.plan: hidden 64, 8 heads of 8, batch 2 x
// seq 16) refuses it, naming the op, the size and the limit; at the size
// itself, without limits, or with a limit of 0 (none) it accepts it.
// The CUDA backend's own limits, end to end: EmulatedRun.*Limit* in
// test_cuda_backend.cc.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "runtime/exec/limits_check.h"
#include "sched/load.h"
#include "sched/ops.h"
}

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::source_path;

namespace {

class BackendLimits : public ::testing::Test {
protected:
    // plans/<plan>.plan, tiny, at tp (loaded as its rank 0); --train adds
    // the backward ops
    void load(bool train, const std::string &plan = "llama-sp", int tp = 1)
    {
        const std::string sched = dir.path + "/" + plan + (train ? "-train" : "") + ".sched";
        std::vector<std::string> args = {source_path("plans/" + plan + ".plan"), "-o", sched, "-D",
                                         "tp=" + std::to_string(tp), "-D",
                                         plan == "gpt2-hf-sp" ? "positions=32" : "kv_heads=4"};
        for (const char *d : {"vocab=256", "hidden=64", "layers=1", "heads=8", "ffn=128", "seq=16", "batch=2"})
            args.insert(args.end(), {"-D", d});
        if (train)
            args.push_back("--train");
        tpcc_test::Proc p = tpcc_test::run_tpcc(args);
        ASSERT_EQ(p.code(), 0) << p.describe();
        char err[1024];
        ASSERT_EQ(tr_schedule_load(&s, sched.c_str(), 0, tp, err, sizeof err), 0) << err;
        loaded = true;
    }
    // The kinds of op that a rows limit of 1 refuses, each op checked
    // alone; each must report its batch x seq tokens, or its sequence
    // shard's under sequence parallelism (a size read wrongly, as elements
    // rather than rows, is far larger).
    std::set<std::string> row_bound_kinds(int64_t tokens, int tp)
    {
        std::set<std::string> kinds;
        tr_schedule all = s;
        tp_backend_limits l = {};
        l.rows = 1;
        for (int i = 0; i < all.nops; i++) {
            s.ops = &all.ops[i];
            s.nops = 1;
            std::string msg = check(l);
            if (msg.empty())
                continue;
            kinds.insert(tp_op_names[all.ops[i].kind]);
            EXPECT_TRUE(contains(msg, " " + std::to_string(tokens) + " is above") ||
                        contains(msg, " " + std::to_string(tokens / tp) + " is above"))
                << msg;
        }
        s = all;
        return kinds;
    }
    void TearDown() override
    {
        if (loaded)
            tr_schedule_free(&s);
    }
    // The message of checking s against `limits`, "" when it passes.
    std::string check(const tp_backend_limits &limits)
    {
        tp_backend be = *tp_backend_cpu();
        be.name = "test";
        be.limits = &limits;
        char err[1024] = "";
        return tr_exec_check_limits(&s, &be, err, sizeof err) ? err : "";
    }
    // A limit one below `size` is refused with `expect` in the message; one
    // at it passes.
    void expect_bound(int64_t tp_backend_limits::*field, int64_t size, const std::string &expect)
    {
        tp_backend_limits l = {};
        l.*field = size - 1;
        std::string msg = check(l);
        EXPECT_TRUE(contains(msg, expect)) << msg;
        EXPECT_TRUE(contains(msg, "is above the test backend's limit of " + std::to_string(size - 1) +
                                      "; run the schedule with --backend cpu, or compile it for "))
            << msg;
        l.*field = size;
        EXPECT_EQ(check(l), "");
    }
    tpcc_test::TempDir dir;
    tr_schedule s;
    bool loaded = false;
};

TEST_F(BackendLimits, ForwardSizes)
{
    load(false);
    // -O1 rotates q and k in the attention: its bounds are attention's and rope's
    expect_bound(&tp_backend_limits::head_dim, 8, "(rope_attention in 'model.layers.0.self_attn'");
    expect_bound(&tp_backend_limits::head_dim, 8, "): head_dim 8 ");
    expect_bound(&tp_backend_limits::attn_heads, 8, "): heads 8 ");
    expect_bound(&tp_backend_limits::attn_batch, 2, "): batch 2 ");
    expect_bound(&tp_backend_limits::attn_seq, 16, "): seq 16 ");
    expect_bound(&tp_backend_limits::rotary_dim, 8, "(rope_attention in 'model.layers.0.self_attn");
    expect_bound(&tp_backend_limits::rotary_dim, 8, "): rotary_dim 8 ");
    // the embedding is the first op with a block per token
    expect_bound(&tp_backend_limits::rows, 32, "op 0 (embedding in 'model.embed_tokens'");
    expect_bound(&tp_backend_limits::rows, 32, "): tokens 32 ");
    // a forward schedule has no norm gradients and no embedding gradient
    tp_backend_limits none = {};
    none.norm_cols = 1;
    none.embedding_grad_dim = 1;
    EXPECT_EQ(check(none), "");
}

TEST_F(BackendLimits, TrainingSizes)
{
    load(true);
    expect_bound(&tp_backend_limits::norm_cols, 64, "_dx in '");
    expect_bound(&tp_backend_limits::norm_cols, 64, "): columns (n) 64 ");
    expect_bound(&tp_backend_limits::embedding_grad_dim, 64, "(embedding_grad in 'model.embed_tokens'");
    expect_bound(&tp_backend_limits::embedding_grad_dim, 64, "): the table's width 64 ");
    expect_bound(&tp_backend_limits::head_dim, 8, "attention");
}

// Every op with a block per row or token is bounded by `rows`, with the
// rows its kernel gets: RMSNorm (alone and fused with its residual add),
// RoPE (in attention and its gradient) and the whole loss at tp 1; LayerNorm,
// sum_rows and the vocab-parallel loss at tp 2.
TEST_F(BackendLimits, EveryRowBoundOpReportsItsRows)
{
    load(true);
    EXPECT_EQ(row_bound_kinds(32, 1),
              (std::set<std::string>{"embedding", "rope_attention", "rope_attention_grad", "rmsnorm", "add_rmsnorm", "rmsnorm_dx", "rmsnorm_dw",
                                     "cross_entropy_grad", "embedding_grad"}));
}

TEST_F(BackendLimits, EveryRowBoundOpReportsItsRowsVocabParallel)
{
    load(true, "gpt2-hf-sp", 2);
    EXPECT_EQ(row_bound_kinds(32, 2),
              (std::set<std::string>{"embedding", "layernorm", "layernorm_dx", "layernorm_dw", "sum_rows", "ce_max",
                                     "ce_sumexp", "ce_grad", "embedding_grad"}));
}

TEST_F(BackendLimits, NoLimitsAcceptEverything)
{
    load(true);
    tp_backend_limits zero = {};
    EXPECT_EQ(check(zero), "");
    char err[64] = "";
    EXPECT_EQ(tr_exec_check_limits(&s, tp_backend_cpu(), err, sizeof err), 0) << err;
}

}  // namespace
