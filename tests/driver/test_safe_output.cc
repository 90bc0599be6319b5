// Safe edits and outputs: --fix applies only the fixes it is sure of
// (golden before/after plans in tests/fixtures/fix/, with exit codes),
// -o never writes over an input, and tprun's hint for a plan names a
// .sched file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

namespace fs = std::filesystem;
using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;
using tpcc_test::kTprun;

Proc tpcc(const std::vector<std::string> &args) { return tpcc_test::run_program(kTpcc, args); }

// The scratch root scratch_copy made for `copy` of tests/fixtures/fix/X.plan.
void remove_scratch(const std::string &copy)
{
    fs::path root = fs::path(copy).parent_path().parent_path().parent_path().parent_path();
    std::error_code ec;
    if (root.string().rfind("/tmp/tpcc-test-", 0) == 0)
        fs::remove_all(root, ec);
}

// ---- --fix: golden plans ----

struct FixCase {
    const char *name;                  // tests/fixtures/fix/NAME.plan; NAME.fixed is the plan after (absent: unchanged)
    int exit_code;                     // of the --fix run, after it checked the fixed plan again
    std::vector<std::string> says;     // in its stderr
    std::vector<std::string> never;    // not in its stderr
};

void PrintTo(const FixCase &c, std::ostream *os) { *os << c.name; }

class FixGolden : public ::testing::TestWithParam<FixCase> {};

TEST_P(FixGolden, PlanAfterFixAndExitCode)
{
    const FixCase &c = GetParam();
    std::string before_path = source_path(std::string("tests/fixtures/fix/") + c.name + ".plan");
    std::string after_path = source_path(std::string("tests/fixtures/fix/") + c.name + ".fixed");
    std::string expected = fs::exists(after_path) ? slurp(after_path) : slurp(before_path);
    std::string copy = tpcc_test::scratch_copy(before_path);
    Proc r = tpcc({"--fix", copy});
    EXPECT_EQ(r.code(), c.exit_code) << r.describe();
    EXPECT_EQ(slurp(copy), expected) << r.describe();
    for (const auto &s : c.says)
        EXPECT_TRUE(contains(r.err, s)) << "missing: " << s << "\n" << r.describe();
    for (const auto &s : c.never)
        EXPECT_FALSE(contains(r.err, s)) << "unexpected: " << s << "\n" << r.describe();
    // the exit code is the fixed plan's: a plain check of it agrees, and a
    // second --fix changes nothing more
    Proc again = tpcc({"--check", copy});
    EXPECT_EQ(again.code(), c.exit_code) << again.describe();
    Proc idem = tpcc({"--fix", copy});
    EXPECT_EQ(idem.code(), c.exit_code) << idem.describe();
    EXPECT_EQ(slurp(copy), expected);
    EXPECT_FALSE(contains(idem.err, "--fix: applied")) << idem.describe();
    remove_scratch(copy);
}

const FixCase kFixCases[] = {
    // the reported bug: both keys became attention_norm, a duplicate-entry
    // (a warning now, as in PyTorch: exit 0)
    {"qk-norm", 0, {"'layers.*.attention.q_norm' matches no module", "'layers.*.attention.k_norm' matches no module"},
     {"--fix: applied", "duplicate-entry", "fixed ["}},
    {"style-case", 0, {"fixed [plan]: 'colwise_parallel' -> 'ColwiseParallel'", "applied 1 edit",
                       "checked again, no errors left"}, {"error:"}},
    {"typo-key", 0, {"fixed [unmatched-entry]: '\"feed_forward.w11\"' -> '\"feed_forward.w1\"'",
                     "checked again, no errors left"}, {"error:"}},
    // two keys renamed to one new key: neither; the relabel they cause waits
    {"same-new-key", 1, {"21:5: not fixed [unmatched-entry]: another fix makes the same key: neither is applied",
                         "22:5: not fixed [unmatched-entry]: another fix makes the same key",
                         "not fixed [relabel]: it was found with plan entries that are not right yet"},
     {"--fix: applied", "duplicate-entry"}},
    {"existing-key", 0, {"did you mean 'feed_forward.w1'? (--fix leaves it: another entry already parallelizes it)"},
     {"--fix: applied", "duplicate-entry"}},
    // "# tpcc: ignore[unmatched-entry]" on the key: its rename is not applied
    {"suppressed-key", 0, {"fixed [relabel]"}, {"fixed [unmatched-entry]", "feed_forward.w11\" ->"}},
    {"tie", 1, {"'layers.*.attention.wx' matches no module"}, {"--fix: applied"}},
    {"fixed-and-left", 1, {"fixed [plan]: 'colwise_parallel' -> 'ColwiseParallel'", "checked again, 1 error left",
                           "ColwiseParallel does not support 'layers.0.attention_norm'"}, {"relabel"}},
};

