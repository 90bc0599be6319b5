// The op table (sched/ops.def) and what derives from it: every kind has a
// name, a signature and a FLOP rule; the reader enforces the signature and
// reads every attribute, refusing an op that lacks one with a message that
// names the op and what is missing; --dump lists the attributes in the
// table's order. (That every kind has an executor is checked when
// runtime/exec/exec.c compiles: its dispatch table names exec_<name> for
// every row; that its kernels column is what exec_<name> calls, by
// OpTable.KernelsColumnIsWhatTheExecutorCalls, tests/CMakeLists.txt.)
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <set>
#include <string>

#include <jansson.h>

#include "tests/support/process.h"

extern "C" {
#include "sched/program.h"
#include "compiler/report/report.h"
#include "sched/format.h"
#include "sched/load.h"
}

using tpcc_test::TempDir;

namespace {

std::string name_of(int kind) { return tp_op_names[kind]; }

const tp_op_def &def_of(int kind) { return tp_ops[kind]; }

// Whether the kind rotates a head of two (RoPE's pair) as it attends.
bool rotating_attention(int kind) { return kind == TP_OP_ROPE_ATTENTION || kind == TP_OP_ROPE_ATTENTION_GRAD; }

// An attribute's value in a schedule whose sizes are all 1: the only
// chunk of one (slice), sums, no mask.
json_t *valid_value(const tp_op_attr &a, int kind = -1)
{
    // a data-parallel collective's dp runs of the one-element weight: 2 of
    // 8 (sched/dp_shard.h), on the 2 replicas schedule_of gives it
    if (kind >= 0 && tp_op_is_dp_collective((tp_op_kind)kind) && !strcmp(a.key, "elems"))
        return json_integer(16);
    switch (a.type) {
    case TP_ATTR_SIZE:
    case TP_ATTR_COUNT:
        /* a narrow keeps the one element from 0; RoPE rotates the pair */
        if (!strcmp(a.key, "rotary_dim") || (!strcmp(a.key, "head_dim") && rotating_attention(kind)))
            return json_integer(2);
        return json_integer(!strcmp(a.key, "start") || !strcmp(a.key, "vocab_start") ? 0 : 1);
    case TP_ATTR_DIM: return json_integer(0);
    case TP_ATTR_CHUNK: return json_integer(strcmp(a.key, "parts") ? 0 : 1);
    case TP_ATTR_REAL: return json_real(1.0);
    case TP_ATTR_BOOL: return json_false();
    case TP_ATTR_REDUCE: return json_string("sum");
    case TP_ATTR_ROPE_TYPE: return json_string("default");
    }
    return json_null();
}

json_t *buffer(const char *name, std::initializer_list<int> shape, const char *dtype, int offset)
{
    json_t *s = json_array();
    int64_t elems = 1;
    for (int d : shape) {
        json_array_append_new(s, json_integer(d));
        elems *= d;
    }
    return json_pack("{s:s, s:o, s:s, s:i, s:I}", "name", name, "shape", s, "dtype", dtype, "offset", offset,
                     "bytes", (json_int_t)(elems * 4));
}

json_t *weight(const char *name)
{
    return json_pack("{s:s, s:[i,i], s:[i,i], s:s, s:s, s:n}", "name", name, "shape", 1, 1, "logical_shape", 1, 1,
                     "dtype", "f32", "placement", "Replicate()", "slice");
}

// Buffers: 0 int32 ids [1, 1]; 1 floats [1, 1, 1, 1]; 2 logits [1, 1, 1];
// 3 one head of two floats [1, 1, 1, 2] (RoPE rotates pairs); 4 an output
// like 1 and 5 one like 2, apart from the inputs; 6 and 7 more outputs like
// 1 (the other outputs of a kind with several); 8 a data-parallel run of
// the one-element weight [8], 9 both replicas' runs of it [16]; 10 to 12
// outputs like 3 (a rotating attention's output, its gradient's three).
enum { IDS_BUF, FLOAT_BUF, LOGITS_BUF, PAIR_BUF, OUT_BUF, DLOGITS_BUF, MORE_OUT_BUFS, RUN_BUF = MORE_OUT_BUFS + 2,
       RUNS_BUF, PAIR_OUT_BUFS };


bool dp_collective(json_t *op)
{
    tp_op_kind k = tp_op_kind_named(json_string_value(json_object_get(op, "op")) ?: "");
    return k != TP_OP_COUNT && tp_op_is_dp_collective(k);
}

// Output o of a kind with several: OUT_BUF, then MORE_OUT_BUFS; a rotating
// attention's of a head of two (its log-sum-exp, one float a query).
int out_buf(int kind, int o)
{
    if (rotating_attention(kind) && (kind == TP_OP_ROPE_ATTENTION_GRAD || o == 0))
        return PAIR_OUT_BUFS + o;
    return o ? MORE_OUT_BUFS + o - 1 : OUT_BUF;
}

json_t *outs_list(int kind, int nout)
{
    json_t *out = json_array();
    for (int o = 0; o < nout; o++)
        json_array_append_new(out, json_integer(out_buf(kind, o)));
    return out;
}

// A complete op of `kind` on those buffers: its minimum inputs, its
// output, weight 0 and bias 1 where it takes them, and every attribute.
json_t *complete_op(int kind)
{
    const tp_op_def &d = def_of(kind);
    bool reads_logits = kind == TP_OP_CROSS_ENTROPY || kind == TP_OP_CE_TARGET || kind == TP_OP_CROSS_ENTROPY_GRAD ||
                        kind == TP_OP_CE_GRAD;
    bool writes_logits = kind == TP_OP_CROSS_ENTROPY_GRAD || kind == TP_OP_CE_GRAD;   // their gradient
    json_t *in = json_array();
    for (int i = 0; i < d.in_min; i++) {
        const bool pair = kind == TP_OP_ROPE || (rotating_attention(kind) && i != 5);   // 5: the gradient's lse
        int b = d.ids >> i & 1 ? IDS_BUF : i == 0 && reads_logits ? LOGITS_BUF : pair ? PAIR_BUF : FLOAT_BUF;
        json_array_append_new(in, json_integer(b));
    }
    json_t *op = json_pack("{s:s, s:o, s:i}", "op", tp_op_names[kind], "in", in, "out",
                           d.out_ids ? IDS_BUF
                           : kind == TP_OP_ROPE ? PAIR_BUF
                           : writes_logits ? DLOGITS_BUF
                           : kind == TP_OP_DP_REDUCE_SCATTER ? RUN_BUF
                           : kind == TP_OP_DP_ALL_GATHER ? RUNS_BUF : OUT_BUF);
    if (d.nout > 1)   // several outputs: one float buffer each
        json_object_set_new(op, "out", outs_list(kind, d.nout));
    if (d.weight != TP_OPERAND_NONE)
        json_object_set_new(op, "weight", json_integer(0));
    if (d.bias != TP_OPERAND_NONE)
        json_object_set_new(op, "bias", json_integer(1));
    for (int a = 0; a < d.nattrs; a++)
        json_object_set_new(op, d.attrs[a].key, valid_value(d.attrs[a], kind));
    return op;
}

// A one-rank schedule holding `op` (taken over); for a data-parallel
// collective, of 2 replicas sharding their gradients, or for a gather
// their parameters (the lookup after it then reads its weight from the
// gathered buffer).
json_t *schedule_of(json_t *op)
{
    bool dp = dp_collective(op), fsdp = !strcmp(json_string_value(json_object_get(op, "op")) ?: "", "dp_all_gather");
    json_t *buffers = json_pack("[o, o, o, o, o, o, o, o, o, o, o, o, o]", buffer("ids", {1, 1}, "i32", 0),
                                buffer("x", {1, 1, 1, 1}, "f32", 256), buffer("logits", {1, 1, 1}, "f32", 512),
                                buffer("pair", {1, 1, 1, 2}, "f32", 768), buffer("y", {1, 1, 1, 1}, "f32", 896),
                                buffer("dlogits", {1, 1, 1}, "f32", 960), buffer("z", {1, 1, 1, 1}, "f32", 1024),
                                buffer("z2", {1, 1, 1, 1}, "f32", 1280), buffer("run", {8}, "f32", 1536),
                                buffer("runs", {16}, "f32", 1792), buffer("o", {1, 1, 1, 2}, "f32", 1856),
                                buffer("o2", {1, 1, 1, 2}, "f32", 1920), buffer("o3", {1, 1, 1, 2}, "f32", 1984));
    // then a masked lookup of the input ids, which bounds the ids and labels tprun accepts to the table's one row
    json_t *lookup = json_pack("{s:s, s:[i], s:i, s:i, s:b, s:i, s:i}", "op", "embedding", "in", IDS_BUF, "out",
                               OUT_BUF, "weight", 0, "masked", 1, "vocab_start", 0, "vocab_local", 1);
    if (fsdp)
        json_object_set_new(lookup, "weight_buf", json_integer(RUNS_BUF));
    json_t *rank =
        json_pack("{s:i, s:[o, o], s:[o, o]}", "rank", 0, "weights", weight("w"), weight("b"), "ops", op, lookup);
    json_t *doc = json_pack("{s:s, s:i, s:s, s:s, s:i, s:s, s:i, s:{s:i, s:n}, s:{s:n, s:n}, s:o, s:[o]}", "magic",
                            TP_SCHEDULE_MAGIC, "format_version", TP_SCHEDULE_VERSION, "producer", "test", "input_hash",
                            "0", "world_size", 1, "dtype", "f32", "arena_bytes", 2048, "inputs", "input_ids", 0,
                            "labels", "outputs", "loss", "logits", "buffers", buffers, "ranks", rank);
    if (dp) {
        json_object_set_new(doc, "data_parallel", json_integer(2));
        json_object_set_new(doc, "dp_shard", json_string(fsdp ? "parameters" : "gradients"));
    }
    return doc;
}

struct Loaded {
    int rc;
    std::string err;
    tr_op op{};
};

// Write the schedule holding complete_op(kind) after `edit`, and load it.
Loaded load(int kind, const std::function<void(json_t *op)> &edit = [](json_t *) {})
{
    TempDir dir;
    json_t *op = complete_op(kind);
    edit(op);
    json_t *doc = schedule_of(op);
    std::string path = dir.path + "/one.sched";
    EXPECT_EQ(json_dump_file(doc, path.c_str(), 0), 0);
    int ranks = json_is_integer(json_object_get(doc, "data_parallel")) ? 2 : 1;
    json_decref(doc);
    tr_schedule s;
    char err[512] = "";
    Loaded r{tr_schedule_load(&s, path.c_str(), 0, ranks, err, sizeof err), err};
    if (r.rc == 0) {
        r.op = s.ops[0];
        r.op.module = r.op.entry = nullptr;   // freed with s
        tr_schedule_free(&s);
    }
    return r;
}

// --dump's listing of the one-rank schedule holding `op` (taken over),
// its keys written with json_dump_file's `flags`.
std::string listing_of(json_t *op, size_t flags)
{
    TempDir dir;
    json_t *doc = schedule_of(op);
    std::string path = dir.path + "/one.sched";
    EXPECT_EQ(json_dump_file(doc, path.c_str(), flags), 0);
    json_decref(doc);
    char *text = nullptr;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    char err[512] = "";
    EXPECT_EQ(tp_schedule_dump(path.c_str(), 0, out, err, sizeof err), 0) << err;
    fclose(out);
    std::string listing(text, len);
    free(text);
    return listing;
}

// "op 0 (rmsnorm): <what>"
std::string about(int kind, const std::string &what) { return "op 0 (" + name_of(kind) + "): " + what; }

TEST(OpTable, EveryKindHasANameAndASignature)
{
    std::set<std::string> names;
    const std::set<std::string> operand_keys = {"op", "in", "out", "weight", "bias", "module", "entry", "implicit"};
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        ASSERT_NE(tp_op_names[k], nullptr) << k;
        EXPECT_FALSE(name_of(k).empty()) << k;
        EXPECT_TRUE(names.insert(name_of(k)).second) << name_of(k) << " twice";
        EXPECT_EQ(tp_op_kind_named(tp_op_names[k]), k);
        EXPECT_LE(0, d.in_min) << name_of(k);
        EXPECT_LE(d.in_min, d.in_max) << name_of(k);
        EXPECT_LE(d.in_max, TP_MAX_INS) << name_of(k);
        EXPECT_TRUE(d.nout >= 1 && d.nout <= TP_MAX_OUTS) << name_of(k);
        EXPECT_TRUE(d.nout == 1 || !d.collective) << name_of(k) << ": a collective with several outputs";
        std::set<std::string> keys;
        for (int a = 0; a < d.nattrs; a++) {
            EXPECT_TRUE(keys.insert(d.attrs[a].key).second) << name_of(k) << "." << d.attrs[a].key << " twice";
            EXPECT_EQ(operand_keys.count(d.attrs[a].key), 0u) << name_of(k) << "." << d.attrs[a].key;
            EXPECT_LT(d.attrs[a].field, sizeof(tr_op)) << name_of(k) << "." << d.attrs[a].key;
        }
    }
    EXPECT_EQ(tp_op_kind_named("frobnicate"), TP_OP_COUNT);
}

