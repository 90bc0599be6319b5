// Model instantiation (compiler/front/model.c) through the front end: the module
// tree of the shipped models with Hugging Face names, parameter shapes,
// tied weights, vocabulary padding and norm eps, and broken model files
// (op keywords included).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "compiler/driver/compile.h"
#include "compiler/front/model.h"
}

namespace fs = std::filesystem;

namespace {

// A scratch directory removed at the end of the test.
using tpcc_test::TempDir;

std::string model_path(const std::string &name) { return tpcc_test::source_path("models/" + name); }

// A compiled unit, freed at scope exit.
struct Unit {
    Unit(const std::string &plan, const std::vector<std::string> &defines = {})
    {
        tpcc_test::compile(&u, plan, defines);
    }
    ~Unit() { tp_unit_free(&u); }
    Unit(const Unit &) = delete;
    Unit &operator=(const Unit &) = delete;

    tp_module *mod(const std::string &fqn) { return tp_model_find(&u.model, fqn.c_str()); }
    tp_param *param(const std::string &fqn) { return tp_model_find_param(&u.model, fqn.c_str()); }
    std::string text() { return tpcc_test::rendered(&u); }
    bool has_error(const char *check, const std::string &text) { return error(check, text) != nullptr; }
    // The first error of `check` whose message contains `text`, or null.
    const tp_diag *error(const char *check, const std::string &text)
    {
        for (int i = 0; i < u.diags.count; i++) {
            const tp_diag &g = u.diags.items[i];
            if (g.level == TP_ERROR && !strcmp(g.check, check) && std::string(g.message).find(text) != std::string::npos)
                return &g;
        }
        return nullptr;
    }
    tp_unit u;
};

// A plan that applies no style to `model` (only instantiates it).
std::string bare_plan(const TempDir &dir, const std::string &model, const std::string &config = "")
{
    std::string text = "model \"" + model + "\"\n";
    if (!config.empty())
        text += "config { " + config + " }\n";
    return dir.write("bare.plan", text);
}

std::vector<int64_t> shape(const tp_param *p)
{
    std::vector<int64_t> s;
    for (int i = 0; i < p->rank; i++)
        s.push_back(p->shape[i]);
    return s;
}

std::vector<int64_t> logical(const tp_param *p)
{
    std::vector<int64_t> s;
    for (int i = 0; i < p->rank; i++)
        s.push_back(p->logical[i]);
    return s;
}

using Shape = std::vector<int64_t>;

// --- Llama ---------------------------------------------------------------------------

TEST(LlamaModel, ModuleTreeForTwoLayers)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    // root, model, embed_tokens, layers, 2 x (layer + 2 norms + attn + 4 proj + mlp + 3 proj), norm, lm_head
    EXPECT_EQ(u.u.model.count, 1 + 1 + 1 + 1 + 2 * 12 + 1 + 1);
    ASSERT_TRUE(u.u.model.root);
    EXPECT_STREQ(u.u.model.root->fqn, "");
    EXPECT_STREQ(u.u.model.root->type, "LlamaForCausalLM");
    EXPECT_EQ(u.u.model.all[0], u.u.model.root);
    for (int i = 0; i < u.u.model.count; i++)
        EXPECT_EQ(u.u.model.all[i]->index, i);
}

