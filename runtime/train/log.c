/* log.c: see log.h. */
#include "runtime/train/log.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sched/train_settings.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

void tr_log_add(tr_train_log *log, const tr_step_record *r)
{
    if (log->n == log->cap) {
        log->cap = log->cap ? 2 * log->cap : 64;
        log->steps = tp_xrealloc(log->steps, (size_t)log->cap * sizeof *log->steps);
    }
    log->steps[log->n++] = *r;
}

void tr_log_free(tr_train_log *log)
{
    free(log->steps);
    *log = (tr_train_log){0};
}

void tr_log_print(FILE *f, bool tty, const tr_step_record *r, int64_t total, int64_t tokens)
{
    fprintf(f, "%sstep %lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  %.1f ms%s%s", tty ? "\r" : "",
            (long long)r->step, (long long)total, r->loss, r->lr, r->grad_norm,
            r->seconds > 0 ? (double)tokens / r->seconds : 0, r->seconds * 1e3,
            r->skipped ? "  skipped (not finite)" : "",
            tty && r->step < total && !r->skipped && !r->evaluated ? "\033[K" : "\n");
    if (r->evaluated)
        fprintf(f, "eval after step %lld: loss %.4f  perplexity %.2f\n", (long long)r->step, r->eval_loss,
                exp(r->eval_loss));
    fflush(f);
}

void tr_log_summary(FILE *f, const tr_train_log *log, int64_t tokens, const char *saved)
{
    if (!log->n)
        return;
    const tr_step_record *first = &log->steps[0], *last = &log->steps[log->n - 1];
    double seconds = 0.0;
    for (int64_t i = 0; i < log->n; i++)
        seconds += log->steps[i].seconds;
    fprintf(f, "trained steps %lld-%lld in %.1f s (%.0f tok/s): loss %.4f -> %.4f", (long long)first->step,
            (long long)last->step, seconds, seconds > 0 ? (double)(tokens * log->n) / seconds : 0.0, first->loss,
            last->loss);
    if (last->evaluated)
        fprintf(f, ", eval loss %.4f (perplexity %.2f)", last->eval_loss, exp(last->eval_loss));
    if (saved)
        fprintf(f, "; saved %s", saved);
    fprintf(f, "\n");
    fflush(f);
}

/* JSON has no NaN or infinity: a diverged step's values are null. */
static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

int tr_log_write_json(const tr_train_log *log, const char *path, char *err, size_t errlen)
{
    json_t *steps = json_array();
    for (int64_t i = 0; i < log->n; i++) {
        const tr_step_record *r = &log->steps[i];
        json_t *step = json_pack("{s:I, s:o, s:o, s:o, s:o}", "step", (json_int_t)r->step, "loss", number(r->loss),
                                 "lr", number(r->lr), "grad_norm", number(r->grad_norm), "seconds", number(r->seconds));
        if (step && r->skipped)
            json_object_set_new(step, "skipped", json_true());
        if (step && r->evaluated) {
            json_object_set_new(step, "eval_loss", number(r->eval_loss));
            json_object_set_new(step, "eval_perplexity", number(exp(r->eval_loss)));
        }
        json_array_append_new(steps, step);
    }
    const tr_train_settings *t = &log->settings;
    json_t *settings = json_pack("{s:o, s:I, s:o, s:s, s:o, s:[o, o], s:o, s:o, s:b, s:o, s:I, s:I, s:i}",
                                 "lr", number(t->lr), "warmup", (json_int_t)t->warmup,
                                 "warmup_start_factor", number(t->warmup_start_factor), "schedule", t->schedule,
                                 "min_lr", number(t->min_lr), "betas", number(t->beta1), number(t->beta2),
                                 "eps", number(t->eps), "weight_decay", number(t->weight_decay),
                                 "decay_all", t->decay_all, "max_grad_norm", number(t->max_grad_norm),
                                 "steps", (json_int_t)t->steps, "micro_batches", (json_int_t)t->micro_batches,
                                 "ignore_index", (int)t->ignore_index);
    if (settings && t->no_decay) {   /* as the plan's no_decay: a list of name parts */
        json_t *names = json_array();
        size_t n;
        for (const char *at = t->no_decay, *name; tp_train_names_next(&at, &name, &n);)
            json_array_append_new(names, json_stringn(name, n));
        json_object_set_new(settings, "no_decay", names);
    }
    if (settings && t->pad_id >= 0)
        json_object_set_new(settings, "pad_id", json_integer(t->pad_id));
    if (settings && t->eos_id >= 0)
        json_object_set_new(settings, "eos_id", json_integer(t->eos_id));
    if (settings && t->decay_type) {
        json_object_set_new(settings, "decay_steps", json_integer(t->decay_steps));
        json_object_set_new(settings, "decay_type", json_string(t->decay_type));
    }
    json_t *root = json_pack("{s:o, s:o}", "settings", settings, "steps", steps);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!text)
        return tp_error(err, errlen, "--log-json: cannot encode the record (out of memory)");
    size_t len = strlen(text);
    tp_bytes pieces[2] = {{text, len}, {"\n", 1}};
    int rc = tp_write_file_atomic(path, pieces, 2, err, errlen);
    free(text);
    return rc;
}
