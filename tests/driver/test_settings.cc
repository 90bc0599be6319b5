// Settings files (compiler/driver/settings.c, settings_find.c): [tool.tpcc]
// in a pyproject.toml or a .tpcc.toml, the nearest above each plan; the
// command line over the file; --config and --isolated; errors with the
// file, line and column and nothing written; and the pre-commit hook and
// the GitHub workflow run as written on a repository a pyproject.toml
// configures.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <jansson.h>

#include "tests/support/json_doc.h"
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"
#include "tests/support/train_harness.h"

extern "C" {
#include "compiler/driver/settings.h"
}

namespace fs = std::filesystem;
using tpcc_test::contains;
using tpcc_test::JsonDoc;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

// A repository in a scratch directory, as projects lay it out: .git,
// plans/ beside models/ (a copy of the shipped llama.model); warns.plan
// has three repeated-gather warnings, clean.plan none.
struct Repo {
    TempDir dir;
    std::string root = dir.path + "/repo";
    Repo()
    {
        fs::create_directories(root + "/.git");
        write("models/llama.model", slurp(source_path("models/llama.model")));
        write("plans/warns.plan", slurp(source_path("plans/llama-sp-input-layouts.plan")));
        write("plans/clean.plan", slurp(source_path("plans/llama-megatron.plan")));
    }
    std::string write(const std::string &name, const std::string &text) const
    {
        fs::create_directories(fs::path(root + "/" + name).parent_path());
        return dir.write("repo/" + name, text);
    }
    std::string at(const std::string &name) const { return root + "/" + name; }
};

Proc tpcc(const std::vector<std::string> &args)
{
    return tpcc_test::run_program(kTpcc, args);
}

const std::string kLayers = "[tool.tpcc]\ndefines = {layers = 2}\n";

TEST(Settings, PyprojectTableConfiguresThePlans)
{
    Repo r;
    r.write("pyproject.toml", "[project]\nname = \"plans\"\n\n" + kLayers + "warnings = {repeated-gather = \"error\"}\n");
    Proc p = tpcc({"--check", r.at("plans/warns.plan"), r.at("plans/clean.plan")});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "[repeated-gather, -W repeated-gather=error]")) << p.describe();
    EXPECT_TRUE(contains(p.err, "3 errors generated.")) << p.describe();
    EXPECT_FALSE(contains(p.err, "All checks passed!")) << p.describe();
    Proc clean = tpcc({"--check", r.at("plans/clean.plan")});
    EXPECT_EQ(clean.code(), 0) << clean.describe();
    EXPECT_EQ(clean.err, "All checks passed! (1 plan)\n");
}

// -W, -Werror and -D on the command line come after the file's.
TEST(Settings, CommandLineOverridesTheFile)
{
    Repo r;
    r.write("pyproject.toml", kLayers + "werror = true\nwarnings = {config-override = \"ignore\"}\n");
    std::string warns = r.at("plans/warns.plan");
    Proc werror = tpcc({warns});
    EXPECT_EQ(werror.code(), 1) << werror.describe();
    EXPECT_TRUE(contains(werror.err, "[repeated-gather, -Werror]")) << werror.describe();
    EXPECT_EQ(tpcc({warns, "-Wno-error"}).code(), 0);
    Proc kept = tpcc({warns, "-W", "repeated-gather=warning"});
    EXPECT_EQ(kept.code(), 0) << kept.describe();
    EXPECT_TRUE(contains(kept.err, "3 warnings generated.")) << kept.describe();
    EXPECT_EQ(tpcc({warns, "-W", "no-repeated-gather"}).err, "All checks passed! (1 plan)\n");
    // -D after the file's defines: tp = 3 does not divide the heads; -D tp=2 does
    r.write("pyproject.toml", "[tool.tpcc]\ndefines = {layers = 2, tp = 3}\n");
    std::string clean = r.at("plans/clean.plan");
    Proc three = tpcc({clean});
    EXPECT_EQ(three.code(), 1) << three.describe();
    EXPECT_EQ(tpcc({clean, "-D", "tp=2"}).code(), 0);
}

