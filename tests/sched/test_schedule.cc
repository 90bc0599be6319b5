// The schedule file (sched/write.c, sched/dump.c, util/hash.c):
// a hand-built two-rank program written, read back with jansson and checked
// field by field per rank; byte-identical rewrites; atomic failure; and the
// readable listing, including its refusal of files it cannot trust.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <jansson.h>

extern "C" {
#include "compiler/front/config.h"
#include "sched/program.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"
#include "sched/load.h"
#include "sched/write.h"
#include "sched/memplan.h"
#include "sched/format.h"
#include "util/hash.h"
#include "util/xalloc.h"
}

namespace fs = std::filesystem;

namespace {

class TempDir {
public:
    TempDir()
    {
        char tmpl[] = "/tmp/tpcc-sched-XXXXXX";
        const char *d = mkdtemp(tmpl);
        if (!d)
            throw std::runtime_error("mkdtemp failed");
        path_ = d;
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string &name) const { return path_ + "/" + name; }
    const std::string &path() const { return path_; }
    // Names in the directory, to catch stray temporary files.
    std::vector<std::string> entries() const
    {
        std::vector<std::string> v;
        for (const auto &e : fs::directory_iterator(path_))
            v.push_back(e.path().filename().string());
        std::sort(v.begin(), v.end());
        return v;
    }

private:
    std::string path_;
};

std::string slurp(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

void spit(const std::string &path, const std::string &text)
{
    std::ofstream f(path, std::ios::binary);
    f << text;
}

char *dup(const char *s) { return tp_xstrdup(s); }

// A tiny Llama-ish program on two ranks: a vocab-sharded embedding
// (padded 10 -> 12 rows), norm, a colwise q_proj, a view, RoPE, attention,
// a gather, the lm_head and the vocab-parallel loss; plus a dead op.
struct Fixture {
    // modules and plan entries, as the program names them
    const char *root = "", *embed = "model.embed_tokens", *layer = "model.layers.0.input_layernorm",
               *q_proj = "model.layers.0.self_attn.q_proj", *lm_head = "lm_head";
    const char *embed_style = "model.embed_tokens", *q_style = "model.layers.*.self_attn.q_proj";
    tp_setting config[5]{};
    tp_ir ir{};
    tp_schedule_meta meta{};

    // a weight: global shape [d0, d1] (rank 1: [d0]), checkpoint rows l0, per-rank shape [local0, local1]
    int add_param(const char *name, int rank, int64_t d0, int64_t d1, int64_t l0, tp_placement pl, int64_t local0,
                  int64_t local1)
    {
        ir.params = (tp_ir_param *)tp_xreallocarray(ir.params, (size_t)ir.nparams + 1, sizeof *ir.params);
        tp_ir_param &ip = ir.params[ir.nparams];
        ip = tp_ir_param{};
        ip.name = name;
        ip.rank = rank;
        ip.shape[0] = d0;
        ip.shape[1] = d1;
        ip.logical[0] = l0;
        ip.logical[1] = d1;
        ip.pl = pl;
        ip.local[0] = local0;
        ip.local[1] = local1;
        return ir.nparams++;
    }
    int buf(const char *name, std::vector<int64_t> shape, tp_dtype dt = TP_F32, int alias = -1)
    {
        tp_ir_buf b{};
        b.rank = (int)shape.size();
        for (size_t i = 0; i < shape.size(); i++)
            b.shape[i] = shape[i];
        b.dtype = dt;
        b.name = dup(name);
        b.alias_of = alias;
        return tp_ir_add_buf(&ir, &b);
    }
    tp_ir_op &op(tp_op_kind k, std::vector<int> in, int out, const char *mod, const char *entry = nullptr)
    {
        tp_ir_op o{};
        o.kind = k;
        for (int b : in)
            o.in[o.nin++] = b;
        for (int p = 0; p < TP_MAX_OUTS; p++)   // an op's further outputs not computed, as the passes leave them
            o.outs[p] = -1;
        o.out = out;
        o.weight = o.bias = -1;
        o.scale = 1.0;
        o.module = mod;
        o.entry = entry;
        int idx = tp_ir_add_op(&ir, &o);   // may move ir.ops
        return ir.ops[idx];
    }

    Fixture()
    {
        config[0] = {"tp", TP_SETTING_INT, 2, 0, nullptr};
        config[1] = {"seq", TP_SETTING_INT, 8, 0, nullptr};
        config[2] = {"loss_parallel", TP_SETTING_BOOL, 1, 0, nullptr};
        config[3] = {"unused", TP_SETTING_NULL, 0, 0, nullptr};   // never evaluated
        config[4] = {"rope_theta", TP_SETTING_REAL, 0, 500000.0, nullptr};

        ir.world = 2;
        ir.loss_buf = ir.logits_buf = -1;
        int w_embed = add_param("model.embed_tokens.weight", 2, 12, 16, 10, tp_shard(0), 6, 16);
        int w_norm = add_param("model.layers.0.input_layernorm.weight", 1, 16, 0, 16, tp_replicate(), 16, 0);
        int w_q = add_param("model.layers.0.self_attn.q_proj.weight", 2, 16, 16, 16, tp_shard(0), 8, 16);
        int w_lm = add_param("lm_head.weight", 2, 12, 16, 10, tp_shard(0), 6, 16);

        int ids = buf("input_ids", {2, 8}, TP_I32), labels = buf("labels", {2, 8}, TP_I32);
        ir.bufs[ids].input = ir.bufs[labels].input = true;
        int pos = buf("positions", {8}, TP_I32);
        int e = buf("model.embed_tokens.out", {2, 8, 16});
        int h = buf("model.embed_tokens.all_reduce", {2, 8, 16});
        int n = buf("model.layers.0.input_layernorm.out", {2, 8, 16});
        int q = buf("model.layers.0.self_attn.q_proj.out", {2, 8, 8});
        int qv = buf("model.layers.0.self_attn.q.view", {2, 8, 2, 4}, TP_F32, q);
        int qr = buf("model.layers.0.self_attn.q.rope", {2, 8, 2, 4});
        int at = buf("model.layers.0.self_attn.attention", {2, 8, 2, 4});
        int sl = buf("model.layers.0.slice", {2, 4, 16});
        int dead = buf("model.layers.0.dead", {2, 8, 16});
        int g = buf("model.layers.0.all_gather", {2, 8, 16});
        int sc = buf("model.layers.0.scale", {2, 8, 16});
        int logits = buf("lm_head.out", {2, 8, 6});
        int mx = buf("ce_max", {2, 8}), se = buf("ce_sumexp", {2, 8}), tg = buf("ce_target", {2, 8});
        int loss = buf("loss", {});

        tp_ir_op *o = &op(TP_OP_POSITIONS, {}, pos, root);
        o->pos_chunk = 8;
        o = &op(TP_OP_EMBEDDING, {ids}, e, embed, embed_style);
        o->weight = w_embed;
        o->masked = true;
        o->vocab_local = 6;
        o = &op(TP_OP_ALL_REDUCE, {e}, h, embed, embed_style);
        o->elems = 2 * 8 * 16;
        o = &op(TP_OP_RMSNORM, {h}, n, layer);
        o->weight = w_norm;
        o->m = 16;
        o->n = 16;
        o->eps = 1e-6;
        o = &op(TP_OP_MATMUL, {n}, q, q_proj, q_style);
        o->weight = w_q;
        o->m = 16;
        o->n = 8;
        o->k = 16;
        o = &op(TP_OP_ROPE, {qv, pos}, qr, q_proj);
        o->theta = 500000.0;
        o->pos_chunk = 8;
        o->k = 4;
        o = &op(TP_OP_ATTENTION, {qr, qr, qr}, at, q_proj);
        o->m = 2;
        o->n = 8;
        o->heads = 2;
        o->k = 4;
        o->groups = 1;
        o = &op(TP_OP_SLICE, {n}, sl, layer, q_style);
        o->dim = 1;
        o->parts = 2;
        o = &op(TP_OP_SCALE, {n}, dead, layer);
        o->dead = true;
        o = &op(TP_OP_ALL_GATHER, {n}, g, layer, q_style);
        o->dim = 2;
        o->elems = 2 * 8 * 16 * 2;
        o->implicit = true;
        o = &op(TP_OP_SCALE, {g}, sc, layer);
        o->scale = 1.0 / 3.0;
        o = &op(TP_OP_ADD, {sc, sl}, -1, layer);   // keeps sl and sc read
        o = &op(TP_OP_MATMUL, {sc}, logits, lm_head);
        o->weight = w_lm;
        o->m = 16;
        o->n = 6;
        o->k = 16;
        o = &op(TP_OP_CE_MAX, {logits}, mx, root);
        o->vocab_local = 6;
        o->vocab_logical = 10;
        o = &op(TP_OP_ALL_REDUCE, {mx}, mx, root);
        o->reduce_max = 1;
        o->elems = 16;
        o = &op(TP_OP_CE_SUMEXP, {logits, mx}, se, root);
        o->vocab_local = 6;
        o->vocab_logical = 10;
        o = &op(TP_OP_ALL_REDUCE, {se}, se, root);
        o->elems = 16;
        o = &op(TP_OP_CE_TARGET, {logits, labels}, tg, root);
        o->vocab_local = 6;
        o = &op(TP_OP_ALL_REDUCE, {tg}, tg, root);
        o->elems = 16;
        o = &op(TP_OP_CE_LOSS, {se, mx, tg}, loss, root);
        o->in[o->nin++] = labels;
        (void)at;

        ir.logits_buf = logits;
        ir.logits_pl = tp_shard(-1);
        ir.bufs[logits].output = true;
        ir.loss_buf = loss;
        ir.bufs[loss].output = true;
        tp_memplan(&ir);

        meta.producer = "tpcc 0.1.0";
        meta.input_hash = tp_hash(TP_HASH_INIT, "abc", 3);
        meta.dtype = TP_F32;
        meta.config = config;
        meta.nconfig = 5;
        meta.plan_path = "plans/tiny.plan";
    }
    ~Fixture() { tp_ir_free(&ir); }
    Fixture(const Fixture &) = delete;
    Fixture &operator=(const Fixture &) = delete;

    int write(const std::string &path, std::string *msg = nullptr)
    {
        char err[512] = "";
        int rc = tp_schedule_write(&ir, &meta, path.c_str(), err, sizeof err);
        if (msg)
            *msg = err;
        return rc;
    }
};

// A parsed schedule, freed on scope exit.
struct Doc {
    json_t *j = nullptr;
    explicit Doc(const std::string &path)
    {
        json_error_t e;
        j = json_load_file(path.c_str(), JSON_REJECT_DUPLICATES, &e);
        EXPECT_NE(j, nullptr) << e.text << " at line " << e.line;
    }
    ~Doc() { json_decref(j); }
    json_t *get(const char *key) const { return json_object_get(j, key); }
};

json_int_t ival(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    EXPECT_TRUE(json_is_integer(v)) << key;
    return json_integer_value(v);
}

std::string sval(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    EXPECT_NE(s, nullptr) << key;
    return s ? s : "";
}

// The ops of one rank with the given name.
std::vector<json_t *> ops_named(json_t *rank, const char *name)
{
    std::vector<json_t *> v;
    size_t i;
    json_t *op;
    json_array_foreach(json_object_get(rank, "ops"), i, op)
        if (sval(op, "op") == name)
            v.push_back(op);
    return v;
}

std::string dump(const std::string &path, int rank, int *rc, std::string *msg = nullptr)
{
    char *text = nullptr;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    char err[512] = "";
    *rc = tp_schedule_dump(path.c_str(), rank, out, err, sizeof err);
    fclose(out);
    std::string s(text, len);
    free(text);
    if (msg)
        *msg = err;
    return s;
}

// ---- hashing ----

TEST(Hash, IsFnv1a64)
{
    EXPECT_EQ(tp_hash(TP_HASH_INIT, "", 0), 0xcbf29ce484222325ULL);
    EXPECT_EQ(tp_hash(TP_HASH_INIT, "a", 1), 0xaf63dc4c8601ec8cULL);
    EXPECT_EQ(tp_hash(TP_HASH_INIT, "foobar", 6), 0x85944171f73967e8ULL);
    // chaining is hashing the concatenation
    EXPECT_EQ(tp_hash(tp_hash(TP_HASH_INIT, "foo", 3), "bar", 3), tp_hash(TP_HASH_INIT, "foobar", 6));
}

// ---- writing ----

TEST(ScheduleWrite, IsByteIdenticalForIdenticalInputs)
{
    TempDir dir;
    Fixture a;
    ASSERT_EQ(a.write(dir.file("a.sched")), 0);
    ASSERT_EQ(a.write(dir.file("b.sched")), 0);
    Fixture b;   // a second, separately built copy of the same program
    ASSERT_EQ(b.write(dir.file("c.sched")), 0);
    std::string x = slurp(dir.file("a.sched"));
    EXPECT_FALSE(x.empty());
    EXPECT_EQ(x, slurp(dir.file("b.sched")));
    EXPECT_EQ(x, slurp(dir.file("c.sched")));
    ASSERT_EQ(a.write(dir.file("a.sched")), 0);   // replacing gives the same bytes
    EXPECT_EQ(x, slurp(dir.file("a.sched")));
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.sched", "b.sched", "c.sched"})) << "no temporary files";
    EXPECT_EQ(x.back(), '\n');
    EXPECT_EQ(x.find("0x"), std::string::npos) << "no pointers";
}

TEST(ScheduleWrite, HeaderConfigAndIo)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    Doc d(dir.file("s"));
    ASSERT_NE(d.j, nullptr);
    EXPECT_EQ(sval(d.j, "magic"), TP_SCHEDULE_MAGIC);
    EXPECT_EQ(ival(d.j, "format_version"), TP_SCHEDULE_VERSION);
    EXPECT_EQ(sval(d.j, "producer"), "tpcc 0.1.0");
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)f.meta.input_hash);
    EXPECT_EQ(sval(d.j, "input_hash"), hash);
    EXPECT_EQ(sval(d.j, "input_hash").size(), 16u);
    EXPECT_EQ(sval(d.j, "plan"), "plans/tiny.plan");
    EXPECT_EQ(ival(d.j, "world_size"), 2);
    EXPECT_EQ(sval(d.j, "dtype"), "f32");
    EXPECT_EQ(ival(d.j, "arena_bytes"), f.ir.arena_bytes);

    // top-level keys in the documented order
    std::vector<std::string> keys;
    const char *key;
    json_t *v;
    json_object_foreach(d.j, key, v)
        keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"magic", "format_version", "producer", "input_hash", "plan",
                                              "world_size", "dtype", "config", "arena_bytes", "inputs", "outputs",
                                              "buffers", "ranks"}));

    json_t *cfg = d.get("config");
    keys.clear();
    json_object_foreach(cfg, key, v)
        keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"tp", "seq", "loss_parallel", "unused", "rope_theta"}))
        << "definition order";
    EXPECT_EQ(ival(cfg, "tp"), 2);
    EXPECT_TRUE(json_is_true(json_object_get(cfg, "loss_parallel")));
    EXPECT_TRUE(json_is_null(json_object_get(cfg, "unused")));
    json_t *theta = json_object_get(cfg, "rope_theta");
    ASSERT_TRUE(json_is_real(theta)) << "a float entry is a JSON real";
    EXPECT_EQ(json_real_value(theta), 500000.0);
    EXPECT_NE(slurp(dir.file("s")).find("\"rope_theta\": 500000.0}"), std::string::npos)
        << "written as the ops' reals are";

    json_t *in = d.get("inputs");
    EXPECT_EQ(ival(in, "input_ids"), 0);
    EXPECT_EQ(ival(in, "labels"), 1);
    json_t *out = d.get("outputs");
    EXPECT_EQ(ival(out, "loss"), f.ir.loss_buf);
    json_t *logits = json_object_get(out, "logits");
    EXPECT_EQ(ival(logits, "buffer"), f.ir.logits_buf);
    EXPECT_EQ(sval(logits, "placement"), "Shard(2)");
    EXPECT_EQ(ival(logits, "vocab"), 10);
}

