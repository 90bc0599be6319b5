// How a training job of several ranks ends when one of them cannot go on
// (docs/reliability.md): a rank that dies is named, with its step and
// phase, by its monitor before the launcher's banner; an I/O phase (a
// save) is held to TPRUN_IO_TIMEOUT, not to a collective's TPRUN_TIMEOUT,
// and one that stalls past it is named and ends the job; a save that
// fails on the rank writing it fails every rank with one message and no
// abort. Two ranks (tp 2) on the llama training fixture, under MPICH's
// mpiexec; each run takes about a second, the stalled save three.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/process.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kFixture = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/";

// A training step of plans/llama-sp.plan at tp 2 on the fixture's config.
std::string compile_tp2(const TempDir &d)
{
    std::string sched = d.path + "/tp2.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                  kFixture + "config.json", "-D", "tp=2", "-D", "seq=16", "-D", "batch=2", "-D",
                                  "vocab_multiple=1", "--train", "-o", sched});
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

std::vector<std::string> training(const std::string &sched, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {sched, "--backend", "cpu", "--weights", kFixture, "--data",
                                     kFixture + "tokens.npy", "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

// `command` (its first word the program) through sh, stderr into stdout,
// as a terminal shows them: the order of tprun's lines and mpiexec's
// banner is the order they were written in.
Proc merged(const std::vector<std::string> &command, const std::vector<std::string> &env, int timeout_s = 60)
{
    std::vector<std::string> args = {"-c", "exec \"$0\" \"$@\" 2>&1"};
    args.insert(args.end(), command.begin(), command.end());
    return tpcc_test::run_program("/bin/sh", args, env, timeout_s);
}

size_t count(const std::string &s, const std::string &part)
{
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1))
        n++;
    return n;
}

// MPICH's hydra kills every other rank with SIGKILL as soon as one dies,
// so none of them can say which; the dead rank's monitor does, once, with
// the step and phase it had reached, before hydra's banner. Under tprun -n
// and under a plain mpiexec, at a step's backward pass, in a save, and
// before the first step. TPRUN_TEST_KILL raises SIGKILL in the rank at
// the point it names, as a kill from outside would.
TEST(RankDeath, TheMonitorNamesTheRankTheStepAndThePhase)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = compile_tp2(d);
    struct Case {
        std::vector<std::string> launcher;
        std::string kill, message;
        std::vector<std::string> extra;
    };
    const std::vector<Case> cases = {
        {{kTprun, "-n", "2"}, "1:2:backward", "tprun: rank 1 died (signal 9, Killed) at step 2, in the backward pass: it was "
                                             "killed from outside", {"--steps", "3"}},
        {{"mpiexec", "-n", "2", kTprun}, "0:1:saving", "tprun: rank 0 died (signal 9, Killed) at step 1, saving the "
                                                       "checkpoint", {"--steps", "2", "--save", d.path + "/ckpt",
                                                                      "--save-every", "1"}},
        {{"mpiexec", "-n", "2", kTprun}, "1:0:loading the weights", "tprun: rank 1 died (signal 9, Killed) loading the "
                                                                    "weights", {"--steps", "1"}},
    };
    for (const Case &c : cases) {
        std::vector<std::string> command = c.launcher, args = training(sched, c.extra);
        command.insert(command.end(), args.begin(), args.end());
        Proc p = merged(command, {"TPRUN_TEST_KILL=" + c.kill});
        EXPECT_NE(p.code(), 0) << c.kill << ": " << p.describe();
        EXPECT_EQ(count(p.out, " died (signal "), 1u) << c.kill << ": " << p.describe();
        size_t named = p.out.find(c.message), banner = p.out.find("BAD TERMINATION");
        EXPECT_NE(named, std::string::npos) << c.kill << ": " << p.describe();
        EXPECT_LT(named, banner) << c.kill << ": the rank is named before the launcher's banner\n" << p.describe();
    }
}

// A save that takes longer than TPRUN_TIMEOUT (TPRUN_TEST_SAVE_DELAY
// holds the writing rank) is an I/O phase: the other rank waits for it
// under TPRUN_IO_TIMEOUT, and the healthy job finishes.
TEST(IoPhase, ASlowSaveOutlastsTheCollectiveTimeout)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = compile_tp2(d), dir = d.path + "/ckpt";
    std::vector<std::string> command = {kTprun, "-n", "2"},
                             args = training(sched, {"--steps", "2", "--save", dir, "--save-every", "1"});
    command.insert(command.end(), args.begin(), args.end());
    Proc p = merged(command, {"TPRUN_TIMEOUT=1", "TPRUN_TEST_SAVE_DELAY=2"});
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(tpcc_test::slurp(dir + "/tprun_state.json"), "\"step\": 2")) << p.describe();
}

// A save past TPRUN_IO_TIMEOUT: the ranks name the phase and the step
// and end the job, long before the save would have ended.
TEST(IoPhase, AStalledSaveIsNamedAndEndsTheJob)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = compile_tp2(d), dir = d.path + "/ckpt";
    std::vector<std::string> command = {kTprun, "-n", "2"},
                             args = training(sched, {"--steps", "2", "--save", dir, "--save-every", "1"});
    command.insert(command.end(), args.begin(), args.end());
    Proc p = merged(command, {"TPRUN_IO_TIMEOUT=2", "TPRUN_TEST_SAVE_DELAY=600"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, ": at step 1, saving the checkpoint: not done after ")) << p.describe();
    EXPECT_TRUE(contains(p.out, "(TPRUN_IO_TIMEOUT=2): a file system stalled, or a rank stopped or died in it; "
                                "ending every rank")) << p.describe();
    EXPECT_FALSE(tpcc_test::slurp(dir + "/tprun_state.json").size()) << "the stalled save published nothing";
}

// A save that fails on the rank writing it (a signal raised there by
// TPRUN_TEST_SAVE_SIGNAL abandons it) ends with a collective carrying its
// status and message: every rank exits 1, the message is printed once,
// naming the rank it came from, and no MPI_Abort banner follows. Each
// rank runs under sh, which prints its exit status.
TEST(SaveFailure, ReachesEveryRankWithOneMessage)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = compile_tp2(d);
    std::vector<std::string> command = {"mpiexec", "-n", "2", "sh", "-c", "\"$0\" \"$@\"; echo \"exit $?\"", kTprun},
                             args = training(sched, {"--steps", "2", "--save", d.path + "/ckpt"});
    command.insert(command.end(), args.begin(), args.end());
    Proc p = merged(command, {"TPRUN_TEST_SAVE_SIGNAL=tensor"});
    EXPECT_EQ(count(p.out, "exit 1\n"), 2u) << p.describe();
    EXPECT_EQ(count(p.out, "interrupted by SIGTERM during --save"), 1u) << p.describe();
    EXPECT_TRUE(contains(p.out, "tprun: rank 0: interrupted by SIGTERM during --save: the save was abandoned"))
        << p.describe();
    EXPECT_FALSE(contains(p.out, "MPI_Abort")) << p.describe();
    EXPECT_FALSE(contains(p.out, "BAD TERMINATION")) << p.describe();
}

}  // namespace
