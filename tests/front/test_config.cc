// Configuration (compiler/front/config.c): config blocks parsed from in-memory
// sources, lazy evaluation, precedence (-D > plan > model), hf() with a
// fixture config.json, floats, and the evaluator's errors.
#include <gtest/gtest.h>

#include <regex>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "compiler/diag/diag.h"
#include "grammar/parse.h"
#include "compiler/diag/source.h"
}

namespace {

std::string fixture(const std::string &name) { return std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/" + name; }

// Sources, diagnostics and a configuration bound from config blocks.
class Cfg {
public:
    Cfg()
    {
        tp_sources_init(&src);
        tp_diags_init(&diags);
        tp_config_init(&cfg, &diags);
    }
    ~Cfg()
    {
        tp_config_free(&cfg);
        for (tp_node *n : asts)
            tp_node_free(n);
        tp_diags_free(&diags);
        tp_sources_free(&src);
    }
    Cfg(const Cfg &) = delete;
    Cfg &operator=(const Cfg &) = delete;

    // Parse `text` as a file and bind each of its config blocks.
    void bind(const std::string &text, tp_cfg_origin origin)
    {
        std::string path = "mem" + std::to_string(asts.size()) + (origin == TP_CFG_MODEL ? ".model" : ".plan");
        int file = tp_sources_add(&src, path.c_str(), text.data(), text.size());
        ASSERT_GE(file, 0);
        int before = diags.errors;
        tp_node *root = tp_parse(&src, file, &diags);
        asts.push_back(root);
        ASSERT_EQ(diags.errors, before) << "syntax error in test input:\n" << text << "\n" << messages();
        int blocks = 0;
        for (int i = 0; i < root->nkids; i++)
            if (root->kids[i]->kind == N_CONFIG) {
                tp_config_bind_block(&cfg, root->kids[i], origin);
                blocks++;
            }
        ASSERT_GT(blocks, 0) << "no config block in test input";
    }

    // -D name=value; returns the error message, "" on success.
    std::string define(const std::string &assignment)
    {
        char err[512] = "";
        int rc = tp_config_override(&cfg, assignment.c_str(), err, sizeof err);
        if (rc == 0)
            EXPECT_STREQ(err, "") << "success with a message";
        else
            EXPECT_STRNE(err, "") << "failure without a message";
        return rc == 0 ? "" : (err[0] ? err : "(failed)");
    }

    bool get(const char *name, int64_t *out) { return tp_config_get(&cfg, name, TP_NO_SPAN, out); }

    int64_t value(const char *name)
    {
        int64_t v = -424242;
        EXPECT_TRUE(get(name, &v)) << "evaluating " << name << ":\n" << messages();
        return v;
    }

    // A float entry's value; fails the test for anything else.
    double real(const char *name)
    {
        tp_cfg_value v = {};
        EXPECT_TRUE(tp_config_value(&cfg, name, TP_NO_SPAN, &v)) << "evaluating " << name << ":\n" << messages();
        EXPECT_TRUE(v.is_float) << name << " is the integer " << v.i;
        return v.f;
    }

    // The definition of `name`, evaluated as a size (where an integer is needed).
    bool size(const char *name, int64_t *out)
    {
        for (int i = 0; i < cfg.count; i++)
            if (!strcmp(cfg.items[i].name, name) && cfg.items[i].expr)
                return tp_eval_size(&cfg, cfg.items[i].expr, out);
        ADD_FAILURE() << "no definition of " << name;
        return false;
    }

    std::string messages() const
    {
        std::string out;
        for (int i = 0; i < diags.count; i++) {
            const tp_diag &g = diags.items[i];
            out += std::string(g.level == TP_ERROR ? "error" : g.level == TP_WARNING ? "warning" : "note") +
                   "[" + g.check + "]: " + g.message + "\n";
            for (int h = 0; h < g.nhelps; h++)
                out += std::string("  help: ") + g.helps[h] + "\n";
        }
        return out;
    }

    // The only error so far; fails the test unless there is exactly one.
    const tp_diag *only_error() const
    {
        const tp_diag *found = nullptr;
        int n = 0;
        for (int i = 0; i < diags.count; i++)
            if (diags.items[i].level == TP_ERROR) {
                found = &diags.items[i];
                n++;
            }
        EXPECT_EQ(n, 1) << messages();
        return n == 1 ? found : nullptr;
    }

    // Evaluate `name`, expect failure with one "config" error containing `text`.
    void expect_error(const char *name, const std::string &text)
    {
        int64_t v = 0;
        EXPECT_FALSE(get(name, &v)) << name << " evaluated to " << v;
        const tp_diag *g = only_error();
        if (!g)
            return;
        EXPECT_STREQ(g->check, "config");
        EXPECT_NE(std::string(g->message).find(text), std::string::npos)
            << "message: " << g->message << "\nwanted: " << text;
        EXPECT_GE(g->span.file, 0) << "error without a location";
    }

    tp_sources src;
    tp_diags diags;
    tp_config cfg;
    std::vector<tp_node *> asts;
};

const char *const llama_block = R"(config {
    hidden = 4096
    heads = 32
    kv_heads = 8
    layers = 32
    head_dim = hidden // heads
    kv_dim = kv_heads * head_dim
    tie_embeddings = False
    tp = 1
}
)";

