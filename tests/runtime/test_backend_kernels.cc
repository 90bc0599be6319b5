// runtime/exec/kernels_check.c: a schedule against the kernels its backend
// has, sched/ops.def's kernels column against the backend's table. The CPU
// backend, the reference, has every op's kernels. A table without one
// refuses, when the executor starts and before anything is allocated, a
// schedule with an op that runs it, naming the op, its position, the
// kernel and the backend: a forward kernel as well as a training one, so
// no kernel is taken for granted. (The CUDA backend's table:
// BackendTraining.HasEveryOpsKernels in cuda_standin/test_backend_training.cc.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "runtime/exec/exec.h"
#include "runtime/exec/kernels_check.h"
#include "sched/load.h"
#include "sched/ops.h"
}

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::source_path;

namespace {

TEST(BackendKernels, TheCpuBackendHasEveryOpsKernels)
{
    for (int k = 0; k < TP_OP_COUNT; k++)
        EXPECT_EQ(tr_backend_missing_kernel(tp_backend_cpu(), (tp_op_kind)k), nullptr) << tp_op_names[k];
}

// A tiny Llama (plans/llama-sp.plan at tp 1), forward or training, against
// copies of the CPU backend's table with a kernel taken out.
class MissingKernel : public ::testing::Test {
protected:
    void SetUp() override
    {
        for (bool train : {false, true}) {
            const std::string sched = dir.path + (train ? "/train.sched" : "/forward.sched");
            std::vector<std::string> args = {source_path("plans/llama-sp.plan"), "-o", sched};
            for (const char *d : {"tp=1", "vocab=256", "hidden=64", "layers=1", "heads=8", "kv_heads=4", "ffn=128",
                                  "seq=16", "batch=2"})
                args.insert(args.end(), {"-D", d});
            if (train)
                args.push_back("--train");
            tpcc_test::Proc p = tpcc_test::run_tpcc(args);
            ASSERT_EQ(p.code(), 0) << p.describe();
            char err[1024];
            ASSERT_EQ(tr_schedule_load(&s[train], sched.c_str(), 0, 1, err, sizeof err), 0) << err;
            loaded[train] = true;
        }
    }
    void TearDown() override
    {
        for (int t = 0; t < 2; t++)
            if (loaded[t])
                tr_schedule_free(&s[t]);
    }
    // The executor's message starting schedule s[train] on `be`, "" when it starts.
    std::string start(bool train, const tp_backend &be)
    {
        tr_exec x;
        char err[1024];
        if (tr_exec_init(&x, &s[train], &be, nullptr, err, sizeof err))
            return err;
        tr_exec_free(&x);
        return "";
    }
    // "op I (kind" of the first op of kind k in s[train]
    std::string first_op(bool train, tp_op_kind k) const
    {
        for (int i = 0; i < s[train].nops; i++)
            if (s[train].ops[i].kind == k)
                return "op " + std::to_string(i) + " (" + tp_op_names[k];
        ADD_FAILURE() << "no " << tp_op_names[k] << " op";
        return "";
    }
    tpcc_test::TempDir dir;
    tr_schedule s[2];
    bool loaded[2] = {false, false};
};

// A backend without attention's gradient runs the forward schedule and
// refuses the training one at its first attention gradient (-O1 rotates q
// and k in it: rope_attention_grad, which needs attention_grad).
TEST_F(MissingKernel, ATrainingKernelRefusesTheTrainingScheduleOnly)
{
    tp_backend be = *tp_backend_cpu();
    be.name = "test";
    be.attention_grad = nullptr;
    EXPECT_EQ(start(false, be), "");
    const std::string msg = start(true, be);
    EXPECT_TRUE(contains(msg, first_op(true, TP_OP_ROPE_ATTENTION_GRAD))) << msg;
    EXPECT_TRUE(contains(msg, "the test backend has no attention_grad kernel")) << msg;
}

// A forward kernel is no more taken for granted: without rmsnorm both
// schedules are refused at the first rmsnorm op. A kernel that several kinds
// share is named as the backend's table names it (silu_grad runs
// unary_grad).
TEST_F(MissingKernel, AForwardOrASharedKernelIsNamed)
{
    tp_backend be = *tp_backend_cpu();
    be.name = "test";
    be.rmsnorm = nullptr;
    for (bool train : {false, true}) {
        const std::string msg = start(train, be);
        EXPECT_TRUE(contains(msg, first_op(train, TP_OP_RMSNORM))) << msg;
        EXPECT_TRUE(contains(msg, "the test backend has no rmsnorm kernel")) << msg;
    }
    be = *tp_backend_cpu();
    be.name = "test";
    be.unary_grad = nullptr;
    EXPECT_EQ(tr_backend_missing_kernel(&be, TP_OP_SILU_GRAD), std::string("unary_grad"));
    EXPECT_EQ(tr_backend_missing_kernel(&be, TP_OP_SILU), nullptr);
}

}   // namespace
