/* train_block.c: a plan's train { } block (see train_block.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/diag/suggest.h"
#include "compiler/plan/plan.h"
#include "compiler/plan/train_block.h"
#include "compiler/plan/train_values.h"
#include "util/xalloc.h"

/* The block's own keys; train_values.h's follow them. */
static const char *const own_keys[] = {"sampler_dims", "shard", "recompute"};
enum { NOWN = sizeof own_keys / sizeof *own_keys };

/* One mesh dimension named by a string of sampler_dims. */
static bool read_dim(struct tp_plan *p, const tp_node *e, tp_diags *d)
{
    if (e->kind != N_STR) {
        tp_diag_add(d, TP_ERROR, e->span, "plan", "sampler_dims names mesh dimensions: a string or a tuple of "
                    "strings (\"dp\", or (\"dp\", \"tp\"))");
        return false;
    }
    for (int i = 0; i < p->mesh_ndim; i++)
        if (!strcmp(p->mesh_name[i], e->str)) {
            p->train.sampler_over[i] = true;
            return true;
        }
    tp_diag *g = tp_diag_add(d, TP_ERROR, e->span, "plan", "sampler_dims names '%s', which is no dimension of the "
                             "mesh", e->str);
    const char *near = tp_suggest(e->str, (const char *const *)p->mesh_name, p->mesh_ndim);
    if (near)
        tp_diag_help(g, "did you mean '%s'?", near);
    return false;
}

static void read_sampler(struct tp_plan *p, const tp_node *v, tp_diags *d)
{
    p->train.sampler = v;
    if (v->kind != N_TUPLE && v->kind != N_LIST) {
        read_dim(p, v, d);
        return;
    }
    for (int k = 0; k < v->nkids; k++)
        read_dim(p, v->kids[k], d);
}

/* shard = "optimizer": one of the ZeRO stages (sched/dp_shard.h). */
static void read_shard(struct tp_plan *p, const tp_node *v, tp_config *c)
{
    tp_cfg_value x;
    p->train.shard = v;
    if (!tp_eval_value(c, v, &x))
        return;
    int mode = x.s ? tp_dp_shard_parse(x.s) : -1;
    if (mode < 0) {
        tp_diag *g = tp_diag_add(c->diags, TP_ERROR, v->span, "plan", "shard says what the data-parallel replicas "
                                 "hold in 1/dp slices: \"none\", \"optimizer\" (ZeRO-1), \"gradients\" (ZeRO-2) or "
                                 "\"parameters\" (FSDP, ZeRO-3)");
        const char *near = x.s ? tp_suggest(x.s, tp_dp_shard_names, TP_DP_SHARD_COUNT) : NULL;
        if (near)
            tp_diag_help(g, "did you mean \"%s\"?", near);
        return;
    }
    p->train.shard_mode = (tp_dp_shard)mode;
}

/* "fsdp", "dp_shard", "hsdp_shard": a name that says the dimension shards */
static bool named_sharded(const char *name) { return !strcmp(name, "fsdp") || strstr(name, "shard"); }

/* A data-parallel dimension named as a sharded one in a plan that shards
 * nothing: tprun would replicate the whole state over it, which is not
 * what the name promises (mesh(fsdp = 4, tp = 2) holds as much per rank
 * as mesh(fsdp = 1, tp = 2)). */
void tp_train_check_shard_names(const struct tp_plan *p, tp_diags *d)
{
    if (p->train.shard)     /* given: explicitly "none", or already reported */
        return;
    for (int i = 0; i < p->mesh_ndim; i++) {
        if (i == p->tp_dim || p->mesh_size[i] <= 1 || !named_sharded(p->mesh_name[i]))
            continue;
        tp_diag *g = tp_diag_add(d, TP_ERROR, p->mesh_arg[i] ? p->mesh_arg[i]->span : p->mesh_span, "mesh",
                                 "mesh dimension '%s' is named as a sharded data-parallel dimension, but the plan "
                                 "shards nothing over it: each of its %lld ranks would hold the whole training "
                                 "state", p->mesh_name[i], (long long)p->mesh_size[i]);
        tp_diag_help(g, "add train { shard = \"optimizer\" } (ZeRO-1); to replicate on purpose, name the dimension "
                        "\"dp\" or say train { shard = \"none\" }");
    }
}

const char *const tp_recompute_names[TP_RECOMPUTE_COUNT] = {"none", "full", "selective"};

