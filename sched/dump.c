/* sched/dump.c: a schedule file as a readable listing (tpcc --dump).
 *
 * Reads the JSON back the way a runtime would, checks what a runtime
 * relies on (magic, format version, world size, one op list per rank,
 * buffer and weight indices in range), and prints each rank's weight table
 * and numbered ops with their provenance:
 *
 *     12  matmul          b40 <- b39 x model.layers.0.self_attn.q_proj.weight [m=2048 n=2048 k=4096]   (...)
 *     13  all_gather      b41 <- b40 dim=1 8.0 MiB                                                    (...)
 *     90  attention_grad  b88, -, b89 <- b30, b31, b32, b87 [batch=2 ...]                            (...)
 */
#include <inttypes.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/dp_shard.h"
#include "sched/format.h"
#include "sched/ops.h"
#include "util/xalloc.h"
#include "util/errmsg.h"
#include "util/input_file.h"

#define REGENERATE "regenerate it with 'tpcc PLAN -o FILE'"
#define MAX_BODY 100   /* ops longer than this push their provenance right */

/* ---- validation ---- */

typedef struct schedule {
    const char *path;
    json_t *doc;
    json_int_t world, nbufs;
    json_t *buffers, *ranks;
} schedule;

static bool is_index(const json_t *v, json_int_t n)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < n;
}

/* "out": a buffer, or for a kind with several outputs a list of buffers
 * and nulls (outputs not computed) */
static bool is_out(const json_t *out, tp_op_kind kind, json_int_t nbufs)
{
    if (tp_ops[kind].nout == 1)
        return is_index(out, nbufs);
    if (!json_is_array(out) || (int)json_array_size(out) != tp_ops[kind].nout)
        return false;
    size_t i;
    const json_t *b;
    json_array_foreach(out, i, b)
        if (!json_is_null(b) && !is_index(b, nbufs))
            return false;
    return true;
}

static int check_rank(const schedule *s, json_int_t r, char *err, size_t errlen)
{
    const json_t *rk = json_array_get(s->ranks, (size_t)r);
    const json_t *weights = json_object_get(rk, "weights"), *ops = json_object_get(rk, "ops");
    if (!json_is_object(rk) || json_integer_value(json_object_get(rk, "rank")) != r ||
        !json_is_integer(json_object_get(rk, "rank")) || !json_is_array(weights) || !json_is_array(ops)) {
        tp_error(err, errlen, "'%s' is not a valid schedule: entry %" JSON_INTEGER_FORMAT
                " of \"ranks\" is not {\"rank\": %" JSON_INTEGER_FORMAT ", \"weights\": [...], \"ops\": [...]}",
                s->path, r, r);
        return -1;
    }
    json_int_t nweights = (json_int_t)json_array_size(weights);
    size_t i;
    const json_t *w;
    json_array_foreach(weights, i, w) {
        if (!json_is_object(w) || !json_is_string(json_object_get(w, "name"))) {
            tp_error(err, errlen, "'%s' is not a valid schedule: rank %" JSON_INTEGER_FORMAT
                    " weight %zu has no name", s->path, r, i);
            return -1;
        }
    }
    const json_t *op;
    json_array_foreach(ops, i, op) {
        const char *what = NULL;
        const json_t *in = json_object_get(op, "in"), *out = json_object_get(op, "out");
        const json_t *weight = json_object_get(op, "weight"), *bias = json_object_get(op, "bias");
        if (!json_is_object(op) || !json_is_string(json_object_get(op, "op")))
            what = "has no \"op\" name";
        else if (tp_op_kind_named(json_string_value(json_object_get(op, "op"))) == TP_OP_COUNT)
            what = "is of an unknown kind (a newer schedule? " REGENERATE ")";
        else if (!json_is_array(in))
            what = "has no \"in\" list";
        else if (out && !is_out(out, tp_op_kind_named(json_string_value(json_object_get(op, "op"))), s->nbufs))
            what = "writes a buffer that does not exist";
        else if ((weight && !is_index(weight, nweights)) || (bias && !is_index(bias, nweights)))
            what = "uses a weight that does not exist";
        size_t k;
        const json_t *b;
        json_array_foreach(in, k, b)
            if (!what && !is_index(b, s->nbufs))
                what = "reads a buffer that does not exist";
        if (what) {
            tp_error(err, errlen, "'%s' is not a valid schedule: rank %" JSON_INTEGER_FORMAT " op %zu %s",
                    s->path, r, i, what);
            return -1;
        }
    }
    return 0;
}

