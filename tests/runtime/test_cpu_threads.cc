// tprun --threads: the CPU backend's kernels split their work over a pool of
// threads (runtime/backends/cpu/pool.h) by rows, heads, column blocks or
// elements, never by a reduction, so --threads 1, 2 and 3 give the same
// logits, loss and training gradients bit for bit. The models are sized so
// that every kernel splits (matmuls wider than a column block, more rows
// than a part's minimum, sequences of several query blocks); 3 threads
// put the parts' edges where 2 don't.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/token_files.h"

namespace {

using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;

struct ThreadCase {
    const char *name, *plan;
    std::vector<std::string> sizes;
};

// Llama: rmsnorm, RoPE, GQA attention, SiLU and mul, the vocab-parallel
// loss pieces. GPT-2: layernorm, gelu_new, Conv1D, biases, learned
// positions, the tied embedding. Both seeded (no checkpoint needed).
const ThreadCase kCases[] = {
    {"llama", "plans/llama-sp.plan",
     {"-D", "vocab=1000", "-D", "hidden=256", "-D", "layers=2", "-D", "heads=8", "-D", "kv_heads=4", "-D", "ffn=640"}},
    {"gpt2", "plans/gpt2-hf-sp.plan",
     {"-D", "vocab=1000", "-D", "hidden=256", "-D", "layers=2", "-D", "heads=8", "-D", "positions=256"}},
};

class CpuThreads : public ::testing::TestWithParam<ThreadCase> {};

std::string compile(const TempDir &d, const ThreadCase &c, int tp, bool train)
{
    std::string sched = d.path + "/" + c.name + (train ? "-train" : "") + "-tp" + std::to_string(tp) + ".sched";
    std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/" + c.plan, "-D", "tp=" + std::to_string(tp),
                                     "-D", "seq=200", "-D", "batch=2", "-o", sched};
    args.insert(args.end(), c.sizes.begin(), c.sizes.end());
    if (train)
        args.push_back("--train");
    Proc p = tpcc_test::run_tpcc(args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    return sched;
}

Proc tprun(int ranks, int threads, const std::string &sched, std::vector<std::string> args)
{
    std::vector<std::string> a;
    if (ranks > 1)
        a = {"-n", std::to_string(ranks)};
    a.insert(a.end(), {sched, "--threads", std::to_string(threads)});
    a.insert(a.end(), args.begin(), args.end());
    return tpcc_test::run_program(kTprun, a, {}, 300);
}

// The summary's loss line ("  loss        2.345678").
std::string loss_line(const std::string &out)
{
    size_t at = out.find("  loss ");
    return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

TEST_P(CpuThreads, ForwardLogitsAndLossAreTheSameAt1_2_3Threads)
{
    const ThreadCase &c = GetParam();
    TempDir d;
    std::string sched = compile(d, c, 1, false), first_logits, first_loss;
    for (int threads : {1, 2, 3}) {
        std::string out = d.path + "/logits" + std::to_string(threads) + ".npy";
        Proc r = tprun(1, threads, sched, {"--labels", "tokens", "--out", out});
        ASSERT_EQ(r.code(), 0) << r.describe();
        std::string logits = tpcc_test::slurp(out), loss = loss_line(r.out);
        ASSERT_FALSE(loss.empty()) << r.out;
        if (threads == 1) {
            first_logits = logits;
            first_loss = loss;
            continue;
        }
        EXPECT_TRUE(logits == first_logits) << c.name << ": the logits at --threads " << threads
                                            << " differ from --threads 1's";
        EXPECT_EQ(loss, first_loss) << c.name << " at --threads " << threads;
    }
}

// One training step's gradients (--grads-out), at tp 1 and, across two
// ranks, with the vocab-parallel loss's gradient pieces.
TEST_P(CpuThreads, TrainingGradientsAreTheSameAt1_2_3Threads)
{
    const ThreadCase &c = GetParam();
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::vector<int32_t> toks;
    for (int i = 0; i < 2 * 200 + 1; i++)
        toks.push_back((i * 389 + 7) % 1000);
    std::string data = d.write("tokens.npy", tpcc_test::npy("<i4", tpcc_test::raw(toks), "(401,)"));
    for (int tp : {1, 2}) {
        std::string sched = compile(d, c, tp, true), first;
        for (int threads : {1, 2, 3}) {
            if (tp == 2 && threads == 3)
                continue;   // two ranks of three threads on the machine's cores: slow, and no new edge
            std::string g = d.path + "/grads" + std::to_string(threads) + ".safetensors";
            Proc r = tprun(tp, threads, sched, {"--data", data, "--steps", "1", "--grads-out", g, "-q"});
            ASSERT_EQ(r.code(), 0) << r.describe();
            std::string grads = tpcc_test::slurp(g);
            ASSERT_FALSE(grads.empty());
            if (threads == 1)
                first = grads;
            else
                EXPECT_TRUE(grads == first) << c.name << " at tp " << tp << ": the gradients at --threads "
                                            << threads << " differ from --threads 1's";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Models, CpuThreads, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ThreadCase> &i) { return std::string(i.param.name); });

}  // namespace
