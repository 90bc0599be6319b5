// Gradient and weight files as training tests compare them: a checkpoint
// (tprun's --grads-out or --save, torch's fixtures) read whole under a
// schedule's weight names, and the largest difference of two such sets.
#ifndef TPCC_TEST_GRAD_FILES_H
#define TPCC_TEST_GRAD_FILES_H

#include <string>
#include <vector>

namespace tpcc_test {

// The file's tensors under the schedule's weight names, in logical shape
// (fails the test where one is missing or the file holds others).
std::vector<std::vector<float>> read_weights_of(const std::string &file, const std::string &sched);

// A --save directory's optimizer.safetensors: every weight's exp_avg, then
// every weight's exp_avg_sq.
std::vector<std::vector<float>> read_moments_of(const std::string &file, const std::string &sched);

// Largest max|a - b| / max|b| over the tensors: each difference against
// its tensor's scale (gradients span orders of magnitude within a tensor),
// a scale never below 1e-5 of the largest |b| of all (rounding noise).
double worst_relative(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b);

// Largest max|a - b| over the tensors (weights, which share one scale).
double worst_absolute(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b);

}  // namespace tpcc_test

#endif
