// tpcc as a lint in CI (compiler/diag/lint.c, sarif.c, json.c,
// driver/output.c): one JSON or SARIF document for many plans, valid
// against the OASIS SARIF 2.1.0 schema; locations for I/O errors; URIs
// relative to --sarif-root; fingerprints that survive unrelated edits;
// -Werror, -W and "# tpcc: ignore[...]" comments; unsupported findings
// (their level, exit statuses and -W); GitHub's workflow commands; every
// check documented
// in docs/checks.md; the pre-commit hook and the workflow file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <jansson.h>
#include <string.h>

#include "tests/support/json_doc.h"
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/diag/checks.h"
}

namespace fs = std::filesystem;
using tpcc_test::contains;
using tpcc_test::JsonDoc;
using tpcc_test::Proc;
using tpcc_test::replaced;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

const std::string kWarns = source_path("plans/llama-sp-input-layouts.plan");
const std::string kBad = source_path("tests/bad/relabel-rowwise-embedding.plan");
const std::string kSuppressed = source_path("tests/lint/suppressed.plan");
const std::string kSuppressedError = source_path("tests/lint/suppressed-error.plan");
const std::string kUnsupported = source_path("tests/lint/unsupported.plan");

Proc tpcc(const std::vector<std::string> &args)
{
    return tpcc_test::run_tpcc(args);
}

// Output with the source directory's prefix removed, so goldens hold
// repository paths.
std::string relative(std::string s)
{
    const std::string prefix = std::string(TPCC_SOURCE_DIR) + "/";
    for (size_t at; (at = s.find(prefix)) != std::string::npos;)
        s.erase(at, prefix.size());
    return s;
}

json_t *at(json_t *v, const std::string &dotted)
{
    size_t start = 0;
    while (v && start <= dotted.size()) {
        size_t dot = dotted.find('.', start);
        std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        v = json_is_array(v) ? json_array_get(v, std::stoul(part)) : json_object_get(v, part.c_str());
        if (dot == std::string::npos)
            break;
        start = dot + 1;
    }
    return v;
}

std::string str(json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : "<not a string>";
}