static int load(schedule *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    char why[600];
    FILE *f = tp_input_fopen(path, why, sizeof why);
    if (!f)
        return tp_error(err, errlen, "cannot read the schedule: %s", why);
    json_error_t je;
    s->doc = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    bool read_error = ferror(f);
    fclose(f);
    if (!s->doc) {
        if (read_error)
            tp_error(err, errlen, "cannot read '%s': %s", path, je.text);
        else
            tp_error(err, errlen, "'%s' is not a valid schedule: invalid JSON at line %d, column %d: %s "
                    "(a truncated or corrupted file? %s)", path, je.line, je.column, je.text, REGENERATE);
        return -1;
    }
    json_t *d = s->doc;
    if (!json_is_object(d)) {
        tp_error(err, errlen, "'%s' is not a tpcc schedule: the top level is not a JSON object", path);
        return -1;
    }
    const char *magic = json_string_value(json_object_get(d, "magic"));
    if (!magic || strcmp(magic, TP_SCHEDULE_MAGIC) != 0) {
        tp_error(err, errlen, "'%s' is not a tpcc schedule: \"magic\" is %s%s%s, expected \"%s\"", path,
                magic ? "\"" : "", magic ? magic : "missing", magic ? "\"" : "", TP_SCHEDULE_MAGIC);
        return -1;
    }
    const json_t *version = json_object_get(d, "format_version");
    if (!json_is_integer(version)) {
        tp_error(err, errlen, "'%s' is not a valid schedule: \"format_version\" is missing or not an integer", path);
        return -1;
    }
    json_int_t v = json_integer_value(version);
    if (v != TP_SCHEDULE_VERSION) {
        tp_error(err, errlen, "'%s' has schedule format version %" JSON_INTEGER_FORMAT
                ", but this tpcc reads version %d only: %s", path, v, TP_SCHEDULE_VERSION,
                v > TP_SCHEDULE_VERSION ? "use the tpcc that wrote it, or " REGENERATE : REGENERATE);
        return -1;
    }
    const json_t *world = json_object_get(d, "world_size");
    if (!json_is_integer(world) || json_integer_value(world) < 1) {
        tp_error(err, errlen, "'%s' is not a valid schedule: \"world_size\" is missing or not a positive integer",
                path);
        return -1;
    }
    s->world = json_integer_value(world);
    s->buffers = json_object_get(d, "buffers");
    s->ranks = json_object_get(d, "ranks");
    if (!json_is_array(s->buffers)) {
        tp_error(err, errlen, "'%s' is not a valid schedule: \"buffers\" is missing or not a list", path);
        return -1;
    }
    s->nbufs = (json_int_t)json_array_size(s->buffers);
    if (!json_is_array(s->ranks) || (json_int_t)json_array_size(s->ranks) != s->world) {
        tp_error(err, errlen, "'%s' is not a valid schedule: \"ranks\" does not hold one entry per rank "
                "(world size %" JSON_INTEGER_FORMAT ")", path, s->world);
        return -1;
    }
    for (json_int_t r = 0; r < s->world; r++)
        if (check_rank(s, r, err, errlen) != 0)
            return -1;
    return 0;
}

/* ---- printing ---- */

static const char *str_or(const json_t *v, const char *dflt)
{
    const char *s = json_string_value(v);
    return s ? s : dflt;
}

static void append_bytes(tp_buf *b, double bytes)
{
    if (bytes < 1024)
        tp_buf_appendf(b, "%.0f B", bytes);
    else if (bytes < 1024.0 * 1024)
        tp_buf_appendf(b, "%.1f KiB", bytes / 1024);
    else if (bytes < 1024.0 * 1024 * 1024)
        tp_buf_appendf(b, "%.1f MiB", bytes / (1024.0 * 1024));
    else
        tp_buf_appendf(b, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
}

static void append_value(tp_buf *b, const json_t *v)
{
    if (json_is_integer(v))
        tp_buf_appendf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        tp_buf_appendf(b, "%g", json_real_value(v));
    else if (json_is_string(v))
        tp_buf_append(b, json_string_value(v));
    else if (json_is_boolean(v))
        tp_buf_append(b, json_is_true(v) ? "true" : "false");
    else if (json_is_null(v))
        tp_buf_append(b, "null");
    else {
        char *s = tp_xcheck(json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));
        tp_buf_append(b, s);
        free(s);
    }
}

