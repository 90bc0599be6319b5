// The tpcc command line (compiler/driver/main.c), run as a process: exit
// statuses, hostile input, output formats, --explain, --fix, --hf-config.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "tests/support/json_doc.h"
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

namespace fs = std::filesystem;
using tpcc_test::source_path;
using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

// tpcc with `args`, stdout and stderr captured, stdin from /dev/null.
Proc run(const std::vector<std::string> &args, const std::vector<std::string> &env_extra = {})
{
    return tpcc_test::run_program(kTpcc, args, env_extra);
}

const std::string kClean = source_path("plans/llama-megatron.plan");
const std::string kBad = source_path("tests/bad/relabel-rowwise-embedding.plan");

TEST(Cli, BinaryExists)
{
    struct stat st;
    ASSERT_EQ(stat(kTpcc.c_str(), &st), 0) << kTpcc << " is not built (add_dependencies(tpcc_tests tpcc))";
    EXPECT_TRUE(st.st_mode & S_IXUSR);
}

// --- exit statuses ------------------------------------------------------------------------------

// A clean check says so in one line, as ruff does; -o and the other modes stay silent.
TEST(CliExit, CleanPlanIsZeroAndOneLine)
{
    Proc r = run({"--check", kClean, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << r.describe();
    EXPECT_EQ(r.out, "") << r.describe();
    // --check is the default
    EXPECT_EQ(run({kClean, "-D", "layers=2"}).code(), 0);
    Proc two = run({"--check", kClean, kClean, "-D", "layers=2"});
    EXPECT_EQ(two.err, "All checks passed! (2 plans)\n") << two.describe();
    // a warning is a finding: its summary is clang's, not this line
    Proc warns = run({"--check", kClean, source_path("plans/llama-sp-input-layouts.plan"), "-D", "layers=2"});
    EXPECT_EQ(warns.code(), 0) << warns.describe();
    EXPECT_FALSE(contains(warns.err, "All checks passed")) << warns.describe();
    TempDir dir;
    Proc compiled = run({kClean, "-D", "layers=2", "-o", dir.path + "/x.sched"});
    EXPECT_EQ(compiled.code(), 0) << compiled.describe();
    EXPECT_EQ(compiled.err, "") << "compiling stays silent";
}

// No plan at all, or a pattern the shell passed on unmatched: a usage
// error that writes nothing, not an empty document.
TEST(CliExit, NoPlanWritesNothing)
{
    for (const std::vector<std::string> &args :
         {std::vector<std::string>{"--check", "--diagnostics-format=sarif"},
          std::vector<std::string>{"--check", "--diagnostics-format=sarif", source_path("plans") + "/*.nothing"},
          std::vector<std::string>{"--check", "--diagnostics-format=json", kClean, source_path("plans/nope-[0-9].plan")}}) {
        Proc r = run(args);
        EXPECT_EQ(r.code(), 2) << r.describe();
        EXPECT_EQ(r.out, "") << r.describe();
        EXPECT_TRUE(contains(r.err, "no plan")) << r.describe();
    }
    Proc pattern = run({"--check", source_path("plans") + "/*.nothing"});
    EXPECT_TRUE(contains(pattern.err, "tpcc: no plan matches '" + source_path("plans") + "/*.nothing' (the shell passes "
                                      "on a pattern that matches no file as it is)")) << pattern.describe();
}

TEST(CliExit, BadPlanIsOne)
{
    Proc r = run({"--check", kBad, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "error:")) << r.describe();
    EXPECT_TRUE(contains(r.err, "[relabel]")) << r.describe();
    EXPECT_TRUE(contains(r.err, "relabel-rowwise-embedding.plan:24:5:")) << r.describe();
    EXPECT_TRUE(contains(r.err, "1 error generated.")) << r.describe();
}

TEST(CliExit, WarningsAloneAreZero)
{
    Proc r = run({source_path("plans/llama-sp-input-layouts.plan"), "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "warning:")) << r.describe();
}

TEST(CliExit, UsageAndIoErrorsAreTwo)
{
    TempDir dir;
    struct {
        std::vector<std::string> args;
        const char *says;
    } cases[] = {
        {{"--check", dir.path + "/missing.plan"}, "missing.plan"},
        {{"--check", dir.path}, "directory"},
        {{"--frobnicate", kClean}, "--frobnicate"},
        {{}, "no plan"},
        {{"--check"}, "no plan"},
        {{"-D", "nosuchname=2", kClean}, "nosuchname"},
        {{"-D", "layrs=2", kClean}, "did you mean 'layers'"},
        {{"-D", "tp=two", kClean}, "tp=two"},
        {{"-D", "tp", kClean}, "name=value"},
        {{"--diagnostics-format=xml", kClean}, "xml"},
        {{"--color=sometimes", kClean}, "--color"},
        {{"--explain", kClean, kBad}, "one plan"},
        {{"--hf-config", dir.path + "/nope.json", kClean}, "nope.json"},
        {{kClean, "-D"}, ""},
    };
    for (const auto &k : cases) {
        std::string cmd;
        for (const auto &a : k.args)
            cmd += " " + a;
        SCOPED_TRACE("tpcc" + cmd);
        Proc r = run(k.args);
        EXPECT_FALSE(r.signaled()) << r.describe();
        EXPECT_EQ(r.code(), 2) << r.describe();
        EXPECT_TRUE(contains(r.err, k.says)) << "stderr should mention '" << k.says << "'\n" << r.describe();
    }
}

TEST(CliExit, WorstPlanDecides)
{
    TempDir dir;
    EXPECT_EQ(run({kClean, kBad, "-D", "layers=2"}).code(), 1);
    EXPECT_EQ(run({kBad, kClean, "-D", "layers=2"}).code(), 1);
    EXPECT_EQ(run({kClean, dir.path + "/missing.plan", kBad, "-D", "layers=2"}).code(), 2);
}

// A dp dimension of more than one device is not compiled as its tp
// dimension alone: PyTorch runs the plan, so --check does not fail on it,
// and compiling exits 3 without writing a schedule.
TEST(CliExit, DataParallelMeshIsUnsupportedAndWritesNothing)
{
    const std::string plan = source_path("tests/bad/unsupported-mesh-dp-unused.plan");
    Proc c = run({"--check", plan, "-D", "layers=2"});
    EXPECT_EQ(c.code(), 0) << c.describe();
    EXPECT_TRUE(contains(c.err, "mesh-dp-unused.plan:6:6: unsupported: mesh dimension 'dp' (size 2) is data "
                                "parallel")) << c.describe();
    EXPECT_TRUE(contains(c.err, "world size 4")) << c.describe();
    EXPECT_TRUE(contains(c.err, "[unsupported]")) << c.describe();
    EXPECT_TRUE(contains(c.err, "mesh(tp = 2) (or dp = 1)")) << c.describe();
    EXPECT_TRUE(contains(c.err, "supported by tpcc --train only")) << c.describe();

    TempDir dir;
    std::string out = dir.path + "/x.sched";
    Proc o = run({plan, "-o", out, "-D", "layers=2"});
    EXPECT_EQ(o.code(), 3) << o.describe();
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(fs::is_empty(dir.path));
}

// With --train the dp dimension is data parallelism: the schedule is one
// tp group's with "data_parallel"; a dp dimension after tp is refused.
TEST(CliExit, DataParallelMeshCompilesForTraining)
{
    TempDir dir;
    std::string out = dir.path + "/x.sched";
    Proc o = run({source_path("tests/bad/unsupported-mesh-dp-unused.plan"), "--train", "-o", out, "-D", "layers=2"});
    ASSERT_EQ(o.code(), 0) << o.describe();
    std::string text = tpcc_test::slurp(out);
    EXPECT_TRUE(contains(text, "\"world_size\": 2,\n  \"data_parallel\": 2,")) << text.substr(0, 400);

    std::string p = dir.write("tp-dp.plan", "model \"" + source_path("models/llama.model") + "\"\n"
                                            "mesh(tp = 2, dp = 2)\n"
                                            "parallelize \"model.layers.*\" on \"tp\" {\n"
                                            "    \"mlp.gate_proj\": ColwiseParallel(),\n"
                                            "    \"mlp.up_proj\": ColwiseParallel(),\n"
                                            "    \"mlp.down_proj\": RowwiseParallel(),\n"
                                            "}\n");
    Proc r = run({p, "--train", "-D", "layers=2", "-o", dir.path + "/y.sched"});
    EXPECT_EQ(r.code(), 3) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: data-parallel mesh dimension 'dp' comes after the tensor-parallel one 'tp'"))
        << r.describe();
    EXPECT_TRUE(contains(r.err, "mesh(dp = ..., tp = ...)")) << r.describe();
}

// dp given by a config value: the fix is a define, and the define works.
TEST(CliExit, DataParallelMeshFromConfigSuggestsTheDefine)
{
    TempDir dir;
    std::string p = dir.write("dp.plan", "model \"" + source_path("models/llama.model") + "\"\n"
                                         "config { dp = 2 }\n"
                                         "mesh(dp = dp, tp = tp)\n"
                                         "parallelize \"model.layers.*\" on \"tp\" {\n"
                                         "    \"mlp.gate_proj\": ColwiseParallel(),\n"
                                         "    \"mlp.up_proj\": ColwiseParallel(),\n"
                                         "    \"mlp.down_proj\": RowwiseParallel(),\n"
                                         "}\n");
    Proc r = run({p, "-D", "layers=2", "-D", "tp=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "-D dp=1 (or mesh(tp = tp))")) << r.describe();
    Proc fixed = run({p, "-D", "layers=2", "-D", "tp=2", "-D", "dp=1", "-o", dir.path + "/x.sched"});
    EXPECT_EQ(fixed.code(), 0) << fixed.describe();
    EXPECT_TRUE(fs::exists(dir.path + "/x.sched"));
}

// --- hostile input ---------------------------------------------------------------------------------

TEST(CliHostile, BinaryGarbageWithNul)
{
    TempDir dir;
    std::mt19937 rng(1234);
    for (int i = 0; i < 5; i++) {
        std::string bytes(512 + 97 * i, '\0');
        for (auto &c : bytes)
            c = char(rng() & 0xff);
        bytes[7 * i + 3] = '\0';
        std::string p = dir.write("garbage" + std::to_string(i) + ".plan", bytes);
        Proc r = run({"--check", p});
        EXPECT_FALSE(r.signaled()) << r.describe();
        EXPECT_TRUE(r.code() == 1 || r.code() == 2) << r.describe();
    }
}

TEST(CliHostile, BinaryGarbageWithoutNulReachesTheParser)
{
    TempDir dir;
    std::mt19937 rng(99);
    for (int i = 0; i < 20; i++) {
        std::string bytes(64 + 211 * i, ' ');
        for (auto &c : bytes) {
            c = char(rng() & 0xff);
            if (!c)
                c = '(';
        }
        std::string p = dir.write("garbage" + std::to_string(i) + ".plan", bytes);
        Proc r = run({"--check", p});
        EXPECT_FALSE(r.signaled()) << "input " << i << ": " << r.describe();
        EXPECT_TRUE(r.code() == 1 || r.code() == 2) << r.describe();
    }
}

TEST(CliHostile, PlanLikeGarbage)
{
    // shuffled tokens of a real plan after a valid model line: deep in the checker
    TempDir dir;
    std::string model = "model \"" + source_path("models/llama.model") + "\"\n";
    const char *toks[] = {"parallelize", "\"model.layers.*\"", "{", "}", "(", ")", "[", "]", ":", ",", "=",
                          "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                          "input_layouts", "output_layouts", "Shard", "Replicate", "Partial", "None", "1", "-1",
                          "\"lm_head\"", "\"\"", "mesh", "tp", "config", "loss_parallel", "\n", "True", "99999"};
    std::mt19937 rng(7);
    for (int i = 0; i < 30; i++) {
        std::string text = model;
        for (int k = 0; k < 60; k++)
            text += std::string(toks[rng() % (sizeof toks / sizeof *toks)]) + " ";
        std::string p = dir.write("tok" + std::to_string(i) + ".plan", text);
        Proc r = run({"--check", p, "-D", "layers=1"});
        EXPECT_FALSE(r.signaled()) << text << "\n" << r.describe();
        EXPECT_TRUE(r.code() == 0 || r.code() == 1) << text << "\n" << r.describe();
    }
}

TEST(CliHostile, EmptyFileSaysWhichModel)
{
    TempDir dir;
    Proc r = run({"--check", dir.write("empty.plan", "")});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "does not say which model")) << r.describe();
}

TEST(CliHostile, DeepNesting)
{
    TempDir dir;
    std::string model = "model \"" + source_path("models/llama.model") + "\"\n";
    for (const char *open : {"(", "[", "{"}) {
        std::string deep(100000, open[0]);
        for (const std::string &text : {model + "config { x = " + deep + "1 }\n", deep, model + "parallelize \"\" " + deep}) {
            std::string p = dir.write("deep.plan", text);
            Proc r = run({"--check", p});
            EXPECT_FALSE(r.signaled()) << open << ": " << r.describe();
            EXPECT_EQ(r.code(), 1) << open << ": " << r.describe();
        }
    }
}

TEST(CliHostile, HugeIntegerLiteral)
{
    TempDir dir;
    std::string model = "model \"" + source_path("models/llama.model") + "\"\n";
    std::string p = dir.write("big.plan", model + "config { tp = 99999999999999999999999 }\nmesh(tp = tp)\n");
    Proc r = run({"--check", p});
    EXPECT_FALSE(r.signaled()) << r.describe();
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "too large")) << r.describe();
}

TEST(CliHostile, HugeDefineValuesAreRejectedNotWrapped)
{
    Proc r = run({"-D", "tp=99999999999999999999999", kClean});
    EXPECT_EQ(r.code(), 2) << r.describe();
}

TEST(CliHostile, AbsurdSizesAreErrorsNotCrashes)
{
    // hidden=INT64_MAX: every weight fits in int64, but batch * seq * hidden elements do not;
    // batch=-1 / seq=-5: model inputs of negative size
    for (const char *d : {"hidden=9223372036854775807", "layers=1000000", "tp=0", "tp=-2", "vocab=-1",
                          "vocab_multiple=0", "heads=0", "batch=-1", "seq=-5"}) {
        std::vector<std::string> args = {"-D", d, kClean};
        if (strncmp(d, "layers=", 7))
            args.insert(args.end(), {"-D", "layers=2"});
        Proc r = run(args);
        EXPECT_FALSE(r.signaled()) << d << ": " << r.describe();
        EXPECT_EQ(r.code(), 1) << d << ": " << r.describe();
    }
}

// --- help and version ---------------------------------------------------------------------------------

TEST(CliInfo, Help)
{
    for (const char *flag : {"--help", "-h"}) {
        Proc r = run({flag});
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(r.out, "usage: tpcc")) << r.describe();
        EXPECT_TRUE(contains(r.out, "--explain")) << r.describe();
        EXPECT_TRUE(contains(r.out, "--diagnostics-format")) << r.describe();
        EXPECT_EQ(r.err, "");
    }
    // help wins over a plan and does not check it
    Proc r = run({"--help", kBad});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

TEST(CliInfo, Version)
{
    Proc r = run({"--version"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(r.out.rfind("tpcc ", 0), 0u) << r.describe();
    EXPECT_EQ(r.out.back(), '\n');
    EXPECT_TRUE(contains(r.out, TPCC_VERSION)) << r.describe();
}

// --- machine-readable output ---------------------------------------------------------------------------

using Json = tpcc_test::JsonDoc;

TEST(CliJson, BadPlanListsChecks)
{
    Proc r = run({"--diagnostics-format=json", kBad, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    Json j(r.out);
    ASSERT_TRUE(j.root) << j.error << "\n" << r.describe();
    ASSERT_TRUE(json_is_object(j.root));
    json_t *diags = json_object_get(j.root, "diagnostics");
    ASSERT_TRUE(json_is_array(diags)) << r.out;
    ASSERT_GE(json_array_size(diags), 1u);
    std::vector<std::string> checks;
    for (size_t i = 0; i < json_array_size(diags); i++) {
        json_t *d = json_array_get(diags, i);
        json_t *check = json_object_get(d, "check");
        ASSERT_TRUE(json_is_string(check));
        checks.push_back(json_string_value(check));
        EXPECT_TRUE(json_is_string(json_object_get(d, "message")));
        EXPECT_TRUE(json_is_string(json_object_get(d, "level")));
    }
    EXPECT_EQ(checks, std::vector<std::string>{"relabel"});
    json_t *d0 = json_array_get(diags, 0);
    EXPECT_STREQ(json_string_value(json_object_get(d0, "level")), "error");
    EXPECT_EQ(json_integer_value(json_object_get(d0, "line")), 24);
    EXPECT_TRUE(contains(json_string_value(json_object_get(d0, "file")), "relabel-rowwise-embedding.plan"));
    EXPECT_EQ(json_integer_value(json_object_get(j.root, "errors")), 1);
    EXPECT_EQ(json_integer_value(json_object_get(j.root, "warnings")), 0);
    json_t *fix = json_object_get(d0, "fixits");
    ASSERT_TRUE(json_is_array(fix));
    ASSERT_EQ(json_array_size(fix), 1u);
    EXPECT_TRUE(contains(json_string_value(json_object_get(json_array_get(fix, 0), "replacement")),
                         "input_layouts=Replicate()"));
    EXPECT_EQ(r.err, "") << "json goes to stdout only";
}

TEST(CliJson, WarningsAreListedWithTheirChecks)
{
    Proc r = run({"--diagnostics-format=json", source_path("plans/llama-sp-input-layouts.plan"), "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    Json j(r.out);
    ASSERT_TRUE(j.root) << j.error << "\n" << r.describe();
    json_t *diags = json_object_get(j.root, "diagnostics");
    ASSERT_TRUE(json_is_array(diags));
    EXPECT_EQ(json_array_size(diags), 3u) << r.out;
    for (size_t i = 0; i < json_array_size(diags); i++) {
        EXPECT_STREQ(json_string_value(json_object_get(json_array_get(diags, i), "check")), "repeated-gather");
        EXPECT_STREQ(json_string_value(json_object_get(json_array_get(diags, i), "level")), "warning");
    }
    EXPECT_EQ(json_integer_value(json_object_get(j.root, "warnings")), 3);
}

TEST(CliJson, CleanPlanHasNoDiagnostics)
{
    Proc r = run({"--diagnostics-format=json", kClean, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    Json j(r.out);
    ASSERT_TRUE(j.root) << j.error << "\n" << r.describe();
    EXPECT_EQ(json_array_size(json_object_get(j.root, "diagnostics")), 0u);
    EXPECT_EQ(json_integer_value(json_object_get(j.root, "errors")), 0);
}

TEST(CliJson, TwoPlansAreOneDocument)
{
    Proc r = run({"--diagnostics-format=json", kBad, kClean, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    Json j(r.out);   // text after the first document would fail this
    ASSERT_TRUE(j.root) << j.error << "\n" << r.describe();
    EXPECT_EQ(json_array_size(json_object_get(j.root, "plans")), 2u);
}

TEST(CliSarif, BadPlan)
{
    Proc r = run({"--diagnostics-format=sarif", kBad, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    Json j(r.out);
    ASSERT_TRUE(j.root) << j.error << "\n" << r.describe();
    EXPECT_STREQ(json_string_value(json_object_get(j.root, "version")), "2.1.0");
    json_t *runs = json_object_get(j.root, "runs");
    ASSERT_TRUE(json_is_array(runs));
    ASSERT_EQ(json_array_size(runs), 1u);
    json_t *run0 = json_array_get(runs, 0);
    json_t *results = json_object_get(run0, "results");
    ASSERT_TRUE(json_is_array(results));
    ASSERT_GE(json_array_size(results), 1u);
    json_t *res = json_array_get(results, 0);
    EXPECT_STREQ(json_string_value(json_object_get(res, "ruleId")), "relabel");
    EXPECT_STREQ(json_string_value(json_object_get(res, "level")), "error");
    json_t *msg = json_object_get(json_object_get(res, "message"), "text");
    ASSERT_TRUE(json_is_string(msg));
    EXPECT_TRUE(contains(json_string_value(msg), "token ids"));
    json_t *loc = json_array_get(json_object_get(res, "locations"), 0);
    json_t *region = json_object_get(json_object_get(loc, "physicalLocation"), "region");
    EXPECT_EQ(json_integer_value(json_object_get(region, "startLine")), 24);
    json_t *driver = json_object_get(json_object_get(run0, "tool"), "driver");
    EXPECT_STREQ(json_string_value(json_object_get(driver, "name")), "tpcc");
    // the rule the result refers to is described
    json_t *rules = json_object_get(driver, "rules");
    ASSERT_TRUE(json_is_array(rules));
    bool found = false;
    for (size_t i = 0; i < json_array_size(rules); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(rules, i), "id"));
        found |= id && !strcmp(id, "relabel");
    }
    EXPECT_TRUE(found) << r.out;
}

TEST(CliSarif, CleanPlanHasNoResults)
{
    Proc r = run({"--diagnostics-format=sarif", kClean, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    Json j(r.out);
    ASSERT_TRUE(j.root) << j.error;
    EXPECT_EQ(json_array_size(json_object_get(json_array_get(json_object_get(j.root, "runs"), 0), "results")), 0u);
}

// --- colour -------------------------------------------------------------------------------------------

TEST(CliColor, AlwaysAndNever)
{
    Proc on = run({"--color=always", kBad, "-D", "layers=2"});
    EXPECT_TRUE(contains(on.err, "\x1b[")) << on.describe();
    Proc off = run({"--color=never", kBad, "-D", "layers=2"});
    EXPECT_FALSE(contains(off.err, "\x1b[")) << off.describe();
    Proc autod = run({kBad, "-D", "layers=2"});   // stderr is a file: no colour
    EXPECT_FALSE(contains(autod.err, "\x1b[")) << autod.describe();
}

// --- --explain ---------------------------------------------------------------------------------------------

TEST(CliExplain, PrintsTheBoundaryTable)
{
    Proc r = run({"--explain", kClean, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "mesh: tp=2")) << r.out;
    EXPECT_TRUE(contains(r.out, "model.layers.0.self_attn.q_proj")) << r.out;
    EXPECT_TRUE(contains(r.out, "ColwiseParallel")) << r.out;
    EXPECT_TRUE(contains(r.out, "RowwiseParallel")) << r.out;
    EXPECT_TRUE(contains(r.out, "model.layers.1.mlp.down_proj")) << r.out;
    EXPECT_FALSE(contains(r.out, "model.layers.2")) << r.out;
    EXPECT_TRUE(contains(r.out, "all_reduce")) << r.out;
    EXPECT_TRUE(contains(r.out, "all_gather")) << r.out;
    // the q_proj row, whole
    std::istringstream lines(r.out);
    std::string line, qrow;
    while (std::getline(lines, line))
        if (line.rfind("model.layers.0.self_attn.q_proj ", 0) == 0)
            qrow = line;
    EXPECT_TRUE(contains(qrow, "ColwiseParallel")) << qrow;
    EXPECT_TRUE(contains(qrow, "Replicate() plain [1, 2048, 4096] -> Shard(2) plain [1, 2048, 4096]")) << qrow;
}

TEST(CliExplain, BadPlanStillExplainsAndFails)
{
    Proc r = run({"--explain", kBad, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.out, "model.embed_tokens")) << r.describe();
    EXPECT_TRUE(contains(r.err, "[relabel]")) << r.describe();
}

// --- --fix ---------------------------------------------------------------------------------------------------

// scratch_copy(original) puts the copy at <root>/<original relative to the
// source tree>; remove <root>.
void remove_scratch(const std::string &copy, const std::string &original)
{
    fs::path root = copy;
    for (const auto &part : fs::relative(original, TPCC_SOURCE_DIR)) {
        (void)part;
        root = root.parent_path();
    }
    std::error_code ec;
    if (root.string().rfind("/tmp/tpcc-test-", 0) == 0)
        fs::remove_all(root, ec);
}

TEST(CliFix, FixesTheRelabelledEmbedding)
{
    std::string copy = tpcc_test::scratch_copy(kBad);
    std::string before = slurp(copy);
    Proc fix = run({"--fix", copy, "-D", "layers=2"});
    EXPECT_EQ(fix.code(), 0) << "the fixed plan has no error left\n" << fix.describe();
    EXPECT_TRUE(contains(fix.err, "applied 1 edit")) << fix.describe();
    EXPECT_TRUE(contains(fix.err, "checked again, no errors left")) << fix.describe();
    std::string after = slurp(copy);
    EXPECT_NE(after, before);
    EXPECT_TRUE(contains(after, "input_layouts=Replicate()")) << after;
    EXPECT_TRUE(contains(after, "\"model.embed_tokens\": RowwiseParallel(output_layouts=Shard(1), input_layouts=Replicate())"))
        << after;
    Proc again = run({"--check", copy, "-D", "layers=2"});
    EXPECT_EQ(again.code(), 0) << again.describe() << "\nfixed plan:\n" << after;
    // a second --fix has nothing to do
    Proc idem = run({"--fix", copy, "-D", "layers=2"});
    EXPECT_EQ(idem.code(), 0) << idem.describe();
    EXPECT_EQ(slurp(copy), after);
    remove_scratch(copy, kBad);
}

TEST(CliFix, CleanPlanIsLeftByteIdentical)
{
    std::string copy = tpcc_test::scratch_copy(kClean);
    std::string before = slurp(copy);
    struct stat st0;
    ASSERT_EQ(stat(copy.c_str(), &st0), 0);
    Proc r = run({"--fix", copy, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(slurp(copy), before);
    struct stat st1;
    ASSERT_EQ(stat(copy.c_str(), &st1), 0);
    EXPECT_EQ(st0.st_ino, st1.st_ino) << "a clean plan must not even be rewritten";
    EXPECT_FALSE(contains(r.err, "applied")) << r.describe();
    remove_scratch(copy, kClean);
}

TEST(CliFix, ModelFileIsNeverEdited)
{
    // relabel-sp-plain-embedding's fix goes into the plan, not the model it points at
    const std::string orig = source_path("tests/bad/relabel-sp-plain-embedding.plan");
    std::string copy = tpcc_test::scratch_copy(orig);
    std::string model_before = slurp(source_path("models/llama.model"));
    run({"--fix", copy, "-D", "layers=2"});
    EXPECT_EQ(slurp(source_path("models/llama.model")), model_before);
    Proc again = run({"--check", copy, "-D", "layers=2"});
    EXPECT_EQ(again.code(), 0) << again.describe() << "\n" << slurp(copy);
    remove_scratch(copy, orig);
}

// --- --hf-config -------------------------------------------------------------------------------------------

TEST(CliHfConfig, SizesComeFromTheJson)
{
    std::string cfg = source_path("tests/fixtures/llama-small.config.json");
    Proc r = run({"--explain", "--hf-config", cfg, kClean});
    EXPECT_EQ(r.code(), 0) << r.describe();
    // hidden 1024, 16 heads of 64, 4 kv heads, ffn 2816, vocab 1000, 2 layers
    EXPECT_TRUE(contains(r.out, "Replicate() plain [1, 2048, 1024] -> Shard(2) plain [1, 2048, 1024]")) << r.out;
    EXPECT_TRUE(contains(r.out, "-> Shard(2) plain [1, 2048, 256]")) << r.out;     // k_proj, v_proj
    EXPECT_TRUE(contains(r.out, "-> Shard(2) plain [1, 2048, 2816]")) << r.out;    // gate_proj, up_proj
    EXPECT_TRUE(contains(r.out, "-> Replicate() plain [1, 2048, 1000]")) << r.out; // lm_head
    EXPECT_TRUE(contains(r.out, "model.layers.1.mlp")) << r.out;
    EXPECT_FALSE(contains(r.out, "model.layers.2")) << r.out;
    EXPECT_FALSE(contains(r.out, "4096")) << r.out;
}

TEST(CliHfConfig, DefinesOverrideTheJson)
{
    std::string cfg = source_path("tests/fixtures/llama-small.config.json");
    Proc r = run({"--explain", "--hf-config", cfg, "-D", "layers=3", kClean});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "model.layers.2.mlp")) << r.out;
    EXPECT_FALSE(contains(r.out, "model.layers.3")) << r.out;
}

TEST(CliHfConfig, MalformedJsonIsAUsageError)
{
    std::string cfg = source_path("tests/fixtures/malformed.config.json");
    Proc r = run({"--hf-config", cfg, kClean});
    EXPECT_FALSE(r.signaled()) << r.describe();
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err + r.out, "malformed.config.json")) << r.describe();
}

TEST(CliHfConfig, NonObjectJsonIsAUsageError)
{
    Proc r = run({"--hf-config", source_path("tests/fixtures/array.config.json"), kClean});
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "array.config.json")) << r.describe();
}

TEST(CliHfConfig, StringValueIsAnErrorInThePlan)
{
    TempDir dir;
    std::string cfg = dir.write("config.json", "{\"hidden_size\": \"big\"}");
    Proc r = run({"--hf-config", cfg, kClean, "-D", "layers=2"});
    EXPECT_FALSE(r.signaled()) << r.describe();
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "hidden_size")) << r.describe();
}

// --- --hf-config against the model's hf { } block --------------------------------------------------------

std::string fixture(const std::string &name) { return source_path("tests/fixtures/" + name); }

// Megatron-style tensor parallelism over models/qwen2.model (same module paths as Llama).
std::string qwen2_plan(const TempDir &dir)
{
    std::string plan = slurp(kClean);
    plan.replace(plan.find("../models/llama.model"), strlen("../models/llama.model"),
                 source_path("models/qwen2.model"));
    return dir.write("qwen2-megatron.plan", plan);
}

// No model file can implement a mixture-of-experts checkpoint: that is not
// the plan's mistake, and --check does not fail on it.
TEST(CliHfArchitecture, MoeConfigIsUnsupported)
{
    Proc r = run({"--check", "--hf-config", fixture("mixtral.config.json"), kClean});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "mixtral.config.json is a MixtralForCausalLM (model_type 'mixtral'), a "
                                "mixture-of-experts model: tpcc would need expert layers"))
        << r.describe();
    EXPECT_TRUE(contains(r.err, "llama-megatron.plan:5:1: unsupported: ")) << "at the plan's model line\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "[unsupported]")) << r.describe();
    EXPECT_TRUE(contains(r.err, "1 unsupported generated.")) << "nothing after the architecture\n" << r.describe();
    TempDir dir;
    Proc o = run({"--hf-config", fixture("mixtral.config.json"), kClean, "-o", dir.path + "/x.sched"});
    EXPECT_EQ(o.code(), 3) << o.describe();
    EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(CliHfArchitecture, SuggestsTheShippedModelThatImplementsIt)
{
    Proc r = run({"--check", "--hf-config", fixture("qwen2.5-7b"), kClean});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "qwen2.5-7b/config.json is a Qwen2ForCausalLM (model_type 'qwen2'); ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/llama.model implements LlamaForCausalLM")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/qwen2.model implements Qwen2ForCausalLM")) << r.describe();
}

TEST(CliHfArchitecture, UnimplementedFamilyAsksForAModelFile)
{
    Proc r = run({"--check", "--hf-config", fixture("falcon.config.json"), kClean});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "is a FalconForCausalLM (model_type 'falcon')")) << r.describe();
    EXPECT_TRUE(contains(r.err, "write a model file for it")) << r.describe();
}

TEST(CliHfArchitecture, AnotherShippedFamilyIsNamed)
{
    Proc r = run({"--check", "--hf-config", fixture("mistral.config.json"), kClean});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "is a MistralForCausalLM (model_type 'mistral')")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/mistral.model implements MistralForCausalLM: name it in the plan's model line"))
        << r.describe();
}

TEST(CliHfArchitecture, RealQwen2ConfigDividesAsPublished)
{
    TempDir dir;
    std::string plan = qwen2_plan(dir);
    // 28 heads, 4 kv heads, hidden 3584, ffn 18944, vocab 152064; use_sliding_window false
    for (const char *tp : {"2", "4"}) {
        Proc r = run({"--check", "--hf-config", fixture("qwen2.5-7b"), plan, "-D", std::string("tp=") + tp});
        EXPECT_EQ(r.code(), 0) << "tp " << tp << "\n" << r.describe();
        EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << "tp " << tp << ": every key is read or understood\n" << r.describe();
    }
    Proc r = run({"--check", "--hf-config", fixture("qwen2.5-7b"), plan, "-D", "tp=8"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "[divisibility]")) << r.describe();
    EXPECT_TRUE(contains(r.err, "28")) << "28 heads do not split over 8\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "k_proj")) << "4 kv heads do not split over 8\n" << r.describe();
}

TEST(CliHfKeys, SlidingWindowIsUnsupportedOnlyBelowSeq)
{
    std::string cfg = fixture("llama-sliding.config.json");
    Proc at_2048 = run({"--check", "--hf-config", cfg, kClean});
    EXPECT_EQ(at_2048.code(), 0) << "a 4096 window at seq 2048 changes nothing\n" << at_2048.describe();
    EXPECT_EQ(at_2048.err, "All checks passed! (1 plan)\n") << at_2048.describe();
    Proc at_8192 = run({"--check", "--hf-config", cfg, kClean, "-D", "seq=8192"});
    EXPECT_EQ(at_8192.code(), 0) << at_8192.describe();
    EXPECT_TRUE(contains(at_8192.err, "llama-sliding.config.json:10:3: unsupported: ")) << at_8192.describe();
    EXPECT_TRUE(contains(at_8192.err, "sets sliding_window 4096, below seq 8192")) << at_8192.describe();
    EXPECT_TRUE(contains(at_8192.err, "tpcc would need a sliding-window mask in its attention kernels"))
        << at_8192.describe();
    EXPECT_TRUE(contains(at_8192.err, "-D seq=4096 or less")) << at_8192.describe();
    // at tp 3 the seq named is one a sequence-sharded plan can split
    Proc at_tp3 = run({"--check", "--hf-config", cfg, kClean, "-D", "seq=8192", "-D", "tp=3"});
    EXPECT_TRUE(contains(at_tp3.err, "-D seq=4095 or less (4095: the longest seq within the window that tp = 3 "
                                     "divides")) << at_tp3.describe();
}

// Llama 3.1's llama3 and YaRN RoPE scaling are computed (models/llama.model
// reads rope_scaling); a member of it the model does not read is refused by
// name, a type transformers computes and tpcc does not (longrope) is
// unsupported, and one transformers does not define either is an error.
TEST(CliHfKeys, RopeScalingIsReadAndAnUncomputedTypeIsUnsupported)
{
    Proc ok = run({"--check", "--hf-config", fixture("llama3-rope-scaling.config.json"), kClean, "-D", "tp=8"});
    EXPECT_EQ(ok.code(), 0) << ok.describe();
    EXPECT_FALSE(contains(ok.err, "rope_scaling")) << ok.describe();
    const std::string yarn_cfg = slurp(fixture("llama-yarn.config.json"));
    Proc yarn = run({"--check", "--hf-config", fixture("llama-yarn.config.json"), kClean, "-D", "tp=8"});
    EXPECT_EQ(yarn.code(), 0) << yarn.describe();
    TempDir dir;
    std::string member = yarn_cfg, longrope = yarn_cfg, fancy = yarn_cfg;
    size_t at = member.find("\"rope_type\": \"yarn\"");
    ASSERT_NE(at, std::string::npos);
    member.insert(at, "\"ntk_alpha\": 2.0, ");
    longrope.replace(longrope.find("\"yarn\""), 6, "\"longrope\"");
    fancy.replace(fancy.find("\"yarn\""), 6, "\"fancy\"");
    Proc unknown = run({"--check", "--hf-config", dir.write("member.json", member), kClean, "-D", "tp=8"});
    EXPECT_EQ(unknown.code(), 1) << unknown.describe();
    EXPECT_TRUE(contains(unknown.err, "sets rope_scaling.ntk_alpha to 2.0, and ")) << unknown.describe();
    Proc type = run({"--check", "--hf-config", dir.write("longrope.json", longrope), kClean, "-D", "tp=8"});
    EXPECT_EQ(type.code(), 0) << type.describe();
    EXPECT_TRUE(contains(type.err, "unsupported: rope(): RoPE scaling \"longrope\", which transformers computes: "
                                   "tpcc would need its frequencies in rope()")) << type.describe();
    EXPECT_TRUE(contains(type.err, "1 unsupported generated.")) << "the other keys are read or harmless\n"
                                                                  << type.describe();
    Proc none = run({"--check", "--hf-config", dir.write("fancy.json", fancy), kClean, "-D", "tp=8"});
    EXPECT_EQ(none.code(), 1) << none.describe();
    EXPECT_TRUE(contains(none.err, "error: rope(): RoPE scaling \"fancy\" is no RoPE type transformers defines"))
        << none.describe();
}

// Phi-3's longrope scaling (Phi-3-mini-128k; the legacy su) is not
// computed yet: one unsupported finding, at rope(), which phi3.model hands
// the type; its factor lists and phi3.model's hf { requires } on the type
// are its consequences, not errors of their own.
TEST(CliHfKeys, Phi3LongropeIsUnsupported)
{
    const std::string plan = source_path("plans/phi3-sp.plan");
    Proc lists = run({"--check", "--hf-config", fixture("phi3-longrope.config.json"), plan});
    EXPECT_EQ(lists.code(), 0) << lists.describe();
    EXPECT_TRUE(contains(lists.err, "unsupported: rope(): RoPE scaling \"longrope\", which transformers computes"))
        << lists.describe();
    EXPECT_TRUE(contains(lists.err, "\n1 unsupported generated.\n")) << lists.describe();
    TempDir dir;
    std::string su = slurp(fixture("published/phi-3-mini-4k-instruct/config.json"));
    size_t at = su.find("\"rope_scaling\": null");
    ASSERT_NE(at, std::string::npos);
    su.replace(at, 20, "\"rope_scaling\": {\"type\": \"su\"}");
    Proc type = run({"--check", "--hf-config", dir.write("config.json", su), plan, "-D", "seq=2040"});
    EXPECT_EQ(type.code(), 0) << type.describe();
    EXPECT_TRUE(contains(type.err, "unsupported: rope(): RoPE scaling \"su\"")) << type.describe();
    EXPECT_TRUE(contains(type.err, "\n1 unsupported generated.\n")) << type.describe();
}

// What Phi3Config itself refuses is an error, never read as a default: a
// RoPE type other than "default" and longrope (rope() would compute linear
// scaling Phi-3 never runs), a null partial_rotary_factor (a TypeError in
// transformers) and RoPE settings that are no object.
TEST(CliHfKeys, Phi3ConfigsTransformersRefusesAreErrors)
{
    const std::string plan = source_path("plans/phi3-sp.plan");
    const std::string published = slurp(fixture("published/phi-3-mini-4k-instruct/config.json"));
    struct Case {
        const char *from, *to, *says;
    } cases[] = {
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}",
         "sets rope_scaling.rope_type to \"linear\"; "},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}",
         "sets rope_scaling.type to \"dynamic\"; "},
        {"\"rope_scaling\": null, \"rope_theta\": 10000.0",
         "\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 10000.0}",
         "sets rope_parameters.rope_type to \"linear\"; "},
        {"\"rope_scaling\": null", "\"rope_scaling\": null, \"partial_rotary_factor\": null",
         "sets partial_rotary_factor to null; transformers multiplies by it and fails (TypeError)"},
        {"\"rope_scaling\": null, \"rope_theta\": 10000.0",
         "\"rope_parameters\": {\"rope_theta\": 10000.0, \"partial_rotary_factor\": null}",
         "sets rope_parameters.partial_rotary_factor to null"},
        {"\"rope_scaling\": null", "\"rope_scaling\": \"x\"", "sets rope_scaling to \"x\"; it must be an object"},
        {"\"rope_scaling\": null, \"rope_theta\": 10000.0", "\"rope_parameters\": [1, 2]",
         "sets rope_parameters to [1,2]; it must be an object"},
        {"\"rope_scaling\": null, \"rope_theta\": 10000.0", "\"rope_parameters\": \"abc\"",
         "sets rope_parameters to \"abc\"; it must be an object"},
    };
    for (const Case &c : cases) {
        TempDir dir;
        std::string cfg = published;
        std::string from = c.from;
        // the published file has one key a line: match across the line break
        size_t at = from.find(", ");
        if (at != std::string::npos)
            from.replace(at, 2, ",\n  ");
        at = cfg.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        cfg.replace(at, from.size(), c.to);
        Proc r = run({"--check", "--hf-config", dir.write("config.json", cfg), plan, "-D", "seq=2040"});
        EXPECT_EQ(r.code(), 1) << c.to << "\n" << r.describe();
        EXPECT_TRUE(contains(r.err, c.says)) << c.to << "\n" << r.describe();
    }
    TempDir dir;
    std::string cfg = published;
    cfg.replace(cfg.find("\"rope_scaling\": null"), 20, "\"rope_scaling\": {\"rope_type\": \"default\"}");
    Proc ok = run({"--check", "--hf-config", dir.write("config.json", cfg), plan, "-D", "seq=2040"});
    EXPECT_EQ(ok.code(), 0) << ok.describe();
}