TEST(ScheduleWrite, BuffersMatchTheMemoryPlan)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    Doc d(dir.file("s"));
    json_t *bufs = d.get("buffers");
    ASSERT_EQ((int)json_array_size(bufs), f.ir.nbufs);
    for (int b = 0; b < f.ir.nbufs; b++) {
        json_t *o = json_array_get(bufs, (size_t)b);
        const tp_ir_buf &ib = f.ir.bufs[b];
        EXPECT_EQ(sval(o, "name"), ib.name);
        EXPECT_EQ(sval(o, "dtype"), tp_dtype_name(ib.dtype));
        EXPECT_EQ(ival(o, "bytes"), tp_ir_buf_elems(&ib) * (json_int_t)tp_dtype_size(ib.dtype));
        json_t *shape = json_object_get(o, "shape");
        ASSERT_EQ((int)json_array_size(shape), ib.rank);
        for (int k = 0; k < ib.rank; k++)
            EXPECT_EQ(json_integer_value(json_array_get(shape, (size_t)k)), ib.shape[k]);
        if (ib.offset < 0)
            EXPECT_TRUE(json_is_null(json_object_get(o, "offset"))) << ib.name;
        else
            EXPECT_EQ(ival(o, "offset"), ib.offset);
        if (ib.alias_of >= 0) {
            EXPECT_EQ(ival(o, "alias_of"), ib.alias_of);
            EXPECT_EQ(ival(o, "offset"), f.ir.bufs[ib.alias_of].offset);
        } else {
            EXPECT_EQ(json_object_get(o, "alias_of"), nullptr);
        }
    }
    // the buffer only the dead op writes has no storage
    EXPECT_TRUE(json_is_null(json_object_get(json_array_get(bufs, 11), "offset")));
}