// The f32 column marks float operands only (ids, labels and positions are
// int32 whatever the dtype), and a kind works in place only on floats it
// reads and writes alike.
TEST(OpTable, ThePlaceAndF32ColumnsFitTheSignature)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        EXPECT_EQ(d.f32 & d.ids, 0u) << name_of(k) << ": an int32 input marked f32";
        EXPECT_FALSE(d.out_ids && d.f32 & TP_F32_OUT) << name_of(k) << ": an int32 output marked f32";
        EXPECT_FALSE(d.in_place && d.out_ids) << name_of(k) << ": int32 written in place";
    }
    EXPECT_TRUE(def_of(TP_OP_CE_LOSS).f32 & TP_F32_OUT);
    EXPECT_TRUE(def_of(TP_OP_ALL_REDUCE).in_place);
    EXPECT_FALSE(def_of(TP_OP_ATTENTION).in_place);
}

TEST(OpTable, FlopsCountMatmulsAndAttentionOnly)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        tp_ir_op op{};
        op.kind = (tp_op_kind)k;
        op.m = op.n = op.k = op.heads = 2;
        op.elems = 1000;
        double f = tp_op_flops(&op);
        if (k == TP_OP_MATMUL || k == TP_OP_CONV1D || k == TP_OP_MATMUL_TN)
            EXPECT_EQ(f, 2.0 * 2 * 2 * 2);
        else if (k == TP_OP_ATTENTION || k == TP_OP_ROPE_ATTENTION)
            // q k^T and p v (the rotation is elementwise): 2 * 2 * b * h * s * s * d
            EXPECT_EQ(f, 4.0 * 2 * 2 * 2 * 2 * 2);
        else if (k == TP_OP_ATTENTION_GRAD || k == TP_OP_ROPE_ATTENTION_GRAD)
            // dP, dS k, dS^T q and P^T dy: twice the forward's
            EXPECT_EQ(f, 8.0 * 2 * 2 * 2 * 2 * 2);
        else
            EXPECT_EQ(f, 0.0) << name_of(k) << (tp_op_is_collective((tp_op_kind)k) ? " (a collective)" : "");
    }
}

