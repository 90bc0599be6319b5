// Activation recomputation (train { recompute }, tpcc --recompute) end to
// end: a recomputed op runs the forward's kernel on the forward's inputs,
// so a run with full or selective recomputation takes exactly the steps of
// one without, bit for bit: the first step's gathered gradients (the
// --grads-out file's bytes), every step's loss and gradient norm, and the
// weights three steps of AdamW leave (--save's bytes), at tp 1 and 2.
#include <gtest/gtest.h>

#include <jansson.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/token_files.h"

namespace {

using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const char *const kModes[] = {"none", "full", "selective"};

struct RecomputeCase {
    const char *dir;   // under tests/fixtures (a checkpoint: --weights and --save), or "": seeded weights
    const char *plan;
    std::vector<int> tps;
    std::vector<std::string> flags;   // sizes for seeded weights, -O0
};

void PrintTo(const RecomputeCase &c, std::ostream *os) { *os << c.dir << " " << c.plan; }

class TrainRecompute : public testing::TestWithParam<RecomputeCase> {};

// What one run leaves: the files' bytes and each step's logged numbers.
struct Outcome {
    std::string grads, saved;
    std::vector<double> losses, norms;
};

Outcome read_run(const std::string &dir, bool saved)
{
    Outcome r;
    r.grads = tpcc_test::slurp(dir + "/grads.safetensors");
    if (saved)
        r.saved = tpcc_test::slurp(dir + "/save/model.safetensors");
    json_error_t e;
    json_t *log = json_load_file((dir + "/log.json").c_str(), 0, &e);
    EXPECT_TRUE(log) << e.text;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(log, "steps"), i, step) {
        r.losses.push_back(json_number_value(json_object_get(step, "loss")));
        r.norms.push_back(json_number_value(json_object_get(step, "grad_norm")));
    }
    json_decref(log);
    return r;
}

// How many ops of a schedule are recomputed ones.
int recomputed_ops(const std::string &sched)
{
    std::string text = tpcc_test::slurp(sched);
    int n = 0;
    for (size_t at = text.find("\"recompute\": true"); at != std::string::npos;
         at = text.find("\"recompute\": true", at + 1))
        n++;
    return n;
}

TEST_P(TrainRecompute, StepsAreThoseWithoutRecomputationBitForBit)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    const RecomputeCase &c = GetParam();
    std::string weights = *c.dir ? std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/" + c.dir + "/" : "";
    TempDir d;
    std::vector<uint16_t> toks;
    for (int i = 0; i < 3 * 32 + 1; i++)   // three steps of batch 2 x seq 16
        toks.push_back(uint16_t((i * 37 + 11) % 128));
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240520, 1, toks));
    for (int tp : c.tps) {
        std::vector<Outcome> runs;
        std::vector<int> recomputed;
        for (const char *mode : kModes) {
            std::string out = d.path + "/tp" + std::to_string(tp) + "-" + mode, sched = out + ".sched";
            std::filesystem::create_directories(out);
            std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/" + c.plan, "-D", "tp=" + std::to_string(tp),
                                             "-D", "seq=16", "-D", "batch=2", "--train", "--recompute", mode,
                                             "-o", sched};
            if (!weights.empty())
                args.insert(args.end(), {"--hf-config", weights + "config.json"});
            args.insert(args.end(), c.flags.begin(), c.flags.end());
            Proc compiled = tpcc_test::run_tpcc(args);
            ASSERT_EQ(compiled.code(), 0) << compiled.describe();
            recomputed.push_back(recomputed_ops(sched));
            std::vector<std::string> run = {"-n",          std::to_string(tp), sched, "--data", data, "--steps", "3",
                                            "--grads-out", out + "/grads.safetensors", "--log-json", out + "/log.json",
                                            "-q"};
            if (!weights.empty())
                run.insert(run.end(), {"--weights", weights, "--save", out + "/save"});
            Proc trained = tpcc_test::run_program(kTprun, run, {}, 300);
            ASSERT_EQ(trained.code(), 0) << trained.describe();
            runs.push_back(read_run(out, !weights.empty()));
        }
        // recomputation happens, and full recomputes more than selective
        EXPECT_EQ(recomputed[0], 0) << "tp " << tp;
        EXPECT_GT(recomputed[2], 0) << "tp " << tp;
        EXPECT_GT(recomputed[1], recomputed[2]) << "tp " << tp;
        ASSERT_EQ(runs[0].losses.size(), 3u);
        for (size_t m = 1; m < runs.size(); m++) {
            std::string what = std::string(kModes[m]) + " at tp " + std::to_string(tp);
            EXPECT_FALSE(runs[0].grads.empty()) << what;
            EXPECT_TRUE(runs[m].grads == runs[0].grads) << what << ": the gradients differ";
            EXPECT_TRUE(runs[m].saved == runs[0].saved) << what << ": the trained weights differ";
            EXPECT_EQ(runs[m].losses, runs[0].losses) << what;
            EXPECT_EQ(runs[m].norms, runs[0].norms) << what;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, TrainRecompute,
    testing::Values(
        // sequence parallelism (all-gathers and reduce-scatters inside the layers), a vocab-parallel loss
        RecomputeCase{"", "plans/llama-tiny.plan", {1, 2}, {"-D", "vocab=128"}},
        RecomputeCase{"", "plans/llama-tiny.plan", {2}, {"-D", "vocab=128", "-O0"}},
        // Megatron's plan (an all-reduce after each Rowwise projection) on transformers' checkpoint
        RecomputeCase{"train/llama", "plans/llama-megatron.plan", {1, 2}, {}},
        // GPT-2: LayerNorm, Conv1D with biases added in place, gelu, a tied embedding
        RecomputeCase{"train/gpt2-tied", "plans/gpt2-hf-sp.plan", {1, 2}, {}}),
    [](const testing::TestParamInfo<RecomputeCase> &i) {
        std::string n = std::string(i.param.dir) + "_" + i.param.plan;
        for (const std::string &f : i.param.flags)
            if (f == "-O0")
                n += "_O0";
        for (char &ch : n)
            if (!isalnum((unsigned char)ch))
                ch = '_';
        return n;
    });

}  // namespace
