/* train.c: see train.h. */
#include "runtime/train/train.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "runtime/comm/progress.h"
#include "runtime/io/safetensors_write.h"
#include "runtime/train/accum.h"
#include "runtime/train/batches.h"
#include "runtime/train/dp.h"
#include "runtime/train/eval.h"
#include "runtime/train/gather.h"
#include "runtime/train/log.h"
#include "runtime/train/optim.h"
#include "runtime/train/save.h"
#include "runtime/train/segments.h"
#include "runtime/train/settings.h"
#include "runtime/train/zero.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

typedef struct trainer {
    const tr_options *o;
    const tr_train_options *t;  /* the settings in force: in_force */
    tr_train_options in_force;  /* the flags over the schedule's train { } (settings.h) */
    tp_comm *comm;             /* the tensor-parallel group */
    tp_comm *dp;               /* the replicas of this rank's shard */
    tp_comm *world;            /* every rank of the job: what they agree on */
    bool everywhere;           /* the failure returned is every rank's (tp_agree) */
    tr_exec *x;
    const tr_schedule *s;
    tr_batches batches;        /* what each step reads (--data, --labels) */
    tr_accum accum;            /* --micro-batches: their gradients' sum */
    tr_eval eval;              /* --eval-data */
    int64_t per_step;          /* tokens per step and replica: B·S */
    tr_optim optim;
    tr_zero zero;              /* the optimizer state's runs over dp (ZeRO-1) */
    bool sharded;
    bool saves;                /* --save: this rank holds state the checkpoint takes */
    tr_layouts layouts;        /* for the files gathered on rank 0 */
    char *save_dir;            /* --save: DIR, as written (tr_save_check) */
    int save_lock;             /* its lock on the rank that writes it, else -1 */
    char *config;              /* --save: the text of the config.json it writes */
    tr_train_log log;
} trainer;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What the schedule and the backend must provide, checked before the data
 * is read. */
static int check_setup(trainer *tr, char *err, size_t errlen)
{
    const tr_schedule *s = tr->s;
    const tp_backend *be = tr->x->be;
    if (s->loss < 0 || s->input_ids < 0)
        return tp_error(err, errlen, "%s has no loss over input ids to train on; its model must return "
                        "cross_entropy(logits, labels), or its logits with a loss from tpcc --train --loss",
                        tr->o->schedule);
    if (!be->adamw || !be->sum_squares)
        return tp_error(err, errlen, "the %s backend has no optimizer kernels (adamw, sum_squares); train with "
                        "--backend cpu", be->name);
    if (tr->t->max_shard_given && !tr->t->save)
        return tp_error(err, errlen, "--max-shard-size goes with --save DIR: it sizes the model files --save writes");
    if (tr->t->no_decay && tr->t->decay_all)
        return tp_error(err, errlen, "--no-decay %s names the parameters without weight decay, decay_all decays "
                        "every one: give one of them", tr->t->no_decay);
    if ((tr->t->save_every || tr->t->save_keep != 1) && !tr->t->save)
        return tp_error(err, errlen, "--save-every and --save-keep go with --save DIR: they say when DIR is written "
                        "and how many checkpoints are kept beside it");
    if (tr->t->save && tr_save_check(tr->t->save, tr->o->weights, &tr->save_dir, &tr->config, err, errlen))
        return -1;
    bool writes = tr->comm->rank == 0 && tr->dp->rank == 0;   /* tr_save's writing rank */
    return tr->t->save && writes ? tr_save_lock(tr->save_dir, &tr->save_lock, err, errlen) : 0;
}

/* Every rank leaves an I/O phase (or a step that stopped on every rank)
 * through one collective over the job, knowing whether a rank failed and
 * why: a save that fails on the rank writing it fails the same way on
 * every rank, which then all end without an abort (tp_agree). */
static int agree(trainer *tr, int rc, char *err, size_t errlen)
{
    return tp_agree(tr->world, rc, &tr->everywhere, err, errlen);
}

