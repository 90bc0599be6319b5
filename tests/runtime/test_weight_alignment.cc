// Every weight of a rank's region starts on a multiple of 8 elements (16
// bytes of bf16, 32 of fp32), so kernels' 128-bit loads and cuBLAS see
// aligned weights; with sizes that leave gaps between weights (hidden 20,
// ffn 22 split over two ranks, vocab 129), loading, training, the gathered
// gradients and the saved checkpoint are the same at tp 1 and tp 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/grad_files.h"
#include "tests/support/process.h"
#include "tests/support/random_vec.h"
#include "tests/support/train_harness.h"
extern "C" {
#include "runtime/io/safetensors_write.h"
#include "sched/load.h"
}

namespace {

using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kTokens = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/tokens.npy";

std::string compile(const TempDir &d, int tp)
{
    std::string sched = d.path + "/odd-tp" + std::to_string(tp) + ".sched";
    std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/plans/llama-megatron.plan", "--train", "-o",
                                     sched};
    const std::vector<std::string> defs = {"vocab=129", "hidden=20", "heads=2", "kv_heads=2", "ffn=22",
                                           "layers=2",  "seq=8",     "batch=2", "tp=" + std::to_string(tp)};
    for (const std::string &def : defs)
        args.insert(args.end(), {"-D", def});
    Proc c = tpcc_test::run_tpcc(args);
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

// A checkpoint directory of seeded weights under the schedule's names and
// logical shapes (the sizes come from -D, so config.json only needs to be
// there for --save to copy).
std::string write_checkpoint(const TempDir &d, const std::string &sched)
{
    tr_schedule s;
    char err[512];
    EXPECT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 1, err, sizeof err), 0) << err;
    std::vector<std::vector<float>> data(s.nweights);
    std::vector<tp_st_tensor> t(s.nweights);
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        const int64_t n = w.logical[0] * (w.rank == 2 ? w.logical[1] : 1);
        data[i] = tpcc_test::random_vec((size_t)n, 100 + (unsigned)i, -0.3f, 0.3f);
        t[i] = {w.name, w.rank, {w.logical[0], w.logical[1]}, data[i].data()};
    }
    const std::string dir = d.path + "/init";
    std::filesystem::create_directories(dir);
    EXPECT_EQ(tp_safetensors_write((dir + "/model.safetensors").c_str(), t.data(), s.nweights, err, sizeof err), 0)
        << err;
    d.write("init/config.json", "{}\n");
    tr_schedule_free(&s);
    return dir;
}

TEST(WeightAlignment, OddSizesLeaveGapsAndTrainTheSameAtTp1And2)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string one = compile(d, 1), two = compile(d, 2);
    for (int rank : {0, 1}) {
        tr_schedule s;
        char err[512];
        ASSERT_EQ(tr_schedule_load(&s, two.c_str(), rank, 2, err, sizeof err), 0) << err;
        int64_t end = 0, gaps = 0;
        for (int i = 0; i < s.nweights; i++) {
            const tr_weight &w = s.weights[i];
            EXPECT_EQ(w.region_offset % 8, 0) << w.name;
            EXPECT_GE(w.region_offset, end) << w.name << " overlaps the weight before it";
            gaps += w.region_offset > end;
            end = w.region_offset + w.local_elems;
        }
        EXPECT_EQ(s.weight_elems, end);
        EXPECT_GT(gaps, 0) << "these sizes were chosen to leave gaps";
        tr_schedule_free(&s);
    }
    // two steps from the same weights: losses, the first step's gradients
    // and the saved weights agree across tp
    const std::string init = write_checkpoint(d, one);
    std::vector<std::vector<std::vector<float>>> grads, saved;
    std::vector<std::string> logs;
    for (int tp : {1, 2}) {
        const std::string tag = std::to_string(tp), sched = tp == 1 ? one : two;
        const std::string g = d.path + "/g" + tag + ".safetensors", save = d.path + "/save" + tag;
        Proc r = tpcc_test::run_program(kTprun, {"-n", tag, sched, "--weights", init, "--data", kTokens, "--steps", "2", "--grads-out", g,
                                                 "--save", save, "--log-json", d.path + "/log" + tag + ".json", "-q"},
                                        {}, 300);
        ASSERT_EQ(r.code(), 0) << r.describe();
        grads.push_back(tpcc_test::read_weights_of(g, sched));
        saved.push_back(tpcc_test::read_weights_of(save + "/model.safetensors", sched));
        logs.push_back(d.path + "/log" + tag + ".json");
    }
    EXPECT_LT(tpcc_test::worst_relative(grads[1], grads[0]), 1e-4);
    EXPECT_LT(tpcc_test::worst_absolute(saved[1], saved[0]), 1e-5);
    std::vector<double> l1 = tpcc_test::logged_losses(logs[0]), l2 = tpcc_test::logged_losses(logs[1]);
    ASSERT_EQ(l1.size(), 2u);
    ASSERT_EQ(l2.size(), 2u);
    for (size_t i = 0; i < 2; i++)
        EXPECT_NEAR(l2[i], l1[i], 1e-5 * l1[i]) << "step " << i + 1;
}

}  // namespace
