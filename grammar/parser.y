/* parser.y: the grammar of .model and .plan files (one language for both).
 *
 * The language is Python-flavoured: expressions follow Python's precedence,
 * strings take either quote, newlines mean nothing, and the dict of a
 * Python parallelize_module() call can be pasted unchanged after
 * `parallelize "path"`. The AST it builds is described in grammar/ast.h.
 *
 * The lexer (lexer.l) and the parser share one tp_parse_ctx: it is the
 * scanner's extra data and the parser's %parse-param. Neither prints nor
 * exits; every problem becomes a "syntax" diagnostic.
 *
 * Error recovery: `error` rules at three levels (top-level items; config
 * assignments, module members and statements; dict entries, call
 * arguments and mesh dimensions), so one mistake loses as little as
 * possible and several can be reported per file. An item that ends where
 * the lexer sees all brackets closed means the parser is back in step, so
 * the next error is reported even within bison's usual three tokens. After
 * TP_MAX_SYNTAX_ERRORS the parse stops.
 *
 * Hostile input: the lexer stops at more than TP_MAX_BRACKETS open
 * brackets, which bounds the parser stack for anything bracketed; bison's
 * YYMAXDEPTH bounds it for long right-nested chains ("- - - x"); and
 * adopt() keeps every expression at most TP_MAX_HEIGHT high (items and
 * statements add a few levels), which bounds the recursion of every later
 * pass over the tree ("1+1+...+1" needs no brackets to grow). */

%require "3.6"
%define api.pure full
%define api.prefix {tp_yy}
%define api.token.prefix {TOK_}
%define api.location.type {tp_span}
%define parse.error custom     /* yyreport_syntax_error words the messages */
%define parse.lac full         /* so that the expected tokens it lists are exact */
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {tp_parse_ctx *ctx}

%code requires {
#include <stdint.h>

#include "grammar/ast.h"
#include "compiler/diag/diag.h"
#include "compiler/diag/source.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

enum {
    TP_MAX_BRACKETS = 256,       /* open ( [ { at once */
    TP_MAX_HEIGHT = 1024,        /* of an expression tree */
    TP_MAX_SYNTAX_ERRORS = 50,   /* per file, then stop */
};

/* An expression under construction: the node and the height of its tree
 * (a leaf is 1), so that the height check costs nothing per node. */
typedef struct tp_parse_val {
    tp_node *n;
    int h;
} tp_parse_val;

typedef struct tp_open_bracket {
    tp_span at;
    char open, close;
} tp_open_bracket;

typedef struct tp_parse_ctx {
    tp_sources *src;
    tp_diags *diags;
    int file;
    tp_node *root;          /* N_FILE; items are added as they complete */
    int nerrors;            /* syntax diagnostics reported so far */
    int stopped;            /* set by a fatal error: the lexer only returns end of file */
    int line, col, offset;  /* lexer: position of the next byte */
    /* Brackets open before the current token, innermost last, for "expected
     * ')' to close '(' at 3:5". A matching closer is popped only when the
     * next token is read, because until then it is the parser's lookahead
     * and the parser still sees its bracket as open. */
    tp_open_bracket open[TP_MAX_BRACKETS];
    int depth;
    int pop_pending;
} tp_parse_ctx;
}

