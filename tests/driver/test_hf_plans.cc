// Hugging Face's own plans (plans/hf/<model_type>.plan: base_model_tp_plan
// under the base model prefix, the causal LM class's _tp_plan, pasted
// verbatim) and `--tp-plan auto`, through the tpcc command line: each
// family's plan checks with exactly the collectives its strings mean in
// transformers, --explain says what each string is, and every misuse of
// --tp-plan auto is a clear usage error.
#include <gtest/gtest.h>

#include <jansson.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

Proc tpcc(const std::vector<std::string> &args, const std::vector<std::string> &env = {})
{
    return tpcc_test::run_program(kTpcc, args, env);
}

std::string hf_fixture(const std::string &name) { return source_path("tests/fixtures/hf/" + name); }

// "kind module" for every collective of layer 0 and of the modules outside
// the layers, in order, from --report-format=json.
std::vector<std::string> collectives(const std::string &report)
{
    std::vector<std::string> out;
    json_error_t err;
    json_t *root = json_loads(report.c_str(), 0, &err);
    EXPECT_NE(root, nullptr) << err.text << "\n" << report;
    if (!root)
        return out;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "collectives"), i, c) {
        std::string module = json_string_value(json_object_get(c, "module"));
        if (contains(module, ".layers.") && !contains(module, ".layers.0."))
            continue;
        out.push_back(std::string(json_string_value(json_object_get(c, "kind"))) + " " + module);
    }
    json_decref(root);
    return out;
}

struct Family {
    const char *fixture;                 // a config.json of the family
    std::vector<std::string> expected;   // layer 0's collectives and the head's
};

// embedding_rowwise: the masked lookups all-reduced; colwise: a plain shard, no collective; rowwise: one all-reduce;
// colwise_gather_output: an all-gather; rowwise_split_input: a local slice
// (no collective) and an all-reduce; replicated_with_grad_allreduce: none.
// A string mapped to another style changes these lists.
TEST(HfPlans, EachFamilyChecksWithTheCollectivesItsStringsMean)
{
    const std::vector<std::string> llama_like = {"all_reduce model.embed_tokens",
                                                 "all_reduce model.layers.0.self_attn.o_proj",
                                                 "all_reduce model.layers.0.mlp.down_proj", "all_gather lm_head"};
    const Family families[] = {
        {"llama2-gqa", llama_like},
        {"qwen2-gqa", llama_like},
        {"mistral-gqa", llama_like},
        {"qwen3-gqa", llama_like},
        {"gemma-bias-untied", llama_like},
        {"gemma2-nocap", llama_like},
        {"phi3-gqa",
         {"all_reduce model.embed_tokens", "all_gather model.layers.0.self_attn.qkv_proj", "all_reduce model.layers.0.self_attn.o_proj",
          "all_gather model.layers.0.mlp.gate_up_proj", "all_reduce model.layers.0.mlp.down_proj",
          "all_gather lm_head"}},
    };
    for (const Family &f : families) {
        Proc r = tpcc({"--report", "--report-format=json", "--tp-plan", "auto", "--hf-config",
                       hf_fixture(f.fixture), "-D", "tp=2"});
        ASSERT_EQ(r.code(), 0) << f.fixture << ": " << r.describe();
        EXPECT_FALSE(contains(r.err, "error")) << f.fixture << ": " << r.err;
        EXPECT_EQ(collectives(r.out), f.expected) << f.fixture;
    }
}

// The same plans as files, at every tp the fixtures' heads divide.
TEST(HfPlans, PastedPlansCheckCleanAtTp1To4)
{
    for (const char *type : {"llama", "qwen2", "mistral", "qwen3", "phi3", "gemma", "gemma2"})
        for (const char *tp : {"1", "2", "4"}) {
            Proc r = tpcc({"--check", source_path(std::string("plans/hf/") + type + ".plan"), "-D",
                           std::string("tp=") + tp, "-D", "kv_heads=4", "-D", "heads=8"});
            EXPECT_EQ(r.code(), 0) << type << " tp " << tp << ": " << r.describe();
        }
}

