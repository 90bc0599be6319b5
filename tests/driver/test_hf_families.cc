// The Mistral and Qwen3 families and the two spellings of RoPE in a
// config.json, through the tpcc command line: rope_parameters (what
// transformers 5 saves) and the top-level rope_theta/rope_scaling of older
// configs give the same schedule; what a model file does not compute (an
// unread RoPE member, both spellings at once, a norm of the wrong width) is
// an error, and what none computes yet (a sliding window below seq,
// longrope) unsupported.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::replaced;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;

Proc tpcc(const std::vector<std::string> &args) { return tpcc_test::run_program(kTpcc, args); }

std::string plan(const std::string &name) { return source_path("plans/" + name); }
std::string hf_fixture(const std::string &name) { return source_path("tests/fixtures/hf/" + name); }

// A schedule without its input_hash line: the hash covers the config.json's
// text, which differs between the spellings.
std::string schedule_body(const std::string &path)
{
    std::string s = slurp(path);
    size_t at = s.find("\"input_hash\"");
    if (at != std::string::npos)
        s.erase(at, s.find('\n', at) - at);
    return s;
}

struct Spelling {
    const char *hub;     // rope_theta / rope_scaling at the top level
    const char *saved;   // the same model saved by transformers 5: rope_parameters
    const char *plan;
};

// llama3 scaling, Qwen2 (with layer_types) and Mistral, at tp 2
TEST(RopeSpellings, BothCompileToTheSameSchedule)
{
    const Spelling cases[] = {{"llama3-scaled", "llama3-scaled-saved", "llama-sp.plan"},
                              {"qwen2-gqa", "qwen2-gqa-saved", "qwen2-sp.plan"},
                              {"mistral-gqa", "mistral-gqa-saved", "mistral-sp.plan"},
                              {"llama-yarn", "llama-yarn-saved", "llama-sp.plan"}};
    for (const Spelling &c : cases) {
        TempDir dir;
        std::string scheds[2];
        const char *configs[2] = {c.hub, c.saved};
        for (int i = 0; i < 2; i++) {
            scheds[i] = dir.path + "/" + configs[i] + ".sched";
            Proc r = tpcc({plan(c.plan), "--hf-config", hf_fixture(configs[i]), "-D", "tp=2", "-D", "seq=16", "-D",
                           "batch=2", "-o", scheds[i]});
            ASSERT_EQ(r.code(), 0) << configs[i] << "\n" << r.describe();
            EXPECT_EQ(r.err, "") << configs[i] << ": every key is read or understood\n" << r.describe();
        }
        EXPECT_TRUE(contains(slurp(scheds[0]), "\"rope_theta\"")) << c.hub;
        EXPECT_EQ(schedule_body(scheds[0]), schedule_body(scheds[1])) << c.hub << " vs " << c.saved;
        // the fixtures are one model: tools/hf_fixtures.py saved the same weights and logits
        EXPECT_EQ(slurp(hf_fixture(std::string(c.hub) + "/logits.npy")),
                  slurp(hf_fixture(std::string(c.saved) + "/logits.npy")));
    }
}


// A fixture's config.json with one edit, written to dir.
std::string edited(const TempDir &dir, const std::string &fixture, const std::string &from, const std::string &to)
{
    return dir.write("config.json", replaced(slurp(hf_fixture(fixture + "/config.json")), from, to));
}