// --- evaluation and laziness -----------------------------------------------------

TEST(Config, EvaluatesDerivedNames)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("head_dim"), 128);
    EXPECT_EQ(c.value("kv_dim"), 1024);
    EXPECT_EQ(c.value("tie_embeddings"), 0);
    EXPECT_TRUE(tp_config_has(&c.cfg, "head_dim"));
    EXPECT_FALSE(tp_config_has(&c.cfg, "ffn"));
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(Config, OverrideChangesDependentNames)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.define("hidden=128"), "");
    EXPECT_EQ(c.value("hidden"), 128);
    EXPECT_EQ(c.value("head_dim"), 4);        // 128 // 32, not 4096 // 32
    EXPECT_EQ(c.value("kv_dim"), 32);
}

TEST(Config, DefinitionOrderDoesNotMatter)
{
    Cfg c;
    c.bind("config { head_dim = hidden // heads, hidden = 1024, heads = 8 }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("head_dim"), 128);
}

TEST(Config, UnusedBrokenNamesAreNotEvaluated)
{
    Cfg c;
    c.bind("config { ok = 3, broken = 1 // 0, worse = nowhere + 1 }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("ok"), 3);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(Config, LaterBindingInABlockWins)
{
    Cfg c;
    c.bind("config { a = 1, a = 2 }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("a"), 2);
}

// --- precedence ---------------------------------------------------------------------

TEST(Config, PlanBlockOverridesModelBlock)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    c.bind("config { hidden = 2048, tp = 2 }", TP_CFG_PLAN);
    EXPECT_EQ(c.value("hidden"), 2048);
    EXPECT_EQ(c.value("head_dim"), 64);
    EXPECT_EQ(c.value("tp"), 2);
    EXPECT_EQ(c.value("layers"), 32);
}

TEST(Config, CommandLineOverridesPlanAndModel)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    c.bind("config { hidden = 2048, tp = 2 }", TP_CFG_PLAN);
    EXPECT_EQ(c.define("tp=8"), "");
    EXPECT_EQ(c.define("layers=2"), "");
    EXPECT_EQ(c.value("tp"), 8);
    EXPECT_EQ(c.value("layers"), 2);
    EXPECT_EQ(c.value("hidden"), 2048);
}

TEST(Config, FilesBoundAfterAFlagDoNotOverrideIt)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.define("tp=4"), "");
    c.bind("config { tp = 2 }", TP_CFG_PLAN);
    c.bind("config { tp = 16 }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("tp"), 4);
}

TEST(Config, ModelBlockBoundAfterThePlanDoesNotOverrideIt)
{
    Cfg c;
    c.bind("config { hidden = 2048 }", TP_CFG_PLAN);
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("hidden"), 2048);
    EXPECT_EQ(c.value("head_dim"), 64);
}

TEST(Config, OriginIsRecorded)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    c.bind("config { hidden = 2048 }", TP_CFG_PLAN);
    c.define("tp=2");
    for (int i = 0; i < c.cfg.count; i++) {
        const tp_cfg_entry &e = c.cfg.items[i];
        tp_cfg_origin want = !strcmp(e.name, "tp") ? TP_CFG_CMDLINE
                             : !strcmp(e.name, "hidden") ? TP_CFG_PLAN : TP_CFG_MODEL;
        EXPECT_EQ(e.origin, want) << e.name;
    }
}

// --- -D values ---------------------------------------------------------------------

TEST(ConfigDefine, Booleans)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.define("tie_embeddings=true"), "");
    EXPECT_EQ(c.value("tie_embeddings"), 1);
    EXPECT_EQ(c.define("tie_embeddings=false"), "");
    EXPECT_EQ(c.value("tie_embeddings"), 0);
    EXPECT_EQ(c.define("tie_embeddings=True"), "");
    EXPECT_EQ(c.value("tie_embeddings"), 1);
    EXPECT_EQ(c.define("tie_embeddings=False"), "");
    EXPECT_EQ(c.value("tie_embeddings"), 0);
    bool found = false;
    for (int i = 0; i < c.cfg.count; i++)
        if (!strcmp(c.cfg.items[i].name, "tie_embeddings")) {
            found = true;
            EXPECT_TRUE(c.cfg.items[i].is_bool);
        }
    EXPECT_TRUE(found);
}

TEST(ConfigDefine, NegativeAndLargeIntegers)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.define("layers=-3"), "");
    EXPECT_EQ(c.value("layers"), -3);
    EXPECT_EQ(c.define("hidden=9223372036854775807"), "");
    EXPECT_EQ(c.value("hidden"), INT64_MAX);
}

TEST(ConfigDefine, UnknownNameSuggests)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    std::string err = c.define("hiden=2");
    EXPECT_NE(err.find("unknown configuration name 'hiden'"), std::string::npos) << err;
    EXPECT_NE(err.find("did you mean 'hidden'"), std::string::npos) << err;
    EXPECT_FALSE(tp_config_has(&c.cfg, "hiden")) << "an unknown -D name must not be bound";
    err = c.define("zzzzzzzz=2");
    EXPECT_NE(err.find("zzzzzzzz"), std::string::npos) << err;
    EXPECT_EQ(err.find("did you mean"), std::string::npos) << err;
}

