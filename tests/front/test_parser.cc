// Tests for the parser (grammar/lexer.l, grammar/parser.y) and the AST
// helpers (grammar/ast.c): shipped files, tree shapes via tp_node_dump,
// error messages and recovery, and hostile input.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "grammar/ast.h"
#include "compiler/diag/diag.h"
#include "grammar/parse.h"
#include "compiler/diag/source.h"
}

namespace {

std::string dump(const tp_node *n)
{
    char *s = tp_node_dump(n);
    std::string out(s);
    free(s);
    return out;
}

// A file on disk, to be parsed as loaded by tp_sources_load.
struct File {
    std::string path;
};

// One source text parsed, with its diagnostics.
class Parsed {
public:
    explicit Parsed(const std::string &text)
    {
        init();
        parse(tp_sources_add(&src_, "test.plan", text.data(), text.size()));
    }
    explicit Parsed(const File &f)
    {
        init();
        char err[512];
        int file = tp_sources_load(&src_, f.path.c_str(), err, sizeof err);
        if (file < 0) {
            ADD_FAILURE() << err;
            file = tp_sources_add(&src_, "empty", "", 0);
        }
        parse(file);
    }
    ~Parsed()
    {
        tp_node_free(root_);
        tp_diags_free(&diags_);
        tp_sources_free(&src_);
    }
    Parsed(const Parsed &) = delete;
    Parsed &operator=(const Parsed &) = delete;

    const tp_node *root() const { return root_; }
    const tp_diags &diags() const { return diags_; }
    std::string tree() const { return dump(root_); }

    // "line:col: message" per diagnostic, one per line.
    std::string errors() const
    {
        std::ostringstream out;
        for (int i = 0; i < diags_.count; i++) {
            const tp_diag &d = diags_.items[i];
            out << d.span.line << ":" << d.span.col << ": " << d.message << "\n";
        }
        return out.str();
    }

private:
    void init()
    {
        tp_sources_init(&src_);
        tp_diags_init(&diags_);
    }
    void parse(int file) { root_ = tp_parse(&src_, file, &diags_); }