/* The evaluation's streams go with --eval-data, and its masks with
 * training's (the kinds after the labels, streams.h): both take their
 * segments from the same sources, --pad-id and --eos-id being the same
 * for both, so a mask given for one stream alone would leave the other's
 * padding or documents unmarked. */
static int check_eval_streams(const trainer *tr, char *err, size_t errlen)
{
    const char *const *eval = tr->t->eval, *const *train = tr->t->streams;
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        if (eval[k] && !eval[TR_STREAM_DATA])
            return tp_error(err, errlen, "%s goes with --eval-data FILE, the validation stream it lies beside",
                            tr_streams[k].eval_flag);
    for (int k = TR_STREAM_ATTENTION_MASK; k < TR_STREAM_KINDS && eval[TR_STREAM_DATA]; k++) {
        if (train[k] && !eval[k])
            return tp_error(err, errlen, "%s gives --data's %s; --eval-data %s needs its own: give %s FILE",
                            tr_streams[k].flag, tr_streams[k].values, eval[TR_STREAM_DATA], tr_streams[k].eval_flag);
        if (eval[k] && !train[k])
            return tp_error(err, errlen, "%s goes with %s: the validation stream's segments come from what the "
                            "training stream's do; give %s FILE for --data too", tr_streams[k].eval_flag,
                            tr_streams[k].flag, tr_streams[k].flag);
    }
    return 0;
}

/* The streams, their headers checked to hold every step (batches.h). */
static int open_data(trainer *tr, int64_t vocab, char *err, size_t errlen)
{
    const tr_buf *ids = &tr->s->bufs[tr->s->input_ids];
    tr->per_step = tr_buf_elems(ids);
    const int64_t seq = ids->rank > 1 ? ids->shape[ids->rank - 1] : tr->per_step;
    const tr_batch_shape shape = {.batch = tr->per_step / seq, .seq = seq, .replicas = tr->dp->world,
                                  .micro_batches = (int)tr->t->micro_batches, .steps = tr->t->steps,
                                  .epochs = tr->t->epochs ? tr->t->epochs : 1, .shuffle = tr->t->shuffle,
                                  .shuffle_seed = tr->t->shuffle_seed,
                                  .label_shift = tr->s->labels >= 0 ? tr->s->label_shift : 1, .vocab = vocab,
                                  .ignore_index = tr->t->ignore_index, .scored = tr->s->labels >= 0,
                                  .pad_id = tr->t->pad_id, .eos_id = tr->t->eos_id};
    const tr_segment_sources sources = tr_train_segment_sources(tr->t);
    if (tr_segments_check(tr->o->schedule, tr->s->segments >= 0, vocab, &sources, err, errlen))
        return -1;
    const char *const *eval = tr->t->eval;
    if (tr->s->labels < 0 && (tr->o->labels || eval[TR_STREAM_DATA]))
        return tp_error(err, errlen, "%s: %s has no labels to take (its loss, tpcc --loss sum, reads none)",
                        tr->o->labels ? "--labels" : "--eval-data", tr->o->schedule);
    if (tr->t->eval_every && !eval[TR_STREAM_DATA])
        return tp_error(err, errlen, "--eval-every goes with --eval-data FILE, the validation stream");
    if (check_eval_streams(tr, err, errlen))
        return -1;
    const char *paths[TR_STREAM_KINDS];
    memcpy(paths, tr->t->streams, sizeof paths);
    paths[TR_STREAM_LABELS] = tr->o->labels;
    if (eval[TR_STREAM_DATA] && tr_eval_open(&tr->eval, tr->s, &shape, eval, err, errlen))
        return -1;
    return tr_batches_open(&tr->batches, &shape, paths, err, errlen);
}

/* The streams' values, checked before step 1, the work split over every
 * rank of the job (tr_batches_check); every rank leaves with the same
 * outcome. */