static void append_shape(tp_buf *b, const json_t *shape)
{
    tp_buf_append(b, "[");
    size_t i;
    const json_t *d;
    json_array_foreach(shape, i, d) {
        if (i)
            tp_buf_append(b, ", ");
        append_value(b, d);
    }
    tp_buf_append(b, "]");
}

static const char *weight_name(const json_t *weights, const json_t *index)
{
    return str_or(json_object_get(json_array_get(weights, (size_t)json_integer_value(index)), "name"), "?");
}

static tp_op_kind kind_of(const json_t *op) { return tp_op_kind_named(json_string_value(json_object_get(op, "op"))); }

/* A computation's attributes, in the order of sched/ops.def:
 * "[m=4 n=16 k=8]". */
static void append_attrs(tp_buf *b, const json_t *op, const tp_op_def *def)
{
    int n = 0;
    for (const tp_op_attr *a = def->attrs; a < def->attrs + def->nattrs; a++) {
        const json_t *v = json_object_get(op, a->key);
        if (!v)
            continue;
        tp_buf_appendf(b, "%s%s=", n++ ? " " : " [", a->key);
        append_value(b, v);
    }
    if (n)
        tp_buf_append(b, "]");
}

/* A collective's, as what it moves: "dim=1->2 sum 8.0 MiB" (elems is in
 * the bytes). */
