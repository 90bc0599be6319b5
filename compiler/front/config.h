/* config.h: named integers and flags (vocab, hidden, tp, ...).
 *
 * Each name is bound to an expression, evaluated lazily so that an
 * override of `hidden` also changes `head_dim = hidden // heads`.
 * Precedence, lowest first: the model's config block (where hf("key", d)
 * reads a Hugging Face config.json), the plan's config block, -D flags. */
#ifndef TPCC_CONFIG_H
#define TPCC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "compiler/front/ast.h"
#include "compiler/diag/diag.h"

typedef enum tp_cfg_origin {
    TP_CFG_MODEL,      /* default in the model file */
    TP_CFG_PLAN,       /* the plan's config block */
    TP_CFG_CMDLINE,    /* -D name=value */
} tp_cfg_origin;

typedef struct tp_cfg_entry {
    char *name;
    const tp_node *expr;      /* NULL for -D constants */
    int64_t value;
    bool is_bool;
    tp_span span;             /* where it was defined */
    tp_cfg_origin origin;
    int state;                /* 0 = not evaluated, 1 = evaluating (cycle guard), 2 = done, 3 = failed */
} tp_cfg_entry;

typedef struct tp_config {
    tp_cfg_entry *items; int count, cap;
    void *hf_json;            /* json_t* of --hf-config, or NULL */
    char *hf_path;
    tp_diags *diags;
} tp_config;

void tp_config_init(tp_config *c, tp_diags *diags);
void tp_config_free(tp_config *c);

/* Load a Hugging Face config.json; returns 0, or -1 with a message in err. */
int tp_config_load_hf(tp_config *c, const char *path, char *err, size_t errlen);

/* Bind every assignment of an N_CONFIG block (later bindings override). */
void tp_config_bind_block(tp_config *c, const tp_node *block, tp_cfg_origin origin);

/* Apply "name=value" from the command line. Unknown names and values that
 * are not integers or booleans are errors (returns -1 with message). */
int tp_config_override(tp_config *c, const char *assignment, char *err, size_t errlen);

/* Look a name up, evaluating it if needed. Returns false (after reporting
 * at `use` if it is a real location) when it is unknown or fails. */
bool tp_config_get(tp_config *c, const char *name, tp_span use, int64_t *out);
bool tp_config_has(const tp_config *c, const char *name);

/* Evaluate an integer/boolean expression: literals, config names, + - * //
 * / % (exact integer division only), unary -, not/and/or, `a if c else b`,
 * and the functions hf("key", default), round_up(x, m), min, max.
 * Reports errors at the offending sub-expression. */
bool tp_eval_int(tp_config *c, const tp_node *e, int64_t *out);

/* Expression text for messages ("heads * head_dim"); malloc'ed. */
char *tp_expr_text(const tp_node *e);

#endif /* TPCC_CONFIG_H */