TEST(ScheduleWrite, RanksDifferOnlyInTheirSlices)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    Doc d(dir.file("s"));
    json_t *ranks = d.get("ranks");
    ASSERT_EQ(json_array_size(ranks), 2u);
    for (json_int_t r = 0; r < 2; r++) {
        SCOPED_TRACE("rank " + std::to_string(r));
        json_t *rk = json_array_get(ranks, (size_t)r);
        EXPECT_EQ(ival(rk, "rank"), r);

        json_t *w = json_object_get(rk, "weights");
        ASSERT_EQ(json_array_size(w), 4u);
        json_t *emb = json_array_get(w, 0);
        EXPECT_EQ(sval(emb, "name"), "model.embed_tokens.weight");
        EXPECT_EQ(sval(emb, "placement"), "Shard(0)");
        EXPECT_EQ(sval(emb, "dtype"), "f32");
        EXPECT_EQ(json_integer_value(json_array_get(json_object_get(emb, "shape"), 0)), 12);
        EXPECT_EQ(json_integer_value(json_array_get(json_object_get(emb, "logical_shape"), 0)), 10);
        json_t *slice = json_object_get(emb, "slice");
        EXPECT_EQ(ival(slice, "dim"), 0);
        EXPECT_EQ(ival(slice, "offset"), r * 6);
        EXPECT_EQ(ival(slice, "length"), 6);
        json_t *norm = json_array_get(w, 1);
        EXPECT_EQ(sval(norm, "placement"), "Replicate()");
        EXPECT_TRUE(json_is_null(json_object_get(norm, "slice")));
        EXPECT_EQ(json_array_size(json_object_get(norm, "shape")), 1u);
        EXPECT_EQ(ival(json_object_get(json_array_get(w, 2), "slice"), "offset"), r * 8);

        json_t *ops = json_object_get(rk, "ops");
        EXPECT_EQ((int)json_array_size(ops), f.ir.nops - 1) << "the dead op is left out";
        EXPECT_TRUE(ops_named(rk, "scale").size() == 1u);

        json_t *emb_op = ops_named(rk, "embedding").at(0);
        EXPECT_EQ(ival(emb_op, "vocab_start"), r * 6);
        EXPECT_EQ(ival(emb_op, "vocab_local"), 6);
        EXPECT_TRUE(json_is_true(json_object_get(emb_op, "masked")));
        EXPECT_EQ(ival(emb_op, "weight"), 0);
        EXPECT_EQ(sval(emb_op, "module"), "model.embed_tokens");
        EXPECT_EQ(sval(emb_op, "entry"), "model.embed_tokens");

        json_t *sl = ops_named(rk, "slice").at(0);
        EXPECT_EQ(ival(sl, "index"), r);
        EXPECT_EQ(ival(sl, "parts"), 2);
        EXPECT_EQ(ival(sl, "dim"), 1);

        EXPECT_EQ(ival(ops_named(rk, "positions").at(0), "pos_offset"), r * 8);
        json_t *rope = ops_named(rk, "rope").at(0);
        EXPECT_EQ(ival(rope, "pos_offset"), r * 8);
        EXPECT_EQ(json_real_value(json_object_get(rope, "theta")), 500000.0);
        EXPECT_EQ(ival(rope, "head_dim"), 4);

        for (const char *ce : {"ce_max", "ce_sumexp", "ce_target"}) {
            json_t *o = ops_named(rk, ce).at(0);
            EXPECT_EQ(ival(o, "vocab_start"), r * 6) << ce;
            EXPECT_EQ(ival(o, "vocab_local"), 6) << ce;
        }
        EXPECT_EQ(ival(ops_named(rk, "ce_max").at(0), "vocab_logical"), 10);

        json_t *mm = ops_named(rk, "matmul").at(0);
        EXPECT_EQ(ival(mm, "m"), 16);
        EXPECT_EQ(ival(mm, "n"), 8);
        EXPECT_EQ(ival(mm, "k"), 16);
        EXPECT_EQ(sval(mm, "entry"), "model.layers.*.self_attn.q_proj");

        json_t *att = ops_named(rk, "attention").at(0);
        json_t *att_out = json_object_get(att, "out");   // [o, lse]: no gradient reads a log-sum-exp here
        ASSERT_TRUE(json_is_array(att_out) && json_array_size(att_out) == 2);
        EXPECT_TRUE(json_is_integer(json_array_get(att_out, 0)));
        EXPECT_TRUE(json_is_null(json_array_get(att_out, 1)));
        EXPECT_EQ(ival(att, "batch"), 2);
        EXPECT_EQ(ival(att, "seq"), 8);
        EXPECT_EQ(ival(att, "heads"), 2);
        EXPECT_EQ(ival(att, "head_dim"), 4);
        EXPECT_EQ(ival(att, "kv_heads"), 1);

        json_t *ag = ops_named(rk, "all_gather").at(0);
        EXPECT_EQ(ival(ag, "dim"), 2);
        EXPECT_EQ(ival(ag, "elems"), 512);
        EXPECT_EQ(ival(ag, "bytes"), 2048);
        EXPECT_TRUE(json_is_true(json_object_get(ag, "implicit")));
        EXPECT_EQ(json_object_get(emb_op, "implicit"), nullptr) << "implicit only when set";

        std::vector<json_t *> ar = ops_named(rk, "all_reduce");
        ASSERT_EQ(ar.size(), 4u);
        EXPECT_EQ(sval(ar[0], "reduce"), "sum");
        EXPECT_EQ(sval(ar[1], "reduce"), "max");
        EXPECT_EQ(ival(ar[1], "bytes"), 64);

        // 1/3 survives the round trip exactly
        EXPECT_EQ(json_real_value(json_object_get(ops_named(rk, "scale").at(0), "scale")), 1.0 / 3.0);
        EXPECT_EQ(json_real_value(json_object_get(ops_named(rk, "rmsnorm").at(0), "eps")), 1e-6);

        json_t *loss = ops_named(rk, "ce_loss").at(0);
        EXPECT_EQ(json_array_size(json_object_get(loss, "in")), 4u);
        EXPECT_EQ(sval(loss, "module"), "");
        EXPECT_EQ(json_object_get(loss, "entry"), nullptr);
    }
}