static void append_movement(tp_buf *b, const json_t *op, const tp_op_def *def)
{
    const json_t *dim2 = json_object_get(op, "dim2");
    for (const tp_op_attr *a = def->attrs; a < def->attrs + def->nattrs; a++) {
        const json_t *v = json_object_get(op, a->key);
        if (!v || !strcmp(a->key, "dim2") || !strcmp(a->key, "elems"))
            continue;
        if (!strcmp(a->key, "dim") && dim2)
            tp_buf_appendf(b, " dim=%" JSON_INTEGER_FORMAT "->%" JSON_INTEGER_FORMAT, json_integer_value(v),
                           json_integer_value(dim2));
        else if (!strcmp(a->key, "dim"))
            tp_buf_appendf(b, " dim=%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (a->type == TP_ATTR_REDUCE)
            tp_buf_appendf(b, " %s", str_or(v, "?"));
        else if (!strcmp(a->key, "bytes")) {
            tp_buf_append(b, " ");
            append_bytes(b, (double)json_integer_value(v));
        } else {
            tp_buf_appendf(b, " %s=", a->key);
            append_value(b, v);
        }
    }
}

/* "b41 <- b40 dim=1 8.0 MiB" or "b40 <- b39 x W [m=... n=... k=...]" */
static char *op_body(const json_t *op, const json_t *weights)
{
    tp_buf b;
    tp_buf_init(&b);
    tp_op_kind kind = kind_of(op);
    tp_buf_appendf(&b, "%-14s ", tp_op_names[kind]);
    const json_t *out = json_object_get(op, "out"), *in = json_object_get(op, "in");
    size_t i;
    const json_t *v;
    if (json_is_integer(out))
        tp_buf_appendf(&b, "b%" JSON_INTEGER_FORMAT " <- ", json_integer_value(out));
    json_array_foreach(out, i, v)    /* several outputs: "-" for one not computed */
        if (json_is_null(v))
            tp_buf_appendf(&b, "%s-%s", i ? ", " : "", i + 1 == json_array_size(out) ? " <- " : "");
        else
            tp_buf_appendf(&b, "%sb%" JSON_INTEGER_FORMAT "%s", i ? ", " : "", json_integer_value(v),
                           i + 1 == json_array_size(out) ? " <- " : "");
    json_array_foreach(in, i, v)
        tp_buf_appendf(&b, "%sb%" JSON_INTEGER_FORMAT, i ? ", " : "", json_integer_value(v));
    if (json_array_size(in) == 0)
        tp_buf_append(&b, "()");
    if ((v = json_object_get(op, "weight")))
        tp_buf_appendf(&b, " x %s", weight_name(weights, v));
    if ((v = json_object_get(op, "weight_buf")))     /* FSDP: gathered into a buffer */
        tp_buf_appendf(&b, " (b%" JSON_INTEGER_FORMAT ")", json_integer_value(v));
    if ((v = json_object_get(op, "bias")))
        tp_buf_appendf(&b, " + %s", weight_name(weights, v));
    if ((v = json_object_get(op, "bias_buf")))
        tp_buf_appendf(&b, " (b%" JSON_INTEGER_FORMAT ")", json_integer_value(v));
    if (tp_op_is_collective(kind))
        append_movement(&b, op, &tp_ops[kind]);
    else
        append_attrs(&b, op, &tp_ops[kind]);
    return tp_buf_take(&b);
}

static void append_provenance(tp_buf *b, const json_t *op)
{
    const char *module = json_string_value(json_object_get(op, "module"));
    const char *entry = json_string_value(json_object_get(op, "entry"));
    bool implicit = json_is_true(json_object_get(op, "implicit"));
    bool recompute = json_is_true(json_object_get(op, "recompute"));
    const char *phase = json_string_value(json_object_get(op, "phase"));
    bool provenance = module || entry || implicit || recompute;
    if (phase)
        tp_buf_appendf(b, provenance ? "[%s] " : "[%s]", phase);
    if (!provenance)
        return;
    tp_buf_append(b, "(");
    if (recompute)
        tp_buf_append(b, module || entry || implicit ? "recompute; " : "recompute");
    if (implicit)
        tp_buf_append(b, module || entry ? "implicit; " : "implicit");
    if (module)
        tp_buf_append(b, module[0] ? module : "<root>");
    if (entry)
        tp_buf_appendf(b, "%s%s", module ? " <- " : "", entry);
    tp_buf_append(b, ")");
}

static int digits(size_t n)
{
    int d = 1;
    while (n >= 10) {
        n /= 10;
        d++;
    }
    return d;
}

static void print_weights(const json_t *weights, FILE *out)
{
    size_t n = json_array_size(weights), i;
    int wname = 4, wshape = 5, wpl = 9;
    const json_t *w;
    char **shapes = tp_xcalloc(n + 1, sizeof *shapes);
    json_array_foreach(weights, i, w) {
        tp_buf b;
        tp_buf_init(&b);
        append_shape(&b, json_object_get(w, "shape"));
        shapes[i] = tp_buf_take(&b);
        int len = (int)strlen(str_or(json_object_get(w, "name"), "?"));
        wname = len > wname ? len : wname;
        len = (int)strlen(shapes[i]);
        wshape = len > wshape ? len : wshape;
        len = (int)strlen(str_or(json_object_get(w, "placement"), "?"));
        wpl = len > wpl ? len : wpl;
    }
    fprintf(out, "  weights (%zu)\n", n);
    int wi = digits(n);
    json_array_foreach(weights, i, w) {
        fprintf(out, "    %*zu  %-*s  %-*s  %-*s  ", wi, i, wname, str_or(json_object_get(w, "name"), "?"), wshape,
                shapes[i], wpl, str_or(json_object_get(w, "placement"), "?"));
        const json_t *slice = json_object_get(w, "slice");
        if (json_is_object(slice)) {
            /* one range, or a packed weight's range per segment */
            const json_t *segs = json_object_get(slice, "segments");
            size_t nsegs = json_is_array(segs) ? json_array_size(segs) : 1;
            fprintf(out, "dim %" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(slice, "dim")));
            for (size_t k = 0; k < nsegs; k++) {
                const json_t *r = json_is_array(segs) ? json_array_get(segs, k) : slice;
                json_int_t off = json_integer_value(json_object_get(r, "offset"));
                json_int_t len = json_integer_value(json_object_get(r, "length"));
                fprintf(out, " [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT ")", off, off + len);
            }
            const json_t *replicas = json_object_get(slice, "replicas");
            if (json_is_integer(replicas))
                fprintf(out, "  (shared by %" JSON_INTEGER_FORMAT " ranks)", json_integer_value(replicas));
        } else {
            fprintf(out, "full");
        }
        const json_t *logical = json_object_get(w, "logical_shape");
        if (logical && !json_equal((json_t *)logical, json_object_get(w, "shape"))) {
            tp_buf b;
            tp_buf_init(&b);
            append_shape(&b, logical);
            fprintf(out, "  (checkpoint %s, padding zero-filled)", b.data);
            tp_buf_free(&b);
        }
        fputc('\n', out);
        free(shapes[i]);
    }
    free(shapes);
}

