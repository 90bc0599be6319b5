// Plans end to end: every shipped plan checks clean at every tp that
// divides its sizes; every bad plan produces exactly the diagnostics written
// inside it; every fix-it, applied, leaves a plan without those errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/support/plan_harness.h"

extern "C" {
#include "compiler/front/config.h"
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

// The sizes a tp degree must divide for a plan to be valid at that degree.
bool tp_divides_sizes(tp_unit *u, int64_t tp)
{
    static const char *const names[] = {"heads", "kv_heads", "ffn", "hidden", "seq"};
    for (const char *n : names) {
        int64_t v;
        if (tp_config_has(&u->config, n) && tp_config_get(&u->config, n, TP_NO_SPAN, &v) && v % tp)
            return false;
    }
    int64_t vocab, mult = 1;
    if (tp_config_get(&u->config, "vocab", TP_NO_SPAN, &vocab)) {
        if (tp_config_has(&u->config, "vocab_multiple"))
            tp_config_get(&u->config, "vocab_multiple", TP_NO_SPAN, &mult);
        int64_t padded = (vocab + mult - 1) / mult * mult;
        if (padded % tp)
            return false;
    }
    return true;
}

TEST_P(ShippedPlan, ChecksCleanAtEveryDividingTp)
{
    for (int64_t tp : {1, 2, 4, 8}) {
        tp_unit u;
        compile(&u, GetParam(), {"tp=" + std::to_string(tp)});
        ASSERT_TRUE(u.built) << rendered(&u);
        bool divides = tp_divides_sizes(&u, tp);
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

class BadPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(BadPlan, ReportsExactlyTheExpectedDiagnostics)
{
    auto want = expectations(GetParam());
    ASSERT_FALSE(want.empty()) << "a bad plan must state its expected diagnostics";
    tp_unit u;
    compile(&u, GetParam());
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
    tp_unit_free(&u);
}

// Apply every fix-it; the errors that had one must be gone and no new error
// may appear (errors without a fix-it may go too: they can be consequences).
TEST_P(BadPlan, FixItsLeaveOnlyUnfixableErrors)
{
    std::string copy = scratch_copy(GetParam());
    tp_unit u;
    compile(&u, copy);
    std::multiset<std::string> unfixable;
    int nfix = 0;
    for (int i = 0; i < u.diags.count; i++) {
        const tp_diag &g = u.diags.items[i];
        if (g.level != TP_ERROR)
            continue;
        if (g.nfixits)
            nfix++;
        else
            unfixable.insert(g.check);
    }
    fs::path root = fs::path(copy).parent_path().parent_path().parent_path();
    if (nfix == 0) {
        tp_unit_free(&u);
        fs::remove_all(root);
        GTEST_SKIP() << "no machine-applicable fix";
    }
    char err[512];
    ASSERT_GT(tp_diags_apply_fixits(&u.diags, &u.src, err, sizeof err), 0) << err;
    tp_unit_free(&u);
    tp_unit v;
    compile(&v, copy);
    std::multiset<std::string> after;
    for (int i = 0; i < v.diags.count; i++)
        if (v.diags.items[i].level == TP_ERROR)
            after.insert(v.diags.items[i].check);
    std::ifstream in(copy);
    std::string fixed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(std::includes(unfixable.begin(), unfixable.end(), after.begin(), after.end()))
        << "fixed plan:\n" << fixed << "\ndiagnostics:\n" << rendered(&v);
    tp_unit_free(&v);
    fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Plans, BadPlan, ::testing::ValuesIn(files_in("tests/bad", ".plan")),
                         [](const auto &info) { return name_of(info.param); });

}  // namespace
