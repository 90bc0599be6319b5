// Large inputs check in time linear in their size: a plan of many entries
// that match no module, of many Python names, a config.json of many keys
// the model does not read, many suppression comments
// (compiler/front/hf_check.c, plan/plan.c, plan/pynames.c, diag/diag.c,
// diag/lint.c, front/source.c), and the
// diagnostics they make are capped per check with a count of the rest
// (tp_diags_limit, --diagnostics-limit).
//
// The growth tests time the check of an input and of one ten times its
// size in this process's CPU time (other jobs on the machine do not
// count) and require at most 40 times the time. Linear work with the
// diagnostics' n log n sort and a larger working set measures 10 to 13
// times on a quiet machine and has reached 15 on a busy one (caches
// shared with other jobs); a quadratic path takes about 100 times. The
// small input is timed three times and its fastest run kept, since at a
// few milliseconds one interruption would double it. The sizes keep each
// test within a second.
#include <gtest/gtest.h>

#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <string>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/diag/lint.h"
}

using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

const char *models_dir()
{
    static char *dir = realpath(source_path("models").c_str(), nullptr);
    return dir;
}

// The tiny Llama's plan with `extra` appended inside the file, its model
// named by absolute path (allowed below).
std::string plan_text(const std::string &extra)
{
    return "model \"" + std::string(models_dir()) + "/llama.model\"\n"
           "config { vocab = 256\n hidden = 64\n layers = 2\n heads = 4\n kv_heads = 2\n ffn = 128\n"
           " seq = 16\n batch = 2\n tp = 2 }\n"
           "mesh(tp = tp)\n"
           "parallelize \"model.layers.*\" {\n"
           "    \"self_attn.q_proj\": ColwiseParallel(),\n"
           "    \"self_attn.k_proj\": ColwiseParallel(),\n"
           "    \"self_attn.v_proj\": ColwiseParallel(),\n"
           "    \"self_attn.o_proj\": RowwiseParallel(),\n"
           "    \"mlp.gate_proj\": ColwiseParallel(),\n"
           "    \"mlp.up_proj\": ColwiseParallel(),\n"
           "    \"mlp.down_proj\": RowwiseParallel(),\n"
           "}\n" +
           extra;
}

// n entries naming no module, each with a suppression comment of its own
// for a check that does not fire there.
std::string unmatched_entries(int n)
{
    std::string s = "parallelize \"model\" {\n";
    for (int i = 0; i < n; i++)
        s += "    \"nope" + std::to_string(i) + ".proj\": ColwiseParallel(),  # tpcc: ignore[relabel]\n";
    return s + "}\n";
}

// n names bound to a PyTorch class, each used by an entry naming no module.
std::string bound_names(int n)
{
    std::string s = "from torch.distributed.tensor.parallel import ColwiseParallel\n";
    for (int i = 0; i < n; i++)
        s += "c" + std::to_string(i) + " = ColwiseParallel\n";
    s += "parallelize \"model\" {\n";
    for (int i = 0; i < n; i++)
        s += "    \"nope" + std::to_string(i) + ".proj\": c" + std::to_string(i) + "(),\n";
    return s + "}\n";
}

// The tiny Llama's config.json with n keys no model file reads.
std::string config_json(int n)
{
    std::string s = "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                    "  \"hidden_size\": 64,\n  \"num_attention_heads\": 4,\n  \"num_key_value_heads\": 2,\n"
                    "  \"num_hidden_layers\": 2,\n  \"vocab_size\": 256,\n  \"intermediate_size\": 128";
    for (int i = 0; i < n; i++)
        s += ",\n  \"unknown_key_" + std::to_string(i) + "\": " + std::to_string(i);
    return s + "\n}\n";
}

