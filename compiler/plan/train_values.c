/* train_values.c: see train_values.h. */
#include "compiler/plan/train_values.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/diag/suggest.h"
#include "compiler/plan/train_block.h"
#include "util/xalloc.h"

/* The error for a value the key does not take: what the key is and what
 * it takes. */
static tp_diag *refuse(const tp_train_key *k, const tp_node *v, tp_diags *d)
{
    char takes[160];
    tp_train_key_takes(k, takes, sizeof takes);
    return tp_diag_add(d, TP_ERROR, v->span, "plan", "%s is %s: %s", k->name, k->is, takes);
}

/* A word key's value: one of its words; a misspelling gets the word it
 * meant, as a fix-it where the string is written here. */
static bool read_word(const tp_train_key *k, const tp_node *v, tp_config *c, double *out)
{
    tp_cfg_value x;
    if (!tp_eval_value(c, v, &x))
        return false;
    int w = x.s ? tp_train_word(k, x.s) : -1;
    if (w >= 0) {
        *out = w;
        return true;
    }
    tp_diag *g = refuse(k, v, c->diags);
    const char *sure = x.s ? tp_suggest_sure(x.s, k->words, k->nwords) : NULL;
    if (!sure)
        return false;
    tp_diag_help(g, "did you mean \"%s\"?", sure);
    if (v->kind == N_STR) {   /* a config name's string is in the config block, not here */
        char *quoted = tp_xasprintf("\"%s\"", sure);
        tp_diag_fixit(g, v->span, quoted);
        free(quoted);
    }
    return false;
}

/* A number (whole for a count and a flag) in the key's range. */
static bool read_number(const tp_train_key *k, const tp_node *v, tp_config *c, double *out)
{
    tp_cfg_value x;
    if (!tp_eval_value(c, v, &x))
        return false;
    bool whole = k->kind == TP_TK_COUNT || k->kind == TP_TK_BOOL || k->kind == TP_TK_ID;
    if (x.s || (whole && x.is_float) || !tp_train_in_range(k, tp_cfg_real(x))) {
        refuse(k, v, c->diags);
        return false;
    }
    *out = tp_cfg_real(x);
    return true;
}

/* A names key's value (no_decay): a string, or a tuple or list of them,
 * each a name part without a comma, joined into t's string. */
static bool read_names(struct tp_train_spec *t, const tp_train_key *k, const tp_node *v, tp_config *c)
{
    const bool many = v->kind == N_TUPLE || v->kind == N_LIST;
    const int n = many ? v->nkids : 1;
    char names[TP_TRAIN_NAMES_MAX] = "";
    if (many && !n) {
        refuse(k, v, c->diags);
        return false;
    }
    for (int i = 0; i < n; i++) {
        const tp_node *one = many ? v->kids[i] : v;
        tp_cfg_value x;
        if (!tp_eval_value(c, one, &x))
            return false;
        if (!x.s || !tp_train_name_ok(x.s)) {
            refuse(k, one, c->diags);
            return false;
        }
        if (!tp_train_names_add(names, x.s)) {
            tp_diag_add(c->diags, TP_ERROR, v->span, "plan", "%s's names take more than %d characters; name "
                        "shorter parts of the parameter names", k->name, TP_TRAIN_NAMES_MAX - 1);
            return false;
        }
    }
    memcpy(t->values.no_decay, names, sizeof names);
    return true;
}

void tp_train_value_read(struct tp_train_spec *t, const tp_train_key *k, const tp_node *v, tp_config *c)
{
    if (t->value_at[k->field]) {
        tp_diag *g = tp_diag_add(c->diags, TP_ERROR, v->span, "plan", "train { } gives %s twice", k->name);
        tp_diag_note_at(g, t->value_at[k->field]->span, "first given here");
        tp_diag_help(g, "keep one of them");
        return;
    }
    t->value_at[k->field] = v;   /* a wrong value too: no "twice" for it, nor errors that follow from it */
    if (k->kind == TP_TK_PAIR)
        t->value_at[k->field + 1] = v;
    double x[2];
    bool ok;
    if (k->kind == TP_TK_NAMES) {
        ok = read_names(t, k, v, c);
        x[0] = 1;
    } else if (k->kind == TP_TK_WORD)
        ok = read_word(k, v, c, &x[0]);
    else if (k->kind != TP_TK_PAIR)
        ok = read_number(k, v, c, &x[0]);
    else if ((v->kind != N_TUPLE && v->kind != N_LIST) || v->nkids != 2) {
        refuse(k, v, c->diags);
        return;
    } else
        ok = read_number(k, v->kids[0], c, &x[0]) && read_number(k, v->kids[1], c, &x[1]);
    if (!ok)
        return;
    for (int i = 0; i < (k->kind == TP_TK_PAIR ? 2 : 1); i++) {
        t->values.v[k->field + i] = x[i];
        t->values.given |= 1u << (k->field + i);
    }
}