TEST(ConfigDefine, RejectsNonIntegers)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    // decimal only, as the integer a plan writes: strtoll alone takes the blank and the '+'
    for (const char *bad : {"tp=two", "tp=", "tp=2x", "tp=0x10", "tp=2 ", "tp= 2", "tp=+2", "tp=-", "tp=--2"}) {
        std::string err = c.define(bad);
        EXPECT_NE(err, "") << bad << " was accepted";
        EXPECT_NE(err.find("an integer, a float or true/false"), std::string::npos) << bad << ": " << err;
    }
    for (const char *huge : {"tp=99999999999999999999", "tp=-9223372036854775809"}) {
        std::string err = c.define(huge);
        EXPECT_NE(err.find("is beyond a 64-bit integer's range"), std::string::npos) << huge << ": " << err;
    }
    EXPECT_EQ(c.define("tp=-9223372036854775808"), "") << "the range's ends are integers";
    EXPECT_EQ(c.value("tp"), INT64_MIN);
    EXPECT_EQ(c.define("tp=1"), "");
    EXPECT_EQ(c.value("tp"), 1) << "a rejected -D must leave the value alone";
}

TEST(ConfigDefine, Floats)
{
    Cfg c;
    c.bind("config { eps = 1e-6, theta = 10000.0, tp = 1 }", TP_CFG_MODEL);
    EXPECT_EQ(c.define("eps=1e-5"), "");
    EXPECT_EQ(c.real("eps"), 1e-5);
    EXPECT_EQ(c.define("theta=500000.0"), "");
    EXPECT_EQ(c.real("theta"), 500000.0);
    const std::vector<std::pair<const char *, double>> cases = {
        {"-2.5", -2.5}, {".5", 0.5}, {"5.", 5.0}, {"5e5", 5e5}, {"1E-06", 1e-6}, {"1e+06", 1e6}};
    for (auto [text, want] : cases) {
        EXPECT_EQ(c.define(std::string("eps=") + text), "") << text;
        EXPECT_EQ(c.real("eps"), want) << text;
    }
    EXPECT_EQ(c.define("theta=10000"), "");
    EXPECT_EQ(c.value("theta"), 10000) << "an integer stays an integer";
}

TEST(ConfigDefine, RejectsMalformedFloats)
{
    Cfg c;
    c.bind("config { eps = 1e-6 }", TP_CFG_MODEL);
    // decimal as an integer is: strtod alone takes the blank, the '+' and hex
    for (const char *bad : {"eps=1e", "eps=1e+", "eps=1.5.2", "eps=.", "eps=e5", "eps=inf", "eps=nan", "eps=0x1p3",
                            "eps=1_000.5", "eps=1.5 ", "eps=+1.5", "eps=+1E-06", "eps= 1.5", "eps=0x10.8",
                            "eps=-+1.5", "eps=+.5"}) {
        std::string err = c.define(bad);
        EXPECT_NE(err.find("an integer, a float or true/false"), std::string::npos) << bad << ": " << err;
    }
    for (const char *bad : {"eps=1e999", "eps=1e-999"}) {
        std::string err = c.define(bad);
        EXPECT_NE(err.find("beyond a double's range"), std::string::npos) << bad << ": " << err;
    }
    EXPECT_EQ(c.real("eps"), 1e-6) << "a rejected -D must leave the value alone";
}

TEST(ConfigDefine, FloatWhereAnIntegerIsNeeded)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_EQ(c.define("tp=2.5"), "") << "a -D value's use decides whether it may be a float";
    int64_t v;
    EXPECT_FALSE(c.get("tp", &v));
    ASSERT_EQ(c.diags.errors, 1) << c.messages();
    EXPECT_STREQ(c.diags.items[0].message, "'tp' is 2.5, a float; it must be an integer");
}

TEST(ConfigDefine, RejectsMalformedAssignments)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    EXPECT_NE(c.define("tp"), "");
    EXPECT_NE(c.define("=2"), "");
    EXPECT_NE(c.define(""), "");
}

// --- operators ------------------------------------------------------------------------