TEST(LlamaModel, HuggingFaceNames)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    std::vector<std::string> names;
    for (int i = 0; i < u.u.model.count; i++)
        names.push_back(u.u.model.all[i]->fqn);
    std::vector<std::string> want = {"", "model", "model.embed_tokens", "model.layers"};
    for (int l = 0; l < 2; l++) {
        std::string p = "model.layers." + std::to_string(l);
        for (const char *s : {"", ".input_layernorm", ".self_attn", ".self_attn.q_proj", ".self_attn.k_proj",
                              ".self_attn.v_proj", ".self_attn.o_proj", ".post_attention_layernorm", ".mlp",
                              ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj"})
            want.push_back(p + s);
    }
    want.push_back("model.norm");
    want.push_back("lm_head");
    EXPECT_EQ(names, want) << "module names in preorder, as model.named_modules() lists them";
    EXPECT_FALSE(u.mod("model.layers.2"));
    tp_module *q = u.mod("model.layers.0.self_attn.q_proj");
    ASSERT_TRUE(q);
    EXPECT_STREQ(q->name, "q_proj");
    EXPECT_STREQ(q->type, "Linear");
    EXPECT_EQ(q->kind, TP_MOD_LINEAR);
    ASSERT_TRUE(q->parent);
    EXPECT_STREQ(q->parent->fqn, "model.layers.0.self_attn");
    EXPECT_STREQ(q->parent->type, "LlamaAttention");
    tp_module *layers = u.mod("model.layers");
    ASSERT_TRUE(layers);
    EXPECT_EQ(layers->kind, TP_MOD_LIST);
    EXPECT_EQ(layers->nkids, 2);
    EXPECT_STREQ(layers->kids[1]->name, "1");
    EXPECT_EQ(u.mod("model.embed_tokens")->kind, TP_MOD_EMBEDDING);
    EXPECT_EQ(u.mod("model.norm")->kind, TP_MOD_RMSNORM);
    EXPECT_TRUE(tp_module_is_leaf(u.mod("lm_head")));
    EXPECT_FALSE(tp_module_is_leaf(u.mod("model.layers.1.mlp")));
    EXPECT_TRUE(tp_module_forward(u.mod("model.layers.1.mlp")));
    EXPECT_FALSE(tp_module_forward(u.mod("lm_head")));
}

TEST(LlamaModel, ParameterNamesAndShapes)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    const int64_t hidden = 4096, heads = 32, kv_heads = 8, head_dim = 128, ffn = 11008, vocab = 32000;
    struct {
        const char *fqn;
        Shape shape;
    } want[] = {
        {"model.embed_tokens.weight", {vocab, hidden}},
        {"model.layers.0.self_attn.q_proj.weight", {heads * head_dim, hidden}},
        {"model.layers.0.self_attn.k_proj.weight", {kv_heads * head_dim, hidden}},
        {"model.layers.0.self_attn.v_proj.weight", {kv_heads * head_dim, hidden}},
        {"model.layers.0.self_attn.o_proj.weight", {hidden, heads * head_dim}},
        {"model.layers.1.mlp.gate_proj.weight", {ffn, hidden}},
        {"model.layers.1.mlp.up_proj.weight", {ffn, hidden}},
        {"model.layers.1.mlp.down_proj.weight", {hidden, ffn}},
        {"model.layers.1.input_layernorm.weight", {hidden}},
        {"model.norm.weight", {hidden}},
        {"lm_head.weight", {vocab, hidden}},
    };
    for (const auto &w : want) {
        tp_param *p = u.param(w.fqn);
        ASSERT_TRUE(p) << w.fqn;
        EXPECT_STREQ(p->fqn, w.fqn);
        EXPECT_EQ(shape(p), w.shape) << w.fqn;
        EXPECT_EQ(logical(p), w.shape) << w.fqn;
    }
    // Llama has no biases anywhere
    for (const char *m : {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj",
                          "model.layers.1.mlp.down_proj", "lm_head", "model.norm"}) {
        EXPECT_FALSE(tp_module_param(u.mod(m), "bias")) << m;
        EXPECT_EQ(u.mod(m)->nparams, 1) << m;
    }
    EXPECT_STREQ(u.param("model.layers.0.self_attn.q_proj.weight")->dimname[1], "hidden");
    EXPECT_STREQ(u.param("model.layers.0.self_attn.q_proj.weight")->dimname[0], "heads * head_dim");
    EXPECT_EQ(u.param("model.layers.0.self_attn.q_proj.weight")->owner, u.mod("model.layers.0.self_attn.q_proj"));
}

TEST(LlamaModel, ShapesFollowTheConfiguration)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")),
           {"layers=2", "hidden=1024", "heads=16", "kv_heads=4", "ffn=2816", "vocab=1000"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.q_proj.weight")), (Shape{16 * 64, 1024}));
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.k_proj.weight")), (Shape{4 * 64, 1024}));
    EXPECT_EQ(shape(u.param("model.layers.1.mlp.down_proj.weight")), (Shape{1024, 2816}));
    EXPECT_EQ(shape(u.param("model.embed_tokens.weight")), (Shape{1000, 1024}));
}