TEST(CliHfKeys, KeysThatChangeTheMathAreErrors)
{
    std::string cfg = fixture("llama-math-keys.config.json");
    Proc r = run({"--check", "--hf-config", cfg, kClean});
    EXPECT_EQ(r.code(), 1) << r.describe();
    for (const char *key : {"attention_bias", "attn_logit_softcapping", "final_logit_softcapping", "mlp_bias",
                            "partial_rotary_factor", "qk_layernorm"})
        EXPECT_TRUE(contains(r.err, std::string("sets ") + key + " to ")) << key << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err, "sets hidden_act to \"gelu\"; ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/llama.model computes hidden_act = \"silu\" only")) << r.describe();
    EXPECT_TRUE(contains(r.err, "llama-math-keys.config.json:")) << r.describe();
    // pretraining_tp 1 and rope_scaling null change nothing
    EXPECT_FALSE(contains(r.err, "pretraining_tp")) << r.describe();
    EXPECT_FALSE(contains(r.err, "rope_scaling")) << r.describe();
    EXPECT_TRUE(contains(r.err, "7 errors generated.")) << r.describe();
}

TEST(CliHfKeys, UnknownKeyIsAWarning)
{
    Proc r = run({"--check", "--hf-config", fixture("llama-unknown-key.config.json"), kClean});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "llama-unknown-key.config.json:10:3: warning: ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "key 'foo' is not used by ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/llama.model [hf-key]")) << r.describe();
}

