// train_harness.h: what the training tests of tprun (test_train_run.cc) and
// of its CUDA backend (test_cuda_backend.cc) share: the dp x tp variant of
// plans/llama-sp.plan on the llama training fixture, and reading and
// comparing the gradients and weights a run writes.
#pragma once

#include <string>
#include <vector>

#include "tests/support/process.h"

namespace tpcc_test {

// plans/llama-sp.plan on a mesh(dp = dp, tp = tp), written into d (the
// model path made absolute) as `plan`.
void dp_plan(const TempDir &d, std::string &plan);

// tpcc on a dp_plan for tests/fixtures/train/llama's config (seq 16,
// `batch` per replica), into sched; --train unless `train` is false.
Proc compile_dp(const std::string &plan, int dp, int tp, int batch, const std::string &sched, bool train = true);

// Each step's loss in a --log-json file (none, with a failure, when it
// cannot be read).
std::vector<double> logged_losses(const std::string &log);

// The file's tensors under the schedule's weight names, in logical shape.
std::vector<std::vector<float>> read_all(const std::string &file, const std::string &sched);

// Largest max|a - b| / max|b| over the tensors: each difference against
// its tensor's scale (gradients span orders of magnitude within a tensor).
double worst_relative(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b);

}  // namespace tpcc_test
