// train_harness.cc: see train_harness.h.
#include "tests/support/train_harness.h"

#include <gtest/gtest.h>

#include <jansson.h>

#include <algorithm>
#include <cmath>

extern "C" {
#include "runtime/io/weights.h"
#include "sched/load.h"
}

namespace tpcc_test {

void dp_plan(const TempDir &d, std::string &plan)
{
    std::string text = slurp(std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan");
    auto swap = [&](const std::string &from, const std::string &to) {
        size_t at = text.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        if (at != std::string::npos)
            text.replace(at, from.size(), to);
    };
    swap("model \"../models/", "model \"" + std::string(TPCC_SOURCE_DIR) + "/models/");
    swap("    tp = 2\n", "    tp = 2\n    dp = 1\n");
    swap("mesh(tp = tp)", "mesh(dp = dp, tp = tp)");
    // on a 2-D mesh each block names its dimension
    for (size_t at = text.find("\nparallelize \""); at != std::string::npos; at = text.find("\nparallelize \"", at + 1)) {
        size_t open = text.find("\" {", at + 14);
        ASSERT_NE(open, std::string::npos);
        text.insert(open + 1, " on \"tp\"");
    }
    plan = d.write("llama-dp.plan", text);
}

Proc compile_dp(const std::string &plan, int dp, int tp, int batch, const std::string &sched, bool train)
{
    std::vector<std::string> args = {plan, "--hf-config",
                                     std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/config.json",
                                     "-D", "vocab_multiple=1", "-D", "dp=" + std::to_string(dp), "-D",
                                     "tp=" + std::to_string(tp), "-D", "seq=16", "-D", "batch=" + std::to_string(batch),
                                     "-o", sched};
    if (train)
        args.push_back("--train");
    return run_tpcc(args);
}

std::vector<double> logged_losses(const std::string &log)
{
    std::vector<double> losses;
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    EXPECT_TRUE(got) << log << ": " << e.text;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(got, "steps"), i, step)
        losses.push_back(json_number_value(json_object_get(step, "loss")));
    json_decref(got);
    return losses;
}

std::vector<std::vector<float>> read_all(const std::string &file, const std::string &sched)
{
    tr_schedule s;
    char err[800] = "";
    std::vector<std::vector<float>> out;
    EXPECT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 0, err, sizeof err), 0) << err;
    tp_checkpoint *c;
    EXPECT_EQ(tp_checkpoint_open(&c, file.c_str(), err, sizeof err), 0) << err;
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        tp_weight_slice whole = {w.name, 0, {w.logical[0], w.logical[1]}, {0, 0}, -1, 0, 0, w.rank};
        std::vector<float> v(size_t(tp_weight_slice_numel(&whole)));
        EXPECT_EQ(tp_checkpoint_read(c, &whole, v.data(), err, sizeof err), 0) << w.name << ": " << err;
        out.push_back(v);
    }
    EXPECT_EQ(tp_checkpoint_num_tensors(c), size_t(s.nweights));
    tp_checkpoint_close(c);
    tr_schedule_free(&s);
    return out;
}

double worst_relative(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b)
{
    double worst = 0;
    for (size_t t = 0; t < a.size() && t < b.size(); t++) {
        double diff = 0, scale = 0;
        for (size_t i = 0; i < a[t].size() && i < b[t].size(); i++) {
            diff = std::max(diff, std::fabs(double(a[t][i]) - b[t][i]));
            scale = std::max(scale, std::fabs(double(b[t][i])));
        }
        worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

}  // namespace tpcc_test