TEST(LlamaModel, ExplicitHeadDim)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2", "head_dim=96"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.q_proj.weight")), (Shape{32 * 96, 4096}));
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.o_proj.weight")), (Shape{4096, 32 * 96}));
}

TEST(LlamaModel, TieEmbeddings)
{
    TempDir dir;
    {
        Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2", "tie_embeddings=true"});
        ASSERT_TRUE(u.u.built) << u.text();
        tp_param *head = u.param("lm_head.weight"), *emb = u.param("model.embed_tokens.weight");
        ASSERT_TRUE(head && emb);
        EXPECT_EQ(head->tied_to, emb);
        EXPECT_EQ(emb->tied_to, nullptr);
        EXPECT_EQ(tp_param_canonical(head), emb);
        EXPECT_EQ(tp_param_canonical(emb), emb);
        EXPECT_GE(head->tie_span.file, 0) << "the tie() that tied it";
    }
    {
        Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2", "tie_embeddings=false"});
        ASSERT_TRUE(u.u.built) << u.text();
        EXPECT_EQ(u.param("lm_head.weight")->tied_to, nullptr);
        EXPECT_EQ(u.param("model.embed_tokens.weight")->tied_to, nullptr);
    }
    {
        Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2"});   // Llama's default: untied
        ASSERT_TRUE(u.u.built) << u.text();
        EXPECT_EQ(u.param("lm_head.weight")->tied_to, nullptr);
    }
}

TEST(LlamaModel, VocabPadding)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2", "vocab=32001", "vocab_multiple=64"});
    ASSERT_TRUE(u.u.built) << u.text();
    tp_param *emb = u.param("model.embed_tokens.weight"), *head = u.param("lm_head.weight");
    ASSERT_TRUE(emb && head);
    EXPECT_EQ(emb->shape[0], 32064);
    EXPECT_EQ(emb->logical[0], 32001);
    EXPECT_EQ(emb->shape[1], 4096);
    EXPECT_EQ(emb->logical[1], 4096);
    EXPECT_EQ(head->shape[0], 32064);
    EXPECT_EQ(head->logical[0], 32001);
    EXPECT_EQ(head->shape[1], 4096);
    // no padding where none is asked for
    EXPECT_EQ(u.param("model.layers.0.mlp.gate_proj.weight")->shape[0], 11008);
}

TEST(LlamaModel, VocabPaddingWithTiedWeights)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")),
           {"layers=2", "vocab=32001", "vocab_multiple=64", "tie_embeddings=true"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    EXPECT_EQ(u.param("lm_head.weight")->tied_to, u.param("model.embed_tokens.weight"));
}

TEST(LlamaModel, VocabPaddingThatOverflowsIsAnError)
{
    // round_up(2^63 - 1, 64) does not fit in int64: an error, never a negative or wrapped shape
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=1", "vocab=9223372036854775807", "vocab_multiple=64"});
    EXPECT_GT(u.u.diags.errors, 0) << "accepted";
    for (const char *p : {"lm_head.weight", "model.embed_tokens.weight"}) {
        tp_param *w = u.u.model.count ? u.param(p) : nullptr;
        if (w) {
            EXPECT_GE(w->shape[0], w->logical[0]) << p << " padded to " << w->shape[0];
        }
    }
}

TEST(LlamaModel, PlanConfigBlockSizesTheModel)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model"), "layers = 3, hidden = 512"));
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_TRUE(u.mod("model.layers.2.mlp"));
    EXPECT_FALSE(u.mod("model.layers.3"));
    EXPECT_EQ(shape(u.param("model.norm.weight")), (Shape{512}));
}

TEST(LlamaModel, NonPositiveSizesAreErrors)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("llama.model")), {"layers=2", "ffn=0"});
    EXPECT_GT(u.u.diags.errors, 0);
    EXPECT_TRUE(u.has_error("config", "must be positive")) << u.text();
}