TEST(ConfigEval, Arithmetic)
{
    Cfg c;
    c.bind(R"(config {
        add = 2 + 3
        sub = 2 - 3
        mul = 6 * 7
        fdiv = 7 // 2
        nfdiv = -7 // 2
        fdivn = 7 // -2
        exact = 8 / 2
        mod = 7 % 3
        neg = -(2 + 3)
        prec = 2 + 3 * 4
        paren = (2 + 3) * 4
        ru = round_up(32001, 64)
        ru_exact = round_up(64, 64)
        lo = min(3, 5)
        hi = max(3, 5)
        cond_t = 10 if 1 else 20
        cond_f = 10 if 0 else 20
        nt = not 0
        nf = not 5
        conj = 3 and 4
        disj = 0 or 0
        tr = True
        fl = False
    })",
           TP_CFG_MODEL);
    EXPECT_EQ(c.value("add"), 5);
    EXPECT_EQ(c.value("sub"), -1);
    EXPECT_EQ(c.value("mul"), 42);
    EXPECT_EQ(c.value("fdiv"), 3);
    EXPECT_EQ(c.value("nfdiv"), -4) << "// rounds toward minus infinity, as in Python";
    EXPECT_EQ(c.value("fdivn"), -4);
    EXPECT_EQ(c.value("exact"), 4);
    EXPECT_EQ(c.value("mod"), 1);
    EXPECT_EQ(c.value("neg"), -5);
    EXPECT_EQ(c.value("prec"), 14);
    EXPECT_EQ(c.value("paren"), 20);
    EXPECT_EQ(c.value("ru"), 32064);
    EXPECT_EQ(c.value("ru_exact"), 64);
    EXPECT_EQ(c.value("lo"), 3);
    EXPECT_EQ(c.value("hi"), 5);
    EXPECT_EQ(c.value("cond_t"), 10);
    EXPECT_EQ(c.value("cond_f"), 20);
    EXPECT_EQ(c.value("nt"), 1);
    EXPECT_EQ(c.value("nf"), 0);
    EXPECT_EQ(c.value("conj"), 1);
    EXPECT_EQ(c.value("disj"), 0);
    EXPECT_EQ(c.value("tr"), 1);
    EXPECT_EQ(c.value("fl"), 0);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigEval, ModuloFollowsPythonLikeFloorDivision)
{
    // a == (a // b) * b + a % b must hold, as in Python: -7 // 2 == -4, -7 % 2 == 1
    Cfg c;
    c.bind("config { a = -7 % 2, b = 7 % -2, q = -7 // 2, id = (-7 // 2) * 2 + (-7 % 2) }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("a"), 1);
    EXPECT_EQ(c.value("b"), -1);
    EXPECT_EQ(c.value("q"), -4);
    EXPECT_EQ(c.value("id"), -7);
}

TEST(ConfigEval, ShortCircuitAndConditionalSkipTheOtherSide)
{
    Cfg c;
    c.bind(R"(config {
        a = 0 and (1 // 0)
        o = 1 or (1 // 0)
        t = 1 if 1 else 1 // 0
        f = 1 // 0 if 0 else 2
    })",
           TP_CFG_MODEL);
    EXPECT_EQ(c.value("a"), 0);
    EXPECT_EQ(c.value("o"), 1);
    EXPECT_EQ(c.value("t"), 1);
    EXPECT_EQ(c.value("f"), 2);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

// --- floats --------------------------------------------------------------------------

TEST(ConfigFloat, LiteralsInABlock)
{
    Cfg c;
    c.bind("config { a = 1e-5, b = 1e-06, c = 500000.0, d = .5, e = 5e5, f = 1_000.25, g = -1e-5, h = 2. }",
           TP_CFG_PLAN);
    EXPECT_EQ(c.real("a"), 1e-5);
    EXPECT_EQ(c.real("b"), 1e-6);
    EXPECT_EQ(c.real("c"), 500000.0);
    EXPECT_EQ(c.real("d"), 0.5);
    EXPECT_EQ(c.real("e"), 500000.0);
    EXPECT_EQ(c.real("f"), 1000.25);
    EXPECT_EQ(c.real("g"), -1e-5);
    EXPECT_EQ(c.real("h"), 2.0);
    for (int i = 0; i < c.cfg.count; i++) {
        EXPECT_TRUE(c.cfg.items[i].is_float) << c.cfg.items[i].name;
        EXPECT_FALSE(c.cfg.items[i].is_bool) << c.cfg.items[i].name;
    }
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigFloat, ArithmeticFollowsPython)
{
    Cfg c;
    c.bind(R"(config {
        eps = 1e-5
        theta = 10000.0
        sum = 1 + 0.5
        diff = theta - 1
        prod = 2 * 1.5
        quot = 1.0 / 4
        int_quot = 1 / 4.0
        neg = -eps
        scaled = theta * 50
        lo = min(2, 0.5)
        hi = max(3, 2.5)
        cond = 1.5 if eps else 2
        truth = not 0.0
        both = eps and 1
        exact = 8 / 2
    })",
           TP_CFG_MODEL);
    EXPECT_EQ(c.real("sum"), 1.5);
    EXPECT_EQ(c.real("diff"), 9999.0);
    EXPECT_EQ(c.real("prod"), 3.0);
    EXPECT_EQ(c.real("quot"), 0.25);
    EXPECT_EQ(c.real("int_quot"), 0.25);
    EXPECT_EQ(c.real("neg"), -1e-5);
    EXPECT_EQ(c.real("scaled"), 500000.0);
    EXPECT_EQ(c.real("lo"), 0.5);
    EXPECT_EQ(c.value("hi"), 3) << "min and max keep the chosen operand's type";
    EXPECT_EQ(c.real("cond"), 1.5);
    EXPECT_EQ(c.value("truth"), 1);
    EXPECT_EQ(c.value("both"), 1);
    EXPECT_EQ(c.value("exact"), 4) << "integer / integer stays exact integer division";
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

// == and != compare strings by text and numbers by value; ** is Python's
// power (Gemma's hidden ** 0.5, its legacy hidden_act "gelu").
TEST(ConfigEval, ComparisonAndPowerFollowPython)
{
    Cfg c;
    c.bind(R"(config {
        act = "gelu"
        legacy = "gelu_pytorch_tanh" if act == "gelu" else act
        kept = "gelu_pytorch_tanh" if act == "silu" else act
        s_eq = act == "gelu"
        s_ne = act != "gelu"
        str_num = act == 1
        int_float = 1 == 1.0
        ints_ne = 2 != 3
        sqrt = 3072 ** 0.5
        ipow = 2 ** 10
        neg = -2 ** 2
        inv = 2 ** -1
        one = 1 ** 1000000000000
        prec = 2 * 3 ** 2
    })",
           TP_CFG_MODEL);
    tp_cfg_value v = {};
    ASSERT_TRUE(tp_config_value(&c.cfg, "legacy", TP_NO_SPAN, &v)) << c.messages();
    EXPECT_STREQ(v.s, "gelu_pytorch_tanh");
    ASSERT_TRUE(tp_config_value(&c.cfg, "kept", TP_NO_SPAN, &v)) << c.messages();
    EXPECT_STREQ(v.s, "gelu");
    EXPECT_EQ(c.value("s_eq"), 1);
    EXPECT_EQ(c.value("s_ne"), 0);
    EXPECT_EQ(c.value("str_num"), 0) << "a string never equals a number";
    EXPECT_EQ(c.value("int_float"), 1);
    EXPECT_EQ(c.value("ints_ne"), 1);
    EXPECT_EQ(c.real("sqrt"), sqrt(3072.0));
    EXPECT_EQ(c.value("ipow"), 1024);
    EXPECT_EQ(c.value("neg"), -4) << "-2 ** 2 is -(2 ** 2), as in Python";
    EXPECT_EQ(c.real("inv"), 0.5) << "a negative integer exponent gives a float";
    EXPECT_EQ(c.value("one"), 1);
    EXPECT_EQ(c.value("prec"), 18);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigError, PowerOverflowAndNonRealResults)
{
    struct Case {
        const char *expr, *message;
    } cases[] = {
        {"2 ** 63", "integer overflow"},
        {"10.0 ** 400", "float overflow"},
        {"0 ** -1", "division by zero"},
        {"(-8) ** 0.5", "not a real number"},
    };
    for (const Case &k : cases) {
        Cfg c;
        c.bind(std::string("config { x = ") + k.expr + " }", TP_CFG_MODEL);
        SCOPED_TRACE(k.expr);
        c.expect_error("x", k.message);
    }
}

