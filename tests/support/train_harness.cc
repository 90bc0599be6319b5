// train_harness.cc: see train_harness.h.
#include "tests/support/train_harness.h"

#include <gtest/gtest.h>

#include <jansson.h>

#include <filesystem>
#include <functional>

namespace tpcc_test {

void replace_once(std::string &text, const std::string &from, const std::string &to)
{
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
        text.replace(at, from.size(), to);
}

void dp_plan(const TempDir &d, std::string &plan, const std::string &source, const std::string &train)
{
    std::string text = slurp(std::string(TPCC_SOURCE_DIR) + "/" + source);
    replace_once(text, "model \"../models/", "model \"" + std::string(TPCC_SOURCE_DIR) + "/models/");
    const size_t tp_line = text.find("\n    tp = ");   // the config's tp, whatever its value: dp beside it
    ASSERT_NE(tp_line, std::string::npos) << source << " has no config value tp";
    text.insert(text.find('\n', tp_line + 1) + 1, "    dp = 1\n");
    replace_once(text, "mesh(tp = tp)", "mesh(dp = dp, tp = tp)");
    // on a 2-D mesh each block names its dimension
    for (size_t at = text.find("\nparallelize \""); at != std::string::npos; at = text.find("\nparallelize \"", at + 1)) {
        size_t open = text.find("\" {", at + 14);
        ASSERT_NE(open, std::string::npos);
        text.insert(open + 1, " on \"tp\"");
    }
    if (!train.empty())
        text += "\ntrain {\n    " + train + "\n}\n";
    std::string name = std::filesystem::path(source).stem().string() + "-dp" + std::to_string(std::hash<std::string>{}(train));
    plan = d.write(name + ".plan", text);
}

Proc compile_dp(const std::string &plan, int dp, int tp, int batch, const std::string &sched, bool train,
                const std::string &dtype, const std::string &fixture)
{
    std::vector<std::string> args = {plan, "--hf-config",
                                     std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/" + fixture + "/config.json",
                                     "-D", "vocab_multiple=1", "-D", "dp=" + std::to_string(dp), "-D",
                                     "tp=" + std::to_string(tp), "-D", "seq=16", "-D", "batch=" + std::to_string(batch),
                                     "--dtype", dtype, "-o", sched};
    if (train)
        args.push_back("--train");
    return run_tpcc(args);
}

std::vector<std::pair<double, double>> logged_steps(const std::string &log) { return logged_fields(log, "lr", "loss"); }

std::vector<std::pair<double, double>> logged_fields(const std::string &log, const char *first, const char *second)
{
    std::vector<std::pair<double, double>> out;
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    EXPECT_TRUE(got) << log << ": " << e.text;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(got, "steps"), i, step)
        out.push_back({json_number_value(json_object_get(step, first)), json_number_value(json_object_get(step, second))});
    json_decref(got);
    return out;
}

std::vector<double> logged_losses(const std::string &log)
{
    std::vector<double> losses;
    for (const auto &[lr, loss] : logged_steps(log))
        losses.push_back(loss);
    return losses;
}

}  // namespace tpcc_test