// A define the model does not have is the plan's config error, naming the
// line of the file that sets it.
TEST(Settings, UnknownDefineNamesItsLine)
{
    Repo r;
    std::string file = r.write("pyproject.toml", "[tool.tpcc]\n\ndefines = {layers = 2, layerz = 4}\n");
    Proc p = tpcc({r.at("plans/clean.plan")});
    EXPECT_EQ(p.code(), 2) << p.describe();
    EXPECT_TRUE(contains(p.err, file + ":3:24: defines: -D layerz=4: unknown configuration name 'layerz' (did you "
                                       "mean 'layers'?) [config]")) << p.describe();
}

// The nearest file wins; in one directory .tpcc.toml before
// pyproject.toml; a pyproject.toml without [tool.tpcc] is passed over;
// nothing above the repository's root is read.
TEST(Settings, NearestFileWins)
{
    Repo r;
    r.dir.write("pyproject.toml", "this is not TOML\n");    // above .git: never read
    r.write("pyproject.toml", kLayers + "warnings = {repeated-gather = \"error\"}\n");
    std::string sub = r.write("plans/sub/warns.plan", slurp(source_path("plans/llama-sp-input-layouts.plan")));
    r.write("plans/sub/pyproject.toml", "[tool.black]\nline-length = 100\n");
    EXPECT_EQ(tpcc({sub, "-D", "layers=2"}).code(), 1) << "the repository's file, past sub/'s pyproject.toml";
    r.write("plans/sub/.tpcc.toml", "warnings = {repeated-gather = \"ignore\"}\n");
    Proc near = tpcc({sub, "-D", "layers=2"});
    EXPECT_EQ(near.code(), 0) << near.describe();
    EXPECT_EQ(near.err, "All checks passed! (1 plan)\n");
    r.write("plans/sub/pyproject.toml", "[tool.tpcc]\nwerror = true\n");
    EXPECT_EQ(tpcc({sub, "-D", "layers=2"}).code(), 0) << ".tpcc.toml before pyproject.toml";
    // two plans, two projects' settings, one run
    Proc both = tpcc({sub, r.at("plans/warns.plan"), "-D", "layers=2"});
    EXPECT_EQ(both.code(), 1) << both.describe();
    EXPECT_TRUE(contains(both.err, "3 errors generated.")) << both.describe();
}

TEST(Settings, ConfigAndIsolated)
{
    Repo r;
    r.write("pyproject.toml", "[tool.tpcc]\nwarning = 1\n");   // broken
    std::string warns = r.at("plans/warns.plan");
    EXPECT_EQ(tpcc({warns, "-D", "layers=2"}).code(), 2);
    Proc isolated = tpcc({"--isolated", warns, "-D", "layers=2"});
    EXPECT_EQ(isolated.code(), 0) << isolated.describe();
    // a file not named pyproject.toml is all settings, as a .tpcc.toml
    std::string other = r.dir.write("elsewhere.toml", "defines = {layers = 2}\nwerror = true\n");
    Proc config = tpcc({"--config", other, warns});
    EXPECT_EQ(config.code(), 1) << config.describe();
    EXPECT_TRUE(contains(config.err, "[repeated-gather, -Werror]")) << config.describe();

    Proc both = tpcc({"--config", other, "--isolated", warns});
    EXPECT_EQ(both.code(), 2);
    EXPECT_TRUE(contains(both.err, "--config FILE and --isolated (no settings file) exclude each other"))
        << both.describe();
    Proc missing = tpcc({"--config", r.dir.path + "/none.toml", warns});
    EXPECT_EQ(missing.code(), 2);
    EXPECT_TRUE(contains(missing.err, "none.toml")) << missing.describe();
    std::string plain = r.dir.write("pyproject.toml", "[project]\nname = \"x\"\n");
    Proc no_table = tpcc({"--config", plain, warns});
    EXPECT_EQ(no_table.code(), 2);
    EXPECT_TRUE(contains(no_table.err, "--config " + plain + ": the file has no [tool.tpcc] table"))
        << no_table.describe();
}