static void print_rank(const schedule *s, json_int_t r, FILE *out)
{
    const json_t *rk = json_array_get(s->ranks, (size_t)r);
    const json_t *weights = json_object_get(rk, "weights"), *ops = json_object_get(rk, "ops");
    size_t n = json_array_size(ops), i;
    const json_t *op;

    char **body = tp_xcalloc(n + 1, sizeof *body);
    int width = 0, ncoll = 0;
    double coll_bytes = 0;
    json_array_foreach(ops, i, op) {
        body[i] = op_body(op, weights);
        int len = (int)strlen(body[i]);
        if (len > width && len <= MAX_BODY)
            width = len;
        if (tp_op_is_collective(kind_of(op))) {
            ncoll++;
            coll_bytes += (double)json_integer_value(json_object_get(op, "bytes"));
        }
    }

    fprintf(out, "\nrank %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT "\n", r, s->world);
    print_weights(weights, out);
    tp_buf sum;
    tp_buf_init(&sum);
    append_bytes(&sum, coll_bytes);
    fprintf(out, "  ops (%zu, %d collectives moving %s)\n", n, ncoll, sum.data);
    tp_buf_free(&sum);
    int wi = digits(n);
    json_array_foreach(ops, i, op) {
        tp_buf line;
        tp_buf_init(&line);
        tp_buf_appendf(&line, "    %*zu  %s", wi, i, body[i]);
        tp_buf prov;
        tp_buf_init(&prov);
        append_provenance(&prov, op);
        if (prov.len) {
            int len = (int)strlen(body[i]);
            tp_buf_append_char(&line, ' ', (size_t)(len < width ? width - len : 0) + 3);
            tp_buf_append(&line, prov.data);
        }
        fprintf(out, "%s\n", line.data);
        tp_buf_free(&prov);
        tp_buf_free(&line);
        free(body[i]);
    }
    free(body);
}

static void print_header(const schedule *s, FILE *out)
{
    const json_t *d = s->doc;
    fprintf(out, "schedule %s (format %d)\n", s->path, TP_SCHEDULE_VERSION);
    fprintf(out, "  producer    %s\n", str_or(json_object_get(d, "producer"), "?"));
    fprintf(out, "  input hash  %s\n", str_or(json_object_get(d, "input_hash"), "?"));
    fprintf(out, "  plan        %s\n", str_or(json_object_get(d, "plan"), "-"));
    fprintf(out, "  world size  %" JSON_INTEGER_FORMAT "\n", s->world);
    /* a dp x tp training schedule: the ranks above form one replica */
    const json_t *dp = json_object_get(d, "data_parallel");
    if (json_is_integer(dp))
        fprintf(out, "  data parallel  %" JSON_INTEGER_FORMAT " replicas of the %" JSON_INTEGER_FORMAT
                     " ranks above (tprun -n %" JSON_INTEGER_FORMAT ")\n",
                json_integer_value(dp), s->world, json_integer_value(dp) * s->world);
    /* what each ZeRO stage holds in slices (sched/dp_shard.h) */
    static const char *const sliced[TP_DP_SHARD_COUNT] = {
        "nothing", "optimizer state", "gradients and optimizer state", "parameters, gradients and optimizer state"};
    const json_t *shard = json_object_get(d, "dp_shard");
    int mode = json_is_string(shard) ? tp_dp_shard_parse(json_string_value(shard)) : -1;
    if (mode >= 0 && json_is_integer(dp))
        fprintf(out, "  dp shard    %s, 1/%" JSON_INTEGER_FORMAT " on each replica\n", sliced[mode],
                json_integer_value(dp));
    fprintf(out, "  dtype       %s\n", str_or(json_object_get(d, "dtype"), "?"));
    json_int_t arena = json_integer_value(json_object_get(d, "arena_bytes"));
    fprintf(out, "  arena       %.1f KiB (%" JSON_INTEGER_FORMAT " bytes) for %" JSON_INTEGER_FORMAT " buffers\n",
            (double)arena / 1024, arena, s->nbufs);
}

int tp_schedule_dump(const char *path, int rank, FILE *out, char *err, size_t errlen)
{
    schedule s;
    if (load(&s, path, err, errlen) != 0) {
        json_decref(s.doc);
        return -1;
    }
    if (rank >= s.world) {
        tp_error(err, errlen, "rank %d is out of range: '%s' has world size %" JSON_INTEGER_FORMAT
                " (ranks 0..%" JSON_INTEGER_FORMAT ")", rank, path, s.world, s.world - 1);
        json_decref(s.doc);
        return -1;
    }
    print_header(&s, out);
    for (json_int_t r = rank < 0 ? 0 : rank; r < (rank < 0 ? s.world : rank + 1); r++)
        print_rank(&s, r, out);
    json_decref(s.doc);
    return 0;
}
