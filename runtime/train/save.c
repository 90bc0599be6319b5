/* save.c: see save.h. */
#define _DEFAULT_SOURCE     /* flock */
#define _XOPEN_SOURCE 700
#include "runtime/train/save.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime/exec/weights_load.h"
#include "runtime/io/safetensors_write.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/input_file.h"
#include "util/number.h"
#include "util/xalloc.h"

static const char *const moment_suffix[2] = {".exp_avg", ".exp_avg_sq"};

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The checkpoint's config.json as JSON text, read now (before training)
 * and written into the new checkpoint as this text: parsed and written
 * again, never copied, so what lands in DIR is a JSON object whatever the
 * file was. Opened without following a symbolic link (a link could take
 * any file on the machine into the checkpoint) and without waiting on a
 * FIFO. malloc'ed; NULL with a message that quotes none of the file. */
static char *read_config(const char *path, char *err, size_t errlen)
{
    int fd = tp_input_open(path, true, err, errlen);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (fd >= 0 && !f) {
        tp_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    json_error_t e;
    json_t *root = f ? json_loadf(f, JSON_REJECT_DUPLICATES, &e) : NULL;
    if (f)
        fclose(f);
    char *text = json_is_object(root) ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (f && !root)
        tp_error(err, errlen, "%s: not valid JSON (line %d, column %d); a Hugging Face config.json is a JSON object",
                 path, e.line, e.column);
    else if (f && !text)
        tp_error(err, errlen, "%s: not a JSON object, which a Hugging Face config.json is", path);
    json_decref(root);
    return text;
}

char *tr_save_name(const char *dir, char *err, size_t errlen)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    char *name = tp_xstrndup(dir, len);
    const char *slash = strrchr(name, '/'), *base = slash ? slash + 1 : name;
    if (*base && strcmp(base, ".") && strcmp(base, ".."))
        return name;
    tp_error(err, errlen, "--save: '%s' names no directory of its own, which the checkpoint could replace; name "
             "one such as %s%scheckpoint", dir, len > 1 || *name == '/' ? name : "", len > 1 ? "/" : "");
    free(name);
    return NULL;
}

int tr_save_check(const char *dir, const char *weights, char **dest, char **config, char *err, size_t errlen)
{
    *config = NULL;
    *dest = tr_save_name(dir, err, errlen);
    if (!*dest)
        return -1;
    struct stat st;
    char why[600];
    if (lstat(*dest, &st) == 0 && !S_ISDIR(st.st_mode))
        return tp_error(err, errlen, "--save: '%s' exists and is not a directory; name a new or existing directory",
                        dir);
    if (tp_check_output_path(*dest, true, why, sizeof why))
        return tp_error(err, errlen, "--save: %s; name a directory where this user can write", why);
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
    int rc = 0;
    if (access(path, F_OK) != 0)
        rc = tp_error(err, errlen, "--save: no config.json beside --weights '%s' (%s); pass --weights DIR of a Hugging "
                      "Face checkpoint", weights, path);
    else if (!(*config = read_config(path, why, sizeof why)))
        rc = tp_error(err, errlen, "--save: %s", why);
    free(path);
    return rc;
}

/* ---- the state's values ---------------------------------------------------- */

/* State k (0 the weight, 1 exp_avg, 2 exp_avg_sq) of weight w, n of its
 * values at v: 0, or -1 with a message naming the tensor and the first
 * value that is not finite, or for exp_avg_sq (a mean of squares)
 * negative. Only the position is told: the values are the bad input. */
static int check_values(const tr_weight *w, int k, const float *v, int64_t n, char *err, size_t errlen)
{
    for (int64_t e = 0; e < n; e++)
        if (!isfinite(v[e]) || (k == 2 && v[e] < 0))
            return tp_error(err, errlen, "%s%s holds %s at element %lld", w->name, k ? moment_suffix[k - 1] : "",
                            isfinite(v[e]) ? "a negative value, which exp_avg_sq never holds" : "NaN or infinity",
                            (long long)e);
    return 0;
}