%code provides {
/* Report a syntax error; returns NULL (and reports nothing) once the parse
 * has stopped. The TP_MAX_SYNTAX_ERRORS+1st error is replaced by "too many
 * errors, stopping" and stops the parse. */
tp_diag *tp_syntax_error(tp_parse_ctx *ctx, tp_span at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Report an error after which parsing cannot usefully go on, and stop. */
void tp_syntax_fatal(tp_parse_ctx *ctx, tp_span at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Bytes as they may appear in a message: printable ASCII as is, anything
 * else (and the backslash) escaped. Malloc'ed. */
char *tp_quote_bytes(const char *p, int n);
}

%code {
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lexer.h"
#include "util/xalloc.h"

static void yyerror(tp_span *loc, yyscan_t scanner, tp_parse_ctx *ctx, const char *msg);

/* The empty span right after prev. Tokens never span lines but a
 * nonterminal may, so the end position is found in the text. */
static tp_span span_after(const tp_parse_ctx *ctx, tp_span prev)
{
    const char *text = ctx->src->files[ctx->file].text;
    tp_span s = prev;
    for (int i = prev.offset; i < prev.offset + prev.length; i++) {
        if (text[i] == '\n') {
            s.line++;
            s.col = 1;
        } else {
            s.col++;
        }
    }
    s.offset = prev.offset + prev.length;
    s.length = 0;
    return s;
}

/* A rule covers its first to its last symbol; an empty rule sits after the
 * symbol before it. (Expanded inside yyparse, where ctx is in scope.) */
#define YYLLOC_DEFAULT(cur, rhs, n)                                     \
    ((cur) = (n) ? tp_span_join(YYRHSLOC(rhs, 1), YYRHSLOC(rhs, n))      \
                 : span_after(ctx, YYRHSLOC(rhs, 0)))

static tp_node *named_node(tp_node_kind kind, tp_span at, char *name)
{
    tp_node *n = tp_node_new(kind, at);
    n->name = name;
    return n;
}

static tp_parse_val leaf(tp_node_kind kind, tp_span at)
{
    return (tp_parse_val){tp_node_new(kind, at), 1};
}

static tp_parse_val str_leaf(tp_span at, char *s)
{
    tp_parse_val v = leaf(N_STR, at);
    v.n->str = s;
    return v;
}

/* Add kid to the tree *parent. A kid that would make the tree higher than
 * TP_MAX_HEIGHT is replaced by None and the parse stops, so no tree ever
 * exceeds the limit. */
static void adopt(tp_parse_ctx *ctx, tp_parse_val *parent, tp_parse_val kid)
{
    if (kid.h >= TP_MAX_HEIGHT) {
        tp_span at = kid.n->span;
        tp_node_free(kid.n);
        kid = leaf(N_NONE, at);
        tp_syntax_fatal(ctx, at, "expression nested too deeply (more than %d levels)",
                        TP_MAX_HEIGHT);
    }
    tp_node_add(parent->n, kid.n);
    if (kid.h + 1 > parent->h)
        parent->h = kid.h + 1;
}

static tp_parse_val wrap(tp_parse_ctx *ctx, tp_node_kind kind, tp_span at, tp_parse_val kid)
{
    tp_parse_val v = leaf(kind, at);
    adopt(ctx, &v, kid);
    return v;
}

static tp_parse_val wrap_named(tp_parse_ctx *ctx, tp_node_kind kind, tp_span at, char *name,
                               tp_parse_val kid)
{
    tp_parse_val v = wrap(ctx, kind, at, kid);
    v.n->name = name;
    return v;
}

static tp_parse_val binop(tp_parse_ctx *ctx, int op, tp_span at, tp_parse_val a, tp_parse_val b)
{
    tp_parse_val v = wrap(ctx, N_BINOP, at, a);
    v.n->op = op;
    adopt(ctx, &v, b);
    return v;
}

/* -<number literal> becomes a negative literal, as plans write Shard(-1).
 * Integer literals are at most INT64_MAX, so negating never overflows. */
static tp_parse_val negate(tp_parse_ctx *ctx, tp_span at, tp_parse_val v)
{
    if (v.n->kind == N_INT)
        v.n->ival = -v.n->ival;
    else if (v.n->kind == N_FLOAT)
        v.n->fval = -v.n->fval;
    else
        return wrap(ctx, N_NEG, at, v);
    v.n->span = at;
    return v;
}

/* Make head the first kid of list, which now covers `at`. Calls and tuples
 * collect their tail before the head is attached. */
static tp_parse_val prepend(tp_parse_ctx *ctx, tp_parse_val list, tp_parse_val head, tp_span at)
{
    tp_node *n = list.n;
    adopt(ctx, &list, head);
    tp_node *first = n->kids[n->nkids - 1];
    memmove(n->kids + 1, n->kids, (size_t)(n->nkids - 1) * sizeof *n->kids);
    n->kids[0] = first;
    n->span = at;
    return list;
}

/* Adjacent string literals were collected as kids of the first; join them
 * into one N_STR in a single pass. */
static tp_parse_val join_strings(tp_parse_val s)
{
    if (s.n->nkids == 0)
        return s;
    tp_buf b;
    tp_buf_init(&b);
    tp_buf_append(&b, s.n->str);
    for (int i = 0; i < s.n->nkids; i++) {
        tp_buf_append(&b, s.n->kids[i]->str);
        tp_node_free(s.n->kids[i]);
    }
    s.n->nkids = 0;
    free(s.n->str);
    s.n->str = tp_buf_take(&b);
    s.h = 1;
    return s;
}

/* After an item: are all brackets closed? Items end with a closer or a
 * string and are reduced without reading a lookahead, so the lexer's
 * last token is the item's last; a closer it returned still counts as
 * open until the next token is read. */
static int at_top_level(const tp_parse_ctx *ctx)
{
    return ctx->depth - ctx->pop_pending == 0;
}

/* A plan's top-level `x = ...` names PyTorch classes (torchtitan's
 * `rowwise_parallel, colwise_parallel = (RowwiseParallel, ColwiseParallel)`);
 * a number or a string there is a configuration value put in the wrong
 * place. */
static int names_something(const tp_node *v)
{
    switch (v->kind) {
    case N_NAME: case N_ATTR: return 1;
    case N_COND: return names_something(v->kids[0]) && names_something(v->kids[2]);
    case N_TUPLE:
        for (int i = 0; i < v->nkids; i++)
            if (!names_something(v->kids[i]))
                return 0;
        return 1;
    default: return 0;
    }
}

static void top_level_binding(tp_parse_ctx *ctx, const tp_node *item)
{
    const tp_node *value = item->kids[item->nkids - 1];
    if (names_something(value))
        return;
    tp_diag *d = tp_syntax_error(ctx, value->span, "a top-level assignment may only give a PyTorch class "
                                 "another name (colwise_parallel = ColwiseParallel)");
    if (d)
        tp_diag_help(d, "top-level assignments go inside config { ... }");
}

/* Keywords usable as names ("model = LlamaModel()") arrive without text. */
static char *source_text(const tp_parse_ctx *ctx, tp_span at)
{
    return tp_xstrndup(ctx->src->files[ctx->file].text + at.offset, (size_t)at.length);
}
}

%initial-action {
    @$ = (tp_span){ctx->file, 1, 1, 0, 0};
}

%union {
    char *text;       /* identifiers and strings (escapes resolved), malloc'ed */
    int64_t ival;
    double fval;
    tp_node *node;    /* items, members, statements */
    tp_parse_val val; /* expressions and their parts */
}

%token <text> IDENT "identifier"
%token <text> STRING "string"
%token <ival> INT "integer"
%token <fval> FLOAT "float"
%token MODEL "'model'" CONFIG "'config'" MESH "'mesh'" PARALLELIZE "'parallelize'"
%token ON "'on'" LOSS_PARALLEL "'loss_parallel'" MODULE "'module'" HF "'hf'" TRAIN "'train'"
%token FROM "'from'" IMPORT "'import'" AS "'as'"
%token DEF "'def'" RETURN "'return'" IF "'if'" ELSE "'else'"
%token NOT "'not'" AND "'and'" OR "'or'" TRUE "'True'" FALSE "'False'" NONE "'None'"
%token DSLASH "'//'"
%token POW "'**'" EQ "'=='" NE "'!='"
%token INVALID "invalid character"

%type <text> name mesh_dim dotted
%type <node> item assigns assign members member def params param_list param
%type <node> block stmts stmt call_stmt targets top_targets unpack_head imported imported_list
%type <val> top_value expr disj conj negation comparison sum term unary postfix primary strings
%type <val> list elems dict pairs pair args arg_list arg kwarg kwargs callee

%destructor { free($$); } <text>
%destructor { tp_node_free($$); } <node>
%destructor { tp_node_free($$.n); } <val>

%%

/* ---- top level ---- */

file
    : %empty
    | file item             { tp_node_add(ctx->root, $2); if (at_top_level(ctx)) yyerrok; }
    | file error            /* skip to the next item keyword ... */
    | file error '}'        /* ... or past a closing brace */
    ;

item
    : MODEL STRING
        { $$ = tp_node_new(N_MODEL_REF, @$); $$->str = $2; }
    | CONFIG '{' assigns '}'
        { $$ = $3; $$->span = @$; }
    | MESH '(' kwargs opt_comma ')'
        { $$ = $3.n; $$->span = @$; }
    | PARALLELIZE STRING mesh_dim dict
        { $$ = named_node(N_PARALLELIZE, @$, $3); $$->str = $2; tp_node_add($$, $4.n); }
    | LOSS_PARALLEL '(' ')'
        { $$ = tp_node_new(N_LOSS_PARALLEL, @$); }
    | MODULE IDENT '{' members '}'
        { $$ = $4; $$->span = @$; $$->name = $2; }
    | HF '{' assigns '}'
        { $$ = $3; $$->span = @$; $$->kind = N_HF; }
    | TRAIN '{' assigns '}'
        { $$ = $3; $$->span = @$; $$->kind = N_TRAIN; }
    /* Python's import lines and names for PyTorch's classes, as a plan
     * pasted from Python has them (compiler/plan/pynames.c gives them
     * their meaning) */
    | FROM dotted IMPORT imported_list
        { $$ = $4; $$->span = @$; $$->str = $2; }
    | FROM dotted IMPORT '(' imported_list opt_comma ')'
        { $$ = $5; $$->span = @$; $$->str = $2; }
    | IMPORT dotted
        { $$ = tp_node_new(N_IMPORT, @$); $$->str = $2; }
    | IMPORT dotted AS name
        { $$ = named_node(N_IMPORT, @$, $4); $$->str = $2; }
    | IDENT '=' top_value
        { $$ = named_node(N_ASSIGN, @$, $1); tp_node_add($$, $3.n); top_level_binding(ctx, $$); }
    | top_targets '=' top_value
        { $$ = $1; $$->span = @$; tp_node_add($$, $3.n); top_level_binding(ctx, $$); }
    ;

/* Python's target lists: a, b / a, b, / a, (one name, unpacked).
 * Identifiers only: keywords start items here. */
top_targets
    : unpack_head
    | unpack_head IDENT     { $$ = $1; $$->span = @$; tp_node_add($$, named_node(N_NAME, @2, $2)); }
    ;

unpack_head
    : IDENT ','             { $$ = tp_node_new(N_UNPACK, @$); tp_node_add($$, named_node(N_NAME, @1, $1)); }
    | unpack_head IDENT ',' { $$ = $1; $$->span = @$; tp_node_add($$, named_node(N_NAME, @2, $2)); }
    ;

/* A, B without parentheses is a tuple, as in Python. Not A, (a trailing
 * comma): newlines mean nothing here, so the next item's first name would
 * read as the tuple's next element. */
top_value
    : expr
    | expr ',' elems        { $$ = prepend(ctx, $3, $1, @$); $$.n->kind = N_TUPLE; }
    ;

/* a.b.c, as the text it is */
dotted
    : name
    | dotted '.' name       { $$ = tp_xasprintf("%s.%s", $1, $3); free($1); free($3); }
    ;

imported_list
    : imported              { $$ = tp_node_new(N_FROM_IMPORT, @$); tp_node_add($$, $1); }
    | imported_list ',' imported  { $$ = $1; tp_node_add($$, $3); }
    ;

/* Names as Python has them: loss_parallel, or a class imported as mesh. */
imported
    : name                  { $$ = named_node(N_ALIAS, @$, $1); }
    | name AS name          { $$ = named_node(N_ALIAS, @$, $1); $$->str = $3; }
    ;

mesh_dim
    : %empty                { $$ = NULL; }
    | ON STRING             { $$ = $2; }
    ;

/* ---- config assignments, module members, statements ---- */

sep: ',' | ';' ;

assigns
    : %empty                { $$ = tp_node_new(N_CONFIG, @$); }
    | assigns assign        { $$ = $1; tp_node_add($$, $2); }
    | assigns sep
    | assigns error
    ;

assign
    : name '=' expr         { $$ = named_node(N_ASSIGN, @$, $1); tp_node_add($$, $3.n); }
    ;

members
    : %empty                { $$ = tp_node_new(N_MODULE, @$); }
    | members member        { $$ = $1; tp_node_add($$, $2); }
    | members sep
    | members error
    ;

member: assign | def | call_stmt ;

def
    : DEF IDENT '(' params ')' block
        { $$ = $4; $$->span = @$; $$->name = $2; tp_node_add($$, $6); }
    ;

params
    : %empty                { $$ = tp_node_new(N_DEF, @$); }
    | param_list opt_comma
    ;

param_list
    : param                 { $$ = tp_node_new(N_DEF, @$); tp_node_add($$, $1); }
    | param_list ',' param  { $$ = $1; tp_node_add($$, $3); }
    ;

param
    : name                  { $$ = named_node(N_PARAM, @$, $1); }
    | name ':' list         { $$ = named_node(N_PARAM, @$, $1); tp_node_add($$, $3.n); }
    ;

block
    : '{' stmts '}'         { $$ = $2; $$->span = @$; }
    ;

stmts
    : %empty                { $$ = tp_node_new(N_BLOCK, @$); }
    | stmts stmt            { $$ = $1; tp_node_add($$, $2); }
    | stmts sep
    | stmts error
    ;

stmt
    : assign
    | targets '=' expr      { $$ = $1; $$->span = @$; tp_node_add($$, $3.n); }
    | RETURN expr           { $$ = tp_node_new(N_RETURN, @$); tp_node_add($$, $2.n); }
    | call_stmt
    ;

/* Tuple unpacking, "q, k, v = split(qkv, (a, b, c), dim=-1)": two or more
 * names (a bare name before '=' is an assignment). */
targets
    : name ',' name         { $$ = tp_node_new(N_UNPACK, @$); tp_node_add($$, named_node(N_NAME, @1, $1));
                              tp_node_add($$, named_node(N_NAME, @3, $3)); }
    | targets ',' name      { $$ = $1; $$->span = @$; tp_node_add($$, named_node(N_NAME, @3, $3)); }
    ;

/* A call used as a statement, e.g. tie("a", "b"). Its callee starts with a
 * name: were "(x)(y)" or "'s'.f()" statements, then after "a = b" a '(' or
 * a string could continue the expression or start a statement. */
call_stmt
    : callee '(' args ')'
        { $$ = tp_node_new(N_EXPR_STMT, @$); tp_node_add($$, prepend(ctx, $3, $1, @$).n); }
    ;

callee
    : name                  { $$ = leaf(N_NAME, @$); $$.n->name = $1; }
    | callee '.' name       { $$ = wrap_named(ctx, N_ATTR, @$, $3, $1); }
    | callee '(' args ')'   { $$ = prepend(ctx, $3, $1, @$); }
    ;

/* ---- expressions, loosest binding first ---- */

expr
    : disj
    | disj IF disj ELSE expr
        { $$ = wrap(ctx, N_COND, @$, $1); adopt(ctx, &$$, $3); adopt(ctx, &$$, $5); }
    ;

disj
    : conj
    | disj OR conj          { $$ = binop(ctx, 'O', @$, $1, $3); }
    ;

conj
    : negation
    | conj AND negation     { $$ = binop(ctx, 'A', @$, $1, $3); }
    ;

negation
    : comparison
    | NOT negation          { $$ = wrap(ctx, N_NOT, @$, $2); }
    ;

/* one comparison, not Python's chains: a config compares a string read
 * from config.json with a name (Gemma's legacy hidden_act "gelu") */
comparison
    : sum
    | sum EQ sum            { $$ = binop(ctx, 'E', @$, $1, $3); }
    | sum NE sum            { $$ = binop(ctx, 'N', @$, $1, $3); }
    ;

sum
    : term
    | sum '+' term          { $$ = binop(ctx, '+', @$, $1, $3); }
    | sum '-' term          { $$ = binop(ctx, '-', @$, $1, $3); }
    ;

term
    : unary
    | term '*' unary        { $$ = binop(ctx, '*', @$, $1, $3); }
    | term '/' unary        { $$ = binop(ctx, '/', @$, $1, $3); }
    | term DSLASH unary     { $$ = binop(ctx, 'f', @$, $1, $3); }
    | term '%' unary        { $$ = binop(ctx, '%', @$, $1, $3); }
    ;

unary
    : postfix
    | postfix POW unary     { $$ = binop(ctx, 'P', @$, $1, $3); }
    | '-' unary             { $$ = negate(ctx, @$, $2); }
    ;

postfix
    : primary
    | postfix '.' name      { $$ = wrap_named(ctx, N_ATTR, @$, $3, $1); }
    | postfix '(' args ')'  { $$ = prepend(ctx, $3, $1, @$); }
    ;

primary
    : INT                   { $$ = leaf(N_INT, @$); $$.n->ival = $1; }
    | FLOAT                 { $$ = leaf(N_FLOAT, @$); $$.n->fval = $1; }
    | strings               { $$ = join_strings($1); }
    | name                  { $$ = leaf(N_NAME, @$); $$.n->name = $1; }
    | TRUE                  { $$ = leaf(N_TRUE, @$); }
    | FALSE                 { $$ = leaf(N_FALSE, @$); }
    | NONE                  { $$ = leaf(N_NONE, @$); }
    /* The span takes in the parentheses, so that a fix-it inserting after
     * an argument lands outside them. */
    | '(' expr ')'          { $$ = $2; $$.n->span = @$; }
    | '(' ')'               { $$ = leaf(N_TUPLE, @$); }
    | '(' expr ',' ')'      { $$ = wrap(ctx, N_TUPLE, @$, $2); }
    | '(' expr ',' elems opt_comma ')'
        { $$ = prepend(ctx, $4, $2, @$); $$.n->kind = N_TUPLE; }
    | list
    | dict
    ;

strings
    : STRING                { $$ = str_leaf(@$, $1); }
    | strings STRING        { $$ = $1; adopt(ctx, &$$, str_leaf(@2, $2)); $$.n->span = @$; }
    ;

list
    : '[' ']'               { $$ = leaf(N_LIST, @$); }
    | '[' elems opt_comma ']'  { $$ = $2; $$.n->span = @$; }
    ;

elems
    : expr                  { $$ = wrap(ctx, N_LIST, @$, $1); }
    | elems ',' expr        { $$ = $1; adopt(ctx, &$$, $3); }
    ;

dict
    : '{' '}'               { $$ = leaf(N_DICT, @$); }
    | '{' pairs opt_comma '}'  { $$ = $2; $$.n->span = @$; }
    ;

/* Dict entries, call arguments and mesh dimensions recover from errors
 * entry by entry: `error` first starts the list, `error` later skips to
 * the next ',' or the closing bracket and keeps the entries so far. */
pairs
    : pair                  { $$ = wrap(ctx, N_DICT, @$, $1); }
    | pairs ',' pair        { $$ = $1; adopt(ctx, &$$, $3); }
    | error                 { $$ = leaf(N_DICT, @$); }
    | pairs error
    ;

pair
    : expr ':' expr         { $$ = wrap(ctx, N_PAIR, @$, $1); adopt(ctx, &$$, $3); }
    ;

/* Arguments are collected in an N_CALL; the callee is prepended. */
args
    : %empty                { $$ = leaf(N_CALL, @$); }
    | arg_list opt_comma
    ;

arg_list
    : arg                   { $$ = wrap(ctx, N_CALL, @$, $1); }
    | arg_list ',' arg      { $$ = $1; adopt(ctx, &$$, $3); }
    | error                 { $$ = leaf(N_CALL, @$); }
    | arg_list error
    ;

arg
    : expr                  { $$ = wrap(ctx, N_ARG, @$, $1); }
    | kwarg
    ;

kwarg
    : name '=' expr         { $$ = wrap_named(ctx, N_ARG, @$, $1, $3); }
    ;

kwargs
    : kwarg                 { $$ = wrap(ctx, N_MESH, @$, $1); }
    | kwargs ',' kwarg      { $$ = $1; adopt(ctx, &$$, $3); }
    | error                 { $$ = leaf(N_MESH, @$); }
    | kwargs error
    ;

opt_comma: %empty | ',' ;

/* Item keywords other than `parallelize` are ordinary names everywhere but
 * at the start of an item: HF models have a member called `model`, and
 * model files call hf("key", default). */
name
    : IDENT
    | keyword_name          { $$ = source_text(ctx, @1); }
    ;

keyword_name: MODEL | CONFIG | MESH | ON | LOSS_PARALLEL | MODULE | HF | TRAIN ;

%%

/* ---- diagnostics ---- */

static tp_diag *vreport(tp_parse_ctx *ctx, tp_span at, const char *fmt, va_list ap)
{
    if (ctx->stopped)
        return NULL;
    if (ctx->nerrors == TP_MAX_SYNTAX_ERRORS) {
        tp_diag_add(ctx->diags, TP_ERROR, at, "syntax", "too many errors, stopping");
        ctx->stopped = 1;
        return NULL;
    }
    ctx->nerrors++;
    char *msg = tp_xvasprintf(fmt, ap);
    tp_diag *d = tp_diag_add(ctx->diags, TP_ERROR, at, "syntax", "%s", msg);
    free(msg);
    return d;
}

tp_diag *tp_syntax_error(tp_parse_ctx *ctx, tp_span at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_diag *d = vreport(ctx, at, fmt, ap);
    va_end(ap);
    return d;
}

void tp_syntax_fatal(tp_parse_ctx *ctx, tp_span at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(ctx, at, fmt, ap);
    va_end(ap);
    ctx->stopped = 1;
}

char *tp_quote_bytes(const char *p, int n)
{
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\')
            tp_buf_append(&b, "\\\\");
        else if (c > ' ' && c < 0x7f)
            tp_buf_append_char(&b, (char)c, 1);
        else
            tp_buf_appendf(&b, "\\x%02X", c);
    }
    return tp_buf_take(&b);
}

/* Bison calls yyerror only when its stack is full (syntax errors go to
 * yyreport_syntax_error): YYMAXDEPTH states of a right-nested chain such as
 * "- - - ... x" or "a if b else c if ...". */
static void yyerror(tp_span *loc, yyscan_t scanner, tp_parse_ctx *ctx, const char *msg)
{
    tp_syntax_fatal(ctx, *loc, "expression nested too deeply");
}

static int expects(const yysymbol_kind_t *expected, int n, yysymbol_kind_t sym)
{
    for (int i = 0; i < n; i++)
        if (expected[i] == sym)
            return 1;
    return 0;
}

static int is_keyword_name(yysymbol_kind_t sym)
{
    return sym == YYSYMBOL_MODEL || sym == YYSYMBOL_CONFIG || sym == YYSYMBOL_MESH ||
           sym == YYSYMBOL_ON || sym == YYSYMBOL_LOSS_PARALLEL || sym == YYSYMBOL_MODULE ||
           sym == YYSYMBOL_HF || sym == YYSYMBOL_TRAIN;
}

/* Keep the expected tokens worth listing: never "end of file", and no
 * keywords that are only expected as names when "identifier" says it. At
 * the top level the item keywords are listed and the identifier that
 * starts a name for a PyTorch class is not. */
static int worth_listing(yysymbol_kind_t *expected, int n)
{
    int top = expects(expected, n, YYSYMBOL_PARALLELIZE);
    int ident = !top && expects(expected, n, YYSYMBOL_IDENT), kept = 0;
    for (int i = 0; i < n; i++)
        if (expected[i] != YYSYMBOL_YYEOF && !(ident && is_keyword_name(expected[i])) &&
            !(top && expected[i] == YYSYMBOL_IDENT))
            expected[kept++] = expected[i];
    return kept;
}

/* Tokens that would only have continued the expression before the error
 * (an operator, a call, string concatenation). */
static int continues_expression(yysymbol_kind_t sym)
{
    switch (sym) {
    case YYSYMBOL_STRING: case YYSYMBOL_IF: case YYSYMBOL_AND: case YYSYMBOL_OR:
    case YYSYMBOL_DSLASH: case YYSYMBOL_POW: case YYSYMBOL_EQ: case YYSYMBOL_NE:
        return 1;
    default:
        return sym == YYTRANSLATE('+') || sym == YYTRANSLATE('-') ||
               sym == YYTRANSLATE('*') || sym == YYTRANSLATE('/') ||
               sym == YYTRANSLATE('%') || sym == YYTRANSLATE('.') ||
               sym == YYTRANSLATE('(');
    }
}

static int drop_continuations(yysymbol_kind_t *expected, int n)
{
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!continues_expression(expected[i]))
            expected[kept++] = expected[i];
    return kept;
}

