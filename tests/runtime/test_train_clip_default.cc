// A plan's train { max_grad_norm } reaches tprun through the schedule: it
// is tprun's default --max-grad-norm, and the option still overrides it.
// On the transformers Llama fixture (tests/fixtures/train/llama) at tp 2,
// three steps of llama-sp with max_grad_norm = 0.001 in the plan equal the
// same plan without it run with --max-grad-norm 0.001, and differ from the
// default 1.0.
#include <gtest/gtest.h>

#include <jansson.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

const std::string kDir = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/";

// plans/llama-sp.plan with `extra` after it, compiled for training at tp 2.
std::string compile(const TempDir &d, const std::string &name, const std::string &extra)
{
    std::string text = tpcc_test::slurp(std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan");
    std::string rel = "\"../models/llama.model\"";
    text.replace(text.find(rel), rel.size(), "\"" + std::string(TPCC_SOURCE_DIR) + "/models/llama.model\"");
    std::string plan = d.write(name + ".plan", text + extra), sched = d.path + "/" + name + ".sched";
    Proc c = tpcc_test::run_tpcc({plan, "--hf-config", kDir + "config.json", "-D", "tp=2", "-D", "seq=16", "-D",
                                  "batch=2", "-D", "vocab_multiple=1", "--train", "-o", sched});
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

// The losses of three steps.
std::vector<double> losses(const TempDir &d, const std::string &sched, const std::vector<std::string> &extra)
{
    std::string log = d.path + "/log.json";
    std::vector<std::string> args = {"-n", "2", sched, "--weights", kDir, "--data", kDir + "tokens.npy", "--steps",
                                     "3", "--log-json", log, "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    Proc r = tpcc_test::run_program(tpcc_test::kTprun, args, {}, 300);
    EXPECT_EQ(r.code(), 0) << r.describe();
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    std::vector<double> v;
    if (!got)
        return v;
    json_t *steps = json_object_get(got, "steps");
    for (size_t i = 0; i < json_array_size(steps); i++)
        v.push_back(json_number_value(json_object_get(json_array_get(steps, i), "loss")));
    json_decref(got);
    return v;
}

TEST(TrainClipDefault, ThePlansMaxGradNormIsTprunsDefault)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string declared = compile(d, "declared", "\ntrain { max_grad_norm = 0.001 }\n");
    std::string plain = compile(d, "plain", "");
    EXPECT_TRUE(contains(tpcc_test::slurp(declared), "\"max_grad_norm\": 0.001")) << tpcc_test::slurp(declared);
    EXPECT_FALSE(contains(tpcc_test::slurp(plain), "max_grad_norm"));
    std::vector<double> from_plan = losses(d, declared, {});
    std::vector<double> from_option = losses(d, plain, {"--max-grad-norm", "0.001"});
    std::vector<double> by_default = losses(d, plain, {});
    std::vector<double> overridden = losses(d, declared, {"--max-grad-norm", "1.0"});
    ASSERT_EQ(from_plan.size(), 3u);
    ASSERT_EQ(from_option.size(), 3u);
    ASSERT_EQ(by_default.size(), 3u);
    ASSERT_EQ(overridden.size(), 3u);
    for (size_t i = 0; i < 3; i++) {
        EXPECT_EQ(from_plan[i], from_option[i]) << "step " << i + 1;    // the same arithmetic, bit for bit
        EXPECT_EQ(overridden[i], by_default[i]) << "step " << i + 1;
    }
    // clipping to 0.001 barely moves the weights: the later losses differ
    EXPECT_GT(std::fabs(from_plan[2] - by_default[2]), 1e-4);
}

}  // namespace
