// plan_harness.h: helpers shared by the plan tests: run the front end on a
// plan, read expectations written inside bad plans, copy a plan into a
// scratch tree for --fix.
#pragma once

#include <map>
#include <tuple>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "compiler/driver/compile.h"
}

namespace tpcc_test {

// One finding as the tests compare it: where (file:line, "" for none),
// level and check name.
struct Finding {
    std::string where, level, check;
    bool operator<(const Finding &o) const
    {
        return std::tie(where, level, check) < std::tie(o.where, o.level, o.check);
    }
    bool operator==(const Finding &o) const { return !(*this < o) && !(o < *this); }
    std::string str() const { return where + ": " + level + "[" + check + "]"; }
};

// The options compile() compiles with: `defines` (kept alive by the
// caller), --train when `train`, the program derived when `program`, models
// from tests/models/ too.
tp_compile_opts compile_options(const std::vector<const char *> &defines, bool train, bool program);

// Compile a plan (with --train when `train`), its model read from its own
// tree, models/ or tests/models/ (the test families the plans under tests/
// name, as --allow-outside allows); the unit must be freed with tp_unit_free.
void compile(tp_unit *u, const std::string &plan, const std::vector<std::string> &defines = {}, bool train = false);

// Bad plans named train-*.plan hold checks that only a training step has:
// their tests compile them with --train.
bool is_train_plan(const std::string &plan);

// Only configure a plan: parse it and its model and bind their config
// blocks and `defines`, without building the model or checking the plan.
// A small fraction of compile()'s cost, for choosing test parameters
// (gtest computes every suite's parameters in every test process). The
// unit must be freed with tp_unit_free.
void configure(tp_unit *u, const std::string &plan, const std::vector<std::string> &defines = {});

// Whether tp divides the sizes a plan shards (heads, kv_heads, ffn, hidden,
// seq; a sharded vocab is padded to a multiple of tp) in a configured or
// compiled unit: the plan is valid at that tp exactly then
// (Plans/ShippedPlan.ChecksCleanAtEveryDividingTp).
bool tp_divides_sizes(tp_unit *u, int64_t tp);

// The errors, warnings and unsupported findings of a compiled unit (notes
// are not findings).
std::multiset<Finding> findings(const tp_unit *u);

// Expectations written in a plan file:
//   ... offending line ...   # expect: error[relabel] warning[repeated-gather]
//   ... a line tpcc cannot handle yet ...   # expect: unsupported[unsupported]
//   # expect-at ../../models/llama.model:61: error[mixed-tensor]
//   # expect-nowhere: error[config]
std::multiset<Finding> expectations(const std::string &plan);

// The text rendering of a unit's diagnostics (for failure messages).
std::string rendered(tp_unit *u);

// All files with the given extension under a source-tree directory.
std::vector<std::string> files_in(const std::string &dir, const std::string &ext);

// Copy `plan` into a fresh scratch directory at the same depth, with
// models/ and tests/models/ linked to the source tree, and return the copy.
std::string scratch_copy(const std::string &plan);

// The scratch directory a copy of `plan` made by scratch_copy lies in.
std::string scratch_root(const std::string &copy, const std::string &plan);

std::string source_path(const std::string &rel);

}  // namespace tpcc_test