static int64_t logical_elems(const tr_weight *w)
{
    int64_t n = 1;
    for (int d = 0; d < w->rank; d++)
        n *= w->logical[d];
    return n;
}

/* ---- writing ------------------------------------------------------------- */

/* JSON text and a newline, as a file of its own. */
static int write_json_text(const char *path, const char *text, char *err, size_t errlen)
{
    tp_bytes pieces[2] = {{text, strlen(text)}, {"\n", 1}};
    return tp_write_file_atomic(path, pieces, 2, err, errlen);
}

static int write_state(const char *path, int64_t step, const tr_save_spec *spec, char *err, size_t errlen)
{
    const tr_data_order *d = &spec->order;
    json_t *seed = d->shuffled ? json_integer((json_int_t)d->shuffle_seed) : json_null();
    json_t *root = json_pack("{s:I, s:I, s:f, s:{s:I, s:I, s:I, s:o}}", "step", (json_int_t)step, "max_steps",
                             (json_int_t)spec->max_steps, "learning_rate", spec->lr, "data", "samples",
                             (json_int_t)d->samples, "samples_per_step", (json_int_t)d->samples_per_step, "seq",
                             (json_int_t)d->seq, "shuffle_seed", seed);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return tp_error(err, errlen, "cannot encode tprun_state.json");
    int rc = write_json_text(path, text, err, errlen);
    free(text);
    return rc;
}

/* The checkpoint rank 0 writes: its directory DIR.tmp.PID.XXXXXX and its two
 * tensor files, streamed one tensor at a time. */
typedef struct checkpoint {
    char *tmp;
    tp_st_tensor *weights, *moments;   /* the files' tensors (names and shapes) */
    char **names;                      /* the moments' names */
    int n;
    tp_st_model *model;
    tp_st_file *optimizer;
} checkpoint;

/* The weights under their checkpoint names, the moments as NAME.exp_avg
 * and NAME.exp_avg_sq (moment k of weight i at 2i + k). */
static void name_tensors(checkpoint *c, const tr_schedule *s)
{
    c->n = s->nweights;
    c->weights = tp_xcalloc((size_t)c->n + 1, sizeof *c->weights);
    c->moments = tp_xcalloc(2 * (size_t)c->n + 1, sizeof *c->moments);
    c->names = tp_xcalloc(2 * (size_t)c->n + 1, sizeof *c->names);
    for (int i = 0; i < c->n; i++) {
        const tr_weight *w = &s->weights[i];
        tp_st_tensor t = {.name = w->name, .ndim = w->rank};
        memcpy(t.shape, w->logical, sizeof w->logical);
        c->weights[i] = t;
        for (int k = 0; k < 2; k++) {
            c->names[2 * i + k] = tp_xasprintf("%s%s", w->name, moment_suffix[k]);
            c->moments[2 * i + k] = t;
            c->moments[2 * i + k].name = c->names[2 * i + k];
        }
    }
}

/* DIR.tmp.PID.XXXXXX with the headers of its tensor files written; the
 * PID tells a later save whether the process that wrote it is gone. */
static int checkpoint_open(checkpoint *c, const tr_schedule *s, const tr_save_spec *spec, char *err, size_t errlen)
{
    name_tensors(c, s);
    c->tmp = tp_xasprintf("%s.tmp.%ld.XXXXXX", spec->dir, (long)getpid());
    if (!mkdtemp(c->tmp)) {
        tp_error(err, errlen, "--save: cannot create a directory beside '%s': %s", spec->dir, strerror(errno));
        free(c->tmp);
        c->tmp = NULL;
        return -1;
    }
    char *opt = tp_xasprintf("%s/optimizer.safetensors", c->tmp);
    int rc = tp_st_model_create(&c->model, c->tmp, c->weights, c->n, spec->shard_bytes, err, errlen);
    if (!rc)
        rc = tp_st_file_create(&c->optimizer, opt, c->moments, 2 * c->n, err, errlen);
    free(opt);
    return rc;
}