TEST(LlamaModel, NormEpsComesFromTheConfig)
{
    TempDir dir;
    const char *norms[] = {"model.norm", "model.layers.0.input_layernorm", "model.layers.1.post_attention_layernorm"};
    Unit dflt(bare_plan(dir, model_path("llama.model")), {"layers=2"});
    ASSERT_TRUE(dflt.u.built) << dflt.text();
    for (const char *n : norms)
        EXPECT_EQ(dflt.mod(n)->eps, 1e-6) << n << ": hf(\"rms_norm_eps\", 1e-6)";
    Unit set(bare_plan(dir, model_path("llama.model")), {"layers=2", "rms_norm_eps=1e-5"});
    ASSERT_TRUE(set.u.built) << set.text();
    for (const char *n : norms)
        EXPECT_EQ(set.mod(n)->eps, 1e-5) << n;
}

// --- GPT-2 and Qwen2 ------------------------------------------------------------------------

TEST(Gpt2Model, LayerNormEpsComesFromTheConfig)
{
    TempDir dir;
    Unit dflt(bare_plan(dir, model_path("gpt2.model")), {"layers=2"});
    ASSERT_TRUE(dflt.u.built) << dflt.text();
    EXPECT_EQ(dflt.mod("transformer.ln_f")->eps, 1e-5);
    Unit set(bare_plan(dir, model_path("gpt2.model"), "layer_norm_epsilon = 1e-3"), {"layers=2"});
    ASSERT_TRUE(set.u.built) << set.text();
    for (const char *n : {"transformer.ln_f", "transformer.h.0.ln_1", "transformer.h.1.ln_2"})
        EXPECT_EQ(set.mod(n)->eps, 1e-3) << n;
}

TEST(Gpt2Model, NamesBiasesAndTiedHead)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("gpt2.model")), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    EXPECT_STREQ(u.u.model.root->type, "GPT2LMHeadModel");
    for (const char *m : {"transformer", "transformer.wte", "transformer.wpe", "transformer.h", "transformer.h.0",
                          "transformer.h.0.ln_1", "transformer.h.0.attn", "transformer.h.0.attn.q_proj",
                          "transformer.h.0.attn.c_proj", "transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj",
                          "transformer.ln_f", "lm_head"})
        EXPECT_TRUE(u.mod(m)) << m;
    EXPECT_FALSE(u.mod("transformer.h.2"));
    EXPECT_FALSE(u.mod("model")) << "GPT-2 is not named like Llama";
    tp_param *qb = u.param("transformer.h.0.attn.q_proj.bias");
    ASSERT_TRUE(qb);
    EXPECT_EQ(shape(qb), (Shape{768}));
    EXPECT_EQ(shape(u.param("transformer.h.0.attn.q_proj.weight")), (Shape{768, 768}));
    EXPECT_EQ(shape(u.param("transformer.h.1.mlp.c_fc.weight")), (Shape{3072, 768}));
    EXPECT_EQ(shape(u.param("transformer.h.1.mlp.c_fc.bias")), (Shape{3072}));
    EXPECT_TRUE(u.param("transformer.h.1.mlp.c_proj.bias"));
    EXPECT_TRUE(u.param("transformer.h.0.ln_1.bias")) << "LayerNorm has a bias by default";
    EXPECT_TRUE(u.param("transformer.ln_f.bias"));
    EXPECT_FALSE(u.param("lm_head.bias"));
    EXPECT_EQ(shape(u.param("transformer.wte.weight")), (Shape{50257, 768}));
    EXPECT_EQ(shape(u.param("transformer.wpe.weight")), (Shape{1024, 768}));
    EXPECT_EQ(u.mod("transformer.h.0.ln_1")->kind, TP_MOD_LAYERNORM);
    // GPT-2 ties its head to the token embedding by default
    EXPECT_EQ(u.param("lm_head.weight")->tied_to, u.param("transformer.wte.weight"));
}

TEST(Gpt2Model, UntiedOnRequest)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("gpt2.model")), {"layers=2", "tie_embeddings=false"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.param("lm_head.weight")->tied_to, nullptr);
}

TEST(Qwen2Model, QkvHaveBiases)
{
    TempDir dir;
    Unit u(bare_plan(dir, model_path("qwen2.model")), {"layers=2"});
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
    const int64_t hidden = 3584, head_dim = 3584 / 28;
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.q_proj.bias")), (Shape{28 * head_dim}));
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.k_proj.bias")), (Shape{4 * head_dim}));
    EXPECT_EQ(shape(u.param("model.layers.1.self_attn.v_proj.bias")), (Shape{4 * head_dim}));
    EXPECT_FALSE(u.param("model.layers.0.self_attn.o_proj.bias"));
    EXPECT_FALSE(u.param("model.layers.0.mlp.gate_proj.bias"));
    EXPECT_EQ(shape(u.param("model.layers.0.self_attn.k_proj.weight")), (Shape{4 * head_dim, hidden}));
    EXPECT_EQ(shape(u.param("model.embed_tokens.weight")), (Shape{151936, hidden}));
    EXPECT_EQ(u.param("lm_head.weight")->tied_to, nullptr);
}

