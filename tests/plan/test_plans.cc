// Plans end to end: every shipped plan checks clean at every tp that
// divides its sizes; every bad plan produces exactly the diagnostics written
// inside it; every fix-it, applied, leaves a plan without those errors (for
// the bad plans that have fix-its); --fix, run again and again, reaches a
// fixed point on every shipped and bad plan at tp 1, 2, 4 and 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/driver/fix.h"
}

using namespace tpcc_test;
namespace fs = std::filesystem;

namespace {

std::string name_of(const std::string &path)
{
    std::string s = fs::path(path).stem().string();
    for (auto &c : s)
        if (!isalnum((unsigned char)c))
            c = '_';
    return s;
}

// --- shipped plans ---------------------------------------------------------

class ShippedPlan : public ::testing::TestWithParam<std::string> {};

// Whether tp divides every size the plan splits. gpt2-hf-sp keeps its
// Conv1D blocks whole (no style shards a Conv1D): it splits the sequence
// and the vocabulary only, so GPT-2's 12 heads do not bind it at tp 8.
bool divides_split_sizes(tp_unit *u, const std::string &plan, int64_t tp)
{
    int64_t seq;
    if (name_of(plan) == "gpt2_hf_sp")
        return tp_config_get(&u->config, "seq", TP_NO_SPAN, &seq) && seq % tp == 0;
    return tp_divides_sizes(u, tp);
}

TEST_P(ShippedPlan, ChecksCleanAtEveryDividingTp)
{
    for (int64_t tp : {1, 2, 4, 8}) {
        tp_unit u;
        compile(&u, GetParam(), {"tp=" + std::to_string(tp)});
        ASSERT_TRUE(u.built) << rendered(&u);
        bool divides = divides_split_sizes(&u, GetParam(), tp);
        if (divides) {
            EXPECT_EQ(u.diags.errors, 0) << "tp=" << tp << "\n" << rendered(&u);
        } else {
            // an indivisible size must be reported, and nothing else may be
            EXPECT_GT(u.diags.errors, 0) << "tp=" << tp;
            for (int i = 0; i < u.diags.count; i++) {
                if (u.diags.items[i].level == TP_ERROR) {
                    EXPECT_STREQ(u.diags.items[i].check, "divisibility") << rendered(&u);
                }
            }
        }
        tp_unit_free(&u);
    }
}

TEST_P(ShippedPlan, ExpectedWarningsOnly)
{
    tp_unit u;
    compile(&u, GetParam());
    EXPECT_EQ(findings(&u), expectations(GetParam())) << rendered(&u);
    tp_unit_free(&u);
}

std::vector<std::string> shipped()
{
    auto v = files_in("plans", ".plan");
    auto t = files_in("tests/plans", ".plan");
    v.insert(v.end(), t.begin(), t.end());
    return v;
}

INSTANTIATE_TEST_SUITE_P(Plans, ShippedPlan, ::testing::ValuesIn(shipped()),
                         [](const auto &info) { return name_of(info.param); });

// --- bad plans ---------------------------------------------------------------

// The bad plans with an error that carries a fix-it; the others have none
// to apply. Listed rather than found by compiling every bad plan, which
// gtest would do in every test process (ctest runs each test in its own),
// at more than the cost of the tests themselves.
// BadPlan.ReportsExactlyTheExpectedDiagnostics keeps the list exact.
const std::set<std::string> kWithFixIts = {
    "arity-positional-for-keyword", "dtensor-logits-without-loss-parallel", "fused-contiguous-both",
    "fused-contiguous-gate-up", "fused-contiguous-qkv", "hf-style-strings", "mixed-residual", "python-name-undefined",
    "relabel-1d-positions", "relabel-prepare-input", "relabel-rowwise-embedding", "relabel-sp-plain-embedding",
    "tied-mismatch", "train-data-split", "train-optimizer-values", "train-partial-grad", "train-unreduced-grad-hf",
};

bool has_fixits(const std::string &plan) { return kWithFixIts.count(fs::path(plan).stem().string()) > 0; }

// The errors of a compiled unit that carry a fix-it.
int errors_with_fixits(const tp_unit &u)
{
    int n = 0;
    for (int i = 0; i < u.diags.count; i++)
        n += u.diags.items[i].level == TP_ERROR && u.diags.items[i].nfixits > 0;
    return n;
}

class BadPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(BadPlan, ReportsExactlyTheExpectedDiagnostics)
{
    auto want = expectations(GetParam());
    ASSERT_FALSE(want.empty()) << "a bad plan must state its expected diagnostics";
    tp_unit u;
    compile(&u, GetParam(), {}, is_train_plan(GetParam()));
    auto got = findings(&u);
    std::string missing, unexpected;
    for (const auto &f : want)
        if (got.count(f) < want.count(f))
            missing += "  " + f.str() + "\n";
    for (const auto &f : got)
        if (want.count(f) < got.count(f))
            unexpected += "  " + f.str() + "\n";
    EXPECT_TRUE(missing.empty() && unexpected.empty())
        << "missing:\n" << missing << "unexpected:\n" << unexpected << "output:\n" << rendered(&u);
    EXPECT_EQ(errors_with_fixits(u) > 0, has_fixits(GetParam()))
        << "kWithFixIts (test_plans.cc) must list exactly the bad plans with an error that has a fix-it\n"
        << rendered(&u);
    tp_unit_free(&u);
}

INSTANTIATE_TEST_SUITE_P(Plans, BadPlan, ::testing::ValuesIn(files_in("tests/bad", ".plan")),
                         [](const auto &info) { return name_of(info.param); });

// --- bad plans with fix-its --------------------------------------------------

class FixableBadPlan : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> fixable_bad_plans()
{
    std::vector<std::string> v;
    for (const auto &p : files_in("tests/bad", ".plan"))
        if (has_fixits(p))
            v.push_back(p);
    return v;
}

// Apply every fix-it; the errors that had one must be gone and no new error
// may appear (errors without a fix-it may go too: they can be consequences).
TEST_P(FixableBadPlan, FixItsLeaveOnlyUnfixableErrors)
{
    std::string copy = scratch_copy(GetParam());
    tp_unit u;
    compile(&u, copy, {}, is_train_plan(copy));
    std::multiset<std::string> unfixable;
    for (int i = 0; i < u.diags.count; i++) {
        const tp_diag &g = u.diags.items[i];
        if (g.level == TP_ERROR && !g.nfixits)
            unfixable.insert(g.check);
    }
    char err[512];
    ASSERT_GT(tp_diags_apply_fixits(&u.diags, &u.src, err, sizeof err), 0) << err;
    tp_unit_free(&u);
    tp_unit v;
    compile(&v, copy, {}, is_train_plan(copy));
    std::multiset<std::string> after;
    for (int i = 0; i < v.diags.count; i++)
        if (v.diags.items[i].level == TP_ERROR)
            after.insert(v.diags.items[i].check);
    std::ifstream in(copy);
    std::string fixed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(std::includes(unfixable.begin(), unfixable.end(), after.begin(), after.end()))
        << "fixed plan:\n" << fixed << "\ndiagnostics:\n" << rendered(&v);
    tp_unit_free(&v);
    fs::remove_all(scratch_root(copy, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Plans, FixableBadPlan, ::testing::ValuesIn(fixable_bad_plans()),
                         [](const auto &info) { return name_of(info.param); });

// --- --fix to a fixed point --------------------------------------------------

// Fix-its never contradict each other: `tpcc --check --fix -D tp=N`, run
// on its own output again and again, stops changing the plan within a few
// runs and never brings back a text it had (two fixes undoing each other).
class FixFixedPoint : public ::testing::TestWithParam<std::string> {};

// Runs of --fix: each applies up to 4 rounds itself, so a plan that still
// changes after this many never settles.
constexpr int kFixRuns = 4;

TEST_P(FixFixedPoint, RepeatedFixStopsChangingThePlan)
{
    const bool train = is_train_plan(GetParam());
    for (int tp : {1, 2, 4, 8}) {
        SCOPED_TRACE("tp=" + std::to_string(tp));
        std::string copy = scratch_copy(GetParam());
        std::string define = "tp=" + std::to_string(tp);
        std::vector<const char *> defines = {define.c_str()};
        tp_compile_opts opts = compile_options(defines, train, train);   // as --check compiles
        tp_lint lint{};
        std::vector<std::string> texts = {slurp(copy)};
        bool settled = false;
        for (int run = 0; run < kFixRuns && !settled; run++) {
            tp_unit u;
            tp_compile(&u, copy.c_str(), &opts);
            FILE *log = fopen("/dev/null", "w");
            char err[512];
            int applied = tp_fix_plan(&u, copy.c_str(), &opts, &lint, log, err, sizeof err);
            fclose(log);
            tp_unit_free(&u);
            ASSERT_GE(applied, 0) << err;
            std::string text = slurp(copy);
            settled = text == texts.back();
            EXPECT_TRUE(settled || std::find(texts.begin(), texts.end(), text) == texts.end())
                << "run " << run + 1 << " brought back an earlier text:\n" << text;
            texts.push_back(text);
        }
        EXPECT_TRUE(settled) << "still changing after " << kFixRuns << " runs of --fix:\n" << texts.back();
        fs::remove_all(scratch_root(copy, GetParam()));
    }
}

std::vector<std::string> shipped_and_bad_plans()
{
    std::vector<std::string> v;
    for (const char *dir : {"plans", "plans/hf", "tests/bad"}) {
        auto in = files_in(dir, ".plan");
        v.insert(v.end(), in.begin(), in.end());
    }
    return v;
}

INSTANTIATE_TEST_SUITE_P(Plans, FixFixedPoint, ::testing::ValuesIn(shipped_and_bad_plans()),
                         [](const auto &info) {
                             std::string dir = fs::path(info.param).parent_path().filename().string();
                             return name_of(dir) + "_" + name_of(info.param);
                         });

}  // namespace