TEST(OpTable, EveryKindLoadsWhenComplete)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        Loaded r = load(k);
        ASSERT_EQ(r.rc, 0) << name_of(k) << ": " << r.err;
        EXPECT_EQ(r.op.kind, k);
        const tp_op_def &d = def_of(k);
        for (int a = 0; a < d.nattrs; a++) {   // each read into its field
            if (d.attrs[a].type == TP_ATTR_SIZE || d.attrs[a].type == TP_ATTR_COUNT) {
                json_t *want = valid_value(d.attrs[a], k);
                EXPECT_EQ(*(const int64_t *)((const char *)&r.op + d.attrs[a].field), json_integer_value(want))
                    << name_of(k) << "." << d.attrs[a].key;
                json_decref(want);
            }
        }
    }
}

TEST(OpTable, AMissingAttributeIsNamed)
{
    for (int k = 0; k < TP_OP_COUNT; k++)
        for (int a = 0; a < def_of(k).nattrs; a++) {
            const char *key = def_of(k).attrs[a].key;
            Loaded r = load(k, [&](json_t *op) { json_object_del(op, key); });
            EXPECT_EQ(r.rc, -1) << name_of(k) << " without " << key;
            EXPECT_TRUE(tpcc_test::contains(r.err, about(k, std::string("missing attribute '") + key + "'")))
                << r.err;
        }
}