// --- broken models ------------------------------------------------------------------------

const char *const tail = "    def forward(x: [1, 2]) {\n        return x\n    }\n}\n";

TEST(BrokenModel, UnknownModuleType)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = Linear(2, 2)\n    b = Foo()\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "unknown module type 'Foo'")) << u.text();
    EXPECT_FALSE(u.u.built);
}

TEST(BrokenModel, UnknownModuleTypeInRepeat)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = repeat(Blok(), 3)\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "unknown module type 'Blok'")) << u.text();
    int n = 0;
    for (int i = 0; i < u.u.diags.count; i++)
        n += std::string(u.u.diags.items[i].message).find("Blok") != std::string::npos;
    EXPECT_EQ(n, 1) << "reported once, not once per repetition:\n" << u.text();
}

TEST(BrokenModel, LeafArguments)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = Linear(2)\n    b = Embedding(4, 2, biass=True)\n"
                         "    c = RMSNorm(2, epsilon=1e-5)\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "Linear() takes 2 size arguments, got 1")) << u.text();
    EXPECT_TRUE(u.has_error("model", "Embedding() has no argument 'biass'; it takes pad_to")) << u.text();
    const tp_diag *g = u.error("model", "RMSNorm() has no argument 'epsilon'; it takes eps, bias");
    ASSERT_TRUE(g) << u.text();
    EXPECT_EQ(g->span.line, 4);
    EXPECT_EQ(g->span.col, 20) << "at the keyword argument";
}

TEST(BrokenModel, NormsWithoutEpsGetTheirClassDefaults)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = RMSNorm(2)\n    b = LayerNorm(2)\n    c = LayerNorm(2, eps=0)\n" +
                             std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    ASSERT_TRUE(u.u.built) << u.text();
    EXPECT_EQ(u.mod("a")->eps, 1e-6) << "LlamaRMSNorm's default";
    EXPECT_EQ(u.mod("b")->eps, 1e-5) << "nn.LayerNorm's default";
    EXPECT_EQ(u.mod("c")->eps, 0.0) << "an integer is a number too";
}

TEST(BrokenModel, NormEpsMustBeANonNegativeNumber)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = RMSNorm(2, eps=-1e-5)\n    b = LayerNorm(2, eps=\"small\")\n" +
                             std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "RMSNorm() eps '-1e-05' is negative; it must be 0 or more")) << u.text();
    EXPECT_TRUE(u.has_error("model", "LayerNorm() eps is the string \"small\"; it must be a number")) << u.text();
}

TEST(BrokenModel, FloatSizeIsAnErrorAtTheUse)
{
    TempDir dir;
    dir.write("m.model", "config { d = 2.0 }\nmodule Root {\n    a = Linear(d, 2)\n    b = repeat(Linear(2, 2), 1.5)\n" +
                             std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    const tp_diag *g = u.error("config", "'d' is 2.0, a float; a size must be an integer");
    ASSERT_TRUE(g) << u.text();
    EXPECT_EQ(g->span.line, 3);
    EXPECT_EQ(g->span.col, 16);
    ASSERT_EQ(g->nnotes, 1) << u.text();
    EXPECT_EQ(g->notes[0].span.line, 1) << "the note shows the definition";
    EXPECT_TRUE(u.has_error("config", "'1.5' is 1.5, a float; a size must be an integer")) << u.text();
}

// Forward bodies for the op tests: x is [batch, seq, heads, head_dim].
std::string op_model(const std::string &body)
{
    return "module Root {\n    def forward(x: [1, 2, 2, 4]) {\n        return " + body + "\n    }\n}\n";
}

TEST(BrokenModel, UnknownOpKeywordsListWhatTheOpTakes)
{
    struct Case {
        std::string body, message;
        int col;
    } cases[] = {
        {"rope(x, base=500000.0)", "rope() has no argument 'base'; it takes theta", 24},
        {"silu(x, inplace=True)", "silu() has no argument 'inplace'; it takes no keyword arguments", 24},
        {"attention(x, x, x, causal=True, dropout_p=0.5)", "attention() has no argument 'dropout_p'; it takes causal",
         48},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.body);
        TempDir dir;
        dir.write("m.model", op_model(k.body));
        Unit u(bare_plan(dir, dir.path + "/m.model"));
        const tp_diag *g = u.error("model", k.message);
        ASSERT_TRUE(g) << u.text();
        EXPECT_EQ(g->span.line, 3);
        EXPECT_EQ(g->span.col, k.col) << "at the keyword argument";
    }
}