std::vector<std::string> plans_in(const std::string &dir)
{
    std::vector<std::string> out;
    for (const auto &e : fs::directory_iterator(source_path(dir)))
        if (e.path().extension() == ".plan")
            out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

const std::string kSarifSchema = source_path("tests/fixtures/sarif/sarif-schema-2.1.0.json");
const std::string kValidateSarif = source_path("tests/support/validate_sarif.py");

// The document is valid SARIF 2.1.0, as a code-scanning upload checks it.
void expect_valid_sarif(const std::string &sarif)
{
    std::string py = tpcc_test::python_with("jsonschema");
    ASSERT_FALSE(py.empty()) << "no python3 with jsonschema: install python3-jsonschema (tools/setup.sh does)";
    TempDir dir;
    Proc v = tpcc_test::run_program(py, {kValidateSarif, kSarifSchema, dir.write("doc.sarif", sarif)});
    EXPECT_EQ(v.code(), 0) << v.describe();
}

// --- one document for many plans ---------------------------------------------------------------

// Every bad plan, the lint plans (suppressed results), a clean plan and a
// missing one (an I/O error): one SARIF document, valid against the OASIS
// schema, every result located, fingerprinted and pointing at its rule.
TEST(LintSarif, ManyPlansAreOneSchemaValidDocument)
{
    TempDir dir;
    std::vector<std::string> args = {"--check", "--diagnostics-format=sarif", "-D", "layers=2"};
    for (const auto &p : plans_in("tests/bad"))
        args.push_back(p);
    args.push_back(kSuppressed);
    args.push_back(kSuppressedError);
    args.push_back(source_path("plans/llama-megatron.plan"));
    args.push_back(dir.path + "/missing.plan");
    Proc r = tpcc(args);
    EXPECT_EQ(r.code(), 2) << r.describe();   // the missing plan
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << r.out.substr(0, 2000);
    ASSERT_EQ(json_array_size(at(doc.root, "runs")), 1u);
    json_t *results = at(doc.root, "runs.0.results");
    std::set<std::string> files;
    size_t suppressed = 0;
    bool io = false;
    for (size_t i = 0; i < json_array_size(results); i++) {
        json_t *res = json_array_get(results, i);
        SCOPED_TRACE(str(at(res, "message.text")));
        EXPECT_TRUE(json_is_integer(at(res, "ruleIndex"))) << "every check is a rule";
        EXPECT_TRUE(json_is_string(at(res, "partialFingerprints.tpcc/v1")));
        json_t *loc = at(res, "locations.0.physicalLocation");
        ASSERT_TRUE(loc) << "every result has a location";
        files.insert(str(at(loc, "artifactLocation.uri")));
        suppressed += at(res, "suppressions") != nullptr;
        if (str(at(res, "ruleId")) == "io") {
            io = true;
            EXPECT_EQ(str(at(loc, "artifactLocation.uri")), "file://" + dir.path + "/missing.plan");
            EXPECT_EQ(json_integer_value(at(loc, "region.startLine")), 1);
        }
    }
    EXPECT_TRUE(io);
    EXPECT_EQ(suppressed, 3u);   // suppressed.plan's three
    EXPECT_GT(files.size(), plans_in("tests/bad").size()) << "results of every plan in the one run";
    EXPECT_TRUE(files.count("tests/bad/relabel-rowwise-embedding.plan"));
    EXPECT_FALSE(json_is_true(at(doc.root, "runs.0.invocations.0.executionSuccessful")));

    expect_valid_sarif(r.out);
    std::string py = tpcc_test::python_with("jsonschema");

    // the validator is not a rubber stamp: a result without its message fails
    json_object_del(json_array_get(results, 0), "message");
    char *broken = json_dumps(doc.root, 0);
    std::string bad = dir.write("broken.sarif", broken);
    free(broken);
    Proc b = tpcc_test::run_program(py, {kValidateSarif, kSarifSchema, bad});
    EXPECT_EQ(b.code(), 1) << b.describe();
    EXPECT_TRUE(contains(b.err, "'message' is a required property")) << b.describe();
}

TEST(LintJson, ManyPlansAreOneDocument)
{
    TempDir dir;
    Proc r = tpcc({"--diagnostics-format=json", "-D", "layers=2", kBad, kWarns, dir.path + "/missing.plan"});
    EXPECT_EQ(r.code(), 2) << r.describe();
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << r.describe();
    EXPECT_EQ(json_integer_value(at(doc.root, "version")), 1);
    EXPECT_EQ(json_array_size(at(doc.root, "plans")), 3u);
    EXPECT_EQ(json_integer_value(at(doc.root, "errors")), 2);      // relabel, io
    EXPECT_EQ(json_integer_value(at(doc.root, "warnings")), 3);    // repeated-gather
    EXPECT_EQ(json_integer_value(at(doc.root, "plans.0.status")), 1);
    EXPECT_EQ(json_integer_value(at(doc.root, "plans.1.status")), 0);
    EXPECT_EQ(json_integer_value(at(doc.root, "plans.2.status")), 2);
    json_t *diags = at(doc.root, "diagnostics");
    ASSERT_EQ(json_array_size(diags), 5u);
    for (size_t i = 0; i < json_array_size(diags); i++) {
        json_t *g = json_array_get(diags, i);
        EXPECT_TRUE(json_is_string(at(g, "plan")));
        EXPECT_TRUE(json_is_string(at(g, "file"))) << "every finding here has a file";
        EXPECT_TRUE(json_is_integer(at(g, "line")));
    }
    json_t *io = json_array_get(diags, 4);
    EXPECT_EQ(str(at(io, "check")), "io");
    EXPECT_EQ(str(at(io, "file")), dir.path + "/missing.plan");
    EXPECT_EQ(json_integer_value(at(io, "line")), 1);
    EXPECT_EQ(r.err, "");
}

TEST(LintText, IoErrorPointsAtTheFile)
{
    TempDir dir;
    Proc r = tpcc({dir.path + "/missing.plan"});
    EXPECT_EQ(r.code(), 2);
    EXPECT_EQ(r.err.rfind(dir.path + "/missing.plan:1:1: error: cannot open", 0), 0u) << r.describe();
    // no location at line -1 (":-1"); the temporary directory's random name may itself hold "-1"
    EXPECT_FALSE(contains(r.err, ":-1")) << r.describe();
    EXPECT_TRUE(contains(r.err, "[io]")) << r.describe();
    // the same for a config.json that is not there
    Proc hf = tpcc({"--hf-config", dir.path + "/none.json", kWarns});
    EXPECT_EQ(hf.code(), 2);
    EXPECT_EQ(hf.err.rfind(dir.path + "/none.json:1:1: error: cannot read Hugging Face config", 0), 0u)
        << hf.describe();
    EXPECT_FALSE(contains(hf.err, ":-1")) << hf.describe();
}

// An unparsable config.json: at jansson's line and column, the file not
// repeated in the message.
TEST(LintText, UnparsableConfigAtJanssonsPosition)
{
    TempDir dir;
    std::string cfg = dir.write("bad.json", "{\n  \"a\": 1,\n  \"b\":\n}\n");
    Proc r = tpcc({"--hf-config", cfg, kWarns});
    EXPECT_EQ(r.code(), 2);
    EXPECT_EQ(r.err.rfind(cfg + ":4:1: error: cannot read Hugging Face config: ", 0), 0u) << r.describe();
    EXPECT_EQ(r.err.find(cfg), r.err.rfind(cfg)) << "the file once, as the location: " << r.describe();
}

// Writing stdout fails (a full disk): said, exit status 2, for every mode
// that writes there.
TEST(LintOutput, WriteFailuresAreErrors)
{
    const std::string &tpcc_bin = tpcc_test::kTpcc;
    const std::string good = source_path("plans/llama-megatron.plan");
    const std::vector<std::string> modes = {"--check --diagnostics-format=json", "--check --diagnostics-format=sarif",
                                            "--explain", "--report", "--help"};
    for (const std::string &mode : modes) {
        SCOPED_TRACE(mode);
        Proc r = tpcc_test::run_program("/bin/sh", {"-c", tpcc_bin + " " + mode + " -D layers=2 " + good +
                                                              " > /dev/full"});
        EXPECT_EQ(r.code(), 2) << r.describe();
        EXPECT_TRUE(contains(r.err, "tpcc: cannot write ")) << r.describe();
        EXPECT_TRUE(contains(r.err, ": No space left on device\n")) << r.describe();
    }
}

// --- URIs and fingerprints ------------------------------------------------------------------------

TEST(LintSarif, UrisAreRelativeToTheSarifRoot)
{
    Proc r = tpcc({"--diagnostics-format=sarif", "--sarif-root", source_path("tests"), kBad});
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << r.describe();
    json_t *art = at(doc.root, "runs.0.results.0.locations.0.physicalLocation.artifactLocation");
    EXPECT_EQ(str(at(art, "uri")), "bad/relabel-rowwise-embedding.plan");
    EXPECT_EQ(str(at(art, "uriBaseId")), "%SRCROOT%");
    EXPECT_EQ(str(at(doc.root, "runs.0.originalUriBaseIds.%SRCROOT%.uri")),
              "file://" + source_path("tests") + "/");
    // the model, outside the root, keeps an absolute URI
    json_t *note = at(doc.root, "runs.0.results.0.relatedLocations.0.physicalLocation.artifactLocation");
    EXPECT_EQ(str(at(note, "uri")), "file://" + source_path("models/llama.model"));
    EXPECT_EQ(at(note, "uriBaseId"), nullptr);

    Proc missing = tpcc({"--diagnostics-format=sarif", "--sarif-root", "/nonexistent/dir", kBad});
    EXPECT_EQ(missing.code(), 2);
    EXPECT_TRUE(contains(missing.err, "--sarif-root")) << missing.describe();
}

std::vector<std::string> fingerprints(const std::string &sarif, std::vector<long long> *lines = nullptr)
{
    JsonDoc doc(sarif);
    std::vector<std::string> out;
    json_t *results = at(doc.root, "runs.0.results");
    for (size_t i = 0; i < json_array_size(results); i++) {
        out.push_back(str(at(json_array_get(results, i), "partialFingerprints.tpcc/v1")));
        if (lines)
            lines->push_back(json_integer_value(
                at(json_array_get(results, i), "locations.0.physicalLocation.region.startLine")));
    }
    return out;
}

// The same findings get the same fingerprints in another run and after a
// blank line is inserted above them; a different finding a different one.
TEST(LintSarif, FingerprintsSurviveRunsAndInsertedLines)
{
    TempDir dir;
    std::string text = slurp(kWarns);
    const std::string model = "\"../models/llama.model\"";
    text.replace(text.find(model), model.size(), "\"" + source_path("models/llama.model") + "\"");
    std::string plan = dir.write("p.plan", text);
    std::vector<std::string> args = {"--diagnostics-format=sarif", "--sarif-root", dir.path, "-D", "layers=2", plan};
    std::vector<long long> before_lines, after_lines;
    std::vector<std::string> before = fingerprints(tpcc(args).out, &before_lines);
    ASSERT_EQ(before.size(), 4u);
    EXPECT_EQ(fingerprints(tpcc(args).out), before);
    std::set<std::string> distinct(before.begin(), before.end());
    EXPECT_EQ(distinct.size(), 4u);

    dir.write("p.plan", "\n" + text);
    std::vector<std::string> after = fingerprints(tpcc(args).out, &after_lines);
    EXPECT_EQ(after, before);
    ASSERT_EQ(after_lines.size(), before_lines.size());
    for (size_t i = 0; i < after_lines.size(); i++)
        EXPECT_EQ(after_lines[i], before_lines[i] + 1);
}

// A model file's finding through two plans: each result names its plan
// (properties.plan and a related location), and the fingerprints differ
// by plan, not by the plans' order.
TEST(LintSarif, ModelFindingsNameTheirPlan)
{
    TempDir dir;
    const std::string text = "model \"" + source_path("models/llama.model") +
                             "\"\nparallelize \"model.layers.*\" {\n    \"self_attn.q_proj\": ColwiseParallel()\n}\n";
    dir.write("aa.plan", text);
    dir.write("zz.plan", text);
    auto run = [&](const std::vector<std::string> &plans) {
        std::vector<std::string> args = {"--check", "--diagnostics-format=sarif", "--sarif-root", dir.path};
        for (const std::string &p : plans)
            args.push_back(dir.path + "/" + p);
        return tpcc(args);
    };
    Proc r = run({"aa.plan", "zz.plan"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << r.describe();
    json_t *results = at(doc.root, "runs.0.results");
    ASSERT_EQ(json_array_size(results), 2u) << r.out;
    std::map<std::string, std::string> by_plan;
    for (size_t i = 0; i < 2; i++) {
        json_t *res = json_array_get(results, i);
        EXPECT_EQ(str(at(res, "ruleId")), "layout-mismatch");
        EXPECT_EQ(str(at(res, "locations.0.physicalLocation.artifactLocation.uri")),
                  "file://" + source_path("models/llama.model"));
        std::string plan = str(at(res, "properties.plan"));
        json_t *related = at(res, "relatedLocations");
        json_t *last = json_array_get(related, json_array_size(related) - 1);
        EXPECT_EQ(str(at(last, "physicalLocation.artifactLocation.uri")), plan);
        EXPECT_EQ(str(at(last, "physicalLocation.artifactLocation.uriBaseId")), "%SRCROOT%");
        EXPECT_EQ(json_integer_value(at(last, "physicalLocation.region.startLine")), 1);
        std::string fp = str(at(res, "partialFingerprints.tpcc/v1"));
        EXPECT_EQ(fp.substr(fp.size() - 2), ":0") << "two plans, two findings, not one found twice";
        by_plan[plan] = fp;
    }
    EXPECT_EQ(by_plan.size(), 2u);
    EXPECT_TRUE(by_plan.count("aa.plan") && by_plan.count("zz.plan")) << r.out;
    EXPECT_NE(by_plan["aa.plan"], by_plan["zz.plan"]);
    expect_valid_sarif(r.out);

    // the other order: each plan's finding keeps its fingerprint
    JsonDoc swapped(run({"zz.plan", "aa.plan"}).out);
    json_t *sr = at(swapped.root, "runs.0.results");
    ASSERT_EQ(json_array_size(sr), 2u);
    for (size_t i = 0; i < 2; i++) {
        json_t *res = json_array_get(sr, i);
        EXPECT_EQ(str(at(res, "partialFingerprints.tpcc/v1")), by_plan[str(at(res, "properties.plan"))]);
    }

    // a finding in the plan itself names the plan, with no extra location
    JsonDoc own(tpcc({"--diagnostics-format=sarif", "--sarif-root", source_path("tests"), kBad}).out);
    EXPECT_EQ(str(at(own.root, "runs.0.results.0.properties.plan")), "bad/relabel-rowwise-embedding.plan");
    json_t *own_related = at(own.root, "runs.0.results.0.relatedLocations");
    for (size_t i = 0; i < json_array_size(own_related); i++)
        EXPECT_NE(str(at(json_array_get(own_related, i), "message.text")), "found checking this plan");
}

// --tp-plan auto without a plan: a located, valid result, the run unsuccessful.
TEST(LintSarif, AutoPlanFailureIsAResult)
{
    TempDir dir;
    Proc r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", dir.path + "/none", "--diagnostics-format=sarif"});
    EXPECT_EQ(r.code(), 2) << r.describe();
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error << "\n" << r.describe();
    EXPECT_EQ(str(at(doc.root, "runs.0.results.0.ruleId")), "io");
    EXPECT_EQ(json_integer_value(at(doc.root, "runs.0.results.0.locations.0.physicalLocation.region.startLine")), 1);
    EXPECT_FALSE(json_is_true(at(doc.root, "runs.0.invocations.0.executionSuccessful")));
    expect_valid_sarif(r.out);
}

// --- GitHub annotations ----------------------------------------------------------------------------

// --diagnostics-format=github: a workflow command per finding on stdout,
// paths relative to the working directory (the source tree here), the
// suppressed findings left out; --output-format is the same option.
TEST(LintGithub, Golden)
{
    std::vector<std::string> args = {"--check", "--diagnostics-format=github", "-D", "layers=2",
                                     "tests/bad/relabel-rowwise-embedding.plan", "tests/lint/suppressed.plan"};
    Proc r = tpcc(args);
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_EQ(r.out, slurp(source_path("tests/lint/github.expected")));
    EXPECT_EQ(r.err, "") << "stdout only";
    args[1] = "--output-format=github";
    EXPECT_EQ(tpcc(args).out, r.out);
    // absolute paths below the working directory are relative too
    args[4] = source_path("tests/bad/relabel-rowwise-embedding.plan");
    args[5] = source_path("tests/lint/suppressed.plan");
    EXPECT_EQ(tpcc(args).out, r.out);
}

// --- -Werror and -W ---------------------------------------------------------------------------------

TEST(LintLevels, WerrorMakesWarningsErrors)
{
    Proc plain = tpcc({kWarns, "-D", "layers=2"});
    EXPECT_EQ(plain.code(), 0);
    Proc r = tpcc({kWarns, "-D", "layers=2", "-Werror"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(relative(r.err),
                         "plans/llama-sp-input-layouts.plan:18:5: error: the same tensor is all-gathered again "
                         "(model.layers.0.self_attn.q_proj already did) [repeated-gather, -Werror]\n"))
        << r.describe();
    EXPECT_TRUE(contains(r.err, "\n3 errors generated.\n")) << r.describe();
    // also in SARIF
    Proc s = tpcc({kWarns, "-D", "layers=2", "-Werror", "--diagnostics-format=sarif"});
    EXPECT_EQ(s.code(), 1);
    JsonDoc doc(s.out);
    EXPECT_EQ(str(at(doc.root, "runs.0.results.0.level")), "error");
}

TEST(LintLevels, PerCheckLevels)
{
    Proc off = tpcc({kWarns, "-D", "layers=2", "-W", "no-repeated-gather"});
    EXPECT_EQ(off.code(), 0);
    EXPECT_EQ(off.err, "All checks passed! (1 plan)\n") << off.describe();

    Proc err = tpcc({kWarns, "-D", "layers=2", "-W", "repeated-gather=error"});
    EXPECT_EQ(err.code(), 1);
    EXPECT_TRUE(contains(err.err, "[repeated-gather, -W repeated-gather=error]")) << err.describe();

    // -Werror, except this check
    Proc kept = tpcc({kWarns, "-D", "layers=2", "-Werror", "-W", "repeated-gather=warning"});
    EXPECT_EQ(kept.code(), 0) << kept.describe();
    EXPECT_TRUE(contains(kept.err, "3 warnings generated.")) << kept.describe();

    // the last -W for a check wins; -Wno-X is the same option
    EXPECT_EQ(tpcc({kWarns, "-D", "layers=2", "-W", "no-repeated-gather", "-W", "repeated-gather=error"}).code(), 1);
    EXPECT_EQ(tpcc({kWarns, "-D", "layers=2", "-Wno-repeated-gather", "-Werror"}).code(), 0);

    // an error cannot be disabled
    Proc bad = tpcc({kBad, "-D", "layers=2", "-W", "no-relabel"});
    EXPECT_EQ(bad.code(), 1);
    EXPECT_TRUE(contains(bad.err, "[relabel]")) << bad.describe();
}

TEST(LintLevels, UnknownCheckIsAUsageError)
{
    Proc r = tpcc({kWarns, "-W", "no-repeated-gathr"});
    EXPECT_EQ(r.code(), 2);
    EXPECT_TRUE(contains(r.err, "unknown check 'repeated-gathr'; did you mean 'repeated-gather'?")) << r.describe();
    Proc level = tpcc({kWarns, "-W", "relabel=fatal"});
    EXPECT_EQ(level.code(), 2);
    EXPECT_TRUE(contains(level.err, "CHECK=warning")) << level.describe();
}

TEST(LintLevels, MissingValueIsSaid)
{
    for (const char *option : {"-W", "--tp-plan", "--hf-config"}) {
        Proc r = tpcc({kWarns, option});
        EXPECT_EQ(r.code(), 2);
        EXPECT_TRUE(contains(r.err, std::string("option '") + option + "' requires an argument")) << r.describe();
        EXPECT_FALSE(contains(r.err, "unknown option")) << r.describe();
    }
}

// gcc's spellings: -Wno-error, -Werror=CHECK, -Wno-CHECK.
TEST(LintLevels, GccSpellings)
{
    EXPECT_EQ(tpcc({kWarns, "-D", "layers=2", "-Werror", "-Wno-error"}).code(), 0);
    Proc err = tpcc({kWarns, "-D", "layers=2", "-Werror=repeated-gather"});
    EXPECT_EQ(err.code(), 1) << err.describe();
    EXPECT_TRUE(contains(err.err, "[repeated-gather, -W repeated-gather=error]")) << err.describe();
    Proc off = tpcc({kWarns, "-D", "layers=2", "-Wno-repeated-gather"});
    EXPECT_EQ(off.code(), 0);
    EXPECT_EQ(off.err, "All checks passed! (1 plan)\n") << off.describe();
    EXPECT_EQ(tpcc({kWarns, "-Werror=repeated-gathr"}).code(), 2);
}

// --- suppression comments -------------------------------------------------------------------------

TEST(LintSuppress, TextGolden)
{
    Proc r = tpcc({kSuppressed, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(relative(r.err), slurp(source_path("tests/lint/suppressed.expected")));
    // -Werror makes the warnings left errors; the suppressed ones stay silent
    Proc werror = tpcc({kSuppressed, "-D", "layers=2", "-Werror"});
    EXPECT_EQ(werror.code(), 1);
    EXPECT_TRUE(contains(werror.err, "4 errors generated.")) << werror.describe();
}

TEST(LintSuppress, ErrorsCannotBeSuppressed)
{
    Proc r = tpcc({kSuppressedError, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 1);
    EXPECT_TRUE(contains(relative(r.err), "tests/lint/suppressed-error.plan:23:5: error: RowwiseParallel on "
                                          "'model.embed_tokens' labels the token ids")) << r.describe();
    EXPECT_TRUE(contains(relative(r.err),
                         "tests/lint/suppressed-error.plan:23:86: warning: the 'relabel' finding on line 23 is "
                         "an error, which cannot be suppressed [unused-suppression]\n"))
        << r.describe();
}

TEST(LintSuppress, SarifReportsThemSuppressedAndJsonCountsThem)
{
    Proc r = tpcc({kSuppressed, "-D", "layers=2", "--diagnostics-format=sarif", "--sarif-root", TPCC_SOURCE_DIR});
    EXPECT_EQ(r.code(), 0);
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error;
    json_t *results = at(doc.root, "runs.0.results");
    std::vector<std::string> seen;
    for (size_t i = 0; i < json_array_size(results); i++) {
        json_t *res = json_array_get(results, i);
        long long line = json_integer_value(at(res, "locations.0.physicalLocation.region.startLine"));
        std::string what = str(at(res, "ruleId")) + ":" + std::to_string(line);
        if (json_t *s = at(res, "suppressions.0")) {
            what += " suppressed " + str(at(s, "kind"));
            if (at(s, "justification"))
                what += " '" + str(at(s, "justification")) + "'";
            what += " by line " +
                    std::to_string(json_integer_value(at(s, "location.physicalLocation.region.startLine")));
        }
        seen.push_back(what);
    }
    std::vector<std::string> want = {
        "unused-suppression:14",
        "repeated-gather:17 suppressed inSource 'gathered on purpose' by line 17",
        "repeated-gather:19 suppressed inSource by line 18",
        "unused-suppression:21",
        "unused-suppression:21",
        "repeated-gather:22",
        "position-ids:27 suppressed inSource 'callers pass position_ids' by line 27",
    };
    EXPECT_EQ(seen, want) << r.out.substr(0, 3000);

    Proc j = tpcc({kSuppressed, "-D", "layers=2", "--diagnostics-format=json"});
    JsonDoc jdoc(j.out);
    ASSERT_TRUE(jdoc.root) << jdoc.error;
    EXPECT_EQ(json_integer_value(at(jdoc.root, "suppressed")), 3);
    EXPECT_EQ(json_integer_value(at(jdoc.root, "warnings")), 4);
    EXPECT_EQ(json_array_size(at(jdoc.root, "diagnostics")), 4u);
}

// A suppression whose warning -W no-CHECK drops is not unused: the
// comment still says what the plan means to accept.
TEST(LintSuppress, DroppedWarningsLeaveSuppressionsUsed)
{
    Proc r = tpcc({kSuppressed, "-D", "layers=2", "-W", "no-repeated-gather", "-W", "no-unused-suppression"});
    EXPECT_EQ(r.code(), 0);
    EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << r.describe();
}

// --- unsupported: what tpcc cannot handle yet -----------------------------------------------------

// Its own level: "unsupported:" and in the summary; the plan may be right,
// so --check exits 0.
TEST(LintUnsupported, TextGolden)
{
    Proc r = tpcc({"--check", kUnsupported, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(relative(r.err), slurp(source_path("tests/lint/unsupported.expected")));
}

// An output that cannot be made of the plan exits 3 and writes nothing; a
// plan error as well is exit 1, an unreadable plan besides 2.
TEST(LintUnsupported, OutputsExitThreeAndWriteNothing)
{
    TempDir dir;
    Proc o = tpcc({kUnsupported, "-D", "layers=2", "-o", dir.path + "/x.sched"});
    EXPECT_EQ(o.code(), 3) << o.describe();
    EXPECT_TRUE(contains(o.err, "unsupported: mesh dimension 'dp' (size 2) is data parallel")) << o.describe();
    Proc report = tpcc({"--report", kUnsupported, "-D", "layers=2"});
    EXPECT_EQ(report.code(), 3) << report.describe();
    EXPECT_EQ(report.out, "");
    Proc exported = tpcc({"--export=pytorch", kUnsupported, "-D", "layers=2", "-o", dir.path + "/x.py"});
    EXPECT_EQ(exported.code(), 3) << exported.describe();
    EXPECT_TRUE(fs::is_empty(dir.path));
    std::string both = dir.write("both.plan", replaced(slurp(kUnsupported), "\"../../models/llama.model\"",
                                                         "\"" + source_path("models/llama.model") + "\"") +
                                                  "parallelize \"\" on \"tp\" {\n    \"model.norm\": ColwiseParallel(),\n}\n");
    EXPECT_EQ(tpcc({both, "-D", "layers=2", "-o", dir.path + "/y.sched"}).code(), 1);
    EXPECT_EQ(tpcc({"--check", kUnsupported, dir.path + "/missing.plan"}).code(), 2);
}

// -W unsupported=error makes them errors; -W no-unsupported leaves them out
// of --check but not out of an output it stops; -Werror leaves them alone.
TEST(LintUnsupported, LevelsAnswerToW)
{
    Proc error = tpcc({"--check", kUnsupported, "-D", "layers=2", "-W", "unsupported=error"});
    EXPECT_EQ(error.code(), 1) << error.describe();
    EXPECT_TRUE(contains(error.err, ": error: mesh dimension 'dp'")) << error.describe();
    EXPECT_TRUE(contains(error.err, "[unsupported, -W unsupported=error]\n")) << error.describe();
    EXPECT_TRUE(contains(error.err, "\n1 error generated.\n")) << error.describe();
    Proc werror = tpcc({"--check", kUnsupported, "-D", "layers=2", "-Werror"});
    EXPECT_EQ(werror.code(), 0) << werror.describe();
    EXPECT_TRUE(contains(werror.err, "\n1 unsupported generated.\n")) << werror.describe();
    Proc off = tpcc({"--check", kUnsupported, "-D", "layers=2", "-W", "no-unsupported"});
    EXPECT_EQ(off.code(), 0) << off.describe();
    EXPECT_EQ(off.err, "All checks passed! (1 plan)\n");
    TempDir dir;
    Proc kept = tpcc({kUnsupported, "-D", "layers=2", "-W", "no-unsupported", "-o", dir.path + "/x.sched"});
    EXPECT_EQ(kept.code(), 3) << kept.describe();
    EXPECT_TRUE(contains(kept.err, "unsupported: mesh dimension 'dp'")) << kept.describe();
    EXPECT_TRUE(contains(kept.err, "note: -W no-unsupported does not hide it here")) << kept.describe();
    EXPECT_TRUE(fs::is_empty(dir.path));
}

// JSON: level "unsupported", counted apart; the plan's status 0 under
// --check, 3 for -o.
TEST(LintUnsupported, JsonGolden)
{
    Proc r = tpcc({"--check", kUnsupported, "-D", "layers=2", "--diagnostics-format=json"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(relative(r.out), slurp(source_path("tests/lint/unsupported.json")));
    TempDir dir;
    Proc o = tpcc({kUnsupported, "-D", "layers=2", "-o", dir.path + "/x.sched", "--diagnostics-format=json"});
    EXPECT_EQ(o.code(), 3) << o.describe();
    JsonDoc doc(o.out);
    ASSERT_TRUE(doc.root) << doc.error;
    EXPECT_EQ(json_integer_value(at(doc.root, "plans.0.status")), 3);
}

// SARIF has no such level: a note, of the rule "unsupported" (whose default
// level is note), in a successful run; valid against the schema.
TEST(LintUnsupported, SarifGolden)
{
    Proc r = tpcc({"--check", kUnsupported, "-D", "layers=2", "--diagnostics-format=sarif", "--sarif-root",
                   TPCC_SOURCE_DIR});
    EXPECT_EQ(r.code(), 0) << r.describe();
    JsonDoc doc(r.out);
    ASSERT_TRUE(doc.root) << doc.error;
    int rule = tp_check_index("unsupported");
    ASSERT_GE(rule, 0);
    // the rule's index moves when checks.def grows: checked here, not in the golden
    EXPECT_EQ(json_integer_value(at(doc.root, "runs.0.results.0.ruleIndex")), rule);
    json_object_del(at(doc.root, "runs.0.results.0"), "ruleIndex");
    char *results = json_dumps(at(doc.root, "runs.0.results"), JSON_INDENT(2) | JSON_SORT_KEYS);
    EXPECT_EQ(std::string(results) + "\n", slurp(source_path("tests/lint/unsupported.sarif-results.json")));
    free(results);
    json_t *config = at(doc.root, "runs.0.tool.driver.rules." + std::to_string(rule) + ".defaultConfiguration");
    EXPECT_EQ(str(at(config, "level")), "note");
    EXPECT_TRUE(json_is_true(at(doc.root, "runs.0.invocations.0.executionSuccessful")));
    expect_valid_sarif(r.out);
}

// A comment cannot silence it: the comment is an unused suppression.
TEST(LintUnsupported, CommentsCannotSilenceIt)
{
    TempDir dir;
    std::string text = replaced(slurp(kUnsupported), "\"../../models/llama.model\"",
                                "\"" + source_path("models/llama.model") + "\"");
    std::string plan = dir.write("x.plan", replaced(text, "mesh(dp = 2, tp = tp)\n",
                                                    "mesh(dp = 2, tp = tp)   # tpcc: ignore[unsupported]\n"));
    Proc r = tpcc({"--check", plan, "-D", "layers=2"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: mesh dimension 'dp'")) << r.describe();
    EXPECT_TRUE(contains(r.err, "warning: the finding on line 12 is unsupported (what tpcc cannot handle yet), "
                                "which a comment cannot silence [unused-suppression]"))
        << r.describe();
}

// --- documentation and CI files -------------------------------------------------------------------

// Every check of checks.def has its section in docs/checks.md ("## NAME",
// anchored #NAME, the rules' helpUri) and every section is a check; every
// check name the compiler reports is in the table.
TEST(LintDocs, EveryCheckIsDocumentedAndKnown)
{
    std::string page = slurp(source_path("docs/checks.md"));
    std::set<std::string> anchors;
    std::regex anchor("\n## ([a-z-]+)\n");
    for (auto it = std::sregex_iterator(page.begin(), page.end(), anchor); it != std::sregex_iterator(); ++it)
        anchors.insert((*it)[1]);
    std::set<std::string> table;
    for (int i = 0; i < tp_ncheck; i++)
        table.insert(tp_checks[i].name);
    EXPECT_EQ(anchors, table);

    // the level, a span argument (calls inside it included), then the name
    std::regex reported("TP_(?:ERROR|WARNING|NOTE|UNSUPPORTED),\\s*(?:[^,;()]|\\([^()]*\\))+,\\s*\"([a-z-]+)\"|"
                        "bad\\(r, [^,]+, \"([a-z-]+)\"");
    int found = 0;
    for (const auto &e : fs::recursive_directory_iterator(source_path("compiler"))) {
        if (e.path().extension() != ".c" && e.path().extension() != ".y")
            continue;
        std::string src = slurp(e.path().string());
        for (auto it = std::sregex_iterator(src.begin(), src.end(), reported); it != std::sregex_iterator(); ++it) {
            std::string name = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
            EXPECT_TRUE(table.count(name)) << "'" << name << "' (" << e.path() << ") is not in checks.def";
            found++;
        }
    }
    EXPECT_GT(found, 100);
}

TEST(LintCi, PreCommitHookAndWorkflowAreValidYaml)
{
    std::string py = tpcc_test::python_with("yaml");
    ASSERT_FALSE(py.empty()) << "no python3 with yaml: install python3-yaml (tools/setup.sh does)";
    const char *check =
        "import sys, yaml\n"
        "hooks = yaml.safe_load(open(sys.argv[1]))\n"
        "hook = [h for h in hooks if h['id'] == 'tpcc-check'][0]\n"
        "assert hook['language'] == 'system', hook\n"
        "assert hook['entry'].split()[:2] == ['tpcc', '--check'], hook\n"
        "assert hook['files'] == r'\\.plan$', hook\n"
        "flow = yaml.safe_load(open(sys.argv[2]))\n"
        "steps = [s for job in flow['jobs'].values() for s in job['steps']]\n"
        "uses = [s.get('uses', '') for s in steps]\n"
        "assert any(u.startswith('github/codeql-action/upload-sarif') for u in uses), uses\n"
        "runs = ' '.join(s.get('run', '') for s in steps)\n"
        "assert '--diagnostics-format=sarif' in runs and 'tools/setup.sh' in runs, runs\n";
    Proc r = tpcc_test::run_program(py, {"-c", check, source_path(".pre-commit-hooks.yaml"),
                                         source_path("docs/ci/tpcc-check.yml")});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

}  // namespace