// A broken file: a usage error with the file, line and column and how to
// fix it, before anything is written.
TEST(Settings, ErrorsSayFileLineAndColumn)
{
    struct {
        std::string text, says;
    } cases[] = {
        {"[tool.tpcc]\nwarning = {}\n", ":2:1: unknown setting 'warning' in [tool.tpcc]; did you mean 'warnings'? "
                                        "(docs/lint.md lists the settings)"},
        {"[tool.tpcc]\nfrobnicate = 1\n", ":2:1: unknown setting 'frobnicate' in [tool.tpcc] (docs/lint.md"},
        {"[tool.tpcc.defines]\ntp = [2]\n", ":2:6: defines: tp is an array: a value is a number"},
        {"[tool.tpcc]\nwerror = \"yes\"\n", ":2:10: werror must be true or false, not a string"},
        {"[tool.tpcc]\nwarnings = {repeated-gathr = \"error\"}\n",
         ":2:13: warnings: unknown check 'repeated-gathr'; did you mean 'repeated-gather'?"},
        {"[tool.tpcc]\nwarnings = {relabel = \"fatal\"}\n",
         ":2:23: warnings: relabel takes \"error\", \"warning\" or \"ignore\""},
        {"[tool.tpcc]\nmodel-path = \"models\"\n", ":2:14: model-path must be an array of paths ([\"models\"]), not a "
                                               "string"},
        {"[tool.tpcc]\nmodel-path = [\"nowhere\"]\n", ":2:15: model-path: 'nowhere' ("},
        {"[tool.tpcc]\nmodel-path = [\"plans/warns.plan\"]\n", "is not a directory"},
        {"[tool.tpcc]\nwerror = true\nwerror = false\n", ":3:1: 'werror' is set twice (first on line 2)"},
        {"[project]\nname = 'x\n", ":2:8: the string is not closed on its line"},
        {"tool = 1\n", ":1:8: 'tool' is an integer, not a table"},
    };
    for (const auto &k : cases) {
        SCOPED_TRACE(k.text);
        Repo r;
        std::string file = r.write("pyproject.toml", k.text);
        Proc p = tpcc({"--check", "--diagnostics-format=sarif", r.at("plans/clean.plan")});
        EXPECT_EQ(p.code(), 2) << p.describe();
        EXPECT_EQ(p.out, "") << "nothing written";
        EXPECT_EQ(p.err.rfind("tpcc: " + file, 0), 0u) << p.describe();
        EXPECT_TRUE(contains(p.err, k.says)) << p.describe();
    }
    // .tpcc.toml's table is the whole file
    Repo r;
    std::string file = r.write(".tpcc.toml", "werrror = true\n");
    Proc p = tpcc({r.at("plans/clean.plan")});
    EXPECT_EQ(p.code(), 2);
    EXPECT_TRUE(contains(p.err, file + ":1:1: unknown setting 'werrror' in " + file + "; did you mean 'werror'?"))
        << p.describe();
}