static void describe_token(tp_buf *b, const tp_parse_ctx *ctx, yysymbol_kind_t tok, tp_span at)
{
    enum { MAX_SHOWN = 40 };
    if (tok != YYSYMBOL_IDENT) {
        tp_buf_append(b, yysymbol_name(tok));
        return;
    }
    const char *text = ctx->src->files[ctx->file].text + at.offset;
    int shown = at.length > MAX_SHOWN ? MAX_SHOWN : at.length;
    tp_buf_appendf(b, "identifier '%.*s%s'", shown, text, at.length > shown ? "..." : "");
}

/* "x = 1" at the top level: is the token at `at` followed by a lone '='? */
static int assignment_follows(const tp_parse_ctx *ctx, tp_span at)
{
    const char *p = ctx->src->files[ctx->file].text + at.offset + at.length;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p[0] == '=' && p[1] != '=';
}

/* Messages read "unexpected X, expected Y", where Y is, by preference:
 * the closer of the innermost open bracket (with a note at the opener),
 * a short list of tokens, "expression", or a short list of the tokens
 * that would have ended the expression before X (the ':' of a dict). */
static int yyreport_syntax_error(const yypcontext_t *yyctx, yyscan_t scanner,
                                 tp_parse_ctx *ctx)
{
    enum { MAX_LISTED = 10 };  /* the ten item keywords */
    yysymbol_kind_t tok = yypcontext_token(yyctx);
    tp_span at = *yypcontext_location(yyctx);
    if (tok == YYSYMBOL_INVALID) {
        char *bytes = tp_quote_bytes(ctx->src->files[ctx->file].text + at.offset, at.length);
        tp_syntax_error(ctx, at, "unexpected character '%s'", bytes);
        free(bytes);
        return 0;
    }
    yysymbol_kind_t expected[YYNTOKENS];
    int n = yypcontext_expected_tokens(yyctx, expected, YYNTOKENS);
    if (n < 0)
        return n;   /* LAC ran out of stack: bison reports it via yyerror */
    n = worth_listing(expected, n);
    const tp_open_bracket *open = ctx->depth ? &ctx->open[ctx->depth - 1] : NULL;
    int close_char = open ? (unsigned char)open->close : 0;
    int closes = open && expects(expected, n, YYTRANSLATE(close_char));

    int expression = expects(expected, n, YYSYMBOL_INT);
    if (n > MAX_LISTED && !expression)
        n = drop_continuations(expected, n);

    tp_buf msg;
    tp_buf_init(&msg);
    tp_buf_append(&msg, "unexpected ");
    describe_token(&msg, ctx, tok, at);
    if (closes) {
        tp_buf_appendf(&msg, ", expected '%c' to close '%c' at %d:%d", open->close,
                       open->open, open->at.line, open->at.col);
    } else if (n > 0 && n <= MAX_LISTED) {
        tp_buf_append(&msg, ", expected ");
        for (int i = 0; i < n; i++) {
            if (i > 0)
                tp_buf_append(&msg, i == n - 1 ? " or " : ", ");
            tp_buf_append(&msg, yysymbol_name(expected[i]));
        }
    } else if (expression) {
        tp_buf_append(&msg, ", expected expression");
    }
    tp_diag *d = tp_syntax_error(ctx, at, "%s", msg.data);
    tp_buf_free(&msg);
    if (!d)
        return 0;
    if (closes)
        tp_diag_note_at(d, open->at, "to match this '%c'", open->open);
    if (tok == YYSYMBOL_IDENT && expects(expected, n, YYSYMBOL_PARALLELIZE) &&
        assignment_follows(ctx, at))
        tp_diag_help(d, "top-level assignments go inside config { ... }");
    return 0;
}

/* ---- entry point ---- */

tp_node *tp_parse(tp_sources *src, int file, tp_diags *diags)
{
    const tp_source_file *f = &src->files[file];
    tp_parse_ctx ctx = {
        .src = src, .diags = diags, .file = file, .line = 1, .col = 1,
    };
    ctx.root = tp_node_new(N_FILE, (tp_span){file, 1, 1, 0, 0});
    /* Spans hold int offsets, and flex takes an int length plus two bytes. */
    if (f->size > (size_t)INT_MAX - 2) {
        tp_syntax_error(&ctx, ctx.root->span, "file too large to parse");
        return ctx.root;
    }
    ctx.root->span.length = (int)f->size;
    yyscan_t scanner;
    if (tp_yylex_init_extra(&ctx, &scanner) != 0)
        tp_out_of_memory();
    tp_yy_scan_bytes(f->text, (int)f->size, scanner);
    tp_yyparse(scanner, &ctx);
    tp_yylex_destroy(scanner);
    return ctx.root;
}