// Dynamic NTK grows from max_position_embeddings, as transformers'
// _compute_dynamic_ntk_parameters reads it: an original_max_position_embeddings
// member (not a dynamic key; transformers warns and ignores it) changes
// nothing, where the other scalings would start from it.
TEST(RopeSpellings, DynamicIgnoresOriginalMaxPositionEmbeddings)
{
    TempDir dir;
    const std::string scheds[2] = {dir.path + "/plain.sched", dir.path + "/member.sched"};
    const std::string configs[2] = {
        hf_fixture("dynamic-scaled/config.json"),
        edited(dir, "dynamic-scaled", "\"rope_type\": \"dynamic\"",
               "\"rope_type\": \"dynamic\", \"original_max_position_embeddings\": 4")};
    for (int i = 0; i < 2; i++) {
        Proc r = tpcc({plan("llama-sp.plan"), "--hf-config", configs[i], "-D", "seq=16", "-D", "batch=2", "-o",
                       scheds[i]});
        ASSERT_EQ(r.code(), 0) << configs[i] << "\n" << r.describe();
    }
    std::string rope_ops[2];    // the config block records either value; the ops must not
    for (int i = 0; i < 2; i++) {
        std::istringstream lines(slurp(scheds[i]));
        for (std::string line; std::getline(lines, line);)
            if (contains(line, "\"op\": \"rope"))   // rope, or rope_attention (-O1)
                rope_ops[i] += line + "\n";
    }
    EXPECT_TRUE(contains(rope_ops[0], "\"original_max_positions\": 8,")) << rope_ops[0];
    EXPECT_EQ(rope_ops[0], rope_ops[1]);
}

TEST(RopeSpellings, BothAtOnceIsAnError)
{
    TempDir dir;
    std::string cfg = edited(dir, "llama3-scaled-saved", "\"rope_parameters\": {",
                             "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0},\n  \"rope_parameters\": {");
    Proc r = tpcc({"--check", plan("llama-sp.plan"), "--hf-config", cfg});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "gives both rope_scaling and rope_parameters: transformers takes rope_scaling"))
        << r.describe();
}

TEST(RopeSpellings, AMemberTheModelDoesNotReadIsAnError)
{
    TempDir dir;
    std::string cfg = edited(dir, "llama3-scaled-saved", "\"rope_type\": \"llama3\"",
                             "\"rope_type\": \"llama3\", \"partial_rotary_factor\": 0.5");
    Proc r = tpcc({"--check", plan("llama-sp.plan"), "--hf-config", cfg});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "sets rope_parameters.partial_rotary_factor to 0.5, and ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/llama.model does not read it [hf-key]")) << r.describe();
    std::string neutral = edited(dir, "llama3-scaled-saved", "\"rope_type\": \"llama3\"",
                                 "\"rope_type\": \"llama3\", \"partial_rotary_factor\": 1.0");
    Proc ok = tpcc({"--check", plan("llama-sp.plan"), "--hf-config", neutral});
    EXPECT_EQ(ok.code(), 0) << "a factor of 1.0 rotates every dimension, as the model does\n" << ok.describe();
}

TEST(RopeSpellings, AnUncomputedTypeInsideRopeParametersIsUnsupported)
{
    TempDir dir;
    std::string cfg = edited(dir, "llama3-scaled-saved", "\"rope_type\": \"llama3\"", "\"rope_type\": \"longrope\"");
    Proc r = tpcc({"--check", plan("llama-sp.plan"), "--hf-config", cfg});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: rope(): RoPE scaling \"longrope\", which transformers computes"))
        << r.describe();
}

// GPT-2's model file reads no RoPE value: only unscaled RoPE at HF's default
// theta computes what it computes
TEST(RopeSpellings, AModelThatReadsNoRopeRefusesScaledRopeParameters)
{
    TempDir dir;
    std::string text = slurp(source_path("tests/fixtures/gpt2.config.json"));
    text.insert(text.find('{') + 1, "\n  \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, "
                                    "\"partial_rotary_factor\": 0.5},");
    std::string cfg = dir.write("config.json", text);
    Proc r = tpcc({"--check", plan("gpt2-sp-tied.plan"), "--hf-config", cfg});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "rope_parameters type 'llama3'; ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "models/gpt2.model computes unscaled RoPE")) << r.describe();
    EXPECT_TRUE(contains(r.err, "sets rope_parameters.rope_theta to 500000.0")) << r.describe();
    EXPECT_TRUE(contains(r.err, "sets rope_parameters.partial_rotary_factor to 0.5")) << r.describe();
    EXPECT_TRUE(contains(r.err, "3 errors generated.")) << r.describe();
}