double cpu_seconds()
{
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Checked {
    double seconds;
    std::string text;           // the rendered diagnostics
    int warnings;
};

// What tpcc --check does with a plan, timed: compile, sort, lint (the
// suppression comments), cap each check at `limit`, render as text.
Checked check(const std::string &plan, const char *hf_config, int limit = 100)
{
    char *allow[] = {const_cast<char *>(models_dir())};
    tp_compile_opts opts = {nullptr, 0, hf_config, true, TP_F32, false, false, TP_LOSS_NONE, allow, 1,
                            false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
    tp_lint lint = {};
    double start = cpu_seconds();
    tp_unit u;
    tp_compile(&u, plan.c_str(), &opts);
    tp_diags_sort(&u.diags);
    tp_lint_apply(&u.diags, &lint);
    tp_diags_limit(&u.diags, limit);
    char *text = tp_diags_render_text(&u.diags, &u.src, 0);
    Checked c = {cpu_seconds() - start, text, u.diags.warnings};
    free(text);
    tp_unit_free(&u);
    return c;
}

// The fastest of three checks of a small input, in seconds.
double fastest_check_seconds(const std::string &plan, const char *hf_config)
{
    double fastest = check(plan, hf_config).seconds;
    for (int i = 0; i < 2; i++)
        fastest = std::min(fastest, check(plan, hf_config).seconds);
    return fastest;
}

int count(const std::string &s, const std::string &what)
{
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        n++;
    return n;
}

TEST(LinearTime, UnmatchedPlanEntriesAndTheirSuppressions)
{
    TempDir dir;
    double small = fastest_check_seconds(dir.write("small.plan", plan_text(unmatched_entries(3000))), nullptr);
    Checked large = check(dir.write("large.plan", plan_text(unmatched_entries(30000))), nullptr);
    EXPECT_LE(large.seconds, 40 * small) << "3k entries: " << small << " s, 30k: " << large.seconds
                                                 << " s";
    // every entry is found and counted; 100 are shown, the last saying how many more
    EXPECT_GE(large.warnings, 30000);
    EXPECT_EQ(count(large.text, "[unmatched-entry]"), 100 + 1);
    EXPECT_NE(large.text.find("note: 29900 more [unmatched-entry] diagnostics not shown (--diagnostics-limit=0 "
                              "shows all)"),
              std::string::npos)
        << large.text.substr(0, 2000);
}

TEST(LinearTime, PythonNamesThePlanBinds)
{
    TempDir dir;
    double small = fastest_check_seconds(dir.write("small.plan", plan_text(bound_names(3000))), nullptr);
    Checked large = check(dir.write("large.plan", plan_text(bound_names(30000))), nullptr);
    EXPECT_LE(large.seconds, 40 * small) << "3k names: " << small << " s, 30k: " << large.seconds
                                                 << " s";
    // each name means the class: the entries are read, and only their modules are missing
    EXPECT_GE(large.warnings, 30000);
    EXPECT_NE(large.text.find("note: 29900 more [unmatched-entry] diagnostics not shown"), std::string::npos)
        << large.text.substr(0, 2000);
}

TEST(LinearTime, ConfigJsonKeysTheModelDoesNotRead)
{
    TempDir dir;
    std::string plan = dir.write("llama.plan", plan_text(""));
    std::string small_json = dir.write("small.json", config_json(3000));
    std::string large_json = dir.write("large.json", config_json(30000));
    double small = fastest_check_seconds(plan, small_json.c_str());
    Checked large = check(plan, large_json.c_str());
    EXPECT_LE(large.seconds, 40 * small) << "3k keys: " << small << " s, 30k: " << large.seconds
                                                 << " s";
    EXPECT_GE(large.warnings, 30000);
    // each warning points at its key's line: unknown_key_0 on line 10
    EXPECT_NE(large.text.find("large.json:10:3: warning: " + large_json + " key 'unknown_key_0' is not used by"),
              std::string::npos)
        << large.text.substr(0, 2000);
    EXPECT_NE(large.text.find("note: 29900 more [hf-key] diagnostics not shown"), std::string::npos);
}

TEST(DiagnosticsLimit, ZeroShowsAllAndALimitSaysHowManyMore)
{
    TempDir dir;
    std::string plan = dir.write("few.plan", plan_text(unmatched_entries(5)));
    EXPECT_EQ(count(check(plan, nullptr, 0).text, "[unmatched-entry]"), 5);
    Checked two = check(plan, nullptr, 2);
    EXPECT_EQ(count(two.text, "[unmatched-entry]"), 2 + 1);
    EXPECT_NE(two.text.find("note: 3 more [unmatched-entry] diagnostics not shown"), std::string::npos) << two.text;
    // the summary counts every warning, shown or not
    EXPECT_NE(two.text.find("11 warnings generated."), std::string::npos) << two.text;
    Checked four = check(plan, nullptr, 4);
    EXPECT_NE(four.text.find("note: 1 more [unmatched-entry] diagnostic not shown"), std::string::npos) << four.text;
}

TEST(DiagnosticsLimit, TheFlagTakesADecimalCount)
{
    TempDir dir;
    std::string plan = dir.write("few.plan", plan_text(unmatched_entries(3)));
    for (const char *bad : {"0x10", "-1", " 5", "+5", "2147483648", "five", ""}) {
        tpcc_test::Proc p = tpcc_test::run_tpcc({"--check", "--diagnostics-limit=" + std::string(bad), plan});
        EXPECT_EQ(p.code(), 2) << bad;
        EXPECT_NE(p.err.find("--diagnostics-limit takes a number of diagnostics from 0 (all) to 2147483647, not '" +
                             std::string(bad) + "'"),
                  std::string::npos)
            << p.err;
    }
    tpcc_test::Proc one = tpcc_test::run_tpcc({"--check", "--diagnostics-limit=1", "--allow-outside", models_dir(), plan});
    EXPECT_EQ(one.code(), 0) << one.err;
    EXPECT_EQ(count(one.err, "[unmatched-entry]"), 1 + 1) << one.err;
}

}  // namespace