/* State k of weight i (0 the weight, 1 and 2 its moments) into its file. */
static int checkpoint_put(checkpoint *c, int k, int i, const float *tensor, char *err, size_t errlen)
{
    return k == 0 ? tp_st_model_put(c->model, i, tensor, err, errlen)
                  : tp_st_file_put(c->optimizer, 2 * i + k - 1, tensor, err, errlen);
}

/* The tensor files finished, config.json and tprun_state.json beside
 * them. */
static int checkpoint_finish(checkpoint *c, const tr_save_spec *spec, int64_t step, char *err, size_t errlen)
{
    tp_st_model *model = c->model;
    tp_st_file *optimizer = c->optimizer;
    c->model = NULL;
    c->optimizer = NULL;
    int rc = tp_st_model_finish(model, err, errlen);
    if (rc)
        tp_st_file_abandon(optimizer);
    else
        rc = tp_st_file_finish(optimizer, err, errlen);
    char *cfg = tp_xasprintf("%s/config.json", c->tmp), *state = tp_xasprintf("%s/tprun_state.json", c->tmp);
    if (!rc)
        rc = write_json_text(cfg, spec->config, err, errlen);
    if (!rc)
        rc = write_state(state, step, spec, err, errlen);
    free(cfg);
    free(state);
    return rc;
}