TEST(BrokenModel, OpAttributeValues)
{
    struct Case {
        std::string body, message;
    } cases[] = {
        {"rope(x, theta=0)", "rope(): theta must be a positive number"},
        {"rope(x, theta=-1e4)", "rope(): theta must be a positive number"},
        {"rope(x, theta=None)", "rope(): theta must be a positive number"},
        {"rope(x, partial_rotary_factor=0.75)", "rope(): partial_rotary_factor 0.75 of head_dim 4 gives an odd rotary "
                                                "dim 3: transformers then rotates the first 4 dims with 2 frequencies "
                                                "at exponents 2i/3, which rope() does not compute"},
        {"rope(x, partial_rotary_factor=1.5)", "rotates 6 dims; it must be at most 1"},
        {"attention(x, x, x, causal=False)", "attention(): only causal=True is supported"},
        {"attention(x, x, x, scale=0)", "attention(): scale must be a positive number"},
        {"attention(x, x, x, softcap=-1)", "attention(): softcap must be a number, 0 for none"},
        {"gelu(x, approximate=True)", "gelu(): approximate must be \"none\" or \"tanh\" (a string)"},
        {"activation(x, \"quick_gleu\")", "activation(): \"quick_gleu\" is no activation transformers defines"},
        {"activation(x)", "activation(x, name) takes a tensor and a Hugging Face activation name"},
        {"softcap(x, -2.0)", "softcap(x, cap) takes a tensor and a number, the cap (0 for none)"},
        {"x * x * \"a\"", "a tensor operator needs two tensors, or a tensor and a number"},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.body);
        TempDir dir;
        dir.write("m.model", op_model(k.body));
        Unit u(bare_plan(dir, dir.path + "/m.model"));
        EXPECT_TRUE(u.has_error("model", k.message)) << u.text();
    }
    TempDir dir;
    dir.write("m.model", "config { rope_theta = 5e5 }\n" + op_model("merge_heads(rope(rope(x, theta=rope_theta), theta=1e4))"));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
}

// attention()'s q [b, s, h, d] against k and v [b, s, g, d]: g must divide
// h (transformers' repeat_kv makes h // g copies of each kv head), the rest
// agree
TEST(BrokenModel, AttentionShapes)
{
    struct Case {
        std::string k, v, message;
    } cases[] = {
        {"[1, 2, 4, 4]", "[1, 2, 4, 4]", "attention(): q has 6 heads but k and v have 4: the key/value heads must "
                                         "divide the query heads"},
        {"[1, 2, 12, 4]", "[1, 2, 12, 4]", "attention(): q has 6 heads but k and v have 12"},
        {"[1, 2, 3, 8]", "[1, 2, 3, 8]", "the same batch, sequence and head_dim"},
        {"[1, 2, 3, 4]", "[1, 2, 2, 4]", "the same batch, sequence and head_dim (k and v alike)"},
        {"[1, 3, 3, 4]", "[1, 3, 3, 4]", "the same batch, sequence and head_dim"},
    };
    for (const Case &k : cases) {
        SCOPED_TRACE(k.k + " " + k.v);
        TempDir dir;
        dir.write("m.model", "module Root {\n    def forward(q: [1, 2, 6, 4], k: " + k.k + ", v: " + k.v +
                                 ") {\n        return attention(q, k, v, causal=True)\n    }\n}\n");
        Unit u(bare_plan(dir, dir.path + "/m.model"));
        EXPECT_TRUE(u.has_error("model", k.message)) << u.text();
    }
    TempDir dir;   // grouped query attention: 3 kv heads for 6 query heads
    dir.write("m.model", "module Root {\n    def forward(q: [1, 2, 6, 4], k: [1, 2, 3, 4]) {\n"
                         "        return merge_heads(attention(q, k, k, causal=True))\n    }\n}\n");
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_EQ(u.u.diags.errors, 0) << u.text();
}