static int check_data(trainer *tr, char *err, size_t errlen)
{
    tp_progress_io("checking the data");
    if (tr_batches_check(&tr->batches, tr->world, &tr->everywhere, err, errlen))
        return -1;
    return tr->t->eval[TR_STREAM_DATA] ? tr_eval_check(&tr->eval, tr->world, &tr->everywhere, err, errlen) : 0;
}

/* --grads-out: the full gradients of the first step taken, before clipping,
 * gathered to rank 0 and written under the checkpoint's names: replica 0
 * writes them, the mean once ZeRO's runs are gathered over dp. */
static int write_grads(trainer *tr, char *err, size_t errlen)
{
    const tr_schedule *s = tr->s;
    float *mine = tp_xcalloc((size_t)s->weight_elems + 1, sizeof *mine);   /* the gaps between weights: 0 */
    for (int i = 0; i < s->nweights; i++) {
        float *at = mine + s->weights[i].region_offset;
        if (!tr->sharded)
            tr_exec_read_buf(tr->x, s->grads[i], at);
        else if (tr_zero_grad_to_host(&tr->zero, i, at, err, errlen)) {
            free(mine);
            return -1;
        }
    }
    if (tr->dp->rank != 0) {
        free(mine);
        return 0;
    }
    float **full;
    int rc = tr_gather_region(tr->comm, &tr->layouts, mine, s->weight_elems, &full, err, errlen);
    free(mine);
    if (rc || !full)
        return rc;
    tp_st_tensor *t = tp_xcalloc((size_t)s->nweights + 1, sizeof *t);
    for (int i = 0; i < s->nweights; i++) {
        const tr_weight *w = &s->weights[i];
        t[i] = (tp_st_tensor){.name = w->name, .ndim = w->rank, .data = full[i]};
        memcpy(t[i].shape, w->logical, sizeof w->logical);
    }
    char why[600];
    rc = tp_safetensors_write(tr->t->grads_out, t, s->nweights, why, sizeof why);
    if (rc)
        tp_error(err, errlen, "--grads-out: %s", why);
    free(t);
    tr_full_free(full, s->nweights);
    return rc;
}

/* The time since *since, the backend's queue drained first when op times
 * are wanted (an asynchronous backend's kernels are still running when a
 * launch returns); *since moves to now. */
static double lap(const tr_exec *x, double *since)
{
    if (x->tracing && x->be->synchronize)
        x->be->synchronize();
    double t = now(), d = t - *since;
    *since = t;
    return d;
}

/* The replicas' gradients made one: averaged everywhere, or with ZeRO-1
 * reduce-scattered, each rank the mean of its runs; ZeRO-2's schedule has
 * reduced them already. */
static int combine_grads(trainer *tr, char *err, size_t errlen)
{
    if (tr->sharded)
        return tr->zero.scheduled ? 0 : tr_zero_reduce_grads(&tr->zero, err, errlen);
    return tr_dp_average_grads(tr->dp, tr->x, err, errlen);
}

/* Step i's loss or gradient norm is not finite: training stops before
 * the weights take its update, so the last checkpoint saved stays the
 * good one and nothing is saved from this state. Every rank holds the
 * same two values (reduced over tp and dp) and so fails alike. */
static int stop_nonfinite(trainer *tr, int64_t i, float loss, double norm, char *err, size_t errlen)
{
    int w;
    if (tr_optim_first_nonfinite(&tr->optim, tr->dp, &w, err, errlen))
        return -1;
    char culprit[400] = "";
    if (w >= 0)
        snprintf(culprit, sizeof culprit, "; the first parameter whose gradient is not finite is %s",
                 tr->s->weights[w].name);
    return tp_error(err, errlen, "step %lld: the loss is %g and the gradient norm %g%s: training stopped before "
                    "the update, nothing was saved%s; lower --lr (or --weight-decay), or pass --on-nonfinite skip "
                    "to drop such steps", (long long)i + 1, (double)loss, norm, culprit,
                    tr->t->save ? " (the --save directory keeps what it held)" : "");
}