// A tied head and embedding (Gemma's default): transformers' plan shards
// both by vocabulary rows ("embedding_rowwise", "colwise_gather_output"),
// one placement for the shared weight.
TEST(HfPlans, TiedHeadAndEmbeddingShareOnePlacement)
{
    for (const char *fixture : {"gemma-gqa", "tied", "qwen3-bias-tied"}) {
        Proc r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", hf_fixture(fixture), "-D", "tp=2"});
        EXPECT_EQ(r.code(), 0) << fixture << ": " << r.describe();
        EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << fixture;
    }
}

TEST(HfPlans, ExplainSaysWhatEachStringIs)
{
    Proc r = tpcc({"--explain", "--tp-plan", "auto", "--hf-config", hf_fixture("qwen3-gqa"), "-D", "tp=2"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    for (const char *line :
         {"\"colwise\" (transformers 5.23: ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1)))",
          "\"rowwise\" (transformers 5.23: RowwiseParallel(input_layouts=Shard(-1), output_layouts=Replicate()))",
          "\"colwise_gather_output\" (transformers 5.23: ColwiseParallel(input_layouts=Replicate(), "
          "output_layouts=Replicate()))",
          "\"replicated_with_grad_allreduce\" (transformers 5.23: ReplicatedWithGradAllReduce())",
          "bias replicated and added once after the all-reduce"})
        EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
    // q_norm runs on the plain head shard colwise hands over
    EXPECT_TRUE(contains(r.out, "replicated_with_grad_allreduce  Shard(2) plain")) << r.out;
}

TEST(TpPlanAuto, CompilesTheFamilysPlanFromConfigJson)
{
    TempDir dir;
    const std::string sched = dir.path + "/auto.sched";
    Proc r = tpcc({"--tp-plan", "auto", "--hf-config", hf_fixture("llama2-gqa") + "/config.json", "-o", sched,
                   "-D", "tp=2"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    Proc dump = tpcc({"--dump", sched});
    EXPECT_TRUE(contains(dump.out, "plans/hf/llama.plan")) << dump.out;
    EXPECT_TRUE(contains(dump.out, "rank 1 of 2")) << dump.out;
}

TEST(TpPlanAuto, PlansDirectoryFromTheEnvironment)
{
    TempDir dir;
    std::filesystem::create_directory(dir.path + "/hf");
    dir.write("hf/llama.plan", "model \"" + source_path("models/llama.model") +
                                   "\"\nparallelize \"\" { \"lm_head\": \"colwise_rep\" }\n");
    Proc r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", hf_fixture("llama2-gqa"), "-D", "tp=2"},
                  {"TPCC_PLANS_DIR=" + dir.path});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, dir.path + "/hf/llama.plan")) << r.err;   // the uncovered-parameter warning
}

TEST(TpPlanAuto, UsageErrors)
{
    struct Bad {
        std::vector<std::string> args;
        const char *says;
    };
    const std::string cfg = hf_fixture("qwen3-gqa");
    const Bad bad[] = {
        {{"--check", "--tp-plan", "auto"}, "--tp-plan auto needs --hf-config"},
        {{"--check", "--tp-plan", "auto", "--hf-config", cfg, source_path("plans/qwen3-sp.plan")},
         "--tp-plan auto takes no plan file"},
        {{"--check", "--tp-plan", "manual", "--hf-config", cfg}, "--tp-plan takes 'auto'"},
        {{"--check", "--fix", "--tp-plan", "auto", "--hf-config", cfg}, "--fix does not rewrite the shipped plan"},
        {{"--dump", "x.sched", "--tp-plan", "auto", "--hf-config", cfg}, "--dump reads a schedule"},
        {{"--check", "--tp-plan", "auto", "--hf-config", hf_fixture("gpt2-tied")},
         "model_type 'gpt2' has no Hugging Face plan shipped"},
    };
    for (const Bad &b : bad) {
        Proc r = tpcc(b.args);
        EXPECT_EQ(r.code(), 2) << b.says << ": " << r.describe();
        EXPECT_TRUE(contains(r.err, b.says)) << r.err;
    }
    Proc r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", hf_fixture("gpt2-tied")});
    EXPECT_TRUE(contains(r.err, "(shipped: gemma, gemma2, llama, mistral, phi3, qwen2, qwen3)")) << r.err;
}

// GPT-2 has no transformers plan shipped: the refusal names the shipped
// plans whose model implements model_type 'gpt2'. A mixture-of-experts
// family has none, and none can be written yet: unsupported, so --check
// exits 0 and -o 3, in text, JSON and SARIF.
TEST(TpPlanAuto, RefusalsNameTheFittingPlanOrSayNoneCanBe)
{
    Proc gpt2 = tpcc({"--check", "--tp-plan", "auto", "--hf-config", hf_fixture("gpt2-tied")});
    EXPECT_EQ(gpt2.code(), 2) << gpt2.describe();
    EXPECT_TRUE(contains(gpt2.err, "fix: " + source_path("plans/gpt2-hf-sp.plan") + " or " +
                                       source_path("plans/gpt2-sp-tied.plan") + " applies to model_type 'gpt2'"))
        << gpt2.describe();

    const std::string mixtral = source_path("tests/fixtures/mixtral.config.json");
    Proc check = tpcc({"--check", "--tp-plan", "auto", "--hf-config", mixtral});
    EXPECT_EQ(check.code(), 0) << check.describe();
    EXPECT_EQ(check.err.rfind(mixtral + ":1:1: unsupported: model_type 'mixtral' is a mixture-of-experts family: no "
                                        "plan, shipped or written, can be checked or compiled yet: tpcc would need "
                                        "expert layers",
                              0),
              0u)
        << check.describe();
    EXPECT_TRUE(contains(check.err, "[unsupported]\n")) << check.describe();
    TempDir dir;
    Proc o = tpcc({"--tp-plan", "auto", "--hf-config", mixtral, "-o", dir.path + "/x.sched"});
    EXPECT_EQ(o.code(), 3) << o.describe();
    EXPECT_TRUE(std::filesystem::is_empty(dir.path));
    EXPECT_EQ(tpcc({"--check", "--tp-plan", "auto", "--hf-config", mixtral, "-W", "unsupported=error"}).code(), 1);

    Proc json = tpcc({"--check", "--tp-plan", "auto", "--hf-config", mixtral, "--diagnostics-format=json"});
    EXPECT_EQ(json.code(), 0) << json.describe();
    json_error_t jerr;
    json_t *doc = json_loads(json.out.c_str(), 0, &jerr);
    ASSERT_NE(doc, nullptr) << json.describe();
    json_t *d = json_array_get(json_object_get(doc, "diagnostics"), 0);
    EXPECT_STREQ(json_string_value(json_object_get(d, "level")), "unsupported");
    EXPECT_STREQ(json_string_value(json_object_get(d, "check")), "unsupported");
    EXPECT_EQ(json_integer_value(json_object_get(doc, "unsupported")), 1);
    json_decref(doc);

    Proc sarif = tpcc({"--check", "--tp-plan", "auto", "--hf-config", mixtral, "--diagnostics-format=sarif"});
    EXPECT_EQ(sarif.code(), 0) << sarif.describe();
    doc = json_loads(sarif.out.c_str(), 0, &jerr);
    ASSERT_NE(doc, nullptr) << sarif.describe();
    json_t *run = json_array_get(json_object_get(doc, "runs"), 0);
    json_t *result = json_array_get(json_object_get(run, "results"), 0);
    EXPECT_STREQ(json_string_value(json_object_get(result, "ruleId")), "unsupported");
    EXPECT_STREQ(json_string_value(json_object_get(result, "level")), "note");
    json_t *inv = json_array_get(json_object_get(run, "invocations"), 0);
    EXPECT_TRUE(json_is_true(json_object_get(inv, "executionSuccessful"))) << sarif.out;
    json_decref(doc);
}

TEST(TpPlanAuto, ConfigWithoutModelTypeOrUnreadable)
{
    TempDir dir;
    std::string cfg = dir.write("config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}");
    Proc r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", cfg});
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "has no model_type string")) << r.err;
    cfg = dir.write("odd.json", "{\"model_type\": \"../llama\"}");
    r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", cfg});
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "model_type '../llama' has no Hugging Face plan")) << r.err;
    r = tpcc({"--check", "--tp-plan", "auto", "--hf-config", dir.path + "/missing.json"});
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_EQ(r.err.rfind(dir.path + "/missing.json:1:1: error: cannot read Hugging Face config", 0), 0u)
        << r.describe();
    EXPECT_FALSE(contains(r.err, ":-1")) << r.describe();   // no line or column -1 (the temporary path may hold "-1")
}