// the config-override warning follows the hf() chain to the key config.json gives
TEST(RopeSpellings, APlanValueOverridingEitherSpellingWarns)
{
    TempDir dir;
    std::string text = replaced(slurp(plan("llama-sp.plan")), "config {", "config {\n    rope_theta = 10000.0");
    std::string p = dir.write("llama-sp.plan", replaced(text, "../models/", source_path("models") + "/"));
    const struct {
        const char *fixture, *key;
    } cases[] = {{"llama3-scaled", "gives rope_theta = 500000.0"},
                 {"llama3-scaled-saved", "gives rope_parameters.rope_theta = 500000.0"}};
    for (const auto &c : cases) {
        Proc r = tpcc({"--check", p, "--hf-config", hf_fixture(c.fixture)});
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(r.err, "the plan sets rope_theta = 10000.0, and ")) << r.describe();
        EXPECT_TRUE(contains(r.err, c.key)) << r.describe();
        EXPECT_TRUE(contains(r.err, "[config-override]")) << r.describe();
    }
}

TEST(LayerTypes, SlidingLayersAreUnsupportedOnlyWhereTheWindowMasks)
{
    TempDir dir;
    // Qwen2 saved by transformers 5: layer_types all full_attention, sliding_window null
    std::string sliding = edited(dir, "qwen2-gqa-saved", "\"full_attention\"\n", "\"sliding_attention\"\n");
    Proc off = tpcc({"--check", plan("qwen2-sp.plan"), "--hf-config", sliding});
    EXPECT_EQ(off.code(), 0) << "use_sliding_window false: no window\n" << off.describe();
    std::string text = replaced(slurp(sliding), "\"use_sliding_window\": false", "\"use_sliding_window\": true");
    std::string on = dir.write("on.config.json", replaced(text, "\"sliding_window\": null", "\"sliding_window\": 8"));
    Proc r = tpcc({"--check", plan("qwen2-sp.plan"), "--hf-config", on, "-D", "seq=16"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "layer_types[1] is \"sliding_attention\" with a sliding_window below seq 16, and "))
        << r.describe();
    EXPECT_TRUE(contains(r.err, "models/qwen2.model attends to all of them")) << r.describe();
    EXPECT_TRUE(contains(r.err, "compile with -D seq=8 or less")) << r.describe();
    std::string chunked = dir.write("chunked.config.json", replaced(slurp(on), "\"sliding_attention\"\n",
                                                                     "\"chunked_attention\"\n"));
    Proc other = tpcc({"--check", plan("qwen2-sp.plan"), "--hf-config", chunked, "-D", "seq=16"});
    EXPECT_EQ(other.code(), 1) << other.describe();
    EXPECT_TRUE(contains(other.err, "models/qwen2.model computes full causal attention in every layer"))
        << other.describe();
    Proc at_8 = tpcc({"--check", plan("qwen2-sp.plan"), "--hf-config", on, "-D", "seq=8"});
    EXPECT_FALSE(contains(at_8.err, "layer_types")) << "a window of 8 at seq 8 masks nothing\n" << at_8.describe();
}

// --- Mistral ------------------------------------------------------------------------------------

