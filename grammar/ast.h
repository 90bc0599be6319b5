/* ast.h: the syntax tree shared by .model and .plan files.
 *
 * One node type for everything: the grammar is small and Python-like, and
 * a uniform tree keeps the parser, the evaluator and the fix-it writer
 * simple. Every node carries the span of the text it came from. */
#ifndef TPCC_AST_H
#define TPCC_AST_H

#include <stdint.h>
#include "compiler/diag/source.h"

typedef enum tp_node_kind {
    /* ---- top level ---- */
    N_FILE,          /* kids: items */
    N_MODEL_REF,     /* model "path.model"          str = path */
    N_CONFIG,        /* config { a = 1, b = 2 }     kids: N_ASSIGN */
    N_MESH,          /* mesh(tp = 2)                kids: N_ARG (name = dim name, kid0 = size) */
    N_PARALLELIZE,   /* parallelize "path" [on "dim"] { dict }
                        str = module path ("" = root), name = mesh dim or NULL, kid0 = N_DICT */
    N_LOSS_PARALLEL, /* loss_parallel() */
    N_MODULE,        /* module Name { members }     name = type name, kids: members */
    N_HF,            /* hf { architectures = (...) }  what a model file implements: kids: N_ASSIGN */
    N_TRAIN,         /* train { max_grad_norm = 1.0 }  a plan's training script: kids: N_ASSIGN */
    N_FROM_IMPORT,   /* from a.b import C as d, E    str = module path, kids: N_ALIAS */
    N_IMPORT,        /* import a.b [as c]            str = module path, name = alias or NULL */
    N_ALIAS,         /* C [as d] of a from-import    name = imported name, str = alias or NULL */
    /* ---- module members ---- */
    N_DEF,           /* def forward(a, b) { body }  name = "forward", kids: N_PARAM..., last kid N_BLOCK */
    N_PARAM,         /* name; kid0 = optional shape annotation (N_LIST of dim expressions) */
    N_BLOCK,         /* kids: statements */
    N_ASSIGN,        /* name = kid0 (also members: submodule declarations; in a plan,
                        at the top level, a name for a PyTorch class: x = ColwiseParallel) */
    N_RETURN,        /* return kid0 */
    N_EXPR_STMT,     /* kid0 (a call used as a statement, e.g. tie(...)) */
    N_UNPACK,        /* a, b = value   kids: N_NAME targets, last kid the value (also at a
                        plan's top level, as N_ASSIGN) */
    /* ---- expressions ---- */
    N_INT,           /* ival */
    N_FLOAT,         /* fval (1e-5, 500000.0) */
    N_STR,           /* str (unquoted, escapes resolved) */
    N_NAME,          /* name */
    N_TRUE, N_FALSE, N_NONE,
    N_CALL,          /* kid0 = callee, kids[1..] = N_ARG */
    N_ARG,           /* name = keyword or NULL, kid0 = value */
    N_TUPLE,         /* kids: elements ("(a,)" is a 1-tuple, "(a)" is just a) */
    N_LIST,          /* kids: elements */
    N_DICT,          /* kids: N_PAIR */
    N_PAIR,          /* kid0 = key, kid1 = value */
    N_ATTR,          /* kid0 . name */
    N_BINOP,         /* op: one of + - * / % and 'f' for //; kid0, kid1 */
    N_NEG,           /* -kid0 */
    N_NOT,           /* not kid0 */
    N_COND,          /* kid0 if kid1 else kid2 */
    N_KIND_COUNT
} tp_node_kind;

typedef struct tp_node {
    tp_node_kind kind;
    tp_span span;
    char *name;          /* identifiers, keywords of N_ARG, N_ASSIGN target */
    char *str;           /* string literals */
    int64_t ival;        /* N_INT */
    double fval;         /* N_FLOAT */
    int op;              /* N_BINOP */
    struct tp_node **kids;
    int nkids, capkids;
} tp_node;

tp_node *tp_node_new(tp_node_kind kind, tp_span span);
void tp_node_add(tp_node *parent, tp_node *kid);   /* kid may be NULL: ignored */
void tp_node_free(tp_node *n);
const char *tp_node_kind_name(tp_node_kind kind);
/* A deep copy, spans included. */
tp_node *tp_node_clone(const tp_node *n);

/* Print the tree as an S-expression (tests and debugging). Returns a
 * malloc'ed string. */
char *tp_node_dump(const tp_node *n);

#endif /* TPCC_AST_H */