TEST(ScheduleWrite, OneOpPerLine)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    std::istringstream in(slurp(dir.file("s")));
    std::string line;
    int op_lines = 0;
    while (std::getline(in, line))
        if (line.find("{\"op\": ") != std::string::npos)
            op_lines++;
    EXPECT_EQ(op_lines, 2 * (f.ir.nops - 1));
}

TEST(ScheduleWrite, RealsRoundTripExactlyAndReadWell)
{
    TempDir dir;
    Fixture f;
    tp_ir_op *scale = nullptr;
    for (tp_ir_op *o = f.ir.ops; o < f.ir.ops + f.ir.nops; o++)
        if (o->kind == TP_OP_SCALE && !o->dead)
            scale = o;
    ASSERT_NE(scale, nullptr);
    for (double x : {0.1, 1.0 / 3.0, 1e-5, 1e-300, 1e300, -2.5, 0.0, 123456789012345678.0, 4.9e-324,
                     0.1 + 0.2, 1.0 / 4096}) {
        scale->scale = x;
        ASSERT_EQ(f.write(dir.file("s")), 0);
        Doc d(dir.file("s"));
        json_t *op = ops_named(json_array_get(d.get("ranks"), 0), "scale").at(0);
        json_t *v = json_object_get(op, "scale");
        ASSERT_TRUE(json_is_real(v)) << x;
        EXPECT_EQ(json_real_value(v), x);
    }
    std::string text = slurp(dir.file("s"));
    EXPECT_NE(text.find("\"eps\": 1e-06"), std::string::npos);
    EXPECT_NE(text.find("\"theta\": 500000.0"), std::string::npos);
    EXPECT_NE(text.find("\"scale\": 0.000244140625"), std::string::npos);
}

