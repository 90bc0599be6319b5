// tprun against PyTorch's own tensor parallelism: the logits and losses in
// tests/fixtures/torch/ were computed by PyTorch (DTensor, parallelize_module
// with the dicts of plans/llama-sp.plan and plans/gpt2-sp-tied.plan, gloo on
// 2 CPU processes) by tools/torch_fixtures.py, from the very checkpoints
// stored next to them. Here tpcc compiles the same plans at the fixtures'
// sizes, tprun runs them on those checkpoints and tokens, and both the
// logits and the loss must match PyTorch's within 1e-4. No PyTorch needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/io/npy.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::kInstallMpich;
using tpcc_test::on_path;
using tpcc_test::Proc;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;
using tpcc_test::kTprun;
const std::string kFixtures = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/torch";
constexpr double kTolerance = 1e-4;
constexpr int kTimeout = 120;

struct Case {
    const char *name;      // test name suffix
    const char *family;    // directory under tests/fixtures/torch
    const char *plan;      // relative to the source tree
    int tp;
    std::vector<std::string> defines;   // -D values besides tp
};

const std::vector<std::string> kLlama = {"vocab=256", "hidden=64", "layers=2", "heads=4", "kv_heads=2",
                                         "ffn=128", "seq=16", "batch=2"};
const std::vector<std::string> kGpt2 = {"vocab=256", "hidden=64", "layers=2", "heads=4", "ffn=256",
                                        "positions=32", "seq=16", "batch=2"};

// gtest prints a parameter on failure; the default is a hex dump.
void PrintTo(const Case &c, std::ostream *os) { *os << c.family << " " << c.plan << " tp=" << c.tp; }

std::vector<std::string> with(std::vector<std::string> v, const std::string &extra)
{
    v.push_back(extra);
    return v;
}

const std::vector<Case> kCases = {
    {"LlamaSpTp2", "llama", "plans/llama-sp.plan", 2, kLlama},
    {"LlamaSpTp1", "llama", "plans/llama-sp.plan", 1, kLlama},
    {"Gpt2SpTiedTp2", "gpt2", "plans/gpt2-sp-tied.plan", 2, with(kGpt2, "vocab_multiple=1")},
    {"Gpt2SpTiedTp1", "gpt2", "plans/gpt2-sp-tied.plan", 1, with(kGpt2, "vocab_multiple=1")},
    // the plan's own vocab_multiple = 128: 256 needs no padding, so the same logits
    {"Gpt2SpTiedTp2PlanVocabMultiple", "gpt2", "plans/gpt2-sp-tied.plan", 2, kGpt2},
};

std::string fixture(const Case &c, const std::string &file) { return kFixtures + "/" + c.family + "/" + file; }

std::vector<float> read_f32(const std::string &path, std::vector<int64_t> *shape)
{
    float *data = nullptr;
    int64_t sh[TP_NPY_MAX_DIMS];
    int nd = 0;
    char err[512];
    if (tp_npy_read_f32(path.c_str(), &data, sh, &nd, err, sizeof err)) {
        ADD_FAILURE() << err;
        return {};
    }
    int64_t n = 1;
    shape->assign(sh, sh + nd);
    for (int i = 0; i < nd; i++)
        n *= sh[i];
    std::vector<float> v(data, data + n);
    free(data);
    return v;
}

// The value printed on tprun's "  loss        X" line, or NaN.
double printed_loss(const std::string &out)
{
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string key;
        double v;
        if (words >> key && key == "loss" && words >> v)
            return v;
    }
    return NAN;
}

class TorchParity : public ::testing::TestWithParam<Case> {};