TEST(ConfigFloat, FloorDivisionModuloAndRoundUpTakeIntegers)
{
    struct Case {
        const char *expr, *message;
    } cases[] = {
        {"7.5 // 2", "'7.5' is 7.5, a float; an operand of // must be an integer"},
        {"7 % half", "'half' is 0.5, a float; an operand of % must be an integer"},
        {"round_up(10, half)", "'half' is 0.5, a float; an argument of round_up() must be an integer"},
    };
    for (const Case &k : cases) {
        Cfg c;
        c.bind(std::string("config { half = 0.5, x = ") + k.expr + " }", TP_CFG_MODEL);
        SCOPED_TRACE(k.expr);
        c.expect_error("x", k.message);
    }
}

TEST(ConfigFloat, OverflowAndDivisionByZero)
{
    for (const char *e : {"1e308 * 10", "-1e308 - 1e308"}) {
        Cfg c;
        c.bind(std::string("config { x = ") + e + " }", TP_CFG_MODEL);
        SCOPED_TRACE(e);
        c.expect_error("x", "float overflow");
    }
    Cfg c;
    c.bind("config { x = 1.5 / 0 }", TP_CFG_MODEL);
    c.expect_error("x", "division by zero");
}

TEST(ConfigFloat, InASizeIsAnErrorAtTheUse)
{
    Cfg c;
    c.bind("config {\n  x = 1e-5\n  hidden = x\n}", TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.size("hidden", &v));
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    EXPECT_STREQ(g->check, "config");
    EXPECT_STREQ(g->message, "'x' is 1e-05, a float; a size must be an integer");
    EXPECT_EQ(g->span.line, 3) << "at the use";
    EXPECT_EQ(g->span.col, 12);
    ASSERT_EQ(g->nnotes, 1) << c.messages();
    EXPECT_STREQ(g->notes[0].message, "'x' is defined here");
    EXPECT_EQ(g->notes[0].span.line, 2);
}

TEST(ConfigFloat, ExpressionInASizeIsNamedByItsText)
{
    Cfg c;
    c.bind("config { hidden = 4096, ffn = hidden * 2.5 }", TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.size("ffn", &v));
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    EXPECT_STREQ(g->message, "'hidden * 2.5' is 10240.0, a float; a size must be an integer");
    EXPECT_GE(g->span.file, 0);
}