TEST(OpTable, AnAttributeOfTheWrongTypeIsNamed)
{
    for (int k = 0; k < TP_OP_COUNT; k++)
        for (int a = 0; a < def_of(k).nattrs; a++) {
            const char *key = def_of(k).attrs[a].key;
            Loaded r = load(k, [&](json_t *op) { json_object_set_new(op, key, json_string("many")); });
            EXPECT_EQ(r.rc, -1) << name_of(k) << "." << key;
            EXPECT_TRUE(tpcc_test::contains(r.err, about(k, std::string("'") + key + "'"))) << r.err;
        }
}

TEST(OpTable, AnOpWithAnOperandTooFewOrTooManyIsRefused)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        if (d.in_min > 0) {
            Loaded r = load(k, [](json_t *op) {
                json_t *in = json_object_get(op, "in");
                json_array_remove(in, json_array_size(in) - 1);
            });
            EXPECT_EQ(r.rc, -1) << name_of(k);
            EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "'in' lists " + std::to_string(d.in_min - 1)))) << r.err;
        }
        Loaded r = load(k, [&](json_t *op) {
            json_t *in = json_object_get(op, "in");
            while ((int)json_array_size(in) <= d.in_max)
                json_array_append_new(in, json_integer(FLOAT_BUF));
        });
        EXPECT_EQ(r.rc, -1) << name_of(k) << " with too many inputs";

        r = load(k, [](json_t *op) { json_object_del(op, "out"); });
        EXPECT_EQ(r.rc, -1) << name_of(k);
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "missing operand 'out'"))) << r.err;

        for (const char *param : {"weight", "bias"}) {
            tp_operand use = !strcmp(param, "weight") ? d.weight : d.bias;
            if (use == TP_OPERAND_REQUIRED) {
                r = load(k, [&](json_t *op) { json_object_del(op, param); });
                EXPECT_TRUE(tpcc_test::contains(r.err, about(k, std::string("missing operand '") + param + "'")))
                    << r.err;
            } else if (use == TP_OPERAND_NONE) {
                r = load(k, [&](json_t *op) { json_object_set_new(op, param, json_integer(0)); });
                EXPECT_TRUE(tpcc_test::contains(r.err, about(k, std::string("takes no ") + param))) << r.err;
            } else {
                r = load(k, [&](json_t *op) { json_object_del(op, param); });
                EXPECT_EQ(r.rc, 0) << name_of(k) << " without its optional " << param << ": " << r.err;
            }
        }
    }
}