TEST_P(TorchParity, LogitsAndLossMatchPyTorch)
{
    const Case &c = GetParam();
    if (c.tp > 1) {
        ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    }

    TempDir dir;
    const std::string sched = dir.path + "/" + c.family + ".sched", out = dir.path + "/logits.npy";
    std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/" + c.plan, "-o", sched, "-D", "tp=" + std::to_string(c.tp)};
    for (const auto &d : c.defines) {
        args.push_back("-D");
        args.push_back(d);
    }
    Proc compile = tpcc_test::run_program(kTpcc, args, {}, kTimeout);
    ASSERT_EQ(compile.code(), 0) << "tpcc " << c.plan << ": " << compile.describe();

    const std::string reference = fixture(c, c.tp > 1 ? "logits_tp2.npy" : "logits_tp1.npy");
    std::vector<std::string> run_args;
    if (c.tp > 1)
        run_args = {"-n", std::to_string(c.tp)};
    std::vector<std::string> rest = {sched,
                                     "--weights", fixture(c, "model.safetensors"),
                                     "--tokens", fixture(c, "tokens.npy"),
                                     "--labels", "tokens",
                                     "--out", out,
                                     "--compare", reference,
                                     "--tolerance", "1e-4"};
    run_args.insert(run_args.end(), rest.begin(), rest.end());
    Proc run = tpcc_test::run_program(kTprun, run_args, {}, kTimeout);
    ASSERT_EQ(run.code(), 0) << "tprun: " << run.describe();
    EXPECT_TRUE(contains(run.out, "agreement")) << run.describe();
    EXPECT_TRUE(contains(run.out, ": ok")) << run.describe();

    // The logits tprun wrote, against PyTorch's, checked here too.
    std::vector<int64_t> got_shape, want_shape;
    std::vector<float> got = read_f32(out, &got_shape), want = read_f32(reference, &want_shape);
    ASSERT_EQ(got_shape, (std::vector<int64_t>{2, 16, 256}));
    ASSERT_EQ(want_shape, got_shape);
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        ASSERT_TRUE(std::isfinite(got[i])) << "logit " << i;
        worst = std::max(worst, std::fabs((double)got[i] - (double)want[i]));
    }
    EXPECT_LT(worst, kTolerance) << "max |tprun - PyTorch| logits";

    // The loss: PyTorch's causal-LM loss with labels = tokens.
    std::vector<int64_t> loss_shape;
    std::vector<float> loss = read_f32(fixture(c, c.tp > 1 ? "loss_tp2.npy" : "loss_tp1.npy"), &loss_shape);
    ASSERT_EQ(loss.size(), 1u);
    double printed = printed_loss(run.out);
    ASSERT_FALSE(std::isnan(printed)) << "no loss line: " << run.describe();
    EXPECT_NEAR(printed, loss[0], kTolerance) << run.describe();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TorchParity, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) { return std::string(info.param.name); });

// The fixtures themselves: the shapes the script promises, and PyTorch's
// single-process and 2-rank results agreeing (what the script checked).
TEST(TorchFixtures, Consistent)
{
    for (const char *family : {"llama", "gpt2"}) {
        SCOPED_TRACE(family);
        const std::string d = kFixtures + "/" + family + "/";
        int32_t *ids = nullptr;
        int64_t ts[2];
        int tnd = 0;
        char err[512];
        ASSERT_EQ(tp_npy_read_tokens((d + "tokens.npy").c_str(), &ids, ts, &tnd, err, sizeof err), 0) << err;
        EXPECT_EQ(tnd, 2);
        EXPECT_EQ(ts[0], 2);
        EXPECT_EQ(ts[1], 16);
        for (int64_t i = 0; i < ts[0] * ts[1]; i++)
            EXPECT_TRUE(ids[i] >= 0 && ids[i] < 256) << i;
        free(ids);
        std::vector<int64_t> s1, s2, l1s, l2s;
        std::vector<float> a = read_f32(d + "logits_tp1.npy", &s1), b = read_f32(d + "logits_tp2.npy", &s2);
        ASSERT_EQ(s1, (std::vector<int64_t>{2, 16, 256}));
        ASSERT_EQ(s2, s1);
        double worst = 0;
        for (size_t i = 0; i < a.size(); i++)
            worst = std::max(worst, std::fabs((double)a[i] - (double)b[i]));
        EXPECT_LT(worst, kTolerance);
        std::vector<float> l1 = read_f32(d + "loss_tp1.npy", &l1s), l2 = read_f32(d + "loss_tp2.npy", &l2s);
        ASSERT_EQ(l1.size(), 1u);
        ASSERT_EQ(l2.size(), 1u);
        EXPECT_NEAR(l1[0], l2[0], kTolerance);
        // ln(256) = 5.545: small random weights give a loss near it
        EXPECT_NEAR(l1[0], std::log(256.0), 0.5);
    }
}

}  // namespace