TEST(Mistral, SlidingWindowBelowSeqIsUnsupported)
{
    std::string cfg = hf_fixture("mistral-gqa");   // sliding_window 4096
    Proc at_4096 = tpcc({"--check", plan("mistral-sp.plan"), "--hf-config", cfg, "-D", "seq=4096"});
    EXPECT_EQ(at_4096.code(), 0) << at_4096.describe();
    Proc r = tpcc({"--check", plan("mistral-sp.plan"), "--hf-config", cfg, "-D", "seq=8192"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "unsupported: ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "attention(): sliding_window 4096 is below seq 8192")) << r.describe();
    EXPECT_TRUE(contains(r.err, "compile with -D seq=4096 or less")) << r.describe();
}

TEST(Mistral, NullWindowIsOffAndAnAbsentOneIsMistralConfigs4096)
{
    TempDir dir;
    std::string null_window = edited(dir, "mistral-gqa", "\"sliding_window\": 4096", "\"sliding_window\": null");
    Proc off = tpcc({"--check", plan("mistral-sp.plan"), "--hf-config", null_window, "-D", "seq=8192"});
    EXPECT_EQ(off.code(), 0) << off.describe();
    std::string absent = edited(dir, "mistral-gqa", "\"sliding_window\": 4096,", "");
    Proc r = tpcc({"--check", plan("mistral-sp.plan"), "--hf-config", absent, "-D", "seq=8192"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.err, "sliding_window 4096 is below seq 8192")) << r.describe();
    std::string zero = edited(dir, "mistral-gqa", "\"sliding_window\": 4096", "\"sliding_window\": 0");
    Proc z = tpcc({"--check", plan("mistral-sp.plan"), "--hf-config", zero});
    EXPECT_EQ(z.code(), 1) << z.describe();
    EXPECT_TRUE(contains(z.err, "attention(): sliding_window must be a positive integer")) << z.describe();
}

// The --explain row of a module: its line of the boundary table.
std::string row(const std::string &explain, const std::string &fqn)
{
    size_t at = explain.find(fqn + " ");
    return at == std::string::npos ? "" : explain.substr(at, explain.find('\n', at) - at);
}

// MistralConfig: num_key_value_heads defaults to 8, and None means the head
// count (16 heads of 4 here)
TEST(Mistral, KvHeadsDefaultTo8AndNullToTheHeads)
{
    TempDir dir;
    const std::vector<std::string> sizes = {"-D", "heads=16", "-D", "hidden=64"};
    const char *from = "\"num_key_value_heads\": 4,";
    const struct {
        const char *to;
        const char *k_proj;
    } cases[] = {{"", "-> Shard(2) plain [1, 2048, 32]"},
                 {"\"num_key_value_heads\": null,", "-> Shard(2) plain [1, 2048, 64]"}};
    for (const auto &c : cases) {
        std::vector<std::string> args = {"--explain", plan("mistral-sp.plan"), "--hf-config",
                                         edited(dir, "mistral-kv4", from, c.to)};
        args.insert(args.end(), sizes.begin(), sizes.end());
        Proc r = tpcc(args);
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(row(r.out, "model.layers.0.self_attn.k_proj"), c.k_proj)) << c.to << "\n" << r.out;
    }
}

// --- Qwen3 --------------------------------------------------------------------------------------

// q_norm and k_norm normalise head_dim, the last dimension of the head view,
// which the plan leaves whole: clean at every tp the heads divide
TEST(Qwen3, HeadNormsRunOnTheHeadShard)
{
    for (const char *tp : {"1", "2", "4", "8"}) {
        Proc r = tpcc({"--check", plan("qwen3-sp.plan"), "-D", std::string("tp=") + tp});
        EXPECT_EQ(r.code(), 0) << "tp " << tp << "\n" << r.describe();
        EXPECT_EQ(r.err, "All checks passed! (1 plan)\n") << "tp " << tp << "\n" << r.describe();
    }
    Proc r = tpcc({"--explain", plan("qwen3-sp.plan"), "-D", "layers=1"});
    EXPECT_TRUE(contains(r.out, "model.layers.0.self_attn.q_norm")) << r.out;
    EXPECT_TRUE(contains(r.out, "Shard(2) plain [1, 2048, 32, 128] -> Shard(2) plain [1, 2048, 32, 128]")) << r.out;
}

TEST(Qwen3, ANormOfTheWrongWidthIsAnError)
{
    TempDir dir;
    dir.write("qwen3.model", replaced(slurp(source_path("models/qwen3.model")), "q_norm = RMSNorm(head_dim",
                                      "q_norm = RMSNorm(hidden"));
    std::string text = replaced(slurp(plan("qwen3-sp.plan")), "../models/qwen3.model", "qwen3.model");
    Proc r = tpcc({"--check", dir.write("qwen3-sp.plan", text)});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "'model.layers.0.self_attn.q_norm' (RMSNorm) normalises 4096 features, gets 128 "
                                "(dimension 3, head_dim)")) << r.describe();
}