TEST(OpTable, IdsAndFloatsAreNotMixedUp)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        Loaded r = load(k, [&](json_t *op) {
            json_t *wrong = json_integer(d.out_ids ? FLOAT_BUF : IDS_BUF);
            if (d.nout > 1)
                json_array_set_new(json_object_get(op, "out"), 0, wrong);
            else
                json_object_set_new(op, "out", wrong);
        });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, d.nout > 1 ? "out[0] is buffer" : "out is buffer"))) << r.err;
        if (d.in_min == 0)
            continue;
        r = load(k, [&](json_t *op) {
            json_array_set_new(json_object_get(op, "in"), 0, json_integer(d.ids & 1 ? FLOAT_BUF : IDS_BUF));
        });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "in[0] is buffer"))) << r.err;
    }
}

// A kind with several outputs lists one buffer or null per output: each
// may be left out (null), not all, none twice, but attention's output
// itself (only its log-sum-exp is for a gradient); the listing shows "-"
// for one left out.
TEST(OpTable, SeveralOutputsAreAListWithNullsForThoseNotComputed)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        if (d.nout == 1)
            continue;
        for (int o = 0; o < d.nout; o++) {
            Loaded r = load(k, [&](json_t *op) { json_array_set_new(json_object_get(op, "out"), o, json_null()); });
            if ((k == TP_OP_ATTENTION || k == TP_OP_ROPE_ATTENTION) && o == 0) {
                EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "out[0], the attention's output, is null"))) << r.err;
                continue;
            }
            ASSERT_EQ(r.rc, 0) << name_of(k) << " without output " << o << ": " << r.err;
            for (int p = 0; p < d.nout; p++)
                EXPECT_EQ(r.op.outs[p], p == o ? -1 : out_buf(k, p)) << name_of(k);
        }
        Loaded r = load(k, [&](json_t *op) {
            json_t *none = json_array();
            for (int o = 0; o < d.nout; o++)
                json_array_append_new(none, json_null());
            json_object_set_new(op, "out", none);
        });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "'out' lists no buffer"))) << r.err;
        const int first = out_buf(k, 0);
        r = load(k, [&](json_t *op) { json_array_set_new(json_object_get(op, "out"), 1, json_integer(first)); });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "out[0] and out[1] are both buffer " + std::to_string(first))))
            << r.err;
        r = load(k, [&](json_t *op) { json_object_set_new(op, "out", json_integer(FLOAT_BUF)); });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "'out' must be a list of " + std::to_string(d.nout))))
            << r.err;
        r = load(k, [&](json_t *op) { json_array_remove(json_object_get(op, "out"), 0); });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "'out' must be a list"))) << r.err;
        r = load(k, [&](json_t *op) { json_array_set_new(json_object_get(op, "out"), 0, json_integer(99)); });
        EXPECT_TRUE(tpcc_test::contains(r.err, about(k, "'out'[0] is neither a buffer nor null"))) << r.err;

        json_t *op = complete_op(k);
        json_array_set_new(json_object_get(op, "out"), 0, json_null());
        std::string listing = listing_of(op, 0);
        std::string want = "-";
        for (int o = 1; o < d.nout; o++)
            want += ", b" + std::to_string(out_buf(k, o));
        EXPECT_TRUE(tpcc_test::contains(listing, want + " <- ")) << listing;
    }
}