// model-path and allow-outside are relative to the file, and are where a
// plan may read.
TEST(Settings, ModelPathAndAllowOutside)
{
    Repo r;
    r.write("shared/mine.model", slurp(source_path("models/llama.model")));
    std::string text = slurp(source_path("plans/llama-megatron.plan"));
    tpcc_test::replace_once(text, "\"../models/llama.model\"", "\"mine.model\"");
    std::string plan = r.write("plans/mine.plan", text);
    Proc lost = tpcc({plan, "-D", "layers=2"});
    EXPECT_EQ(lost.code(), 2) << lost.describe();
    EXPECT_TRUE(contains(lost.err, "cannot find the model 'mine.model'")) << lost.describe();
    r.write("pyproject.toml", kLayers + "model-path = [\"shared\"]\n");
    Proc found = tpcc({plan});
    EXPECT_EQ(found.code(), 0) << found.describe();

    // outside the repository: refused, unless allow-outside says so
    fs::create_directories(r.dir.path + "/outside");
    std::string outside = r.dir.write("outside/llama.model", slurp(source_path("models/llama.model")));
    text = slurp(source_path("plans/llama-megatron.plan"));
    tpcc_test::replace_once(text, "\"../models/llama.model\"", "\"" + outside + "\"");
    plan = r.write("plans/outside.plan", text);
    Proc refused = tpcc({plan});
    EXPECT_EQ(refused.code(), 2) << refused.describe();
    EXPECT_TRUE(contains(refused.err, "is outside the directories a plan may read")) << refused.describe();
    r.write("pyproject.toml", kLayers + "allow-outside = [\"../outside\"]\n");
    Proc allowed = tpcc({plan});
    EXPECT_EQ(allowed.code(), 0) << allowed.describe();
}

// docs/lint.md's table has a row for every key, and only those.
TEST(Settings, EveryKeyIsDocumented)
{
    std::string page = slurp(source_path("docs/lint.md"));
    for (int i = 0; i < tp_nsettings_keys; i++)
        EXPECT_TRUE(contains(page, std::string("\n| `") + tp_settings_keys[i] + "` |")) << tp_settings_keys[i];
    size_t rows = 0;
    for (size_t at = page.find("## Settings"); (at = page.find("\n| `", at + 1)) != std::string::npos;)
        rows++;
    EXPECT_EQ(rows, (size_t)tp_nsettings_keys);
}

// --- the pre-commit hook and the GitHub workflow, as written -----------------------------------------