// Why --tp-plan auto has no plan is a diagnostic in config.json like any
// other: in text, JSON and SARIF, exit status 2, SARIF's run unsuccessful.
TEST(TpPlanAuto, FailuresAreDiagnostics)
{
    TempDir dir;
    struct Case {
        std::string config, check, says;
        int line, col;
    } cases[] = {
        {dir.path + "/missing.json", "io", "cannot read Hugging Face config: unable to open", 1, 1},
        {dir.write("bad.json", "{\n  \"model_type\": \"llama\",\n}\n"), "io", "cannot read Hugging Face config: ", 3,
         1},
        {dir.write("none.json", "{\"architectures\": [\"LlamaForCausalLM\"]}"), "config", "has no model_type string",
         1, 1},
        {hf_fixture("gpt2-tied") + "/config.json", "plan", "model_type 'gpt2' has no Hugging Face plan shipped in", 1,
         1},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.config);
        Proc text = tpcc({"--check", "--tp-plan", "auto", "--hf-config", k.config});
        EXPECT_EQ(text.code(), 2) << text.describe();
        const std::string at = k.config + ":" + std::to_string(k.line) + ":" + std::to_string(k.col) + ": error: ";
        EXPECT_EQ(text.err.rfind(at, 0), 0u) << text.describe();
        EXPECT_TRUE(contains(text.err, k.says)) << text.describe();
        EXPECT_TRUE(contains(text.err, "[" + k.check + "]")) << text.describe();

        Proc json = tpcc({"--check", "--tp-plan", "auto", "--hf-config", k.config, "--diagnostics-format=json"});
        EXPECT_EQ(json.code(), 2) << json.describe();
        json_error_t jerr;
        json_t *doc = json_loads(json.out.c_str(), 0, &jerr);
        ASSERT_NE(doc, nullptr) << json.describe();
        json_t *d = json_array_get(json_object_get(doc, "diagnostics"), 0);
        EXPECT_STREQ(json_string_value(json_object_get(d, "check")), k.check.c_str());
        EXPECT_EQ(json_integer_value(json_object_get(d, "line")), k.line);
        json_decref(doc);

        Proc sarif = tpcc({"--check", "--tp-plan", "auto", "--hf-config", k.config, "--diagnostics-format=sarif"});
        EXPECT_EQ(sarif.code(), 2) << sarif.describe();
        doc = json_loads(sarif.out.c_str(), 0, &jerr);
        ASSERT_NE(doc, nullptr) << sarif.describe();
        json_t *run = json_array_get(json_object_get(doc, "runs"), 0);
        json_t *results = json_object_get(run, "results");
        ASSERT_EQ(json_array_size(results), 1u) << sarif.out;
        EXPECT_STREQ(json_string_value(json_object_get(json_array_get(results, 0), "ruleId")), k.check.c_str());
        json_t *inv = json_array_get(json_object_get(run, "invocations"), 0);
        EXPECT_TRUE(json_is_false(json_object_get(inv, "executionSuccessful"))) << sarif.out;
        json_decref(doc);
    }
}

}  // namespace