TEST(BrokenModel, TieToAMissingParameter)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = Linear(2, 4, bias=False)\n    tie(\"a.weight\", \"b.weight\")\n" +
                             std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "no parameter 'b.weight'")) << u.text();
}

TEST(BrokenModel, TieOfDifferentShapes)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = Linear(2, 4, bias=False)\n    b = Linear(4, 2, bias=False)\n"
                         "    tie(\"a.weight\", \"b.weight\")\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "shapes differ")) << u.text();
    EXPECT_FALSE(u.u.model.count && u.param("a.weight") && u.param("a.weight")->tied_to);
}

TEST(BrokenModel, DefinedTwice)
{
    TempDir dir;
    dir.write("m.model", "module Root {\n    a = Linear(2, 2)\n" + std::string(tail) +
                             "module Root {\n    b = Linear(2, 2)\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "defined twice")) << u.text();
}

TEST(BrokenModel, NoModuleAtAll)
{
    TempDir dir;
    dir.write("m.model", "config { hidden = 4 }\n");
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "defines no module")) << u.text();
    EXPECT_FALSE(u.u.built);
}

// Compile `plan` in a child process with a time and memory limit. Returns
// how the child ended: "exit N" or "signal N".
std::string compile_in_child(const std::string &plan, unsigned seconds)
{
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
#ifndef __SANITIZE_ADDRESS__   /* AddressSanitizer reserves terabytes of address space for its shadow */
        struct rlimit mem = {1u << 30, 1u << 30};
        setrlimit(RLIMIT_AS, &mem);
#endif
        alarm(seconds);
        tp_unit u;
        tpcc_test::compile(&u, plan);
        bool reported = false;
        for (int i = 0; i < u.diags.count; i++)
            reported |= !strcmp(u.diags.items[i].check, "model") && u.diags.items[i].level == TP_ERROR;
        _exit(reported ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        return "signal " + std::to_string(WTERMSIG(status));
    return "exit " + std::to_string(WEXITSTATUS(status));
}

TEST(BrokenModel, DirectRecursionIsReported)
{
    TempDir dir;
    dir.write("m.model", "module A {\n    a = A()\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "recursive")) << u.text();
    int n = 0;
    for (int i = 0; i < u.u.diags.count; i++)
        n += u.u.diags.items[i].level == TP_ERROR;
    EXPECT_EQ(n, 1) << u.text();
}

TEST(BrokenModel, MutualRecursionIsReported)
{
    TempDir dir;
    dir.write("m.model", "module A {\n    b = B()\n" + std::string(tail) + "module B {\n    a = A()\n" + std::string(tail));
    Unit u(bare_plan(dir, dir.path + "/m.model"));
    EXPECT_TRUE(u.has_error("model", "recursive")) << u.text();
}

// A module with two recursive members must not take 2^depth steps.
TEST(BrokenModel, BranchingRecursionDoesNotHang)
{
    TempDir dir;
    std::string plan = dir.path + "/m.plan";
    dir.write("m.model", "module A {\n    a = A()\n    b = A()\n" + std::string(tail));
    dir.write("m.plan", "model \"m.model\"\n");
    EXPECT_EQ(compile_in_child(plan, 2), "exit 0")
        << "signal 14 is SIGALRM: still instantiating after 2 s; exit 3: no [model] error";
}

TEST(BrokenModel, RecursionThroughRepeatDoesNotHang)
{
    TempDir dir;
    std::string plan = dir.path + "/m.plan";
    dir.write("m.model", "module A {\n    l = repeat(A(), 2)\n" + std::string(tail));
    dir.write("m.plan", "model \"m.model\"\n");
    EXPECT_EQ(compile_in_child(plan, 2), "exit 0")
        << "signal 14 is SIGALRM: still instantiating after 2 s; exit 3: no [model] error";
}

}  // namespace