TEST(ConfigFloat, IntegerLookupOfAFloatPointsAtTheDefinition)
{
    Cfg c;
    c.bind("config { tp = 2.0 }", TP_CFG_PLAN);
    c.expect_error("tp", "'tp' is 2.0, a float; it must be an integer");
}

// --- errors --------------------------------------------------------------------------

TEST(ConfigError, DivisionByZero)
{
    for (const char *op : {"//", "/", "%"}) {
        Cfg c;
        c.bind(std::string("config { zero = 0, x = 4 ") + op + " zero }", TP_CFG_MODEL);
        c.expect_error("x", "division by zero");
    }
}

TEST(ConfigError, InexactSlashSaysWriteFloorDivision)
{
    Cfg c;
    c.bind("config { hidden = 4096, heads = 48, head_dim = hidden / heads }", TP_CFG_MODEL);
    c.expect_error("head_dim", "write //");
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    EXPECT_NE(std::string(g->message).find("4096 / 48"), std::string::npos) << g->message;
}

TEST(ConfigError, OverflowIsReported)
{
    const char *cases[] = {
        "9223372036854775807 + 1",
        "-9223372036854775807 - 2",
        "4611686018427387904 * 2",
        "-(-9223372036854775807 - 1)",
        "(-9223372036854775807 - 1) // -1",
        "round_up(9223372036854775807, 2)",
    };
    for (const char *e : cases) {
        Cfg c;
        c.bind(std::string("config { x = ") + e + " }", TP_CFG_MODEL);
        SCOPED_TRACE(e);
        c.expect_error("x", "overflow");
    }
}

TEST(ConfigError, LargestValuesDoNotOverflow)
{
    Cfg c;
    c.bind("config { a = 9223372036854775806 + 1, b = -9223372036854775807 - 1 }", TP_CFG_MODEL);
    EXPECT_EQ(c.value("a"), INT64_MAX);
    EXPECT_EQ(c.value("b"), INT64_MIN);
}

TEST(ConfigError, SelfReference)
{
    Cfg c;
    c.bind("config { a = a + 1 }", TP_CFG_MODEL);
    c.expect_error("a", "'a' is defined in terms of itself");
    int64_t v;
    EXPECT_FALSE(c.get("a", &v)) << "a failed name must keep failing";
    EXPECT_EQ(c.diags.errors, 1) << "reported once:\n" << c.messages();
}

TEST(ConfigError, MutualCycle)
{
    Cfg c;
    c.bind("config { a = b * 2, b = c + 1, c = a // 2, d = 5 }", TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.get("a", &v));
    EXPECT_FALSE(c.get("b", &v));
    EXPECT_FALSE(c.get("c", &v));
    EXPECT_EQ(c.diags.errors, 1) << "a cycle is one error:\n" << c.messages();
    EXPECT_NE(c.messages().find("defined in terms of itself"), std::string::npos) << c.messages();
    EXPECT_EQ(c.value("d"), 5);
}

TEST(ConfigError, UnknownNameWithDidYouMean)
{
    Cfg c;
    c.bind("config { hidden = 4096, heads = 32, head_dim = hiden // heads }", TP_CFG_MODEL);
    c.expect_error("head_dim", "unknown name 'hiden'");
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    ASSERT_EQ(g->nhelps, 1) << c.messages();
    EXPECT_STREQ(g->helps[0], "did you mean 'hidden'?");
    // the error points at the misspelt name, not the whole definition
    EXPECT_EQ(g->span.length, 5);
}

TEST(ConfigError, UnknownNameWithoutSuggestion)
{
    Cfg c;
    c.bind("config { hidden = 4096, x = qqqqqqqq + 1 }", TP_CFG_MODEL);
    c.expect_error("x", "unknown name 'qqqqqqqq'");
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    EXPECT_EQ(g->nhelps, 0) << c.messages();
}

TEST(ConfigError, LookupWithoutLocationIsSilent)
{
    Cfg c;
    c.bind(llama_block, TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.get("nope", &v));
    EXPECT_EQ(c.diags.count, 0);
}

TEST(ConfigError, NonIntegerExpressions)
{
    Cfg c;
    c.bind("config { s = \"text\", t = (1, 2), f = foo(1, 2) }", TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.get("s", &v));
    EXPECT_FALSE(c.get("t", &v));
    EXPECT_FALSE(c.get("f", &v));
    EXPECT_EQ(c.diags.errors, 3) << c.messages();
}

TEST(ConfigError, RoundUpNeedsAPositiveMultiple)
{
    Cfg c;
    c.bind("config { x = round_up(10, 0) }", TP_CFG_MODEL);
    c.expect_error("x", "positive");
}

// --- hf() ------------------------------------------------------------------------------

const char *const hf_block = R"(config {
    hidden = hf("hidden_size", 4096)
    heads = hf("num_attention_heads", 32)
    head_dim = hf("head_dim", hidden // heads)
    layers = hf("num_hidden_layers", 32)
    tie = hf("tie_word_embeddings", False)
    kind = hf("model_type", 1)
    big = hf("big", 0)
    lazy_default = hf("hidden_size", 1 // 0)
}
)";