INSTANTIATE_TEST_SUITE_P(Fixtures, FixGolden, ::testing::ValuesIn(kFixCases),
                         [](const auto &info) {
                             std::string n = info.param.name;
                             for (auto &ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

// --fix edits the plans it is given and nothing else: not the model, not
// config.json, even where a fix-it would point there.
TEST(FixWrites, OnlyThePlan)
{
    std::string copy = tpcc_test::scratch_copy(source_path("tests/fixtures/fix/style-case.plan"));
    std::string model = source_path("tests/models/torch_transformer.model");
    struct stat m0, m1;
    ASSERT_EQ(stat(model.c_str(), &m0), 0);
    Proc r = tpcc({"--fix", copy});
    EXPECT_EQ(r.code(), 0) << r.describe();
    ASSERT_EQ(stat(model.c_str(), &m1), 0);
    EXPECT_EQ(m0.st_mtime, m1.st_mtime);
    EXPECT_EQ(m0.st_ino, m1.st_ino);
    // the plan's directory holds the plan alone: no temporary left behind
    auto entries = fs::directory_iterator(fs::path(copy).parent_path());
    EXPECT_EQ(std::distance(fs::begin(entries), fs::end(entries)), 1);
    remove_scratch(copy);
}

// --fix with -o: the schedule is compiled from the fixed plan.
TEST(FixWrites, CompileAfterFixing)
{
    std::string copy = tpcc_test::scratch_copy(source_path("tests/fixtures/fix/typo-key.plan"));
    std::string out = fs::path(copy).parent_path().parent_path().parent_path().string() + "/typo.sched";
    Proc r = tpcc({"--fix", copy, "-o", out});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(fs::exists(out));
    remove_scratch(copy);
}

// ---- -o never writes over an input ----

struct Inputs {
    TempDir dir;
    std::string plan, model, config;
    Inputs()
    {
        model = dir.write("tiny.model", slurp(source_path("models/llama.model")));
        std::string text = slurp(source_path("plans/llama-tiny.plan"));
        text.replace(text.find("../models/llama.model"), 21, "tiny.model");
        plan = dir.write("tiny.plan", text);
        config = dir.write("config.json", slurp(source_path("tests/fixtures/llama-small.config.json")));
    }
};

void expect_refused(const Inputs &in, const std::vector<std::string> &args, const std::string &victim,
                    const std::string &role)
{
    std::string before = slurp(victim);
    Proc r = tpcc(args);
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "would overwrite " + role)) << r.describe();
    EXPECT_TRUE(contains(r.err, "nothing was written; name the schedule another file, such as tiny.sched")) << r.describe();
    EXPECT_EQ(slurp(victim), before) << "the input was written over";
}

TEST(NoClobber, ThePlanItself)
{
    Inputs in;
    ASSERT_EQ(tpcc({in.plan, "-o", in.dir.path + "/ok.sched"}).code(), 0);
    expect_refused(in, {in.plan, "-o", in.plan}, in.plan, "the plan");
    // under another spelling of the same path
    std::string name = fs::path(in.dir.path).filename().string();
    expect_refused(in, {in.plan, "-o", in.dir.path + "/./../" + name + "/tiny.plan"}, in.plan, "the plan");
}

TEST(NoClobber, ThePlanThroughASymlinkOrHardLink)
{
    Inputs in;
    std::string sym = in.dir.path + "/link.sched", hard = in.dir.path + "/hard.sched";
    ASSERT_EQ(symlink(in.plan.c_str(), sym.c_str()), 0);
    ASSERT_EQ(link(in.plan.c_str(), hard.c_str()), 0);
    expect_refused(in, {in.plan, "-o", sym}, in.plan, "the plan");
    expect_refused(in, {in.plan, "-o", hard}, in.plan, "the plan");
    EXPECT_TRUE(fs::is_symlink(sym));
}

TEST(NoClobber, TheModel)
{
    Inputs in;
    expect_refused(in, {in.plan, "-o", in.model}, in.model, "the model file");
}

TEST(NoClobber, TheHuggingFaceConfig)
{
    Inputs in;
    // by file and by directory
    expect_refused(in, {in.plan, "--hf-config", in.config, "-o", in.config}, in.config, "the Hugging Face config");
    expect_refused(in, {in.plan, "--hf-config", in.dir.path, "-o", in.config}, in.config, "the Hugging Face config");
}

TEST(NoClobber, RelativeToAnotherDirectory)
{
    Inputs in;
    // -o names the plan by a path relative to the working directory
    fs::path cwd = fs::current_path();
    fs::current_path(in.dir.path);
    std::string before = slurp(in.plan);
    Proc r = tpcc({in.plan, "-o", "tiny.plan"});
    fs::current_path(cwd);
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_EQ(slurp(in.plan), before);
}

// ---- where a plan's model is found ----

// Beside the plan first; else its file name in TPCC_MODEL_PATH (then the
// models/ directories above the plan and tpcc's own: test_input_roots.cc;
// the installed models: tests/install/test_install.sh).
TEST(ModelPath, SearchedByFileNameInTpccModelPath)
{
    TempDir dir, elsewhere;
    std::string text = slurp(source_path("plans/llama-tiny.plan"));
    text.replace(text.find("../models/llama.model"), 21, "mine.model");
    std::string plan = dir.write("mine.plan", text);
    Proc missing = tpcc_test::run_program(kTpcc, {"--check", plan});
    EXPECT_EQ(missing.code(), 2) << missing.describe();
    EXPECT_TRUE(contains(missing.err, "mine.model")) << missing.describe();
    elsewhere.write("mine.model", slurp(source_path("models/llama.model")));
    Proc found = tpcc_test::run_program(kTpcc, {"--check", plan},
                                        {"TPCC_MODEL_PATH=/nonexistent::" + elsewhere.path});
    EXPECT_EQ(found.code(), 0) << found.describe();
    // a model beside the plan wins over the search path
    dir.write("mine.model", "this is not a model");
    Proc beside = tpcc_test::run_program(kTpcc, {"--check", plan}, {"TPCC_MODEL_PATH=" + elsewhere.path});
    EXPECT_EQ(beside.code(), 1) << beside.describe();
    EXPECT_TRUE(contains(beside.err, dir.path + "/mine.model")) << beside.describe();
}

// ---- tprun given a plan ----

TEST(TprunHint, APlanGetsASchedName)
{
    Proc r = tpcc_test::run_program(kTprun, {source_path("plans/llama-tiny.plan")});
    EXPECT_NE(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "tpcc " + source_path("plans/llama-tiny.plan") + " -o llama-tiny.sched"))
        << r.describe();
    EXPECT_FALSE(contains(r.err, "-o " + source_path("plans/llama-tiny.plan"))) << r.describe();
}

TEST(TprunHint, AnyOtherFile)
{
    TempDir dir;
    Proc r = tpcc_test::run_program(kTprun, {dir.write("notes.txt", "hello\n")});
    EXPECT_NE(r.code(), 0);
    EXPECT_TRUE(contains(r.err, "-o notes.sched")) << r.describe();
    Proc j = tpcc_test::run_program(kTprun, {dir.write("config.json", "{\"a\": 1}")});
    EXPECT_TRUE(contains(j.err, "not a tpcc schedule")) << j.describe();
    EXPECT_TRUE(contains(j.err, "tpcc PLAN -o NAME.sched")) << j.describe();
    // a broken schedule is to be compiled again, under its own name
    Proc s = tpcc_test::run_program(kTprun, {dir.write("old.sched", "{")});
    EXPECT_TRUE(contains(s.err, "compile it again with tpcc PLAN -o " + dir.path + "/old.sched")) << s.describe();
}

}  // namespace