    tp_sources src_;
    tp_diags diags_;
    tp_node *root_;
};

// The dump of expression `expr`, parsed as the value of a config entry.
std::string expr(const std::string &expr)
{
    Parsed p("config { x = " + expr + " }");
    EXPECT_EQ(p.errors(), "") << expr;
    const tp_node *root = p.root();
    if (root->nkids != 1 || root->kids[0]->nkids != 1)
        return "<no expression: " + p.tree() + ">";
    return dump(root->kids[0]->kids[0]->kids[0]);
}

// ---- shipped files ----

TEST(ParserFiles, ShippedModelsAndPlansParseWithoutDiagnostics)
{
    int files = 0;
    for (const char *dir : {"models", "plans"}) {
        for (const auto &entry :
             std::filesystem::recursive_directory_iterator(std::filesystem::path(TPCC_SOURCE_DIR) / dir)) {
            if (entry.is_directory())
                continue;           // plans/hf/: transformers' own plans
            Parsed p(File{entry.path().string()});
            EXPECT_EQ(p.errors(), "") << entry.path();
            EXPECT_GT(p.root()->nkids, 0) << entry.path();
            files++;
        }
    }
    EXPECT_GE(files, 2);
}

TEST(ParserFiles, LlamaModel)
{
    Parsed p(File{TPCC_SOURCE_DIR "/models/llama.model"});
    ASSERT_EQ(p.errors(), "");
    const tp_node *root = p.root();
    ASSERT_EQ(root->kind, N_FILE);
    ASSERT_EQ(root->nkids, 7);
    EXPECT_EQ(root->kids[6]->kind, N_HF);    // hf { architectures = ... }: what it implements
    EXPECT_EQ(dump(root->kids[6]->kids[0]), "(ASSIGN architectures (TUPLE (STR \"LlamaForCausalLM\")))");
    EXPECT_EQ(root->kids[0]->kind, N_CONFIG);
    EXPECT_EQ(root->kids[0]->nkids, 26);
    EXPECT_EQ(dump(root->kids[0]->kids[12]),
              "(ASSIGN rms_norm_eps (CALL (NAME hf) (ARG (STR \"rms_norm_eps\")) (ARG (FLOAT 1e-06))))");
    const tp_node *causal = root->kids[1];
    ASSERT_EQ(causal->kind, N_MODULE);
    EXPECT_STREQ(causal->name, "LlamaForCausalLM");
    ASSERT_EQ(causal->nkids, 4);
    EXPECT_EQ(dump(causal->kids[0]), "(ASSIGN model (CALL (NAME LlamaModel)))");
    EXPECT_EQ(dump(causal->kids[2]),
              "(EXPR_STMT (CALL (NAME tie) (ARG (STR \"lm_head.weight\")) "
              "(ARG (STR \"model.embed_tokens.weight\")) (ARG when (NAME tie_embeddings))))");
    const tp_node *forward = causal->kids[3];
    ASSERT_EQ(forward->kind, N_DEF);
    EXPECT_STREQ(forward->name, "forward");
    ASSERT_EQ(forward->nkids, 3);
    EXPECT_EQ(dump(forward->kids[0]), "(PARAM input_ids (LIST (NAME batch) (NAME seq)))");
    EXPECT_EQ(forward->kids[2]->kind, N_BLOCK);
    EXPECT_EQ(dump(forward->kids[2]->kids[2]),
              "(RETURN (CALL (NAME cross_entropy) (ARG (NAME logits)) (ARG (NAME labels))))");
}

TEST(ParserFiles, LlamaSpPlan)
{
    Parsed p(File{TPCC_SOURCE_DIR "/plans/llama-sp.plan"});
    ASSERT_EQ(p.errors(), "");
    const tp_node *root = p.root();
    ASSERT_EQ(root->nkids, 5);
    EXPECT_EQ(dump(root->kids[0]), "(MODEL_REF \"../models/llama.model\")");
    EXPECT_EQ(dump(root->kids[1]), "(CONFIG (ASSIGN tp (INT 2)))");
    EXPECT_EQ(dump(root->kids[2]), "(MESH (ARG tp (NAME tp)))");
    const tp_node *layers = root->kids[3];
    ASSERT_EQ(layers->kind, N_PARALLELIZE);
    EXPECT_STREQ(layers->str, "model.layers.*");
    EXPECT_EQ(layers->name, nullptr);
    ASSERT_EQ(layers->nkids, 1);
    EXPECT_EQ(layers->kids[0]->kind, N_DICT);
    EXPECT_EQ(layers->kids[0]->nkids, 11);
    EXPECT_STREQ(root->kids[4]->str, "");
    // The mesh item starts the line after "tp = 2 }" and a blank line.
    EXPECT_EQ(root->kids[2]->span.line, 9);
    EXPECT_EQ(root->kids[2]->span.col, 1);
    EXPECT_EQ(root->kids[2]->span.length, (int)std::string("mesh(tp = tp)").size());
}

// ---- tree shapes ----

TEST(ParserDump, Items)
{
    EXPECT_EQ(Parsed("model \"x.model\"\nconfig { tp = 2 }").tree(),
              "(FILE (MODEL_REF \"x.model\") (CONFIG (ASSIGN tp (INT 2))))");
    EXPECT_EQ(Parsed("mesh(dp = 2, tp = 4,)").tree(),
              "(FILE (MESH (ARG dp (INT 2)) (ARG tp (INT 4))))");
    EXPECT_EQ(Parsed("parallelize \"a.b\" on \"tp\" {}").tree(),
              "(FILE (PARALLELIZE tp \"a.b\" (DICT)))");
    EXPECT_EQ(Parsed("loss_parallel()").tree(), "(FILE (LOSS_PARALLEL))");
    EXPECT_EQ(Parsed("module M { def f() { return 1 } }").tree(),
              "(FILE (MODULE M (DEF f (BLOCK (RETURN (INT 1))))))");
}

// Python's import lines and names for classes, as a plan pasted from a
// training script has them (compiler/plan/pynames.c reads them).
TEST(ParserDump, ImportsAndNames)
{
    Parsed p("from torch.distributed.tensor.parallel import ColwiseParallel as colwise_parallel, RowwiseParallel\n"
             "from torch.distributed.tensor import (\n  Shard,\n  Replicate,\n)\n"
             "import torch.nn as nn\nimport torch\n"
             "a, b = (A, B)\nc = x.y.C\n");
    EXPECT_EQ(p.errors(), "");
    EXPECT_EQ(p.tree(),
              "(FILE (FROM_IMPORT \"torch.distributed.tensor.parallel\" (ALIAS ColwiseParallel \"colwise_parallel\") "
              "(ALIAS RowwiseParallel)) (FROM_IMPORT \"torch.distributed.tensor\" (ALIAS Shard) (ALIAS Replicate)) "
              "(IMPORT nn \"torch.nn\") (IMPORT \"torch\") (UNPACK (NAME a) (NAME b) (TUPLE (NAME A) (NAME B))) "
              "(ASSIGN c (ATTR C (ATTR y (NAME x)))))");
    // a number where a class belongs is a configuration value out of place
    EXPECT_EQ(Parsed("x = 4").errors(),
              "1:5: a top-level assignment may only give a PyTorch class another name "
              "(colwise_parallel = ColwiseParallel)\n");
    EXPECT_EQ(Parsed("from torch import *").errors(), "1:19: unexpected '*', expected identifier or '('\n");
    // the plan language's words are Python's names in an import line
    EXPECT_EQ(Parsed("from a.model import loss_parallel, B as mesh, C as config\nimport a.b as model\n").tree(),
              "(FILE (FROM_IMPORT \"a.model\" (ALIAS loss_parallel) (ALIAS B \"mesh\") (ALIAS C \"config\")) "
              "(IMPORT model \"a.b\"))");
    // Python's target lists and unparenthesized tuples
    EXPECT_EQ(Parsed("a, b = A, B\nc, = (C,)\nd, e, = D, x.E\nf = F, G\n").tree(),
              "(FILE (UNPACK (NAME a) (NAME b) (TUPLE (NAME A) (NAME B))) (UNPACK (NAME c) (TUPLE (NAME C))) "
              "(UNPACK (NAME d) (NAME e) (TUPLE (NAME D) (ATTR E (NAME x)))) (ASSIGN f (TUPLE (NAME F) (NAME G))))");
    EXPECT_EQ(Parsed("a, b = A, B\nmesh(tp = 2)\n").errors(), "");
}

TEST(ParserDump, Separators)
{
    EXPECT_EQ(Parsed("config { a = 1, b = 2; c = 3 d = 4 }").tree(),
              "(FILE (CONFIG (ASSIGN a (INT 1)) (ASSIGN b (INT 2)) (ASSIGN c (INT 3)) "
              "(ASSIGN d (INT 4))))");
    EXPECT_EQ(Parsed("module M { a = f(); tie(\"a\", \"b\"), def g(x,) { y = x; return y } }")
                  .tree(),
              "(FILE (MODULE M (ASSIGN a (CALL (NAME f))) "
              "(EXPR_STMT (CALL (NAME tie) (ARG (STR \"a\")) (ARG (STR \"b\")))) "
              "(DEF g (PARAM x) (BLOCK (ASSIGN y (NAME x)) (RETURN (NAME y))))))");
}

TEST(ParserDump, Tuples)
{
    EXPECT_EQ(expr("()"), "(TUPLE)");
    EXPECT_EQ(expr("(1,)"), "(TUPLE (INT 1))");
    EXPECT_EQ(expr("(1)"), "(INT 1)");
    EXPECT_EQ(expr("(1, 2)"), "(TUPLE (INT 1) (INT 2))");
    EXPECT_EQ(expr("(1, 2, 3,)"), "(TUPLE (INT 1) (INT 2) (INT 3))");
    EXPECT_EQ(expr("((1,),)"), "(TUPLE (TUPLE (INT 1)))");
}

TEST(ParserDump, ListsAndDicts)
{
    EXPECT_EQ(expr("[]"), "(LIST)");
    EXPECT_EQ(expr("[a, b,]"), "(LIST (NAME a) (NAME b))");
    EXPECT_EQ(expr("{}"), "(DICT)");
    EXPECT_EQ(expr("{\"a\": 1, 'b': [2],}"),
              "(DICT (PAIR (STR \"a\") (INT 1)) (PAIR (STR \"b\") (LIST (INT 2))))");
}

TEST(ParserDump, Integers)
{
    EXPECT_EQ(expr("0"), "(INT 0)");
    EXPECT_EQ(expr("32_000"), "(INT 32000)");
    EXPECT_EQ(expr("9223372036854775807"), "(INT 9223372036854775807)");
    EXPECT_EQ(expr("-1"), "(INT -1)");
    EXPECT_EQ(expr("-9223372036854775807"), "(INT -9223372036854775807)");
    EXPECT_EQ(expr("Shard(-1)"), "(CALL (NAME Shard) (ARG (INT -1)))");
    EXPECT_EQ(expr("- -2"), "(INT 2)");
    EXPECT_EQ(expr("1 - -2"), "(BINOP - (INT 1) (INT -2))");
    EXPECT_EQ(expr("-x"), "(NEG (NAME x))");
}

TEST(ParserDump, Floats)
{
    EXPECT_EQ(expr("1e-5"), "(FLOAT 1e-05)");
    EXPECT_EQ(expr("1e-06"), "(FLOAT 1e-06)");
    EXPECT_EQ(expr("500000.0"), "(FLOAT 500000.0)");
    EXPECT_EQ(expr(".5"), "(FLOAT 0.5)");
    EXPECT_EQ(expr("5e5"), "(FLOAT 500000.0)");
    EXPECT_EQ(expr("2."), "(FLOAT 2.0)");
    EXPECT_EQ(expr("1E+3"), "(FLOAT 1000.0)");
    EXPECT_EQ(expr("1_000.000_5"), "(FLOAT 1000.0005)");
    EXPECT_EQ(expr("0.1"), "(FLOAT 0.1)") << "the shortest text that reads back exactly";
    EXPECT_EQ(expr("4.9e-324"), "(FLOAT 5e-324)");
    EXPECT_EQ(expr("-1e-5"), "(FLOAT -1e-05)");
    EXPECT_EQ(expr("- -2.5"), "(FLOAT 2.5)");
    EXPECT_EQ(expr("hidden * 0.5"), "(BINOP * (NAME hidden) (FLOAT 0.5))");
    EXPECT_EQ(expr("rope(q, theta=500000.0)"),
              "(CALL (NAME rope) (ARG (NAME q)) (ARG theta (FLOAT 500000.0)))");
    Parsed p("config { x = 1.5 }");
    const tp_node *f = p.root()->kids[0]->kids[0]->kids[0];
    EXPECT_EQ(f->kind, N_FLOAT);
    EXPECT_EQ(f->fval, 1.5);
    EXPECT_EQ(f->span.col, 14);
    EXPECT_EQ(f->span.length, 3);
}

TEST(ParserDump, Calls)
{
    EXPECT_EQ(expr("Linear(hidden, vocab, bias=False,)"),
              "(CALL (NAME Linear) (ARG (NAME hidden)) (ARG (NAME vocab)) (ARG bias (FALSE)))");
    EXPECT_EQ(expr("f()()"), "(CALL (CALL (NAME f)))");
    EXPECT_EQ(expr("f(None, True, model=1)"),
              "(CALL (NAME f) (ARG (NONE)) (ARG (TRUE)) (ARG model (INT 1)))");
}

TEST(ParserDump, AttributeChains)
{
    EXPECT_EQ(expr("model.layers.mlp"), "(ATTR mlp (ATTR layers (NAME model)))");
    EXPECT_EQ(expr("a.b(c).d"), "(ATTR d (CALL (ATTR b (NAME a)) (ARG (NAME c))))");
}

TEST(ParserDump, Precedence)
{
    EXPECT_EQ(expr("a + b * c"), "(BINOP + (NAME a) (BINOP * (NAME b) (NAME c)))");
    EXPECT_EQ(expr("a - b - c"), "(BINOP - (BINOP - (NAME a) (NAME b)) (NAME c))");
    EXPECT_EQ(expr("(a + b) * c"), "(BINOP * (BINOP + (NAME a) (NAME b)) (NAME c))");
    EXPECT_EQ(expr("-a * b"), "(BINOP * (NEG (NAME a)) (NAME b))");
    EXPECT_EQ(expr("a // b % c / d"),
              "(BINOP / (BINOP % (BINOP // (NAME a) (NAME b)) (NAME c)) (NAME d))");
    EXPECT_EQ(expr("not a and b or c"),
              "(BINOP or (BINOP and (NOT (NAME a)) (NAME b)) (NAME c))");
    EXPECT_EQ(expr("not a + b"), "(NOT (BINOP + (NAME a) (NAME b)))");
    EXPECT_EQ(expr("a or b and c"), "(BINOP or (NAME a) (BINOP and (NAME b) (NAME c)))");
}

TEST(ParserDump, Conditional)
{
    EXPECT_EQ(expr("a if c else b"), "(COND (NAME a) (NAME c) (NAME b))");
    EXPECT_EQ(expr("a if c else b if d else e"),
              "(COND (NAME a) (NAME c) (COND (NAME b) (NAME d) (NAME e)))");
    EXPECT_EQ(expr("x or y if p and q else z"),
              "(COND (BINOP or (NAME x) (NAME y)) (BINOP and (NAME p) (NAME q)) (NAME z))");
}

TEST(ParserDump, Strings)
{
    EXPECT_EQ(expr("'single'"), "(STR \"single\")");
    EXPECT_EQ(expr("\"ab\" 'cd'\n \"ef\""), "(STR \"abcdef\")");
    EXPECT_EQ(expr("\"q\\\"\\\\\\n\\t'\""), "(STR \"q\\\"\\\\\\n\\t'\")");
    EXPECT_EQ(expr("'it\\'s'"), "(STR \"it's\")");
    EXPECT_EQ(expr("\"# not a comment\""), "(STR \"# not a comment\")");
    EXPECT_EQ(expr("'\xc3\xa9'"), "(STR \"\\xC3\\xA9\")");
}

TEST(ParserDump, ByteOrderMark)
{
    EXPECT_EQ(Parsed("\xEF\xBB\xBFloss_parallel()").tree(), "(FILE (LOSS_PARALLEL))");
    EXPECT_EQ(Parsed("loss_parallel() \xEF\xBB\xBF").errors(),
              "1:17: unexpected character '\\xEF\\xBB\\xBF'\n");
}

TEST(ParserDump, Comments)
{
    EXPECT_EQ(Parsed("# head\nconfig { # open\n  a = 1 # value\n  # alone\n} # tail").tree(),
              "(FILE (CONFIG (ASSIGN a (INT 1))))");
}

TEST(ParserDump, ItemKeywordsAreNamesInsideItems)
{
    Parsed p("module M {\n"
             "  model = LlamaModel()\n"
             "  config = C(); mesh = D(); module = E(on=1)\n"
             "  model.tie(loss_parallel)\n"
             "  def forward(model: [mesh]) { h = model(x); return model.layers }\n"
             "}\n"
             "config { model = 1 }");
    ASSERT_EQ(p.errors(), "");
    EXPECT_EQ(p.tree(),
              "(FILE (MODULE M (ASSIGN model (CALL (NAME LlamaModel))) "
              "(ASSIGN config (CALL (NAME C))) (ASSIGN mesh (CALL (NAME D))) "
              "(ASSIGN module (CALL (NAME E) (ARG on (INT 1)))) "
              "(EXPR_STMT (CALL (ATTR tie (NAME model)) (ARG (NAME loss_parallel)))) "
              "(DEF forward (PARAM model (LIST (NAME mesh))) "
              "(BLOCK (ASSIGN h (CALL (NAME model) (ARG (NAME x)))) "
              "(RETURN (ATTR layers (NAME model)))))) "
              "(CONFIG (ASSIGN model (INT 1))))");
}

TEST(ParserDump, PlanPastedFromPython)
{
    Parsed p("parallelize \"model.layers.*\" {\n"
             "    \"self_attn\": PrepareModuleInput(\n"
             "        input_layouts=(Shard(1), None),\n"
             "        desired_input_layouts=(Replicate(), None),\n"
             "        input_kwarg_layouts={\"hidden_states\": Shard(1)},\n"
             "        use_local_output=False,   # trailing comma + comment\n"
             "    ),\n"
             "    'mlp.down_proj': RowwiseParallel(output_layouts=Shard(-1)),\n"
             "}\n");
    ASSERT_EQ(p.errors(), "");
    EXPECT_EQ(p.tree(),
              "(FILE (PARALLELIZE \"model.layers.*\" (DICT "
              "(PAIR (STR \"self_attn\") (CALL (NAME PrepareModuleInput) "
              "(ARG input_layouts (TUPLE (CALL (NAME Shard) (ARG (INT 1))) (NONE))) "
              "(ARG desired_input_layouts (TUPLE (CALL (NAME Replicate)) (NONE))) "
              "(ARG input_kwarg_layouts (DICT (PAIR (STR \"hidden_states\") "
              "(CALL (NAME Shard) (ARG (INT 1)))))) "
              "(ARG use_local_output (FALSE)))) "
              "(PAIR (STR \"mlp.down_proj\") (CALL (NAME RowwiseParallel) "
              "(ARG output_layouts (CALL (NAME Shard) (ARG (INT -1)))))))))");
}

TEST(ParserDump, Spans)
{
    Parsed p("config {\n  x = f(a, k = (b))\n}");
    ASSERT_EQ(p.errors(), "");
    const tp_node *assign = p.root()->kids[0]->kids[0];
    EXPECT_EQ(assign->span.line, 2);
    EXPECT_EQ(assign->span.col, 3);
    const tp_node *call = assign->kids[0];
    // A call ends with its ')', and a parenthesised argument includes its
    // parentheses: fix-its insert after the last argument.
    EXPECT_EQ(call->span.col, 7);
    EXPECT_EQ(call->span.length, (int)std::string("f(a, k = (b))").size());
    const tp_node *kw = call->kids[2];
    EXPECT_EQ(kw->span.col, 12);
    EXPECT_EQ(kw->span.length, (int)std::string("k = (b)").size());
    EXPECT_EQ(kw->kids[0]->span.length, 3);
    EXPECT_EQ(p.root()->span.length, 30);
}

TEST(ParserDump, NodeHelpers)
{
    EXPECT_STREQ(tp_node_kind_name(N_FILE), "FILE");
    EXPECT_STREQ(tp_node_kind_name(N_COND), "COND");
    EXPECT_STREQ(tp_node_kind_name(N_KIND_COUNT), "?");
    tp_node *n = tp_node_new(N_ARG, TP_NO_SPAN);
    n->name = strdup("not an identifier");
    tp_node_add(n, nullptr);
    for (int i = 0; i < 9; i++)
        tp_node_add(n, tp_node_new(N_NONE, TP_NO_SPAN));
    EXPECT_EQ(n->nkids, 9);
    EXPECT_EQ(dump(n).rfind("(ARG \"not an identifier\" (NONE) (NONE)", 0), 0u);
    tp_node_free(n);
    tp_node_free(nullptr);
    EXPECT_EQ(dump(nullptr), "()");
}

// ---- errors ----

TEST(ParserErrors, EmptyFile)
{
    Parsed empty("");
    EXPECT_EQ(empty.tree(), "(FILE)");
    EXPECT_EQ(empty.diags().count, 0);
    Parsed blank("  \n# only a comment\n\n");
    EXPECT_EQ(blank.tree(), "(FILE)");
    EXPECT_EQ(blank.diags().count, 0);
}

TEST(ParserErrors, ThreeErrorsKeepTheValidItems)
{
    Parsed p("model \"x.model\"\n"
             "config { tp = 2 + }\n"
             "mesh(tp = tp)\n"
             "parallelize \"a\" { \"b\": Foo(x=), \"c\": Bar() }\n"
             "foo = 3\n"
             "module M { x = Linear() }\n");
    EXPECT_EQ(p.errors(),
              "2:19: unexpected '}', expected expression\n"
              "4:30: unexpected ')', expected expression\n"
              "5:7: a top-level assignment may only give a PyTorch class another name "
              "(colwise_parallel = ColwiseParallel)\n");
    EXPECT_EQ(p.tree(),
              "(FILE (MODEL_REF \"x.model\") (CONFIG) (MESH (ARG tp (NAME tp))) "
              "(PARALLELIZE \"a\" (DICT (PAIR (STR \"b\") (CALL (NAME Foo))) "
              "(PAIR (STR \"c\") (CALL (NAME Bar))))) (ASSIGN foo (INT 3)) "
              "(MODULE M (ASSIGN x (CALL (NAME Linear)))))");
    for (int i = 0; i < p.diags().count; i++) {
        EXPECT_STREQ(p.diags().items[i].check, "syntax");
        EXPECT_EQ(p.diags().items[i].level, TP_ERROR);
    }
    // The top-level assignment gets a hint.
    ASSERT_EQ(p.diags().items[2].nhelps, 1);
    EXPECT_STREQ(p.diags().items[2].helps[0], "top-level assignments go inside config { ... }");
}

TEST(ParserErrors, BrokenDictEntryKeepsTheOthers)
{
    Parsed p("parallelize \"x\" {\n"
             "  \"a\": Foo(),\n"
             "  \"b\" Bar(),\n"
             "  \"c\": Baz(k=1 j=2),\n"
             "  \"d\": Qux(),\n"
             "}");
    EXPECT_EQ(p.errors(),
              "3:7: unexpected identifier 'Bar', expected ':'\n"
              "4:16: unexpected identifier 'j', expected ')' to close '(' at 4:11\n");
    EXPECT_EQ(p.tree(),
              "(FILE (PARALLELIZE \"x\" (DICT (PAIR (STR \"a\") (CALL (NAME Foo))) "
              "(PAIR (STR \"c\") (CALL (NAME Baz))) (PAIR (STR \"d\") (CALL (NAME Qux))))))");
    ASSERT_EQ(p.diags().items[1].nnotes, 1);
    EXPECT_STREQ(p.diags().items[1].notes[0].message, "to match this '('");
    EXPECT_EQ(p.diags().items[1].notes[0].span.col, 11);
}

TEST(ParserErrors, Messages)
{
    EXPECT_EQ(Parsed("config { a = 1 $ }").errors(), "1:16: unexpected character '$'\n");
    EXPECT_EQ(Parsed("config { a = \x01 }").errors(), "1:14: unexpected character '\\x01'\n");
    EXPECT_EQ(Parsed("config { a = \xe2\x86\x92 }").errors(),
              "1:14: unexpected character '\\xE2\\x86\\x92'\n");
    EXPECT_EQ(Parsed("config { a = (1, 2").errors(),
              "1:19: unexpected end of file, expected ')' to close '(' at 1:14\n");
    EXPECT_EQ(Parsed("config { a = [1, 2) }").errors(),
              "1:19: unexpected ')', expected ']' to close '[' at 1:14\n");
    EXPECT_EQ(Parsed("mesh(2)").errors(), "1:6: unexpected integer, expected identifier\n");
    EXPECT_EQ(Parsed("module M { x. }").errors(),
              "1:15: unexpected '}', expected identifier\n");
    EXPECT_EQ(Parsed("module M { def f(a b) {} }").errors(),
              "1:20: unexpected identifier 'b', expected ')' to close '(' at 1:17\n");
    // Back at the top level, the next error counts even right away...
    EXPECT_EQ(Parsed("parallelize \"x\" { \"a\" B(), }\n= 4").errors(),
              "1:23: unexpected identifier 'B', expected ':'\n"
              "2:1: unexpected '=', expected 'model', 'config', 'mesh', "
              "'parallelize', 'loss_parallel', 'module', 'hf', 'train', 'from' or 'import'\n");
    // ... but not when an item only seemed to end, inside brackets.
    EXPECT_EQ(Parsed("module M { def f(a b) { return a } }\nmesh(tp = 2)").diags().count, 1);
    EXPECT_EQ(Parsed("config { a = 1 }\nx = 1").diags().items[0].nhelps, 1);
    EXPECT_EQ(Parsed("config { a = 1 }\nx(1)").diags().items[0].nhelps, 0);
}

TEST(ParserErrors, IntegerLiterals)
{
    Parsed big("config { a = 9223372036854775808, b = 1 }");
    EXPECT_EQ(big.errors(),
              "1:14: integer literal too large (the limit is 9223372036854775807)\n");
    EXPECT_EQ(big.root()->kids[0]->nkids, 2);
    EXPECT_EQ(Parsed("config { a = 123456789012345678901234567890 }").diags().count, 1);
    EXPECT_EQ(Parsed("config { a = 1_, b = 2x, c = 1__0 }").errors(),
              "1:14: invalid integer literal\n"
              "1:22: invalid integer literal\n"
              "1:30: invalid integer literal\n");
}

TEST(ParserErrors, FloatLiterals)
{
    EXPECT_EQ(Parsed("config { a = 1e, b = 1.5x, c = 1.2.3, d = .5e, e = 2e5_ }").errors(),
              "1:14: invalid float literal\n"
              "1:22: invalid float literal\n"
              "1:32: invalid float literal\n"
              "1:43: invalid float literal\n"
              "1:52: invalid float literal\n");
    Parsed range("config { a = 1e999, b = 1e-999, c = 4.9e-324 }");
    EXPECT_EQ(range.errors(),
              "1:14: float literal out of range (a double holds about 2.2e-308 to 1.8e308)\n"
              "1:25: float literal out of range (a double holds about 2.2e-308 to 1.8e308)\n");
    EXPECT_EQ(range.root()->kids[0]->nkids, 3) << "the entries survive";
    EXPECT_EQ(Parsed("config { a = 1e+ }").errors(),
              "1:14: invalid float literal\n"
              "1:18: unexpected '}', expected expression\n");
    EXPECT_EQ(Parsed("config { a = x.5 }").errors(), "1:15: unexpected float, expected '}' to close '{' at 1:8\n")
        << "'.5' after a name is a float, not an attribute";
}

TEST(ParserErrors, UnterminatedStrings)
{
    Parsed dq("model \"abc\nconfig { tp = 2 }");
    EXPECT_EQ(dq.errors(), "1:7: unterminated string literal\n");
    EXPECT_EQ(dq.tree(), "(FILE (MODEL_REF \"abc\") (CONFIG (ASSIGN tp (INT 2))))");
    EXPECT_EQ(Parsed("model 'abc\\").errors(), "1:7: unterminated string literal\n");
    EXPECT_EQ(Parsed("config { a = 'x\" }").errors(),
              "1:14: unterminated string literal\n"
              "1:19: unexpected end of file, expected '}' to close '{' at 1:8\n");
}

TEST(ParserErrors, UnknownEscape)
{
    Parsed p("config { a = 'x\\qy' }");
    EXPECT_EQ(p.errors(), "1:16: unknown escape sequence '\\q'\n");
    EXPECT_EQ(p.tree(), "(FILE (CONFIG (ASSIGN a (STR \"x\\\\qy\"))))");
}

TEST(ParserErrors, NulBytes)
{
    Parsed p(std::string("config { a = 1 }\0config { b = \"\0\" }", 35));
    EXPECT_EQ(p.errors(),
              "1:17: unexpected character '\\x00'\n"
              "1:31: unterminated string literal\n"
              "1:32: unexpected character '\\x00'\n"
              "1:33: unterminated string literal\n");
    EXPECT_EQ(p.tree(), "(FILE (CONFIG (ASSIGN a (INT 1))))");
}

TEST(ParserErrors, TooManyErrorsStop)
{
    std::string text;
    for (int i = 0; i < 100; i++)
        text += "config { a = $ }\n";
    Parsed p(text);
    ASSERT_EQ(p.diags().count, 51);
    EXPECT_STREQ(p.diags().items[49].message, "unexpected character '$'");
    EXPECT_STREQ(p.diags().items[50].message, "too many errors, stopping");
    EXPECT_EQ(p.diags().items[50].span.line, 51);
}

// ---- hostile input ----

std::string repeat(const std::string &s, int n)
{
    std::string out;
    for (int i = 0; i < n; i++)
        out += s;
    return out;
}

TEST(ParserLimits, DeepBrackets)
{
    for (const char *open : {"(", "[", "{", "f("}) {
        Parsed p("config { a = " + repeat(open, 100000) + "1");
        ASSERT_EQ(p.diags().count, 1) << open;
        EXPECT_STREQ(p.diags().items[0].message, "nesting too deep (more than 256 open brackets)");
        EXPECT_EQ(p.tree(), "(FILE)");
    }
    // Within the limit, nesting is fine.
    EXPECT_EQ(expr(repeat("(", 255) + "1" + repeat(")", 255)), "(INT 1)");
}

TEST(ParserLimits, LongOperatorChains)
{
    const int n = 100000;
    for (const std::string &chain :
         {repeat("1 + ", n) + "y", "x" + repeat(".y", n), "y" + repeat("()", n),
          repeat("- x ", n) + "- y", repeat("not ", n) + "y", repeat("y if y else ", n) + "y"}) {
        Parsed p("config { a = " + chain + " }");
        ASSERT_EQ(p.diags().count, 1) << chain.substr(0, 20);
        EXPECT_EQ(std::string(p.diags().items[0].message).rfind("expression nested too deeply", 0),
                  0u)
            << chain.substr(0, 20);
        EXPECT_EQ(p.tree(), "(FILE)");
    }
    // Folded literals do not nest.
    EXPECT_EQ(expr(repeat("-", 1000) + "1"), "(INT 1)");
    EXPECT_EQ(expr(repeat("1 + ", 1000) + "1").substr(0, 14), "(BINOP + (BINO");
}

TEST(ParserLimits, RandomBytesNeverCrash)
{
    std::mt19937 rng(20240607);
    std::uniform_int_distribution<int> byte(0, 255), length(0, 400);
    for (int i = 0; i < 300; i++) {
        std::string text(length(rng), '\0');
        for (char &c : text)
            c = (char)byte(rng);
        Parsed p(text);
        EXPECT_EQ(p.root()->kind, N_FILE);
        EXPECT_LE(p.diags().count, 51);
        dump(p.root());
    }
}

// Random sequences of real tokens reach much deeper into the grammar than
// random bytes.
TEST(ParserLimits, RandomTokensNeverCrash)
{
    const std::vector<std::string> tokens = {
        "model", "config", "mesh", "parallelize", "on", "loss_parallel", "module", "def",
        "return", "if", "else", "not", "and", "or", "True", "False", "None", "x", "tp",
        "1", "-2", "'s'", "\"t\"", "(", ")", "[", "]", "{", "}", ",", ":", ";", ".", "=",
        "+", "-", "*", "/", "//", "%", "#c\n", "\n", "'open", "9999999999999999999999", "$",
        "1e-5", "500000.0", ".5", "1e", "1e999",
    };
    std::mt19937 rng(7);
    std::uniform_int_distribution<size_t> pick(0, tokens.size() - 1);
    std::uniform_int_distribution<int> length(0, 200);
    for (int i = 0; i < 500; i++) {
        std::string text;
        for (int n = length(rng); n > 0; n--)
            text += tokens[pick(rng)] + " ";
        Parsed p(text);
        EXPECT_EQ(p.root()->kind, N_FILE);
        EXPECT_LE(p.diags().count, 51);
        dump(p.root());
    }
}

}  // namespace
