// train_harness.h: what the training tests of tprun (test_train_run.cc) and
// of its CUDA backend (test_cuda_backend.cc) share: the dp x tp variant of
// plans/llama-sp.plan on the llama training fixture and the losses a run
// logs (tests/support/grad_files.h reads and compares what it writes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tests/support/process.h"

namespace tpcc_test {

// Replaces the first `from` in text by `to` (a test failure where text
// has none): edits a shipped plan into the variant a test needs.
void replace_once(std::string &text, const std::string &from, const std::string &to);

// `source` (a shipped plan, plans/llama-sp.plan by default) on a
// mesh(dp = dp, tp = tp), with `train` as its train { } block's body
// (none when empty), written into d (the model path made absolute) as
// `plan`.
void dp_plan(const TempDir &d, std::string &plan, const std::string &source = "plans/llama-sp.plan",
             const std::string &train = "");

// tpcc on a dp_plan for tests/fixtures/train/`fixture`'s config (seq 16,
// `batch` per replica), into sched; --train unless `train` is false; in
// `dtype`.
Proc compile_dp(const std::string &plan, int dp, int tp, int batch, const std::string &sched, bool train = true,
                const std::string &dtype = "fp32", const std::string &fixture = "llama");

// Each step's loss in a --log-json file (none, with a failure, when it
// cannot be read).
std::vector<double> logged_losses(const std::string &log);
// Each step's (rate, loss) in a --log-json file.
std::vector<std::pair<double, double>> logged_steps(const std::string &log);
// Each step's two fields `first` and `second` in a --log-json file.
std::vector<std::pair<double, double>> logged_fields(const std::string &log, const char *first, const char *second);

}  // namespace tpcc_test