/* Step i: the batch, forward and backward, the gradients combined over
 * the replicas (which then take identical optimizer steps), norm,
 * clipping, AdamW, and with ZeRO-1 the updated runs gathered. A loss or
 * norm that is not finite stops training, or with --on-nonfinite skip
 * drops the step's update (r->skipped).
 * x->profile is this step's alone: the schedule's ops, then the data-
 * parallel collectives and the optimizer (--grads-out's writing is in
 * neither). */
static int step(trainer *tr, int64_t i, bool first, tr_step_record *r, char *err, size_t errlen)
{
    const tr_schedule *s = tr->s;
    tr_exec *x = tr->x;
    tr_profile *p = &x->profile;
    double t0 = now();
    tp_progress_step(i + 1);
    memset(p, 0, sizeof *p);
    float loss = 0.0f;
    for (int m = 0; m < tr->accum.micro_batches; m++) {
        if (tr_batches_write(&tr->batches, x, i, m, tr->dp->rank, err, errlen))
            return -1;
        if (s->labels >= 0)
            x->loss_divisor = tr_batches_divisor(&tr->batches, i);
        if (tr_exec_run(x, err, errlen))
            return -1;
        float part;
        tr_exec_read_buf(x, s->loss, &part);
        loss += part;      /* each a sum over the step's labelled tokens: together their mean */
        tr_accum_add(&tr->accum, m);
    }
    double since = now();
    tp_progress_phase("averaging the gradients over the data-parallel replicas");
    if (combine_grads(tr, err, errlen) || tr_dp_mean(tr->dp, x, tr->optim.sum, &loss, err, errlen))
        return -1;
    p->dp_seconds = lap(x, &since);
    tp_progress_phase("in the optimizer step");
    double norm;
    if (tr_optim_grad_norm(&tr->optim, tr->dp, &norm, err, errlen))
        return -1;
    p->optimizer_seconds = lap(x, &since);
    bool finite = isfinite(loss) && isfinite(norm);
    if (!finite && !tr->t->skip_nonfinite)     /* every rank stops here, with the same values */
        return agree(tr, stop_nonfinite(tr, i, loss, norm, err, errlen), err, errlen);
    if (first && tr->t->grads_out) {
        tp_progress_io("writing --grads-out");
        if (agree(tr, write_grads(tr, err, errlen), err, errlen))
            return -1;
        tp_progress_phase("in the optimizer step");
    }
    since = now();
    const tr_train_options *t = tr->t;
    const tr_lr_shape shape = tr_train_lr_shape(t);
    double lr = t->lr * tr_lr_lambda(&shape, i);
    if (finite) {
        const tr_adamw_hparams h = {.beta1 = t->adam_beta1, .beta2 = t->adam_beta2, .eps = t->adam_epsilon,
                                    .weight_decay = t->weight_decay, .decay_all = t->decay_all,
                                    .no_decay = t->no_decay};
        tr_optim_clip(&tr->optim, norm, t->max_grad_norm);
        tr_optim_adamw(&tr->optim, lr, &h);
    } else {
        tr->optim.step++;   /* skipped, yet taken: the schedule, the data and a save's step count move on */
    }
    p->optimizer_seconds += lap(x, &since);
    if (finite && tr->sharded && !tr->zero.fsdp && tr_zero_gather_weights(&tr->zero, err, errlen))
        return -1;
    if (x->be->synchronize)
        x->be->synchronize();
    p->dp_seconds += now() - since;
    p->total_seconds += p->dp_seconds + p->optimizer_seconds;
    *r = (tr_step_record){.step = i + 1, .loss = loss, .lr = lr, .grad_norm = norm, .seconds = now() - t0,
                          .skipped = !finite};
    return 0;
}

