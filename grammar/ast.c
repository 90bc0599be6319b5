/* ast.c: building, freeing and printing syntax trees.
 *
 * Dump format (tp_node_dump): one S-expression per node, on one line,
 *
 *     (KIND name "str" ival op kid kid ...)
 *
 * where each part after KIND is printed only when the node has it:
 *
 *   KIND    tp_node_kind_name(): FILE, MODEL_REF, CALL, ...
 *   name    bare when it is an identifier (model, tp), else double-quoted
 *   "str"   always double-quoted, with \" \\ \n \t and \xNN escapes
 *   ival    N_INT only, in decimal
 *   fval    N_FLOAT only, the shortest decimal that reads back exactly,
 *           with a '.' or an exponent (1e-05, 500000.0)
 *   op      N_BINOP only: + - * / // % and or
 *   kids    nested S-expressions, in order
 *
 * Attributes never start with '(', so the first '(' after KIND begins the
 * first kid; a NULL tree dumps as "()". Examples:
 *
 *     (FILE (MODEL_REF "x.model") (CONFIG (ASSIGN tp (INT 2))))
 *     (CALL (NAME Linear) (ARG (NAME hidden)) (ARG bias (FALSE)))
 *     (PARALLELIZE tp "model.layers.*" (DICT (PAIR (STR "mlp") (CALL (NAME f)))))
 *     (BINOP // (NAME hidden) (NAME heads))
 *
 * Recursion: the parser caps the height of every tree it builds (see
 * grammar/parser.y), so the recursive walks below stay shallow. */
#include "grammar/ast.h"

#include <inttypes.h>
#include <stdlib.h>

#include "util/xalloc.h"

tp_node *tp_node_new(tp_node_kind kind, tp_span span)
{
    tp_node *n = tp_xcalloc(1, sizeof *n);
    n->kind = kind;
    n->span = span;
    return n;
}

void tp_node_add(tp_node *parent, tp_node *kid)
{
    if (!kid)
        return;
    if (parent->nkids == parent->capkids) {
        parent->capkids = parent->capkids ? parent->capkids * 2 : 4;
        parent->kids = tp_xreallocarray(parent->kids, (size_t)parent->capkids,
                                        sizeof *parent->kids);
    }
    parent->kids[parent->nkids++] = kid;
}

void tp_node_free(tp_node *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->nkids; i++)
        tp_node_free(n->kids[i]);
    free(n->kids);
    free(n->name);
    free(n->str);
    free(n);
}

static const char *const kind_names[] = {
    [N_FILE] = "FILE",
    [N_MODEL_REF] = "MODEL_REF",
    [N_CONFIG] = "CONFIG",
    [N_MESH] = "MESH",
    [N_PARALLELIZE] = "PARALLELIZE",
    [N_LOSS_PARALLEL] = "LOSS_PARALLEL",
    [N_MODULE] = "MODULE",
    [N_HF] = "HF",
    [N_TRAIN] = "TRAIN",
    [N_FROM_IMPORT] = "FROM_IMPORT",
    [N_IMPORT] = "IMPORT",
    [N_ALIAS] = "ALIAS",
    [N_DEF] = "DEF",
    [N_PARAM] = "PARAM",
    [N_BLOCK] = "BLOCK",
    [N_ASSIGN] = "ASSIGN",
    [N_RETURN] = "RETURN",
    [N_EXPR_STMT] = "EXPR_STMT",
    [N_UNPACK] = "UNPACK",
    [N_INT] = "INT",
    [N_FLOAT] = "FLOAT",
    [N_STR] = "STR",
    [N_NAME] = "NAME",
    [N_TRUE] = "TRUE",
    [N_FALSE] = "FALSE",
    [N_NONE] = "NONE",
    [N_CALL] = "CALL",
    [N_ARG] = "ARG",
    [N_TUPLE] = "TUPLE",
    [N_LIST] = "LIST",
    [N_DICT] = "DICT",
    [N_PAIR] = "PAIR",
    [N_ATTR] = "ATTR",
    [N_BINOP] = "BINOP",
    [N_NEG] = "NEG",
    [N_NOT] = "NOT",
    [N_COND] = "COND",
};
/* A kind added to ast.h after N_COND needs a name here. */
_Static_assert(sizeof kind_names / sizeof kind_names[0] == N_KIND_COUNT,
               "every tp_node_kind needs a name");

/* Kind names without the N_ prefix, as in dumps. */
const char *tp_node_kind_name(tp_node_kind kind)
{
    if ((unsigned)kind >= N_KIND_COUNT || !kind_names[kind])
        return "?";
    return kind_names[kind];
}

static int is_identifier(const char *s)
{
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return 0;
    for (s++; *s; s++)
        if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

/* Double-quoted, so that dumps stay one line of printable ASCII whatever
 * bytes the string holds. */
static void dump_quoted(tp_buf *b, const char *s)
{
    tp_buf_append(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            tp_buf_appendf(b, "\\%c", *p);
        else if (*p == '\n')
            tp_buf_append(b, "\\n");
        else if (*p == '\t')
            tp_buf_append(b, "\\t");
        else if (*p < 0x20 || *p >= 0x7f)
            tp_buf_appendf(b, "\\x%02X", *p);
        else
            tp_buf_append_char(b, (char)*p, 1);
    }
    tp_buf_append(b, "\"");
}

static const char *op_text(int op)
{
    switch (op) {
    case 'f': return "//";
    case 'P': return "**";
    case 'E': return "==";
    case 'N': return "!=";
    case 'A': return "and";
    case 'O': return "or";
    case '+': return "+";
    case '-': return "-";
    case '*': return "*";
    case '/': return "/";
    case '%': return "%";
    default: return "?";
    }
}

static void dump_node(tp_buf *b, const tp_node *n)
{
    tp_buf_appendf(b, "(%s", tp_node_kind_name(n->kind));
    if (n->name) {
        tp_buf_append(b, " ");
        if (is_identifier(n->name))
            tp_buf_append(b, n->name);
        else
            dump_quoted(b, n->name);
    }
    if (n->str) {
        tp_buf_append(b, " ");
        dump_quoted(b, n->str);
    }
    if (n->kind == N_INT)
        tp_buf_appendf(b, " %" PRId64, n->ival);
    if (n->kind == N_FLOAT) {
        char real[TP_REAL_TEXT_MAX];
        tp_format_real(n->fval, real);
        tp_buf_appendf(b, " %s", real);
    }
    if (n->kind == N_BINOP)
        tp_buf_appendf(b, " %s", op_text(n->op));
    for (int i = 0; i < n->nkids; i++) {
        tp_buf_append(b, " ");
        dump_node(b, n->kids[i]);
    }
    tp_buf_append(b, ")");
}

tp_node *tp_node_clone(const tp_node *n)
{
    tp_node *c = tp_node_new(n->kind, n->span);
    c->name = n->name ? tp_xstrdup(n->name) : NULL;
    c->str = n->str ? tp_xstrdup(n->str) : NULL;
    c->ival = n->ival;
    c->fval = n->fval;
    c->op = n->op;
    for (int i = 0; i < n->nkids; i++)
        tp_node_add(c, tp_node_clone(n->kids[i]));
    return c;
}

char *tp_node_dump(const tp_node *n)
{
    tp_buf b;
    tp_buf_init(&b);
    if (n)
        dump_node(&b, n);
    else
        tp_buf_append(&b, "()");
    return tp_buf_take(&b);
}