TEST(ScheduleWrite, StringsAreEscapedAndMustBeUtf8)
{
    TempDir dir;
    Fixture f;
    const char *odd = "q\"uo\\te\n\ttab\x01 caf\xc3\xa9 \xe2\x86\x92";
    free(f.ir.bufs[5].name);
    f.ir.bufs[5].name = dup(odd);
    ASSERT_EQ(f.write(dir.file("s")), 0);
    {
        Doc d(dir.file("s"));
        EXPECT_EQ(sval(json_array_get(d.get("buffers"), 5), "name"), odd);
    }
    EXPECT_NE(slurp(dir.file("s")).find("\\u0001"), std::string::npos);

    free(f.ir.bufs[5].name);
    f.ir.bufs[5].name = dup("bad \xff utf-8");
    std::string msg;
    EXPECT_EQ(f.write(dir.file("t"), &msg), -1);
    EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(dir.file("t")));
}

// The writer checks UTF-8 and escapes strings itself, without jansson; both
// must agree with jansson exactly: a string is refused iff json_string
// refuses it, and is written as json_dumps writes it.
TEST(ScheduleWrite, StringsAgreeWithJansson)
{
    TempDir dir;
    Fixture f;
    std::string controls;
    for (int c = 1; c < 0x20; c++)
        controls += (char)c;
    const std::vector<std::string> names = {
        controls + "\"\\/\x7f",
        "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",   // 2-, 3- and 4-byte forms, U+10FFFF
        "\xc0\x80", "\xc1\xbf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf",       // overlong
        "\xed\xa0\x80", "\xed\xbf\xbf",                                   // surrogates
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",                   // above U+10FFFF, never a lead byte
        "\x80", "a\xbf", "\xe2\x82", "\xf0\x9f\x98", "\xc3",              // stray continuation, truncated
        "\xc3(", "\xe2\x28\xa1",                                          // bad continuation
    };
    for (const std::string &name : names) {
        SCOPED_TRACE(::testing::PrintToString(name));
        free(f.ir.bufs[5].name);
        f.ir.bufs[5].name = dup(name.c_str());
        json_t *s = json_string(name.c_str());
        std::string msg;
        int rc = f.write(dir.file("s"), &msg);
        if (!s) {
            EXPECT_EQ(rc, -1);
            EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
            continue;
        }
        ASSERT_EQ(rc, 0) << msg;
        char *want = json_dumps(s, JSON_ENCODE_ANY);
        json_decref(s);
        EXPECT_NE(slurp(dir.file("s")).find(std::string("{\"name\": ") + want + ", \"shape\""), std::string::npos)
            << want;
        free(want);
    }
}

