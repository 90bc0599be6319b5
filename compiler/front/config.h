/* config.h: named integers, flags and floats (vocab, hidden, tp,
 * rms_norm_eps, ...).
 *
 * Each name is bound to an expression, evaluated lazily so that an
 * override of `hidden` also changes `head_dim = hidden // heads`.
 * Precedence, lowest first: the model's config block (where hf("key", d)
 * reads a Hugging Face config.json), the plan's config block, -D flags. */
#ifndef TPCC_CONFIG_H
#define TPCC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "grammar/ast.h"
#include "compiler/diag/diag.h"
#include "util/map.h"

typedef enum tp_cfg_origin {
    TP_CFG_MODEL,      /* default in the model file */
    TP_CFG_PLAN,       /* the plan's config block */
    TP_CFG_CMDLINE,    /* -D name=value */
} tp_cfg_origin;

/* A value: an integer (booleans are the integers 0 and 1), a float or a
 * string. Floats are finite: literals and arithmetic that leave a double's
 * range are errors. Strings (a literal, or a JSON string of --hf-config,
 * such as rope_scaling.rope_type) take part in no arithmetic: only an
 * argument that names a choice reads one. */
typedef struct tp_cfg_value {
    bool is_float;
    int64_t i;                /* when !is_float and !s */
    double f;                 /* when is_float */
    const char *s;            /* a string, borrowed from the model text or the config.json; else NULL */
} tp_cfg_value;

/* A value as a double, for float contexts (eps, theta): an integer is
 * exact up to 2^53 and rounds beyond, as in Python. */
static inline double tp_cfg_real(tp_cfg_value v) { return v.is_float ? v.f : (double)v.i; }

typedef struct tp_cfg_entry {
    char *name;
    const tp_node *expr;      /* NULL for -D constants */
    int64_t value;            /* integers and booleans */
    double real;              /* floats */
    bool is_bool;             /* written True or False: the schedule records true/false */
    bool is_float;
    const char *str;          /* strings (borrowed) */
    tp_span span;             /* where it was defined */
    tp_cfg_origin origin;
    int state;                /* 0 = not evaluated, 1 = evaluating (cycle guard), 2 = done, 3 = failed */
} tp_cfg_entry;

typedef struct tp_config {
    tp_cfg_entry *items; int count, cap;
    tp_map index;             /* name -> position in items */
    void *hf_json;            /* json_t* of --hf-config, or NULL */
    char *hf_path;
    int64_t seq_window;       /* config.json's sliding window, which seq must stay within; 0: none */
    tp_diags *diags;
} tp_config;

void tp_config_init(tp_config *c, tp_diags *diags);
void tp_config_free(tp_config *c);

/* Load a Hugging Face config.json, or the config.json of a model
 * directory; returns 0, or -1 with an "io" error in c->diags where jansson
 * stopped (the file is added to src). */
int tp_config_load_hf(tp_config *c, const char *path, tp_sources *src);

/* path, or path/config.json when path is a directory (a model as
 * Hugging Face saves it); malloc'ed. */
char *tp_config_json_path(const char *path);

/* Bind every assignment of an N_CONFIG block (later bindings override). */
void tp_config_bind_block(tp_config *c, const tp_node *block, tp_cfg_origin origin);

/* Apply "name=value" from the command line. Unknown names and values that
 * are not integers, floats (1e-5, 500000.0) or booleans are errors
 * (returns -1 with message). */
int tp_config_override(tp_config *c, const char *assignment, char *err, size_t errlen);

/* Look a name up, evaluating it if needed. Returns false (after reporting
 * at `use` if it is a real location) when it is unknown or fails. */
bool tp_config_value(tp_config *c, const char *name, tp_span use, tp_cfg_value *out);
/* The same for an integer or boolean: a float is an error, reported at
 * `use`, else where the name is defined. */
bool tp_config_get(tp_config *c, const char *name, tp_span use, int64_t *out);
bool tp_config_has(const tp_config *c, const char *name);
/* The entry bound to name, or NULL. */
const tp_cfg_entry *tp_config_entry(const tp_config *c, const char *name);
/* The key of an hf("key", ...) call, else NULL. */
const char *tp_config_hf_key(const tp_node *e);
/* The json_t* at a dotted key ("rope_scaling.factor": member factor of
 * object rope_scaling) of --hf-config, JSON null included; NULL when a
 * step is missing or is no object. */
void *tp_config_hf_lookup(const tp_config *c, const char *key);

/* The resolved configuration as a schedule records it: one setting per
 * name, at the place the name was first bound, with its last value
 * (unevaluated or failed values are null). Returns an array of *n the
 * caller frees; names are borrowed from c. */
struct tp_setting *tp_config_settings(const tp_config *c, int *n);

/* Evaluate an expression: literals, config names, + - * / // %, unary -,
 * not/and/or, `a if c else b`, and the functions hf("key", default),
 * round_up(x, m), min, max. On integers / must divide exactly; + - * /
 * with a float operand give a float, as in Python; // % and round_up take
 * integers only. Reports errors at the offending sub-expression. */
bool tp_eval_value(tp_config *c, const tp_node *e, tp_cfg_value *out);
/* The same where an integer or boolean is needed: a float is an error. */
bool tp_eval_int(tp_config *c, const tp_node *e, int64_t *out);
/* The same for a size (a dimension, a count, a padding multiple): a
 * positive integer. */
bool tp_eval_size(tp_config *c, const tp_node *e, int64_t *out);

/* Expression text for messages ("heads * head_dim"); malloc'ed. */
char *tp_expr_text(const tp_node *e);

#endif /* TPCC_CONFIG_H */