TEST(CliHfKeys, AbsentKvHeadsDefaultToTheHeads)
{
    Proc r = run({"--explain", "--hf-config", fixture("llama-no-kv-heads.config.json"), kClean});
    EXPECT_EQ(r.code(), 0) << r.describe();
    // 16 heads of 64 and 16 kv heads: k_proj is as wide as q_proj (the standalone 8 would give 512)
    EXPECT_TRUE(contains(r.out, "model.layers.0.self_attn.k_proj")) << r.out;
    EXPECT_TRUE(contains(r.out, "-> Shard(2) plain [1, 2048, 1024]")) << r.out;
    EXPECT_FALSE(contains(r.out, "[1, 2048, 512]")) << r.out;
}

TEST(CliHfKeys, PlanValueOverConfigJsonIsAWarning)
{
    TempDir dir;
    std::string plan = slurp(kClean);
    plan.replace(plan.find("../models/llama.model"), strlen("../models/llama.model"), source_path("models/llama.model"));
    plan.replace(plan.find("tp = 2"), strlen("tp = 2"), "tp = 2\n    kv_heads = 2");
    std::string path = dir.write("override.plan", plan);
    Proc r = run({"--check", "--hf-config", fixture("llama-small.config.json"), path});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "override.plan:9:5: warning: the plan sets kv_heads = 2, and ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "llama-small.config.json gives num_key_value_heads = 4: the plan's value wins "
                                "[config-override]")) << r.describe();
    EXPECT_TRUE(contains(r.err, "-D kv_heads=... wins over both")) << r.describe();
    Proc without = run({"--check", path});
    EXPECT_EQ(without.err, "All checks passed! (1 plan)\n") << "no config.json, nothing overridden\n" << without.describe();
}