static void checkpoint_free(checkpoint *c)
{
    tp_st_model_abandon(c->model);
    tp_st_file_abandon(c->optimizer);
    for (int i = 0; i < 2 * c->n; i++)
        free(c->names[i]);
    free(c->names);
    free(c->moments);
    free(c->weights);
    free(c->tmp);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- SIGINT and SIGTERM during a save -------------------------------------- */

/* Killed by their default action mid-save, a run would leave a
 * temporary directory, or between the two renames no DIR at all. While
 * the writing rank saves they are only noted: the save is abandoned at the
 * next tensor, or, once its renames have begun, finished; the run then
 * fails either way. */
static volatile sig_atomic_t save_signal;

static void note_signal(int sig) { save_signal = sig; }

static const int guarded[2] = {SIGINT, SIGTERM};

typedef struct signal_guard {
    struct sigaction was[2];
    bool set[2];
} signal_guard;

/* A signal ignored where the run started (a background job) stays
 * ignored. */
static int guard_signals(signal_guard *g, char *err, size_t errlen)
{
    struct sigaction note = {.sa_handler = note_signal};
    sigemptyset(&note.sa_mask);
    save_signal = 0;
    for (int i = 0; i < 2; i++) {
        if (sigaction(guarded[i], NULL, &g->was[i]) != 0)
            return tp_error(err, errlen, "--save: sigaction failed: %s", strerror(errno));
        if (g->was[i].sa_handler == SIG_IGN)
            continue;
        if (sigaction(guarded[i], &note, NULL) != 0)
            return tp_error(err, errlen, "--save: sigaction failed: %s", strerror(errno));
        g->set[i] = true;
    }
    return 0;
}

static void unguard_signals(signal_guard *g)
{
    for (int i = 0; i < 2; i++)
        if (g->set[i])
            (void)sigaction(guarded[i], &g->was[i], NULL);   /* restoring what was installed cannot fail */
}

static const char *signal_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

/* The tests' way to signal a save at a chosen point: TPRUN_TEST_SAVE_SIGNAL
 * names it ("tensor": after the first tensor written; "rename": between
 * the two renames), and SIGTERM is raised there. */
static void test_signal(const char *point)
{
    const char *at = getenv("TPRUN_TEST_SAVE_SIGNAL");
    if (at && !strcmp(at, point))
        (void)raise(SIGTERM);
}

/* The tests' way to make a save slow, as a slow file system would:
 * TPRUN_TEST_SAVE_DELAY=S holds the writing rank S seconds before it
 * publishes the checkpoint. */
static void test_delay(void)
{
    const char *v = getenv("TPRUN_TEST_SAVE_DELAY");
    double s;
    if (!v || tp_parse_real(v, 0, &s))
        return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        continue;
}

/* What "data" in tprun_state.json says differs from `want`, or NULL:
 * none recorded, or the same order. */
static const char *order_differs(json_t *data, const tr_data_order *want)
{
    json_t *seed = json_object_get(data, "shuffle_seed");
    if (!json_is_object(data))
        return NULL;
    if (json_integer_value(json_object_get(data, "seq")) != want->seq)
        return "sequence length";
    if (json_integer_value(json_object_get(data, "samples")) != want->samples)
        return "stream (its number of samples of seq tokens differs)";
    if (json_integer_value(json_object_get(data, "samples_per_step")) != want->samples_per_step)
        return "samples a step (batch x --micro-batches x data-parallel replicas)";
    if (json_is_null(seed) == want->shuffled ||
        (want->shuffled && (uint64_t)json_integer_value(seed) != want->shuffle_seed))
        return "--shuffle-seed";
    return NULL;
}

/* The step a checkpoint directory's tprun_state.json records, and with
 * `order` its data order checked (order_differs). */
static int read_step(const char *dir, const tr_data_order *order, int64_t *step, char *err, size_t errlen)
{
    char *path = tp_xasprintf("%s/tprun_state.json", dir);
    json_error_t e;
    char why[600];
    FILE *f = tp_input_fopen(path, why, sizeof why);
    json_t *root = f ? json_loadf(f, 0, &e) : NULL;
    if (f) {
        fclose(f);
        snprintf(why, sizeof why, "%s: %s", path, e.text);
    }
    json_t *v = json_object_get(root, "step");
    int rc = 0;
    if (!root)
        rc = tp_error(err, errlen, "--resume: %s (a directory written by tprun --save holds it)", why);
    else if (!json_is_integer(v) || json_integer_value(v) < 0)
        rc = tp_error(err, errlen, "--resume: %s: \"step\" must be a non-negative integer", path);
    else if (order && order_differs(json_object_get(root, "data"), order))
        rc = tp_error(err, errlen, "--resume: %s was trained with another %s: this run would not read the samples "
                      "the one it resumes would have; resume with the same data settings (its \"data\": batch, "
                      "--micro-batches, replicas, seq and --shuffle-seed)", dir,
                      order_differs(json_object_get(root, "data"), order));
    else
        *step = json_integer_value(v);
    json_decref(root);
    free(path);
    return rc;
}

/* DIR.step-S, S a step as keep_old writes it (decimal, no leading zero),
 * or -1 when `name` is not one beside `base`. */
static int64_t kept_step(const char *name, const char *base)
{
    size_t n = strlen(base);
    int64_t step;
    if (strncmp(name, base, n) || strncmp(name + n, ".step-", 6) || tp_parse_int(name + n + 6, 0, INT64_MAX, &step))
        return -1;
    char canonical[24];
    snprintf(canonical, sizeof canonical, "%lld", (long long)step);
    return strcmp(name + n + 6, canonical) ? -1 : step;
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* --save-keep K: `old`, the checkpoint DIR held, becomes DIR.step-S, and
 * of the DIR.step-* beside DIR older than the checkpoint now in DIR (a
 * step below `step`, its own) the K - 1 newest stay. A later one is
 * another run's (DIR held a longer run this one went back from) and is
 * left alone, as is the --resume directory `resume`: pruning them would
 * lose what a rollback keeps. What cannot be read as a checkpoint, or
 * renamed, is removed as a replaced DIR always was. */
static void keep_old(const char *old, const char *dir, int64_t keep, int64_t step, const char *resume)
{
    char why[600];
    int64_t old_step;
    char *kept = NULL;
    if (!read_step(old, NULL, &old_step, why, sizeof why)) {
        kept = tp_xasprintf("%s.step-%lld", dir, (long long)old_step);
        if (!tp_same_file(kept, resume))
            remove_tree(kept);   /* a checkpoint of the same step from an earlier run */
    }
    if (!kept || rename(old, kept) != 0)
        remove_tree(old);
    free(kept);
    const char *slash = strrchr(dir, '/');
    char *parent = tp_path_parent(dir);
    const char *base = slash ? slash + 1 : dir;
    int64_t *steps = NULL;
    int64_t n = 0;
    int cap = 0;
    DIR *d = opendir(parent);
    for (struct dirent *e; d && (e = readdir(d));) {
        int64_t s = kept_step(e->d_name, base);
        if (s >= 0 && s < step) {
            steps = tp_xgrow(steps, (int)n, &cap, sizeof *steps, 8);
            steps[n++] = s;
        }
    }
    if (d)
        closedir(d);
    if (n)
        qsort(steps, (size_t)n, sizeof *steps, newest_first);
    for (int64_t i = keep - 1; i < n; i++) {
        char *path = tp_xasprintf("%s.step-%lld", dir, (long long)steps[i]);
        if (!tp_same_file(path, resume))
            remove_tree(path);
        free(path);
    }
    free(steps);
    free(parent);
}

/* tmp becomes dir; a directory already there is moved aside and, once the new
 * one is in place, removed or kept (keep_old). */
static int replace_dir(const char *tmp, const tr_save_spec *spec, int64_t step, char *err, size_t errlen)
{
    const char *dir = spec->dir;
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
    test_signal("rename");
    if (rename(tmp, dir) != 0) {
        rc = tp_error(err, errlen, "--save: cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
        if (old && rename(old, dir) != 0)
            rc = tp_error(err, errlen, "--save: cannot rename '%s' to '%s', and the previous checkpoint is in '%s'",
                          tmp, dir, old);
    } else if (old && spec->keep > 1) {
        keep_old(old, dir, spec->keep, step, spec->resume);
    } else if (old) {
        remove_tree(old);
    }
    free(old);
    return rc;
}

/* ---- one save at a time, and what killed saves left ---------------------- */

/* The process id in a leftover's name, BASE.tmp.PID.XXXXXX or
 * BASE.old.PID (`kind` ".tmp." or ".old."), or 0 when it is not one. */
static long leftover_owner(const char *name, const char *base, const char *kind)
{
    size_t n = strlen(base), k = strlen(kind);
    if (strncmp(name, base, n) || strncmp(name + n, kind, k))
        return 0;
    char *end;
    errno = 0;
    long pid = strtol(name + n + k, &end, 10);
    return !errno && pid > 0 && end != name + n + k && (*end == '\0' || *end == '.') ? pid : 0;
}

static bool process_gone(long pid) { return kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

/* With the lock held, what saves killed on this machine left beside DIR,
 * their process gone: a DIR.tmp.PID.* is removed; a DIR.old.PID is the
 * checkpoint a save moved aside and was killed before renaming its new
 * one in: it becomes DIR again where there is no DIR, and is removed
 * where there is. Best effort: what cannot be removed stays, and the save
 * goes on. */
static void clean_leftovers(const char *dir)
{
    const char *slash = strrchr(dir, '/');
    char *parent = tp_path_parent(dir);
    const char *base = slash ? slash + 1 : dir;
    DIR *d = opendir(parent);
    for (struct dirent *e; d && (e = readdir(d));) {
        long tmp = leftover_owner(e->d_name, base, ".tmp."), old = leftover_owner(e->d_name, base, ".old.");
        if (!(tmp && process_gone(tmp)) && !(old && process_gone(old)))
            continue;
        char *path = tp_xasprintf("%s/%s", parent, e->d_name);
        if (!old || is_dir(dir) || rename(path, dir) != 0)
            remove_tree(path);
        free(path);
    }
    if (d)
        closedir(d);
    free(parent);
}

int tr_save_lock(const char *dir, int *fd, char *err, size_t errlen)
{
    char *path = tp_xasprintf("%s.lock", dir);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat st;
    int rc = 0;
    if (*fd < 0)
        rc = tp_error(err, errlen, "--save: cannot open the lock file '%s': %s", path, strerror(errno));
    else if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = tp_error(err, errlen, "--save: the lock file '%s' is not a regular file; remove it", path);
    else if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char text[24] = "";
        ssize_t n = pread(*fd, text, sizeof text - 1, 0);
        long pid = n > 0 ? strtol(text, NULL, 10) : 0;
        if (e == EWOULDBLOCK && pid > 0)
            rc = tp_error(err, errlen, "--save: process %ld is saving to '%s' (it holds '%s'); two runs saving to one "
                          "directory would each replace the other's checkpoint: save into another directory", pid,
                          dir, path);
        else
            rc = tp_error(err, errlen, "--save: cannot lock '%s': %s", path, e == EWOULDBLOCK ?
                          "another process holds it" : strerror(e));
    } else {
        char pid[24];
        int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(*fd, 0) != 0 || pwrite(*fd, pid, (size_t)len, 0) != len)
            rc = tp_error(err, errlen, "--save: cannot write the lock file '%s': %s", path, strerror(errno));
    }
    if (rc && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    free(path);
    if (!rc)
        clean_leftovers(dir);
    return rc;
}

void tr_save_unlock(int fd)
{
    if (fd >= 0)
        close(fd);   /* the lock goes with the descriptor; the file stays, so that no two runs lock two files */
}

/* The host memory a save stages through: this rank's slice of one
 * weight, and on the writing rank every rank's slice and the full tensor
 * of one weight, each sized for the largest. */
typedef struct staging {
    float *slice, *slices, *full;
} staging;

static void staging_alloc(staging *st, const tr_schedule *s, const tr_layouts *l, bool writes)
{
    int64_t slice = 0, slices = 0, full = 0;
    for (int i = 0; i < s->nweights; i++)
        slice = s->weights[i].local_elems > slice ? s->weights[i].local_elems : slice;
    if (writes)
        tr_gather_rooms(l, &slices, &full);
    st->slice = tp_xmalloc((size_t)slice * sizeof(float) + 1);
    st->slices = writes ? tp_xmalloc((size_t)slices * sizeof(float) + 1) : NULL;
    st->full = writes ? tp_xmalloc((size_t)full * sizeof(float) + 1) : NULL;
}

static void staging_free(staging *st)
{
    free(st->slice);
    free(st->slices);
    free(st->full);
}

/* A state that is not finite (the last step's update overflowed) is
 * never saved: the save fails and DIR keeps the checkpoint it holds. */
static int unsaved_if_invalid(const tr_weight *w, int k, const float *full, int64_t step, char *err, size_t errlen)
{
    char why[400];
    if (!check_values(w, k, full, logical_elems(w), why, sizeof why))
        return 0;
    return tp_error(err, errlen, "--save: %s after step %lld: nothing was saved (the directory keeps what it "
                    "held); lower --lr (or --weight-decay)", why, (long long)step);
}

/* Every weight's three states in turn: its slice to host (over dp, from
 * the runs, with ZeRO), gathered over tp to rank 0, written there. A
 * writing error on rank 0 is kept in *write_rc, and the gathers go on so
 * that the other ranks are not left waiting in them. */
static int stream_states(tr_optim *o, const tr_layouts *l, checkpoint *c, bool gathers, int *write_rc, char *err,
                         size_t errlen)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    bool writes = c != NULL;
    staging st;
    staging_alloc(&st, s, l, writes);
    int rc = 0;
    for (int i = 0; i < s->nweights && !rc; i++)
        for (int k = 0; k < 3 && !rc; k++) {
            rc = tr_optim_weight_to_host(o, k, i, st.slice, err, errlen);
            if (!rc && gathers)
                rc = tr_gather_tensor(x->comm, l, &s->weights[i], i, st.slice, st.slices, st.full, err, errlen);
            if (!rc && writes && !*write_rc)
                *write_rc = unsaved_if_invalid(&s->weights[i], k, st.full, o->step, err, errlen);
            if (!rc && writes && !*write_rc)
                *write_rc = checkpoint_put(c, k, i, st.full, err, errlen);
            if (!rc && writes && !*write_rc)
                test_signal("tensor");
            if (!rc && writes && !*write_rc && save_signal)
                *write_rc = tp_error(err, errlen, "interrupted by %s during --save: the save was abandoned (its "
                                     "directory keeps what it held)", signal_name(save_signal));
        }
    staging_free(&st);
    return rc;
}

int tr_save(tr_optim *o, const tr_layouts *l, const tr_save_spec *spec, char *err, size_t errlen)
{
    bool gathers = !o->zero || o->zero->dp->rank == 0;    /* the replicas hold the same state, once gathered */
    bool writes = gathers && o->x->comm->rank == 0;
    checkpoint c = {0};
    signal_guard guard = {0};
    int write_rc = writes ? guard_signals(&guard, err, errlen) : 0;
    if (writes && !write_rc)
        write_rc = checkpoint_open(&c, o->x->s, spec, err, errlen);
    int rc = stream_states(o, l, writes ? &c : NULL, gathers, &write_rc, err, errlen);
    if (!rc && writes && !write_rc) {
        test_delay();
        write_rc = checkpoint_finish(&c, spec, o->step, err, errlen);
    }
    if (!rc && writes && !write_rc) {
        write_rc = replace_dir(c.tmp, spec, o->step, err, errlen);
        if (!write_rc && save_signal)
            write_rc = tp_error(err, errlen, "interrupted by %s during --save, which finished first: %s holds the "
                                "new checkpoint", signal_name(save_signal), spec->dir);
    }
    if (writes && (rc || write_rc) && c.tmp)
        remove_tree(c.tmp);  /* unpublished (gone once renamed in); a previous checkpoint is untouched */
    if (writes)
        unguard_signals(&guard);
    checkpoint_free(&c);     /* closes the files not finished */
    return rc ? rc : write_rc;
}

/* ---- resuming ------------------------------------------------------------ */

/* The state resumed, this rank's slice of every weight, master and
 * moment: training from a NaN or a negative exp_avg_sq would go on
 * silently and save the damage. Every rank reads all of its state (the
 * reads are collective where it is sharded) before any reports. */
static int check_state(tr_optim *o, const char *dir, char *err, size_t errlen)
{
    const tr_schedule *s = o->x->s;
    int64_t most = 0;
    for (int i = 0; i < s->nweights; i++)
        most = s->weights[i].local_elems > most ? s->weights[i].local_elems : most;
    float *slice = tp_xmalloc((size_t)most * sizeof *slice + 1);
    char why[400] = "";
    int rc = 0, bad_k = -1;
    for (int i = 0; i < s->nweights && !rc; i++)
        for (int k = 0; k < 3 && !rc; k++) {
            rc = tr_optim_weight_to_host(o, k, i, slice, err, errlen);
            if (!rc && bad_k < 0 && check_values(&s->weights[i], k, slice, s->weights[i].local_elems, why, sizeof why))
                bad_k = k;
        }
    free(slice);
    if (!rc && bad_k >= 0)
        rc = tp_error(err, errlen, "--resume: %s%s: %s (of this rank's slice): the checkpoint is damaged; resume "
                      "from an earlier one", dir, bad_k ? "/optimizer.safetensors" : ", its model weights", why);
    return rc;
}

/* The files of a --resume directory into o: its step in *step, this
 * rank's slices of the moments. Reads files only, no collective. */
static int read_resumed(tr_optim *o, const char *dir, const tr_data_order *order, int64_t *step, char *err,
                        size_t errlen)
{
    tr_exec *x = o->x;
    if (read_step(dir, order, step, err, errlen))
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
    return rc;
}

int tr_resume(tr_optim *o, const char *dir, const tr_data_order *order, char *err, size_t errlen)
{
    int64_t step = 0;
    int rc = read_resumed(o, dir, order, &step, err, errlen);
    /* the state is read back even where the files failed: sharded, the
     * reads are collective, and a rank that skipped them would leave the
     * others waiting in them rather than in the agreement that ends the
     * --resume phase (train.c) */
    char why[600];
    if (check_state(o, dir, why, sizeof why) && !rc)
        rc = tp_error(err, errlen, "%s", why);
    if (!rc)
        o->step = step;
    return rc;
}
