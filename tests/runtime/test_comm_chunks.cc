// The MPI communicator's chunks (runtime/comm/mpi.c): with
// TPRUN_MPI_MAX_COUNT set low, every collective runs as several MPI calls
// and gives the bits of one call (comm_collectives.c, at 2 and 3 ranks, on
// ragged sizes), a training run logs the same losses and saves the same
// checkpoint byte for byte, and a limit that is not a positive int count is
// refused before anything runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/grad_files.h"
#include "tests/support/process.h"
#include "tests/support/token_files.h"
#include "tests/support/train_harness.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kCollectives = std::string(TPCC_BINARY_DIR) + "/comm_collectives";

// comm_collectives on `world` ranks, its results into prefix.rank<r>.
Proc collectives(int world, const std::string &prefix, const std::vector<std::string> &env)
{
    return tpcc_test::run_program("mpiexec", {"-n", std::to_string(world), kCollectives, prefix}, env,
                                  120);
}

TEST(MpiChunks, EveryCollectiveGivesTheBitsOfOneCall)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    for (int world : {2, 3}) {
        std::string whole = d.path + "/whole" + std::to_string(world);
        Proc one = collectives(world, whole, {});
        ASSERT_EQ(one.code(), 0) << "world " << world << ": " << one.describe();
        for (const char *limit : {"1", "3", "5"}) {
            std::string chunked = d.path + "/limit" + limit + "-" + std::to_string(world);
            Proc p = collectives(world, chunked, {std::string("TPRUN_MPI_MAX_COUNT=") + limit});
            ASSERT_EQ(p.code(), 0) << "world " << world << ", limit " << limit << ": " << p.describe();
            for (int r = 0; r < world; r++) {
                std::string rank = ".rank" + std::to_string(r);
                EXPECT_FALSE(tpcc_test::slurp(whole + rank).empty());
                EXPECT_EQ(tpcc_test::slurp(chunked + rank), tpcc_test::slurp(whole + rank))
                    << "world " << world << ", limit " << limit << ", rank " << r;
            }
        }
    }
}

// Three steps of llama-sp with --save, at dp 1 x tp 2 and at dp 2 x tp 1
// with ZeRO-1 (each gradient reduce-scattered, each weight all-gathered
// over dp), with and without a limit of 61 elements: the forward's and
// backward's collectives, the gradient synchronisation and the gathers of
// the weights and moments for --save run in chunks, ragged ones (all but
// the norm weights', of 32 elements or their runs, are larger than 61).
TEST(MpiChunks, TrainingLogsAndSavesTheSameBytesInChunks)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string plan;
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, plan, "plans/llama-sp.plan", "shard = \"optimizer\","));
    std::vector<int32_t> toks;
    for (int i = 0; i < 3 * 64; i++)
        toks.push_back(int32_t((i * 37 + i / 16) % 128));     // three steps of 4 x 16
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240801, 7, toks));
    const std::string weights = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/";
    for (auto [dp, tp] : {std::pair{1, 2}, std::pair{2, 1}}) {
        std::string tag = "dp" + std::to_string(dp) + "tp" + std::to_string(tp), sched = d.path + "/" + tag + ".sched";
        Proc c = tpcc_test::compile_dp(plan, dp, tp, 4 / dp, sched);
        ASSERT_EQ(c.code(), 0) << c.describe();
        auto train = [&](const std::string &run, const std::vector<std::string> &env) {
            return tpcc_test::run_program(kTprun, {"-n", "2", sched, "--weights", weights, "--data", data,
                                                   "--steps", "3", "--log-json", d.path + "/" + run + ".json",
                                                   "--save", d.path + "/" + run, "-q"},
                                          env, 300);
        };
        Proc whole = train(tag + "-whole", {});
        ASSERT_EQ(whole.code(), 0) << tag << ": " << whole.describe();
        Proc chunked = train(tag + "-chunked", {"TPRUN_MPI_MAX_COUNT=61"});
        ASSERT_EQ(chunked.code(), 0) << tag << ": " << chunked.describe();
        std::vector<double> losses = tpcc_test::logged_losses(d.path + "/" + tag + "-whole.json");
        EXPECT_EQ(losses.size(), 3u) << tag;
        EXPECT_EQ(tpcc_test::logged_losses(d.path + "/" + tag + "-chunked.json"), losses) << tag;
        for (const char *file : {"/model.safetensors", "/optimizer.safetensors", "/tprun_state.json"}) {
            std::string saved = tpcc_test::slurp(d.path + "/" + tag + "-whole" + file);
            EXPECT_FALSE(saved.empty()) << tag << file;
            EXPECT_TRUE(tpcc_test::slurp(d.path + "/" + tag + "-chunked" + file) == saved) << tag << file;
        }
    }
}

TEST(MpiChunks, ALimitThatIsNoPositiveIntCountIsRefused)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = d.path + "/forward.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-D", "tp=2", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    for (const char *bad : {"0", "-1", "abc", "7x", "", "2147483648"}) {
        std::string out = d.path + "/logits.npy";
        Proc p = tpcc_test::run_program(kTprun, {"-n", "2", sched, "--out", out, "-q"},
                                        {std::string("TPRUN_MPI_MAX_COUNT=") + bad}, 120);
        EXPECT_NE(p.code(), 0) << "'" << bad << "': " << p.describe();
        EXPECT_TRUE(contains(p.err, "TPRUN_MPI_MAX_COUNT takes a whole number of elements from 1 to 2147483647, "
                                    "not '" + std::string(bad) + "'"))
            << p.describe();
        EXPECT_FALSE(std::filesystem::exists(out)) << "'" << bad << "' wrote the logits";
    }
}

}  // namespace