TEST(Qwen3, AttentionBiasAddsBiasesToEveryProjection)
{
    Proc r = tpcc({"--explain", plan("qwen3-sp.plan"), "--hf-config", hf_fixture("qwen3-bias-tied"), "-D", "seq=16"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    TempDir dir;
    std::string sched = dir.path + "/q.sched";
    Proc c = tpcc({plan("qwen3-sp.plan"), "--hf-config", hf_fixture("qwen3-bias-tied"), "-D", "seq=16", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::string s = slurp(sched);
    for (const char *proj : {"q_proj", "k_proj", "v_proj", "o_proj"})
        EXPECT_TRUE(contains(s, std::string("model.layers.0.self_attn.") + proj + ".bias")) << proj;
    Proc plain = tpcc({plan("qwen3-sp.plan"), "--hf-config", hf_fixture("qwen3-gqa"), "-D", "seq=16", "-o", sched});
    ASSERT_EQ(plain.code(), 0) << plain.describe();
    EXPECT_FALSE(contains(slurp(sched), ".bias\"")) << "attention_bias false: no biases";
}

// Hugging Face's GPT-2: what GPT2Attention computes that the model file does
// not (a per-layer scale, cross-attention blocks, no scaling) is refused by
// name, and so is an activation ACT2FN does not have; one it has and tprun
// does not compute is unsupported
TEST(Gpt2Hf, ConfigKeysTheModelDoesNotComputeAreErrors)
{
    const struct {
        const char *from, *to, *says;
    } cases[] = {
        {"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
         "models/gpt2-hf.model computes scale_attn_by_inverse_layer_idx = False only [hf-key]"},
        {"\"add_cross_attention\": false", "\"add_cross_attention\": true",
         "computes add_cross_attention = False only [hf-key]"},
        {"\"scale_attn_weights\": true", "\"scale_attn_weights\": false",
         "computes scale_attn_weights = True only [hf-key]"},
        {"\"activation_function\": \"gelu_new\"", "\"activation_function\": \"quick_gleu\"",
         "\"quick_gleu\" is no activation transformers defines"},
    };
    for (const auto &c : cases) {
        TempDir dir;
        std::string cfg = edited(dir, "gpt2-tied-saved", c.from, c.to);
        Proc r = tpcc({"--check", plan("gpt2-hf-sp.plan"), "--hf-config", cfg, "-D", "seq=16"});
        EXPECT_EQ(r.code(), 1) << c.to << "\n" << r.describe();
        EXPECT_TRUE(contains(r.err, c.says)) << c.to << "\n" << r.describe();
    }
    TempDir dir;
    std::string quick = edited(dir, "gpt2-tied-saved", "\"activation_function\": \"gelu_new\"",
                               "\"activation_function\": \"quick_gelu\"");
    Proc unsupported = tpcc({"--check", plan("gpt2-hf-sp.plan"), "--hf-config", quick, "-D", "seq=16"});
    EXPECT_EQ(unsupported.code(), 0) << unsupported.describe();
    EXPECT_TRUE(contains(unsupported.err, "unsupported: activation(): transformers' activation \"quick_gelu\""))
        << unsupported.describe();
    Proc ok = tpcc({"--check", plan("gpt2-hf-sp.plan"), "--hf-config", hf_fixture("gpt2-tied-saved"), "-D", "seq=16"});
    EXPECT_EQ(ok.code(), 0) << ok.describe();
    EXPECT_EQ(ok.err, "All checks passed! (1 plan)\n") << ok.describe();
}

}  // namespace