bool tp_recompute_parse(const char *name, tp_recompute *out)
{
    for (int m = 0; m < TP_RECOMPUTE_COUNT; m++)
        if (!strcmp(name, tp_recompute_names[m])) {
            *out = (tp_recompute)m;
            return true;
        }
    return false;
}

/* recompute = "none" | "full" | "selective": a string, or a config name
 * the plan's config { } gives one (ac = "full" there, recompute = ac) */
static void read_recompute(struct tp_plan *p, const tp_node *v, tp_config *c)
{
    tp_cfg_value x;
    if (!tp_eval_value(c, v, &x))
        return;
    if (x.s && tp_recompute_parse(x.s, &p->train.recompute))
        return;
    tp_diag *g = tp_diag_add(c->diags, TP_ERROR, v->span, "plan", "recompute is the activation checkpointing of "
                             "the transformer layers: \"none\", \"full\" or \"selective\"");
    const char *sure = x.s ? tp_suggest_sure(x.s, tp_recompute_names, TP_RECOMPUTE_COUNT) : NULL;
    if (!sure) {
        tp_diag_help(g, "\"full\" keeps each layer's input and recomputes the layer in the backward; "
                     "\"selective\" keeps its matmuls' outputs too and recomputes the rest");
        return;
    }
    tp_diag_help(g, "did you mean \"%s\"?", sure);
    if (v->kind != N_STR)    /* a config name: the string is in the config block, not here */
        return;
    char *quoted = tp_xasprintf("\"%s\"", sure);
    tp_diag_fixit(g, v->span, quoted);
    free(quoted);
}

/* A key the block lacks: the one it is misspelt from, or the one a
 * script's other name for it means (eta_min: min_lr). */
static void unknown_key(const tp_node *a, tp_diags *d)
{
    tp_diag *g = tp_diag_add(d, TP_ERROR, a->span, "plan", "train { } has no key '%s'", a->name);
    const tp_train_key *also = tp_train_key_also(a->name);
    if (also) {
        tp_diag_help(g, "did you mean '%s'? that is train { }'s name for %s: %s", also->name, also->also, also->is);
        return;
    }
    const char *names[NOWN + TP_TF_COUNT];
    memcpy(names, own_keys, sizeof own_keys);
    for (int k = 0; k < tp_train_nkeys; k++)
        names[NOWN + k] = tp_train_keys[k].name;
    const char *near = tp_suggest(a->name, names, NOWN + tp_train_nkeys);
    if (near)
        tp_diag_help(g, "did you mean '%s'?", near);
}

void tp_train_block_read(struct tp_plan *p, const tp_node *file, tp_config *c)
{
    for (int i = 0; i < file->nkids; i++) {
        const tp_node *b = file->kids[i];
        if (b->kind != N_TRAIN)
            continue;
        if (p->train.block) {
            tp_diag_add(c->diags, TP_ERROR, b->span, "plan", "the plan has a train { } block already; merge them");
            continue;
        }
        p->train.block = b;
        for (int k = 0; k < b->nkids; k++) {
            const tp_node *a = b->kids[k];
            if (!strcmp(a->name, "sampler_dims")) {
                read_sampler(p, a->kids[0], c->diags);
                continue;
            }
            const tp_train_key *key = tp_train_key_named(a->name);
            if (key) {
                tp_train_value_read(&p->train, key, a->kids[0], c);
                continue;
            }
            if (!strcmp(a->name, "shard")) {
                read_shard(p, a->kids[0], c);
                continue;
            }
            if (!strcmp(a->name, "recompute")) {
                read_recompute(p, a->kids[0], c);
                continue;
            }
            unknown_key(a, c->diags);
        }
        tp_train_values_check(&p->train, c->diags);
    }
    if (p->train.sampler)
        return;
    for (int i = 0; i < p->mesh_ndim; i++)   /* tprun's feed: each replica its own batch */
        p->train.sampler_over[i] = i != p->tp_dim && p->mesh_size[i] > 1;
}

void tp_train_block_reject_in_model(const tp_node *model_file, tp_diags *d)
{
    for (int i = 0; i < model_file->nkids; i++)
        if (model_file->kids[i]->kind == N_TRAIN)
            tp_diag_add(d, TP_ERROR, model_file->kids[i]->span, "model",
                        "train { } describes a plan's training script; move it into the plan");
}