TEST(ConfigHf, DefaultsWithoutAConfigJson)
{
    Cfg c;
    c.bind(hf_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("hidden"), 4096);
    EXPECT_EQ(c.value("head_dim"), 128);
    EXPECT_EQ(c.value("layers"), 32);
    EXPECT_EQ(c.value("tie"), 0);
    EXPECT_EQ(c.value("kind"), 1);
}

TEST(ConfigHf, ReadsPresentKeysAndFallsBackOnMissingAndNull)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("hf-values.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(hf_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("hidden"), 1024);                 // present
    EXPECT_EQ(c.value("heads"), 16);
    EXPECT_EQ(c.value("head_dim"), 64);                 // null: default, itself from the json
    EXPECT_EQ(c.value("layers"), 32);                   // missing: default
    EXPECT_EQ(c.value("tie"), 1);                       // boolean true
    EXPECT_EQ(c.value("big"), INT64_C(9007199254740993));
    EXPECT_EQ(c.value("lazy_default"), 1024) << "the default must not be evaluated when the key is present";
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

// kv_heads = hf("num_key_value_heads", heads, standalone=8), as models/llama.model writes it.
const char *const kv_heads_block = R"(config {
    heads    = hf("num_attention_heads", 32)
    kv_heads = hf("num_key_value_heads", heads, standalone=8)
})";

TEST(ConfigHf, StandaloneIsTheValueWithoutAConfigJson)
{
    Cfg c;
    c.bind(kv_heads_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("kv_heads"), 8);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigHf, AbsentKeyTakesHuggingFacesDefaultFromAnotherValue)
{
    Cfg c;
    // 16 heads and no num_key_value_heads: LlamaConfig makes it 16, not the standalone 8
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("llama-no-kv-heads.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(kv_heads_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("kv_heads"), 16);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigHf, ModelDirectoryMeansItsConfigJson)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("qwen2.5-7b").c_str(), &c.src), 0) << c.messages();
    EXPECT_EQ(std::string(c.cfg.hf_path), fixture("qwen2.5-7b/config.json"));
    c.bind(kv_heads_block, TP_CFG_MODEL);
    EXPECT_EQ(c.value("heads"), 28);
    EXPECT_EQ(c.value("kv_heads"), 4);
}

// Mistral's sliding_window defaults to 4096 when absent, and null turns it
// off: null= gives what Hugging Face makes of a JSON null.
TEST(ConfigHf, NullTakesTheNullValueAndAbsenceTheDefault)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("hf-values.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(R"(config {
        seq = 2048
        window = hf("head_dim", 4096, null=seq)
        absent = hf("sliding_window", 4096, null=seq)
        present = hf("num_attention_heads", 4096, null=seq, standalone=1)
    })", TP_CFG_MODEL);
    EXPECT_EQ(c.value("window"), 2048) << "head_dim is null in the fixture";
    EXPECT_EQ(c.value("absent"), 4096);
    EXPECT_EQ(c.value("present"), 16);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigHf, KeywordsAreStandaloneAndNullOnce)
{
    Cfg c;
    c.bind("config { x = hf(\"a\", 1, null=2, null=3) }", TP_CFG_MODEL);
    c.expect_error("x", "hf() takes a key string, Hugging Face's default and optionally");
}

TEST(ConfigHf, StandaloneMustBeTheThirdArgument)
{
    Cfg c;
    c.bind("config { x = hf(\"a\", 1, alone=2) }", TP_CFG_MODEL);
    c.expect_error("x", "hf() takes a key string, Hugging Face's default and optionally");
}

TEST(ConfigHf, StringValueIsAnError)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("hf-values.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(hf_block, TP_CFG_MODEL);
    c.expect_error("kind", "'kind' is \"llama\", a string (\"model_type\" of ");
    EXPECT_NE(c.messages().find("hf-values.config.json"), std::string::npos) << "name the file:\n" << c.messages();
}

TEST(ConfigHf, RealsAreFloatsAndIntegersStayIntegers)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("llama3-attrs.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(R"(config {
        rms_norm_eps = hf("rms_norm_eps", 1e-6)
        rope_theta = hf("rope_theta", 10000.0)
        missing = hf("partial_rotary_factor", 1.0)
    })",
           TP_CFG_MODEL);
    EXPECT_EQ(c.real("rms_norm_eps"), 1e-5);
    EXPECT_EQ(c.real("rope_theta"), 500000.0);
    EXPECT_EQ(c.real("missing"), 1.0);
    Cfg i;
    ASSERT_EQ(tp_config_load_hf(&i.cfg, fixture("hf-values.config.json").c_str(), &i.src), 0) << i.messages();
    i.bind("config { theta = hf(\"hidden_size\", 10000.0) }", TP_CFG_MODEL);
    EXPECT_EQ(i.value("theta"), 1024) << "a JSON integer where the default is a float stays an integer";
    EXPECT_EQ(c.diags.count + i.diags.count, 0) << c.messages() << i.messages();
}