TEST(CliHfKeys, ModelWithoutHfBlockIsAWarning)
{
    TempDir dir;
    std::string model = slurp(source_path("models/llama.model"));
    model.erase(model.find("\nhf {"));
    dir.write("llama.model", model);
    std::string plan = slurp(kClean);
    plan.replace(plan.find("../models/llama.model"), strlen("../models/llama.model"), "llama.model");
    std::string path = dir.write("plan.plan", plan);
    Proc r = run({"--check", "--hf-config", fixture("llama-small.config.json"), path});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "declares no hf { architectures = (...) }")) << r.describe();
}

TEST(CliHfArchitecture, PublishedGpt2ConfigChecksClean)
{
    std::string plan = source_path("plans/gpt2-sp-tied.plan");
    for (const char *tp : {"2", "4"}) {
        Proc r = run({"--check", "--hf-config", fixture("gpt2.config.json"), plan, "-D", std::string("tp=") + tp});
        EXPECT_EQ(r.code(), 0) << "tp " << tp << "\n" << r.describe();
        EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << "tp " << tp << ": every key is read or understood\n" << r.describe();
    }
    Proc r = run({"--check", "--hf-config", fixture("gpt2.config.json"), plan, "-D", "tp=8"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "12 heads do not split over 8 ranks")) << r.describe();
}

TEST(CliHfKeys, HfBlockInAPlanIsAnError)
{
    TempDir dir;
    std::string plan = slurp(kClean);
    plan.replace(plan.find("../models/llama.model"), strlen("../models/llama.model"), source_path("models/llama.model"));
    Proc r = run({"--check", dir.write("plan.plan", plan + "hf { architectures = (\"LlamaForCausalLM\",) }\n")});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "hf { } says what a model file implements; move it into the model file"))
        << r.describe();
}

TEST(CliHfKeys, HfBlockFieldsAreChecked)
{
    TempDir dir;
    std::string model = slurp(source_path("models/llama.model"));
    model.replace(model.find("model_types   = (\"llama\",)"), strlen("model_types   = (\"llama\",)"),
                  "model_types   = \"llama\"\n    implements = (\"x\",)");
    dir.write("llama.model", model);
    std::string plan = slurp(kClean);
    plan.replace(plan.find("../models/llama.model"), strlen("../models/llama.model"), "llama.model");
    Proc r = run({"--check", dir.write("plan.plan", plan)});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "hf { model_types } must be a tuple of strings")) << r.describe();
    EXPECT_TRUE(contains(r.err, "hf { } has no field 'implements'")) << r.describe();
}

}  // namespace