/* --resume: the moments and the step count; training goes on from the
 * next step, and so does the data stream. */
static int resume(trainer *tr, const tr_data_order *order, char *err, size_t errlen)
{
    if (tr_resume(&tr->optim, tr->t->resume, order, err, errlen))
        return -1;
    if (tr->optim.step >= tr->t->steps)
        return tp_error(err, errlen, "--resume: %s has taken %lld steps already, --steps %lld asks for no more; "
                        "--steps counts every step, those before resuming included", tr->t->resume,
                        (long long)tr->optim.step, (long long)tr->t->steps);
    return 0;
}

/* --save DIR now: an I/O phase every rank enters, in which the ranks
 * holding the state save it (replica 0's, or with ZeRO every rank), and
 * which they all leave together. */
static int save(trainer *tr, const tr_save_spec *spec, char *err, size_t errlen)
{
    tp_progress_io("saving the checkpoint");
    int rc = tr->saves ? tr_save(&tr->optim, &tr->layouts, spec, err, errlen) : 0;
    return agree(tr, rc, err, errlen);
}

int tr_train(const tr_options *o, tr_dp *groups, tr_exec *x, const float *masters, int64_t vocab,
             double **step_seconds, int *nsteps, uint64_t *data_bytes, bool *everywhere, char *err, size_t errlen)
{
    tp_comm *comm = &groups->tp;
    trainer tr = {.o = o, .comm = comm, .dp = &groups->dp, .world = groups->world, .x = x, .s = x->s,
                  .save_lock = -1};
    tr.t = &tr.in_force;
    bool rank0 = comm->rank == 0 && tr.dp->rank == 0, tty = isatty(STDOUT_FILENO);
    /* the setup reads files and runs no collective: every rank gets to the
     * agreement, a failure on one (a lock another run holds, a damaged
     * data file) is every rank's */
    tp_progress_io("reading the data");
    int rc = tr_train_in_force(&o->train, &x->s->train, &tr.in_force, err, errlen);
    if (!rc)
        rc = check_setup(&tr, err, errlen);
    if (!rc)
        rc = open_data(&tr, vocab, err, errlen);
    if (!rc && !o->train.steps) {   /* --epochs: every step they hold, now counted */
        tr_train_options flags = o->train;
        flags.steps = tr.batches.steps;
        rc = tr_train_in_force(&flags, &x->s->train, &tr.in_force, err, errlen);
    }
    if (!rc && (o->train.grads_out || o->train.save))
        rc = tr_layouts_load(&tr.layouts, o->schedule, comm, err, errlen);
    tr.sharded = x->s->dp_shard != TP_DP_SHARD_NONE;
    if (!rc && tr.sharded)
        rc = tr_zero_init(&tr.zero, x, tr.dp, err, errlen);
    if (!rc)
        rc = tr_accum_init(&tr.accum, x, (int)tr.t->micro_batches, err, errlen);
    if (!rc)
        rc = tr_optim_init(&tr.optim, x, tr.sharded ? &tr.zero : NULL, masters, err, errlen);
    tr.saves = o->train.save && (tr.sharded || tr.dp->rank == 0);   /* replicated: replica 0 has it all */
    const tr_batch_shape *b = &tr.batches.shape;
    const tr_data_order order = {.samples = tr.batches.samples,
                                 .samples_per_step = b->batch * b->replicas * b->micro_batches, .seq = b->seq,
                                 .shuffled = b->shuffle, .shuffle_seed = b->shuffle_seed};
    rc = agree(&tr, rc, err, errlen);
    if (!rc)
        rc = check_data(&tr, err, errlen);
    if (!rc && o->train.resume) {
        tp_progress_io("reading the --resume state");
        rc = agree(&tr, resume(&tr, &order, err, errlen), err, errlen);
    }
    const tr_train_options *t = tr.t;
    tr.log.settings = (tr_train_settings){
        .lr = t->lr, .warmup_start_factor = t->warmup_start_factor, .min_lr = t->min_lr, .beta1 = t->adam_beta1,
        .beta2 = t->adam_beta2, .eps = t->adam_epsilon, .weight_decay = t->weight_decay,
        .max_grad_norm = t->max_grad_norm, .warmup = t->warmup, .steps = t->steps,
        .schedule = tp_lr_schedule_names[t->schedule], .decay_all = t->decay_all,
        .decay_steps = t->decay_steps, .decay_type = t->schedule == TP_LR_WSD ? tp_lr_decay_names[t->decay_type] : NULL,
        .micro_batches = t->micro_batches, .ignore_index = t->ignore_index, .pad_id = t->pad_id,
        .eos_id = t->eos_id, .no_decay = t->no_decay};
    int64_t first = tr.optim.step;
    tr_profile *profiles = NULL;   /* kept when op times are wanted */
    int kept = 0;
    *nsteps = 0;
    const tr_save_spec spec = {.dir = tr.save_dir, .config = tr.config, .max_steps = tr.t->steps,
                               .lr = t->lr, .shard_bytes = o->train.max_shard_bytes, .keep = o->train.save_keep,
                               .resume = o->train.resume, .order = order};
    for (int64_t i = first; !rc && i < tr.t->steps; i++) {
        tr_step_record r;
        rc = step(&tr, i, i == first, &r, err, errlen);
        if (rc)
            break;
        if (x->tracing) {
            profiles = tp_xgrow(profiles, *nsteps, &kept, sizeof *profiles, 16);
            profiles[(*nsteps)++] = x->profile;
        }
        const int64_t every = o->train.eval_every;
        if (o->train.eval[TR_STREAM_DATA] && ((every && r.step % every == 0) || r.step == tr.t->steps)) {
            tp_progress_phase("evaluating --eval-data");
            rc = tr_eval_loss(&tr.eval, x, tr.dp, tr.optim.sum, &r.eval_loss, err, errlen);
            r.evaluated = !rc;
            if (rc)
                break;
        }
        tr_log_add(&tr.log, &r);
        if (rank0 && !o->quiet)
            tr_log_print(stdout, tty, &r, tr.t->steps, tr.per_step * tr.dp->world * tr.t->micro_batches);
        /* --save-every: a long run loses at most N steps; the last is saved below */
        if (!rc && o->train.save && o->train.save_every && r.step % o->train.save_every == 0 && r.step < tr.t->steps)
            rc = save(&tr, &spec, err, errlen);
    }
    if (!rc && o->train.save)
        rc = save(&tr, &spec, err, errlen);
    if (!rc && o->train.log_json) {
        tp_progress_io("writing --log-json");
        rc = agree(&tr, rank0 ? tr_log_write_json(&tr.log, o->train.log_json, err, errlen) : 0, err, errlen);
    }
    if (!rc && rank0 && !o->quiet)
        tr_log_summary(stdout, &tr.log, tr.per_step * tr.dp->world * tr.t->micro_batches, o->train.save);
    *everywhere = rc && tr.everywhere;
    *data_bytes = tr_batches_bytes_read(&tr.batches) + tr_batches_bytes_read(&tr.eval.batches);
    *step_seconds = tp_xmalloc((size_t)*nsteps * sizeof **step_seconds + 1);
    tr_profile_keep_median(&x->profile, profiles, *nsteps, *step_seconds);
    free(profiles);
    tr_log_free(&tr.log);
    tr_optim_free(&tr.optim);
    tr_zero_free(&tr.zero);
    tr_layouts_free(&tr.layouts);
    tr_batches_free(&tr.batches);
    tr_accum_free(&tr.accum);
    tr_eval_free(&tr.eval);
    tr_save_unlock(tr.save_lock);
    free(tr.save_dir);
    free(tr.config);
    return rc;
}