TEST(ConfigHf, RealWhereAnIntegerIsNeededIsAnError)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("hf-values.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind("config {\n  layers = hf(\"rope_theta\", 32)\n  n = layers\n}", TP_CFG_MODEL);
    int64_t v;
    EXPECT_FALSE(c.size("n", &v));
    const tp_diag *g = c.only_error();
    ASSERT_TRUE(g);
    EXPECT_STREQ(g->message, "'layers' is 10000.0, a float; a size must be an integer");
    ASSERT_EQ(g->nnotes, 1);
    EXPECT_EQ(g->notes[0].span.line, 2) << "the note shows the hf() call";
    EXPECT_NE(std::string(g->notes[0].message).find("as \"rope_theta\" of "), std::string::npos) << g->notes[0].message;
    EXPECT_NE(std::string(g->notes[0].message).find("hf-values.config.json (a JSON real)"), std::string::npos)
        << g->notes[0].message;
}

TEST(ConfigHf, DefinedOverridesBeatTheJson)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("llama-small.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(hf_block, TP_CFG_MODEL);
    c.bind("config { heads = 8 }", TP_CFG_PLAN);
    EXPECT_EQ(c.define("layers=2"), "");
    EXPECT_EQ(c.value("hidden"), 1024);
    EXPECT_EQ(c.value("heads"), 8);
    EXPECT_EQ(c.value("head_dim"), 128);
    EXPECT_EQ(c.value("layers"), 2);
}

// null= says what a null key means where it differs from the default for
// an absent one (Gemma 2's softcapping: absent is 50.0, null is off)
TEST(ConfigHf, NullArgumentIsTheValueOfANullKey)
{
    Cfg c;
    ASSERT_EQ(tp_config_load_hf(&c.cfg, fixture("hf-values.config.json").c_str(), &c.src), 0) << c.messages();
    c.bind(R"(config {
        null_key = hf("head_dim", 50.0, null=0.0)
        absent   = hf("attn_logit_softcapping", 50.0, null=0.0)
        present  = hf("rope_theta", 1.0, null=0.0)
        both     = hf("head_dim", 1, null=2, standalone=3)
    })",
           TP_CFG_MODEL);
    EXPECT_EQ(c.real("null_key"), 0.0);
    EXPECT_EQ(c.real("absent"), 50.0);
    EXPECT_EQ(c.real("present"), 10000.0);
    EXPECT_EQ(c.value("both"), 2);
    EXPECT_EQ(c.diags.count, 0) << c.messages();
}

TEST(ConfigHf, BadArguments)
{
    for (const char *e : {"hf(1, 2)", "hf(\"hidden_size\")", "hf(\"hidden_size\", 1, 2)", "hf(key=\"a\", default=1)",
                          "hf(\"a\", 1, nul=2)", "hf(\"a\", 1, null=2, null=3)"}) {
        Cfg c;
        c.bind(std::string("config { x = ") + e + " }", TP_CFG_MODEL);
        SCOPED_TRACE(e);
        c.expect_error("x", "hf()");
    }
}

TEST(ConfigHf, LoadErrorsPointIntoTheFile)
{
    struct Case {
        std::string path, text;
        int line, col;
    } cases[] = {
        {fixture("malformed.config.json"), "cannot read Hugging Face config", 0, 0},
        {fixture("array.config.json"), "must be a JSON object", 1, 1},
        {fixture("no-such-file.json"), "unable to open", 1, 1},
    };
    for (const auto &k : cases) {
        Cfg c;
        EXPECT_EQ(tp_config_load_hf(&c.cfg, k.path.c_str(), &c.src), -1) << k.path;
        ASSERT_EQ(c.diags.count, 1) << k.path;
        const tp_diag &g = c.diags.items[0];
        EXPECT_STREQ(g.check, "io");
        EXPECT_NE(std::string(g.message).find(k.text), std::string::npos) << g.message;
        // the file is the location, never repeated in the message
        EXPECT_FALSE(std::regex_search(g.message, std::regex("\\.json:[0-9]"))) << g.message;
        ASSERT_GE(g.span.file, 0);
        EXPECT_EQ(std::string(c.src.files[g.span.file].path), k.path);
        if (k.line) {
            EXPECT_EQ(g.span.line, k.line) << k.path;
            EXPECT_EQ(g.span.col, k.col) << k.path;
        } else {
            EXPECT_GT(g.span.line, 1) << "jansson's line, not line 1";
        }
        EXPECT_EQ(c.cfg.hf_json, nullptr) << "a failed load must not leave a config behind";
    }
}

TEST(ConfigExprText, RendersExpressions)
{
    Cfg c;
    c.bind("config { a = heads * head_dim, b = hidden // heads, c = -x, d = 4096, e = True }", TP_CFG_MODEL);
    const tp_node *block = nullptr;
    for (int i = 0; i < c.asts[0]->nkids; i++)
        if (c.asts[0]->kids[i]->kind == N_CONFIG)
            block = c.asts[0]->kids[i];
    ASSERT_TRUE(block);
    ASSERT_EQ(block->nkids, 5);
    const char *want[] = {"heads * head_dim", "hidden // heads", "-x", "4096", "True"};
    for (int i = 0; i < 5; i++) {
        char *t = tp_expr_text(block->kids[i]->kids[0]);
        EXPECT_STREQ(t, want[i]);
        free(t);
    }
}

}  // namespace