// ---- failing atomically ----

TEST(ScheduleWrite, MissingDirectoryFailsAndLeavesNothing)
{
    TempDir dir;
    Fixture f;
    std::string msg, path = dir.file("no/such/dir/x.sched");
    EXPECT_EQ(f.write(path, &msg), -1);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(dir.entries().empty());
}

TEST(ScheduleWrite, ErrorLeavesAnExistingFileUntouched)
{
    TempDir dir;
    Fixture f;
    std::string path = dir.file("x.sched");
    spit(path, "previous contents\n");
    for (tp_ir_op *o = f.ir.ops; o < f.ir.ops + f.ir.nops; o++)
        if (o->kind == TP_OP_SCALE && !o->dead)
            o->scale = NAN;
    std::string msg;
    EXPECT_EQ(f.write(path, &msg), -1);
    EXPECT_NE(msg.find("scale"), std::string::npos) << msg;
    EXPECT_EQ(slurp(path), "previous contents\n");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"x.sched"});
}

TEST(ScheduleWrite, FailedRenameRemovesTheTemporaryFile)
{
    TempDir dir;
    Fixture f;
    std::string path = dir.file("out");
    fs::create_directory(path);
    spit(path + "/keep", "x");
    std::string msg;
    EXPECT_EQ(f.write(path, &msg), -1);
    EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
    EXPECT_TRUE(fs::is_directory(path));
    EXPECT_EQ(slurp(path + "/keep"), "x");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"out"}) << "the temporary file is gone";
}