namespace {

// --export=hf of transformers' plan gives its strings back as written;
// --export=pytorch refuses the ones no torch ParallelStyle does.
TEST(HfPlans, ExportHfGivesTheStringsBack)
{
    Proc r = tpcc({"--export=hf", source_path("plans/hf/qwen3.plan")});
    ASSERT_EQ(r.code(), 0) << r.describe();
    for (const char *entry : {"\"model.embed_tokens\": \"embedding_rowwise\"",
                              "\"model.layers.*.self_attn.q_norm\": \"replicated_with_grad_allreduce\"",
                              "\"model.layers.*.self_attn.o_proj\": \"rowwise\"", "\"lm_head\": \"colwise_gather_output\""})
        EXPECT_TRUE(contains(r.out, entry)) << entry << "\n" << r.out;
    Proc py = tpcc({"--export=pytorch", source_path("plans/hf/qwen3.plan")});
    EXPECT_EQ(py.code(), 1) << py.describe();
    EXPECT_TRUE(contains(py.err, "\"replicated_with_grad_allreduce\" is transformers 5.23's")) << py.err;
    Proc old = tpcc({"--export=hf", source_path("tests/plans/llama-hf-local.plan")});
    EXPECT_EQ(old.code(), 1) << old.describe();
    EXPECT_TRUE(contains(old.err, "transformers 4.56 registered it; 5.23 no longer does")) << old.err;
}

}  // namespace
