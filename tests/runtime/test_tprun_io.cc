// tprun's inputs and outputs at the edges: an output never replaces one
// of the run's inputs (the schedule, token and data files, the reference
// logits, the checkpoint's tensors): the run stops before it starts, with
// a message naming both; a token array of another shape than the
// schedule's [batch, seq] and a negative seed are refused, not
// reinterpreted.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/process.h"
#include "tests/support/token_files.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;

TEST(TprunOutputs, NeverReplaceAnInput)
{
    TempDir d;
    std::string sched = d.path + "/s.sched", fixture = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-D", "tp=1", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::string before = tpcc_test::slurp(sched);
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    std::string tokens = d.write("tokens.npy", tpcc_test::slurp(fixture + "/tokens.npy"));
    for (const Case &k : std::vector<Case>{
             {{"--labels", "tokens", "--out", sched}, "--out " + sched + " would overwrite the schedule '" + sched},
             {{"--labels", "tokens", "--profile-json", sched}, "--profile-json " + sched + " would overwrite the schedule"},
             {{"--labels", "tokens", "--trace", tokens, "--tokens", tokens}, "--trace " + tokens +
                                                                                 " would overwrite the file of --tokens"},
             {{"--weights", fixture, "--out", fixture + "/model.safetensors"},
              "would overwrite the file of --weights '" + fixture + "'"},
             {{"--eval-attention-mask", tokens, "--trace", tokens}, "--trace " + tokens +
                                                                    " would overwrite the file of --eval-attention-mask"},
         }) {
        std::vector<std::string> args = {sched, "-q"};
        args.insert(args.end(), k.args.begin(), k.args.end());
        Proc p = tpcc_test::run_program(kTprun, args);
        EXPECT_EQ(p.code(), 2) << p.describe();
        EXPECT_TRUE(contains(p.err, k.says)) << p.describe();
        EXPECT_TRUE(contains(p.err, "an input of this run: nothing was run; name another output file")) << p.err;
    }
    EXPECT_EQ(tpcc_test::slurp(sched), before);
    // a device is written through, and stays a device
    Proc ok = tpcc_test::run_program(kTprun, {sched, "-q", "--labels", "tokens", "--out", "/dev/null"});
    EXPECT_EQ(ok.code(), 0) << ok.describe();
}

TEST(TprunInputs, TokensOfAnotherShapeAndNegativeSeedsAreRefused)
{
    TempDir d;
    std::string sched = d.path + "/s.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-D", "tp=1", "-D",
                                  "batch=2", "-D", "seq=16", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::string ids(32 * 4, '\0');
    std::string seq_batch = d.write("t.npy", tpcc_test::npy("<i4", ids, "(16, 2)"));
    std::string batch_seq = d.write("u.npy", tpcc_test::npy("<i4", ids, "(2, 16)"));
    std::string flat = d.write("v.npy", tpcc_test::npy("<i4", ids, "(32,)"));
    Proc bad = tpcc_test::run_program(kTprun, {sched, "-q", "--labels", "tokens", "--tokens", seq_batch});
    EXPECT_EQ(bad.code(), 1) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "--tokens: " + seq_batch + " has shape [16, 2], the schedule takes [2, 16] (batch, seq)"))
        << bad.err;
    for (const std::string &good : {batch_seq, flat}) {
        Proc p = tpcc_test::run_program(kTprun, {sched, "-q", "--labels", "tokens", "--tokens", good});
        EXPECT_EQ(p.code(), 0) << p.describe();
    }
    // decimal digits only: strtoull alone wraps "-1" and takes a blank or a '+'
    for (const char *bad : {"-1", "+5", " 5", "0x10", "18446744073709551616"}) {
        Proc seed = tpcc_test::run_program(kTprun, {sched, "-q", "--seed", bad});
        EXPECT_EQ(seed.code(), 2) << seed.describe();
        EXPECT_TRUE(contains(seed.err, std::string("--seed takes a non-negative decimal integer below 2^64, not '") +
                                           bad + "'")) << seed.err;
    }
}

}  // namespace
