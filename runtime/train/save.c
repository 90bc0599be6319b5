/* save.c: see save.h. */
#define _XOPEN_SOURCE 700
#include "runtime/train/save.h"
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/exec/weights_load.h"
#include "runtime/io/safetensors_write.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static const char *const moment_suffix[2] = {".exp_avg", ".exp_avg_sq"};

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int tr_save_check(const char *dir, const char *weights, char **config, char *err, size_t errlen)
{
    *config = NULL;
    struct stat st;
    if (lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return tp_error(err, errlen, "--save: '%s' exists and is not a directory; name a new or existing directory",
                        dir);
    if (!weights)
        return tp_error(err, errlen, "--save writes a Hugging Face checkpoint, whose config.json comes from the "
                        "checkpoint trained: pass --weights DIR of a Hugging Face checkpoint");
    char *home = is_dir(weights) ? tp_xasprintf("%s", weights) : NULL;
    if (!home) {
        const char *slash = strrchr(weights, '/');
        home = slash ? tp_xasprintf("%.*s", (int)(slash - weights), weights) : tp_xasprintf(".");
    }
    char *path = tp_xasprintf("%s/config.json", home);
    free(home);
    if (access(path, R_OK) != 0) {
        tp_error(err, errlen, "--save: no config.json beside --weights '%s' (%s); pass --weights DIR of a Hugging "
                 "Face checkpoint", weights, path);
        free(path);
        return -1;
    }
    *config = path;
    return 0;
}

/* ---- writing ------------------------------------------------------------- */

static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    FILE *f = fopen(from, "rb");
    if (!f)
        return tp_error(err, errlen, "cannot read '%s': %s", from, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = tp_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap)
            buf = tp_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    int rc = bad ? tp_error(err, errlen, "cannot read '%s'", from)
                 : tp_write_file_atomic(to, &(tp_bytes){buf, len}, 1, err, errlen);
    free(buf);
    return rc;
}

static int write_state(const char *path, int64_t step, int64_t max_steps, double lr, char *err, size_t errlen)
{
    json_t *root = json_pack("{s:I, s:I, s:f}", "step", (json_int_t)step, "max_steps", (json_int_t)max_steps,
                             "learning_rate", lr);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return tp_error(err, errlen, "cannot encode trainer_state.json");
    tp_bytes pieces[2] = {{text, strlen(text)}, {"\n", 1}};
    int rc = tp_write_file_atomic(path, pieces, 2, err, errlen);
    free(text);
    return rc;
}

/* The tensors of the three regions under their file names. */
static void name_tensors(const tr_schedule *s, float **full[3], tp_st_tensor *weights, tp_st_tensor *moments,
                         char **names)
{
    for (int i = 0; i < s->nweights; i++) {
        const tr_weight *w = &s->weights[i];
        tp_st_tensor t = {.name = w->name, .ndim = w->rank};
        memcpy(t.shape, w->logical, sizeof w->logical);
        weights[i] = t;
        weights[i].data = full[0][i];
        for (int k = 0; k < 2; k++) {
            names[2 * i + k] = tp_xasprintf("%s%s", w->name, moment_suffix[k]);
            moments[2 * i + k] = t;
            moments[2 * i + k].name = names[2 * i + k];
            moments[2 * i + k].data = full[1 + k][i];
        }
    }
}