TEST(ScheduleWrite, RefusesAnInvalidMemoryPlan)
{
    TempDir dir;
    Fixture f;
    f.ir.bufs[4].offset = f.ir.bufs[3].offset;   // embedding out and its all-reduce result, live together
    std::string msg;
    EXPECT_EQ(f.write(dir.file("s"), &msg), -1);
    EXPECT_NE(msg.find("invalid memory plan"), std::string::npos) << msg;
    EXPECT_TRUE(dir.entries().empty());
}

TEST(ScheduleWrite, RefusesUnevenShards)
{
    TempDir dir;
    Fixture f;
    f.ir.params[2].local[0] = 7;   // 2 x 7 != 16
    std::string msg;
    EXPECT_EQ(f.write(dir.file("s"), &msg), -1);
    EXPECT_NE(msg.find("q_proj.weight"), std::string::npos) << msg;
}

// A packed weight (a fused projection under packed_colwise): each rank
// holds its share of every segment, listed as ranges (the reader:
// Weights.PackedSegmentsLoadAsRanges in tests/runtime/test_tprun.cc).
TEST(ScheduleWrite, PackedWeightsListEachSegmentsRange)
{
    TempDir dir;
    Fixture f;
    tp_ir_param &q = f.ir.params[2];   // q_proj.weight [16, 16], Shard(0), 8 rows a rank
    q.nsegments = 2;
    q.segments[0] = 12;
    q.segments[1] = 4;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    Doc d(dir.file("s"));
    for (json_int_t r = 0; r < 2; r++) {
        SCOPED_TRACE("rank " + std::to_string(r));
        json_t *w = json_array_get(json_object_get(json_array_get(d.get("ranks"), (size_t)r), "weights"), 2);
        json_t *segs = json_object_get(json_object_get(w, "slice"), "segments");
        ASSERT_EQ(json_array_size(segs), 2u);
        EXPECT_EQ(ival(json_array_get(segs, 0), "offset"), r * 6);
        EXPECT_EQ(ival(json_array_get(segs, 0), "length"), 6);
        EXPECT_EQ(ival(json_array_get(segs, 1), "offset"), 12 + r * 2);
        EXPECT_EQ(ival(json_array_get(segs, 1), "length"), 2);
    }
    int rc;
    std::string listing = dump(dir.file("s"), 1, &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_NE(listing.find("dim 0 [6, 12) [14, 16)"), std::string::npos) << listing;
    q.segments[0] = 13;   // 13 and 3 rows do not split over 2 ranks
    q.segments[1] = 3;
    std::string msg;
    EXPECT_EQ(f.write(dir.file("uneven"), &msg), -1);
    EXPECT_NE(msg.find("packed segments"), std::string::npos) << msg;
}

// ---- the listing ----

TEST(ScheduleDump, ListsEveryRank)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    int rc;
    std::string msg, text = dump(dir.file("s"), -1, &rc, &msg);
    ASSERT_EQ(rc, 0) << msg;
    for (const char *want : {"producer    tpcc 0.1.0", "world size  2", "rank 0 of 2", "rank 1 of 2", "embedding",
                             "matmul", "rmsnorm", "rope", "attention", "all_gather", "all_reduce", "ce_loss",
                             "model.layers.0.self_attn.q_proj.weight", "Shard(0)", "Replicate()",
                             "(model.layers.0.self_attn.q_proj <- model.layers.*.self_attn.q_proj)",
                             "(implicit; model.layers.0.input_layernorm <- model.layers.*.self_attn.q_proj)",
                             "dim=2 2.0 KiB", "max 64 B", "dim 0 [6, 12)", "checkpoint [10, 16]"})
        EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
    EXPECT_EQ(text.find("dead"), std::string::npos) << text;
}