/* decay_steps and decay_type shape "wsd"'s decay alone; "wsd" needs the
 * first. A schedule written wrong is an error already. */
static void check_wsd(const struct tp_train_spec *t, tp_diags *d)
{
    const tp_train_values *v = &t->values;
    if (t->value_at[TP_TF_SCHEDULE] && !tp_train_given(v, TP_TF_SCHEDULE))
        return;
    bool wsd = tp_train_given(v, TP_TF_SCHEDULE) && v->v[TP_TF_SCHEDULE] == TP_LR_WSD;
    if (wsd && !t->value_at[TP_TF_DECAY_STEPS]) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, t->value_at[TP_TF_SCHEDULE]->span, "plan", "schedule \"wsd\" needs "
                                 "decay_steps: the steps at the end that decay to min_lr (get_wsd_schedule's "
                                 "num_decay_steps)");
        tp_diag_help(g, "add decay_steps = N to the block: the rate holds at lr from the warm-up's end until the "
                        "last N steps");
    }
    if (wsd)
        return;
    char schedule[40];
    if (tp_train_given(v, TP_TF_SCHEDULE))
        snprintf(schedule, sizeof schedule, "\"%s\"", tp_lr_schedule_names[(int)v->v[TP_TF_SCHEDULE]]);
    else
        snprintf(schedule, sizeof schedule, "not given (cosine)");
    for (tp_train_field f = TP_TF_DECAY_STEPS; f <= TP_TF_DECAY_TYPE; f++) {
        if (!t->value_at[f])
            continue;
        const char *key = tp_train_key_of(f)->name;
        tp_diag *g = tp_diag_add(d, TP_ERROR, t->value_at[f]->span, "plan", "%s shapes the decay of schedule "
                                 "\"wsd\" (warmup-stable-decay), and the block's schedule is %s", key, schedule);
        tp_diag_help(g, "say schedule = \"wsd\", or remove %s", key);
    }
}

void tp_train_values_check(const struct tp_train_spec *t, tp_diags *d)
{
    const tp_train_values *v = &t->values;
    if (tp_train_given(v, TP_TF_LR) && tp_train_given(v, TP_TF_MIN_LR) && v->v[TP_TF_MIN_LR] > v->v[TP_TF_LR]) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, t->value_at[TP_TF_MIN_LR]->span, "plan", "min_lr %g is above lr %g: "
                                 "the schedule decays from lr to min_lr", v->v[TP_TF_MIN_LR], v->v[TP_TF_LR]);
        tp_diag_note_at(g, t->value_at[TP_TF_LR]->span, "lr is given here");
        tp_diag_help(g, "min_lr is a rate, not a fraction of lr: for a tenth of lr write min_lr = %g",
                     v->v[TP_TF_LR] / 10);
    }
    check_wsd(t, d);
    if (tp_train_given(v, TP_TF_NO_DECAY) && tp_train_given(v, TP_TF_DECAY_ALL) && v->v[TP_TF_DECAY_ALL]) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, t->value_at[TP_TF_NO_DECAY]->span, "plan", "no_decay names the "
                                 "parameters without weight decay, and decay_all = True decays every one");
        tp_diag_note_at(g, t->value_at[TP_TF_DECAY_ALL]->span, "decay_all is given here");
        tp_diag_help(g, "keep one of them");
    }
    if (tp_train_given(v, TP_TF_PAD_ID) && tp_train_given(v, TP_TF_EOS_ID) &&
        v->v[TP_TF_PAD_ID] == v->v[TP_TF_EOS_ID]) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, t->value_at[TP_TF_EOS_ID]->span, "plan", "eos_id %.0f is pad_id too: "
                                 "a token cannot both end a document and be padding", v->v[TP_TF_EOS_ID]);
        tp_diag_note_at(g, t->value_at[TP_TF_PAD_ID]->span, "pad_id is given here");
        tp_diag_help(g, "pad with another id, or give only eos_id");
    }
}