static int write_files(const char *tmp, const tr_schedule *s, float **full[3], const tr_save_spec *spec,
                       int64_t step, char *err, size_t errlen)
{
    int n = s->nweights;
    tp_st_tensor *weights = tp_xcalloc((size_t)n + 1, sizeof *weights);
    tp_st_tensor *moments = tp_xcalloc(2 * (size_t)n + 1, sizeof *moments);
    char **names = tp_xcalloc(2 * (size_t)n + 1, sizeof *names);
    name_tensors(s, full, weights, moments, names);
    char *opt = tp_xasprintf("%s/optimizer.safetensors", tmp), *cfg = tp_xasprintf("%s/config.json", tmp);
    char *state = tp_xasprintf("%s/trainer_state.json", tmp);
    int rc = tp_safetensors_write_sharded(tmp, weights, n, spec->shard_bytes, err, errlen);
    if (!rc)
        rc = tp_safetensors_write(opt, moments, 2 * n, err, errlen);
    if (!rc)
        rc = copy_file(spec->config, cfg, err, errlen);
    if (!rc)
        rc = write_state(state, step, spec->max_steps, spec->lr, err, errlen);
    for (int i = 0; i < 2 * n; i++)
        free(names[i]);
    free(names);
    free(opt);
    free(cfg);
    free(state);
    free(moments);
    free(weights);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* tmp becomes dir; a directory already there is moved aside and removed
 * once the new one is in place. */
static int replace_dir(const char *tmp, const char *dir, char *err, size_t errlen)
{
    char *old = NULL;
    if (is_dir(dir)) {
        old = tp_xasprintf("%s.old.%ld", dir, (long)getpid());
        if (rename(dir, old) != 0) {
            tp_error(err, errlen, "--save: cannot move the previous '%s' aside: %s", dir, strerror(errno));
            free(old);
            return -1;
        }
    }
    int rc = 0;
    if (rename(tmp, dir) != 0) {
        rc = tp_error(err, errlen, "--save: cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
        if (old && rename(old, dir) != 0)
            rc = tp_error(err, errlen, "--save: cannot rename '%s' to '%s', and the previous checkpoint is in '%s'",
                          tmp, dir, old);
    } else if (old) {
        remove_tree(old);
    }
    free(old);
    return rc;
}

static int write_dir(const tr_schedule *s, float **full[3], const tr_save_spec *spec, int64_t step, char *err,
                     size_t errlen)
{
    const char *dir = spec->dir;
    char *tmp = tp_xasprintf("%s.tmp.XXXXXX", dir);
    if (!mkdtemp(tmp)) {
        tp_error(err, errlen, "--save: cannot create a directory beside '%s': %s", dir, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = write_files(tmp, s, full, spec, step, err, errlen);
    if (!rc)
        rc = replace_dir(tmp, dir, err, errlen);
    if (rc)
        remove_tree(tmp);
    free(tmp);
    return rc;
}

int tr_save(tr_optim *o, const tr_layouts *l, const tr_save_spec *spec, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    float *host = tp_xmalloc((size_t)s->weight_elems * sizeof(float) + 1);  /* the gaps come and go unread */
    bool writer = !o->zero || o->zero->dp->rank == 0;    /* the replicas hold the same state, once gathered */
    float **full[3] = {NULL, NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {      /* the fp32 weights (a bf16 schedule's masters), the moments */
        rc = tr_optim_state_to_host(o, k, host, err, errlen);
        if (!rc && writer)
            rc = tr_gather_region(x->comm, l, host, s->weight_elems, &full[k], err, errlen);
    }
    free(host);
    if (!rc && full[0])
        rc = write_dir(s, full, spec, o->step, err, errlen);
    for (int k = 0; k < 3; k++)
        tr_full_free(full[k], s->nweights);
    return rc;
}

/* ---- resuming ------------------------------------------------------------ */

static int read_step(const char *dir, int64_t *step, char *err, size_t errlen)
{
    char *path = tp_xasprintf("%s/trainer_state.json", dir);
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    json_t *v = json_object_get(root, "step");
    int rc = 0;
    if (!root)
        rc = tp_error(err, errlen, "--resume: %s: %s (a directory written by tprun --save holds it)", path, e.text);
    else if (!json_is_integer(v) || json_integer_value(v) < 0)
        rc = tp_error(err, errlen, "--resume: %s: \"step\" must be a non-negative integer", path);
    else
        *step = json_integer_value(v);
    json_decref(root);
    free(path);
    return rc;
}

int tr_resume(tr_optim *o, const char *dir, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    int64_t step = 0;
    if (read_step(dir, &step, err, errlen))
        return -1;
    char *path = tp_xasprintf("%s/optimizer.safetensors", dir);
    tp_checkpoint *c;
    char why[600];
    if (tp_checkpoint_open(&c, path, why, sizeof why)) {
        tp_error(err, errlen, "--resume: %s", why);
        free(path);
        return -1;
    }
    /* tprun saves two moments of every weight and nothing else: a count
     * that differs is another model's (fewer layers, say), whose weights
     * would load in part and whose config.json --save would copy */
    size_t held = tp_checkpoint_num_tensors(c), needed = 2 * (size_t)x->s->nweights;
    if (held != needed) {
        tp_error(err, errlen, "--resume: %s holds %zu tensors, the two moments of this schedule's %d weights are %zu: "
                 "%s was saved from another model (compile the schedule from its config.json)", path, held,
                 x->s->nweights, needed, dir);
        free(path);
        tp_checkpoint_close(c);
        return -1;
    }
    free(path);
    /* sharded moments load whole into host memory, then this rank's runs
     * go to the backend: its memory never holds more than the runs */
    float *regions[2] = {o->m, o->v};
    float *whole = o->zero ? tp_xmalloc((size_t)x->s->weight_elems * sizeof(float) + 1) : NULL;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        tr_weight_source src = {.ckpt = c, .suffix = moment_suffix[k]};
        tr_weights_sink dst = {.region = whole ? NULL : regions[k], .dtype = TP_F32, .fp32_copy = whole};
        if (tr_weights_load(x, &src, &dst, why, sizeof why))
            rc = tp_error(err, errlen, "--resume: %s", why);
        else if (whole)
            tr_zero_take_runs(o->zero, whole, regions[k], true);
    }
    free(whole);
    tp_checkpoint_close(c);
    if (!rc)
        o->step = step;
    return rc;
}
