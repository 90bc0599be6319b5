// tprun --profile, --profile-json and --trace on a training schedule: the
// median step's time split into the schedule's phases (forward, backward,
// the gradients' reduction over tp) and the trainer's (the average over
// the data-parallel replicas, the optimizer), every op kind's time, every
// step's total, the bytes of the data each rank read, and the last
// step's ops in a Chrome trace with their phase; on a dp 2 x tp 2 mesh, so
// that every phase has work and the data's check is split four ways.
#include <gtest/gtest.h>

#include <jansson.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/train_harness.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kTokens = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/tokens.npy";

double num(json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

TEST(TrainProfile, PhasesOpsAndStepsOfEveryRank)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string plan, sched = d.path + "/dp2tp2.sched", prof = d.path + "/profile.json", trace = d.path + "/trace.json";
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, plan));
    Proc c = tpcc_test::compile_dp(plan, 2, 2, 1, sched);
    ASSERT_EQ(c.code(), 0) << c.describe();
    Proc r = tpcc_test::run_program(kTprun, {"-n", "4", sched, "--data", kTokens, "--steps", "3", "--profile",
                                             "--profile-json", prof, "--trace", trace, "-q"},
                                    {}, 300);
    ASSERT_EQ(r.code(), 0) << r.describe();
    for (int rank = 0; rank < 4; rank++)
        EXPECT_TRUE(contains(r.out, "profile, rank " + std::to_string(rank) + ": ")) << r.out;
    EXPECT_TRUE(contains(r.out, " ms per training step (median of 3 steps), ")) << r.out;
    EXPECT_TRUE(contains(r.out, "\n  phases             forward ")) << r.out;
    for (const char *part : {" ms, backward ", " ms, grad_sync ", " ms, dp_average ", " ms, optimizer ", "matmul_tn ",
                             " KiB of data read\n"})
        EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;

    json_error_t e;
    json_t *p = json_load_file(prof.c_str(), 0, &e);
    ASSERT_TRUE(p) << e.text << "\n" << tpcc_test::slurp(prof);
    json_t *ranks = json_object_get(p, "ranks");
    ASSERT_EQ(json_array_size(ranks), 4u);
    size_t i;
    json_t *rk;
    // the stream's 10 samples of 16 int32 tokens: before step 1 each rank
    // checks its 2 or 3 of them (a quarter, together all), then reads its
    // replica's sample of each of the 3 steps, never the whole stream
    const double sample = 16 * 4;
    double checked = 0;
    json_array_foreach(ranks, i, rk) {
        const double own = num(rk, "data_bytes_read") - 3 * sample;
        EXPECT_TRUE(own == 2 * sample || own == 3 * sample) << "rank " << i << ": " << own;
        checked += own;
    }
    EXPECT_EQ(checked, 10 * sample);
    json_array_foreach(ranks, i, rk) {
        SCOPED_TRACE("rank " + std::to_string(i));
        EXPECT_FALSE(json_object_get(rk, "forward_seconds"));   // a training step is more than its forward
        json_t *ph = json_object_get(rk, "phases");
        ASSERT_TRUE(json_is_object(ph));
        const double step = num(rk, "step_seconds"), fwd = num(ph, "forward"), bwd = num(ph, "backward"),
                     sync = num(ph, "grad_sync"), dp = num(ph, "dp_average"), opt = num(ph, "optimizer");
        // every phase has work here: sequence-parallel norms' gradients are
        // reduced over tp, every gradient averaged over dp
        for (double t : {fwd, bwd, sync, dp, opt})
            EXPECT_GT(t, 0.0);
        // the ops' times are the schedule's phases, summed another way
        double ops = 0;
        const char *name;
        json_t *op;
        json_object_foreach(json_object_get(rk, "ops"), name, op) ops += num(op, "seconds");
        EXPECT_NEAR(ops, fwd + bwd + sync, 1e-6 * ops);
        EXPECT_TRUE(json_object_get(json_object_get(rk, "ops"), "matmul_tn"));
        // the step holds all of them (and the executor's own time)
        EXPECT_GE(step * (1 + 1e-6), fwd + bwd + sync + dp + opt);
        EXPECT_LT(step, 2 * (fwd + bwd + sync + dp + opt));
        // the profile is the median step's
        json_t *steps = json_object_get(rk, "steps");
        ASSERT_EQ(json_array_size(steps), 3u);
        std::vector<double> all;
        for (size_t k = 0; k < 3; k++)
            all.push_back(json_number_value(json_array_get(steps, k)));
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all[1], step);
    }
    json_decref(p);

    json_t *t = json_load_file(trace.c_str(), 0, &e);
    ASSERT_TRUE(t) << e.text;
    int backward = 0, forward = 0;
    json_t *ev;
    json_array_foreach(json_object_get(t, "traceEvents"), i, ev) {
        const char *phase = json_string_value(json_object_get(json_object_get(ev, "args"), "phase"));
        const char *op_name = json_string_value(json_object_get(ev, "name"));
        if (!phase)
            continue;
        forward += std::string(phase) == "forward" && std::string(op_name) == "embedding";
        backward += std::string(phase) == "backward" && std::string(op_name) == "embedding_grad";
    }
    EXPECT_EQ(forward, 4);    // one per rank
    EXPECT_EQ(backward, 4);
    json_decref(t);
}

// A forward schedule's profile has no phases to split: its JSON keeps
// "forward_seconds"; a training run still takes none
// of a forward run's inputs and outputs.
TEST(TrainProfile, ForwardInputsAndOutputsStayRefused)
{
    TempDir d;
    std::string sched = d.path + "/train.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "--train", "-D", "tp=1",
                                  "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    Proc r = tpcc_test::run_program(kTprun, {sched, "--data", kTokens, "--steps", "1", "--out", d.path + "/l.npy"});
    EXPECT_EQ(r.code(), 1);
    EXPECT_TRUE(contains(r.err, "is a training schedule: --tokens, --out and --compare go with forward schedules; it "
                                "reads its batches from --data")) << r.describe();
    EXPECT_FALSE(std::filesystem::exists(d.path + "/l.npy"));
}

}  // namespace