// A git repository of plans that a pyproject.toml configures: -D layers=2
// and repeated-gather as an error, so warns.plan fails; tracked, as the
// workflow and pre-commit see files.
struct GitRepo : Repo {
    GitRepo()
    {
        write("pyproject.toml", "[project]\nname = \"plans\"\n\n" + kLayers +
                                    "warnings = {repeated-gather = \"error\"}\n");
        fs::remove_all(root + "/.git");
        git({"init", "-q"});
        git({"add", "."});
        git({"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "plans"});
    }
    void git(const std::vector<std::string> &args) const
    {
        std::vector<std::string> all = {"-C", root};
        all.insert(all.end(), args.begin(), args.end());
        Proc p = tpcc_test::run_program("git", all);
        ASSERT_EQ(p.code(), 0) << p.describe();
    }
};

// The workflow's steps (tests/support/run_workflow.py), in the repository;
// the report of each step.
Proc run_workflow(const GitRepo &r)
{
    std::string py = tpcc_test::python_with("yaml");
    EXPECT_FALSE(py.empty()) << "no python3 with yaml: install python3-yaml (tools/setup.sh does)";
    EXPECT_FALSE(tpcc_test::python_with("jsonschema").empty()) << "install python3-jsonschema (tools/setup.sh does)";
    fs::remove(r.at(".tpcc/build/tpcc"));
    return tpcc_test::run_program(
        py, {source_path("tests/support/run_workflow.py"), source_path("docs/ci/tpcc-check.yml"), r.root, kTpcc,
             source_path("tests/support/validate_sarif.py"),
             source_path("tests/fixtures/sarif/sarif-schema-2.1.0.json")});
}

std::vector<std::string> outcomes(const JsonDoc &doc)
{
    std::vector<std::string> out;
    for (size_t i = 0; i < json_array_size(doc.root); i++)
        out.push_back(json_string_value(json_object_get(json_array_get(doc.root, i), "outcome")));
    return out;
}

TEST(LintCi, WorkflowStepsRunAsWritten)
{
    GitRepo r;
    Proc run = run_workflow(r);
    ASSERT_EQ(run.code(), 0) << run.describe();
    JsonDoc doc(run.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << run.describe();
    // checkout, checkout, build, check (fails: the settings' error), SARIF, upload
    EXPECT_EQ(outcomes(doc), (std::vector<std::string>{"success", "success", "success", "failure", "success", "success"}))
        << run.out.substr(0, 4000);
    json_t *check = json_array_get(doc.root, 3);
    std::string annotations = json_string_value(json_object_get(check, "stdout"));
    EXPECT_EQ(json_integer_value(json_object_get(check, "status")), 1);
    EXPECT_TRUE(contains(annotations, "::error file=plans/warns.plan,line=18,col=5,")) << annotations;
    EXPECT_TRUE(contains(annotations, "title=tpcc (repeated-gather)::")) << annotations;
    EXPECT_TRUE(contains(annotations, "[-W repeated-gather=error]")) << annotations;
    JsonDoc sarif(slurp(r.at("tpcc.sarif")));
    ASSERT_TRUE(sarif.root) << sarif.error;
    json_t *results = json_object_get(json_array_get(json_object_get(sarif.root, "runs"), 0), "results");
    // three repeated-gathers, and the position-ids warning the plan suppresses (SARIF keeps it, marked)
    ASSERT_EQ(json_array_size(results), 4u);
    EXPECT_TRUE(json_object_get(json_array_get(results, 3), "suppressions"));
    EXPECT_EQ(std::string(json_string_value(json_object_get(json_array_get(results, 0), "level"))), "error");

    // the settings fixed, every step passes
    r.write("pyproject.toml", "[project]\nname = \"plans\"\n\n" + kLayers);
    Proc again = run_workflow(r);
    JsonDoc passed(again.out);
    ASSERT_TRUE(passed.root) << passed.error << "\n" << again.describe();
    EXPECT_EQ(outcomes(passed), std::vector<std::string>(6, "success")) << again.out.substr(0, 4000);

    // no plan tracked: the check says so and fails, nothing is uploaded
    r.git({"rm", "-q", "--cached", "plans/warns.plan", "plans/clean.plan"});
    Proc none = run_workflow(r);
    JsonDoc empty(none.out);
    ASSERT_TRUE(empty.root) << empty.error << "\n" << none.describe();
    EXPECT_EQ(outcomes(empty), (std::vector<std::string>{"success", "success", "success", "failure", "failure", "skipped"}))
        << none.out.substr(0, 4000);
    EXPECT_TRUE(contains(json_string_value(json_object_get(json_array_get(empty.root, 3), "stderr")),
                         "tpcc: no plan given")) << none.out.substr(0, 4000);
}

// pre-commit itself runs the repository's hook (try-repo: as a user's
// .pre-commit-config.yaml would) on the plans, from the repository's root,
// with tpcc on PATH, as language: system asks.
TEST(LintCi, PreCommitHookRunsAsWritten)
{
    ASSERT_TRUE(tpcc_test::on_path("pre-commit")) << "no pre-commit: install it (tools/setup.sh does)";
    GitRepo r;
    TempDir home;
    std::string path = std::string(TPCC_BINARY_DIR) + ":" + getenv("PATH");
    std::string script = "cd '" + r.root + "' && pre-commit try-repo '" + TPCC_SOURCE_DIR +
                         "' tpcc-check --all-files --verbose";
    Proc p = tpcc_test::run_program("/bin/sh", {"-c", script},
                                    {"PATH=" + path, "PRE_COMMIT_HOME=" + home.path, "HOME=" + home.path}, 300);
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.out, "[repeated-gather, -W repeated-gather=error]")) << p.describe();
    EXPECT_TRUE(contains(p.out, "Failed")) << p.describe();
    r.write("pyproject.toml", "[project]\nname = \"plans\"\n\n" + kLayers);
    r.git({"add", "."});
    Proc ok = tpcc_test::run_program("/bin/sh", {"-c", script},
                                     {"PATH=" + path, "PRE_COMMIT_HOME=" + home.path, "HOME=" + home.path}, 300);
    EXPECT_EQ(ok.code(), 0) << ok.describe();
    EXPECT_TRUE(contains(ok.out, "Passed")) << ok.describe();
}

}  // namespace