TEST(OpTable, AnUnknownKindIsRefusedByTheReaderAndTheListing)
{
    TempDir dir;
    json_t *op = complete_op(TP_OP_SILU);
    json_object_set_new(op, "op", json_string("frobnicate"));
    json_t *doc = schedule_of(op);
    std::string path = dir.path + "/unknown.sched";
    ASSERT_EQ(json_dump_file(doc, path.c_str(), 0), 0);
    json_decref(doc);
    tr_schedule s;
    char err[512] = "";
    EXPECT_EQ(tr_schedule_load(&s, path.c_str(), 0, 1, err, sizeof err), -1);
    EXPECT_TRUE(tpcc_test::contains(err, "unknown op 'frobnicate'")) << err;
    FILE *null = fopen("/dev/null", "w");
    EXPECT_EQ(tp_schedule_dump(path.c_str(), -1, null, err, sizeof err), -1);
    fclose(null);
    EXPECT_TRUE(tpcc_test::contains(err, "rank 0 op 0 is of an unknown kind")) << err;
}

// valid_value(a, kind) as --dump prints it.
std::string listed(const tp_op_attr &a, int kind)
{
    json_t *v = valid_value(a, kind);
    std::string s = json_is_boolean(v) ? "false" : json_is_string(v) ? json_string_value(v)
                                                                      : std::to_string((int)json_number_value(v));
    json_decref(v);
    return s;
}

// --dump lists a computation's attributes in the table's order, whatever
// the order of the keys in the file.
TEST(OpTable, TheListingShowsTheAttributesInTheTablesOrder)
{
    for (int k = 0; k < TP_OP_COUNT; k++) {
        const tp_op_def &d = def_of(k);
        if (d.collective || d.nattrs == 0)
            continue;
        std::string listing = listing_of(complete_op(k), JSON_SORT_KEYS), want = " [";
        for (int a = 0; a < d.nattrs; a++)
            want += std::string(a ? " " : "") + d.attrs[a].key + "=" + listed(d.attrs[a], k);
        EXPECT_TRUE(tpcc_test::contains(listing, want + "]")) << want << "]\n" << listing;
    }
}

}  // namespace
