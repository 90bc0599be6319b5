#include "tests/support/grad_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

extern "C" {
#include "runtime/io/weights.h"
#include "sched/load.h"
}

namespace tpcc_test {

namespace {

// The file's tensors under the schedule's weight names with each suffix
// in turn (every weight for the first suffix, then for the next), which
// must be all the file holds.
std::vector<std::vector<float>> read_named(const std::string &file, const std::string &sched,
                                           const std::vector<std::string> &suffixes)
{
    tr_schedule s;
    char err[800] = "";
    std::vector<std::vector<float>> out;
    EXPECT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 0, err, sizeof err), 0) << err;
    tp_checkpoint *c;
    EXPECT_EQ(tp_checkpoint_open(&c, file.c_str(), err, sizeof err), 0) << err;
    for (const std::string &suffix : suffixes)
        for (int i = 0; i < s.nweights; i++) {
            const tr_weight &w = s.weights[i];
            std::string name = w.name + suffix;
            tp_weight_slice whole = {name.c_str(), 0, {w.logical[0], w.logical[1]}, {0, 0}, -1, 0, 0, w.rank};
            std::vector<float> v(size_t(tp_weight_slice_numel(&whole)));
            EXPECT_EQ(tp_checkpoint_read(c, &whole, v.data(), err, sizeof err), 0) << name << ": " << err;
            out.push_back(v);
        }
    EXPECT_EQ(tp_checkpoint_num_tensors(c), suffixes.size() * size_t(s.nweights));
    tp_checkpoint_close(c);
    tr_schedule_free(&s);
    return out;
}

}  // namespace

std::vector<std::vector<float>> read_weights_of(const std::string &file, const std::string &sched)
{
    return read_named(file, sched, {""});
}

std::vector<std::vector<float>> read_moments_of(const std::string &file, const std::string &sched)
{
    return read_named(file, sched, {".exp_avg", ".exp_avg_sq"});
}

double worst_relative(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b)
{
    // A tensor's scale is at least 1e-5 of the model's largest gradient:
    // below that a gradient is fp32 rounding noise, such as a key bias's,
    // which is 0 in exact arithmetic (softmax ignores a constant added to
    // every score) and comes out near 1e-11 in any order of the sums.
    double model_scale = 0;
    for (const std::vector<float> &t : b)
        for (float v : t)
            model_scale = std::max(model_scale, std::fabs(double(v)));
    double worst = 0;
    for (size_t t = 0; t < a.size() && t < b.size(); t++) {
        double diff = 0, scale = 1e-5 * model_scale;
        for (size_t i = 0; i < a[t].size() && i < b[t].size(); i++) {
            // a NaN on either side is the worst difference (std::max would drop it)
            const double d = std::fabs(double(a[t][i]) - b[t][i]);
            diff = std::isnan(d) ? INFINITY : std::max(diff, d);
            scale = std::max(scale, std::fabs(double(b[t][i])));
        }
        worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

double worst_absolute(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b)
{
    double worst = 0;
    for (size_t t = 0; t < a.size() && t < b.size(); t++)
        for (size_t i = 0; i < a[t].size() && i < b[t].size(); i++) {
            const double d = std::fabs(double(a[t][i]) - b[t][i]);
            worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        }
    return worst;
}

}  // namespace tpcc_test
