/* model.h: a model definition instantiated with a configuration: the
 * module tree with Hugging Face fully qualified names and parameter shapes.
 *
 * The tree knows nothing of any model family: module types come from the
 * .model file; only the leaf types (PyTorch's nn.Linear, nn.Embedding,
 * nn.RMSNorm, nn.LayerNorm, transformers' Conv1D) and repeat() are built in. */
#ifndef TPCC_MODEL_H
#define TPCC_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "sched/layout.h"

typedef enum tp_module_kind {
    TP_MOD_USER,        /* a `module` from the model file */
    TP_MOD_LIST,        /* repeat(M(), n): children "0" .. "n-1", applied in order */
    TP_MOD_LINEAR,
    TP_MOD_CONV1D,      /* transformers' Conv1D(nf, nx): weight [nx, nf] (in, out), y = x @ W + b */
    TP_MOD_EMBEDDING,
    TP_MOD_RMSNORM,
    TP_MOD_LAYERNORM,
} tp_module_kind;

typedef struct tp_param {
    char *name;                 /* "weight", "bias" */
    char *fqn;                  /* "model.layers.0.self_attn.q_proj.weight" */
    int rank;
    int64_t shape[2];           /* padded where pad_to applies */
    int64_t logical[2];         /* as in the checkpoint */
    char *dimname[2];           /* "vocab", "hidden": for messages */
    struct tp_param *tied_to;   /* the parameter this one shares storage with */
    tp_span tie_span;           /* the tie() that tied it */
    struct tp_module *owner;
    int ir_index;               /* position in the lowered weight table, -1 before lowering */
} tp_param;

typedef struct tp_module {
    tp_module_kind kind;
    char *name;                 /* "q_proj", "3"; "" for the root */
    char *fqn;                  /* "model.layers.3.self_attn.q_proj"; "" for the root */
    char *type;                 /* "LlamaAttention", "Linear", "ModuleList" */
    const tp_node *def;         /* N_MODULE of a user module */
    const tp_node *decl;        /* the N_ASSIGN that declared it (NULL for the root) */
    struct tp_module *parent;
    struct tp_module **kids; int nkids;
    tp_param *params; int nparams;
    int index;                  /* position in tp_model.all */
    double eps;                 /* norms: added to the variance (eps=) */
    /* Linear(packed=(a, b, c)): the output features are segments of a fused
     * projection (q/k/v, gate/up), a packed style shards each of them */
    int nsegments;              /* 0: not packed */
    int64_t segments[TP_MAX_SEGMENTS];
    bool unit_offset;           /* RMSNorm(unit_offset=True): scales by 1 + weight (Gemma) */
    struct tp_style *style;     /* the plan entry that applies to it, if any */
} tp_module;

typedef struct tp_model {
    tp_module *root;
    tp_module **all; int count, cap;    /* preorder */
    /* hf { positions_from = "model.embed_tokens" }: the module whose output's
     * length transformers numbers the positions by (LlamaModel's
     * position_ids = arange(inputs_embeds.shape[1])) when the caller
     * passes no position_ids; NULL: the positions do not depend on it */
    tp_module *positions_from;
    const tp_node **defs; int ndefs;    /* module type definitions */
} tp_model;

/* Instantiate the first module of the model file(s) as the root. Errors go
 * to c->diags. Returns false when nothing usable could be built. */
bool tp_model_build(tp_model *m, const tp_node *const *files, int nfiles, tp_config *c);
void tp_model_free(tp_model *m);

tp_module *tp_model_find(const tp_model *m, const char *fqn);
tp_param *tp_model_find_param(const tp_model *m, const char *fqn);
const tp_node *tp_model_def(const tp_model *m, const char *type);
const tp_node *tp_module_forward(const tp_module *mod);   /* N_DEF or NULL */
bool tp_module_is_leaf(const tp_module *mod);
tp_param *tp_module_param(const tp_module *mod, const char *name);

/* Canonical parameter (following ties). */
static inline tp_param *tp_param_canonical(tp_param *p) { return p->tied_to ? p->tied_to : p; }

#endif /* TPCC_MODEL_H */