TEST(ScheduleDump, OneRank)
{
    TempDir dir;
    Fixture f;
    ASSERT_EQ(f.write(dir.file("s")), 0);
    int rc;
    std::string text = dump(dir.file("s"), 1, &rc);
    ASSERT_EQ(rc, 0);
    EXPECT_NE(text.find("rank 1 of 2"), std::string::npos);
    EXPECT_EQ(text.find("rank 0 of 2"), std::string::npos);
    EXPECT_NE(text.find("vocab_start=6"), std::string::npos) << text;

    std::string msg;
    dump(dir.file("s"), 2, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("rank 2 is out of range"), std::string::npos) << msg;
}

TEST(ScheduleDump, RejectsFilesItCannotTrust)
{
    TempDir dir;
    Fixture f;
    std::string good = dir.file("good");
    ASSERT_EQ(f.write(good), 0);
    std::string text = slurp(good);
    int rc;
    std::string msg;

    dump(dir.file("missing"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("cannot read"), std::string::npos) << msg;

    spit(dir.file("magic"), "{\"magic\": \"safetensors\", \"format_version\": 1}\n");
    dump(dir.file("magic"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("not a tpcc schedule"), std::string::npos) << msg;
    EXPECT_NE(msg.find("safetensors"), std::string::npos) << msg;

    spit(dir.file("array"), "[1, 2]\n");
    dump(dir.file("array"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("not a tpcc schedule"), std::string::npos) << msg;

    // a newer version than this reader knows
    const std::string now = "\"format_version\": " + std::to_string(TP_SCHEDULE_VERSION);
    const std::string next = std::to_string(TP_SCHEDULE_VERSION + 1);
    std::string newer = text;
    size_t at = newer.find(now);
    ASSERT_NE(at, std::string::npos);
    newer.replace(at, now.size(), "\"format_version\": " + next);
    spit(dir.file("newer"), newer);
    dump(dir.file("newer"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("format version " + next), std::string::npos) << msg;
    EXPECT_NE(msg.find("reads version " + std::to_string(TP_SCHEDULE_VERSION)), std::string::npos) << msg;

    spit(dir.file("truncated"), text.substr(0, text.size() / 2));
    dump(dir.file("truncated"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

    std::string world = text;
    at = world.find("\"world_size\": 2");
    ASSERT_NE(at, std::string::npos);
    world.replace(at, 15, "\"world_size\": 3");
    spit(dir.file("world"), world);
    dump(dir.file("world"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("one entry per rank"), std::string::npos) << msg;

    // an op naming a buffer that is not there
    Doc d(good);
    json_t *op = json_array_get(json_object_get(json_array_get(d.get("ranks"), 1), "ops"), 3);
    json_object_set_new(op, "out", json_integer(9999));
    ASSERT_EQ(json_dump_file(d.j, dir.file("badref").c_str(), 0), 0);
    dump(dir.file("badref"), -1, &rc, &msg);
    EXPECT_EQ(rc, -1);
    EXPECT_NE(msg.find("rank 1 op 3 writes a buffer that does not exist"), std::string::npos) << msg;
}

// The loader's message for the schedule at path (rank 0 of 2); 0 or -1.
int load(const std::string &path, std::string *msg)
{
    tr_schedule s;
    char err[1024] = "";
    int rc = tr_schedule_load(&s, path.c_str(), 0, 2, err, sizeof err);
    if (!rc)
        tr_schedule_free(&s);
    *msg = err;
    return rc;
}

// tprun keeps the first vocab columns of the gathered logits: a vocab
// wider than the columns the ranks hold, or a placement naming no dim of
// the buffer, would send it past the end of the logits.
TEST(ScheduleLoad, RejectsLogitsOutsideTheirBuffer)
{
    TempDir dir;
    Fixture f;
    std::string good = dir.file("good"), msg;
    ASSERT_EQ(f.write(good), 0);
    struct Case {
        const char *key;
        json_t *value;
        const char *says;
    } cases[] = {
        {"vocab", json_integer(13), "vocab 13 is more than the 12 columns"},
        {"vocab", json_integer(100000), "vocab 100000 is more than the 12 columns"},
        {"placement", json_string("Shard(3)"), "Shard(3) names no dim of their rank-3 buffer"},
        {"placement", json_string("Replicate()"), "vocab 10 is more than the 6 columns"},
        {"buffer", json_integer(0), "they must be [batch, seq, vocab] floats"},
    };
    for (const Case &c : cases) {
        Doc d(good);
        json_object_set_new(json_object_get(d.get("outputs"), "logits"), c.key, c.value);
        ASSERT_EQ(json_dump_file(d.j, dir.file("bad").c_str(), 0), 0);
        EXPECT_EQ(load(dir.file("bad"), &msg), -1) << c.key;
        EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    }
    Doc d(good);
    json_object_set_new(json_object_get(d.get("outputs"), "logits"), "vocab", json_integer(12));
    ASSERT_EQ(json_dump_file(d.j, dir.file("widest").c_str(), 0), 0);
    load(dir.file("widest"), &msg);   // the fixture's ops are not all runnable: only the outputs are read here
    EXPECT_EQ(msg.find("logits"), std::string::npos) << msg;
}

}  // namespace
