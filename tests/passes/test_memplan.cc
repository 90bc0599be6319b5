// The activation arena planner (compiler/passes/memplan.c): every pair of buffers
// live at the same time is disjoint, views share their root's storage and
// keep it alive, dead ops are ignored, offsets are aligned, and the arena
// is never smaller than what is live at once (equal to it on a chain).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "sched/program.h"
#include "sched/memplan.h"
#include "util/xalloc.h"
}

namespace {

// A tp_ir built by hand: one-dimensional buffers of a given byte size.
struct Program {
    tp_ir ir{};
    Program()
    {
        ir.loss_buf = ir.logits_buf = -1;
        ir.world = 1;
    }
    ~Program() { tp_ir_free(&ir); }
    Program(const Program &) = delete;
    Program &operator=(const Program &) = delete;

    int buf(int64_t bytes, tp_dtype dt = TP_F32, int alias_of = -1)
    {
        tp_ir_buf b{};
        b.rank = 1;
        b.dtype = dt;
        b.shape[0] = bytes / (int64_t)tp_dtype_size(dt);
        b.name = tp_xasprintf("b%d", ir.nbufs);
        b.offset = -1;
        b.alias_of = alias_of;
        return tp_ir_add_buf(&ir, &b);
    }
    int op(std::vector<int> in, int out, bool dead = false)
    {
        tp_ir_op o{};
        o.kind = TP_OP_ADD;
        for (int b : in)
            o.in[o.nin++] = b;
        o.out = out;
        o.weight = o.bias = -1;
        o.dead = dead;
        return tp_ir_add_op(&ir, &o);
    }
    int64_t bytes(int b) const { return tp_ir_buf_elems(&ir.bufs[b]) * (int64_t)tp_dtype_size(ir.bufs[b].dtype); }
    int64_t off(int b) const { return ir.bufs[b].offset; }
};

bool disjoint(int64_t a, int64_t alen, int64_t b, int64_t blen) { return a + alen <= b || b + blen <= a; }

// ---- an independent model of the rules, deliberately naive ----

struct Model {
    std::vector<int> root;          // alias root of each buffer
    std::vector<int64_t> lo, hi;    // group lifetime per root (times: op i is i + 1), lo > hi: never
    std::vector<int64_t> extent;    // largest member in bytes, per root
};

Model model_of(const Program &p)
{
    const tp_ir &ir = p.ir;
    Model m;
    int n = ir.nbufs;
    m.root.resize(n);
    m.lo.assign(n, INT64_MAX);
    m.hi.assign(n, INT64_MIN);
    m.extent.assign(n, 0);
    for (int b = 0; b < n; b++) {
        int r = b;
        while (ir.bufs[r].alias_of >= 0)
            r = ir.bufs[r].alias_of;
        m.root[b] = r;
    }
    auto use = [&](int b, int64_t t) {
        int r = m.root[b];
        m.lo[r] = std::min(m.lo[r], t);
        m.hi[r] = std::max(m.hi[r], t);
    };
    for (int i = 0; i < ir.nops; i++) {
        if (ir.ops[i].dead)
            continue;
        if (ir.ops[i].out >= 0)
            use(ir.ops[i].out, i + 1);
        for (int k = 0; k < ir.ops[i].nin; k++)
            use(ir.ops[i].in[k], i + 1);
    }
    for (int b = 0; b < n; b++) {
        if (ir.bufs[b].input)
            use(b, 0);
        if (ir.bufs[b].output)
            use(b, ir.nops + 1);
        m.extent[m.root[b]] = std::max(m.extent[m.root[b]], p.bytes(b));
    }
    return m;
}

// Every property the plan must have, checked the slow way; returns the
// largest number of bytes live at one time (a lower bound for the arena).
int64_t check_plan(const Program &p)
{
    const tp_ir &ir = p.ir;
    Model m = model_of(p);
    for (int b = 0; b < ir.nbufs; b++) {
        int r = m.root[b];
        bool live = m.lo[r] <= m.hi[r];
        if (!live) {
            EXPECT_EQ(p.off(b), -1) << "buffer " << b << " is never live";
            continue;
        }
        EXPECT_GE(p.off(b), 0) << "buffer " << b;
        EXPECT_EQ(p.off(b) % 256, 0) << "buffer " << b << " is not 256-byte aligned";
        EXPECT_LE(p.off(b) + p.bytes(b), ir.arena_bytes) << "buffer " << b << " ends beyond the arena";
        EXPECT_EQ(p.off(b), p.off(r)) << "view " << b << " is not at its root " << r;
    }
    for (int a = 0; a < ir.nbufs; a++) {
        for (int b = a + 1; b < ir.nbufs; b++) {
            int ra = m.root[a], rb = m.root[b];
            if (ra == rb || m.lo[ra] > m.hi[ra] || m.lo[rb] > m.hi[rb])
                continue;
            if (m.lo[ra] > m.hi[rb] || m.lo[rb] > m.hi[ra])
                continue;
            EXPECT_TRUE(disjoint(p.off(a), p.bytes(a), p.off(b), p.bytes(b)))
                << "buffers " << a << " and " << b << " are live together but overlap";
        }
    }
    int64_t peak = 0;
    for (int64_t t = 0; t <= ir.nops + 1; t++) {
        int64_t live = 0;
        for (int r = 0; r < ir.nbufs; r++)
            if (m.root[r] == r && m.lo[r] <= t && t <= m.hi[r])
                live += m.extent[r];
        peak = std::max(peak, live);
    }
    EXPECT_GE(ir.arena_bytes, peak) << "the arena is smaller than what is live at once";
    return peak;
}

std::string verify(const tp_ir &ir)
{
    char err[512] = "";
    return tp_memplan_verify(&ir, err, sizeof err) ? "" : (err[0] ? err : "(no message)");
}

// ---- random programs ----

void random_program(Program &p, unsigned seed)
{
    std::mt19937 rng(seed);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    int nbufs = uni(1, 60), T = uni(1, 40);
    std::vector<int> s(nbufs), e(nbufs);
    std::vector<bool> input(nbufs);
    const tp_dtype dts[] = {TP_F32, TP_BF16, TP_I32};
    for (int b = 0; b < nbufs; b++) {
        tp_dtype dt = dts[uni(0, 2)];
        int64_t elems = uni(1, 3000);
        int alias = b > 0 && uni(0, 4) == 0 ? uni(0, b - 1) : -1;
        p.buf(elems * (int64_t)tp_dtype_size(dt), dt, alias);
        input[b] = uni(0, 9) == 0;
        p.ir.bufs[b].input = input[b];
        p.ir.bufs[b].output = uni(0, 9) == 0;
        s[b] = uni(0, T - 1);
        e[b] = uni(s[b], T - 1);
    }
    // At each time: the writes starting there, then reads (up to four per op)
    // of the buffers ending there; one op in ten is dead.
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < nbufs; b++)
            if (s[b] == t && !input[b])
                p.op({}, b, uni(0, 9) == 0);
        std::vector<int> readers;
        for (int b = 0; b < nbufs; b++)
            if (e[b] == t)
                readers.push_back(b);
        for (size_t i = 0; i < readers.size(); i += 4) {
            std::vector<int> in(readers.begin() + (long)i, readers.begin() + (long)std::min(readers.size(), i + 4));
            p.op(in, uni(0, 3) == 0 ? uni(0, nbufs - 1) : -1, uni(0, 9) == 0);
        }
    }
}

TEST(MemPlan, RandomProgramsAreDisjoint)
{
    for (unsigned seed = 1; seed <= 200; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        Program p;
        random_program(p, seed);
        tp_memplan(&p.ir);
        EXPECT_EQ(verify(p.ir), "");
        check_plan(p);
        EXPECT_EQ(p.ir.arena_bytes % 256, 0);
        if (::testing::Test::HasFailure())
            break;   // one seed's failures are enough to read
    }
}

TEST(MemPlan, IsDeterministic)
{
    Program a, b;
    random_program(a, 77);
    random_program(b, 77);
    tp_memplan(&a.ir);
    tp_memplan(&b.ir);
    ASSERT_EQ(a.ir.nbufs, b.ir.nbufs);
    EXPECT_EQ(a.ir.arena_bytes, b.ir.arena_bytes);
    for (int i = 0; i < a.ir.nbufs; i++)
        EXPECT_EQ(a.off(i), b.off(i));
}

// ---- the rules one at a time ----

TEST(MemPlan, ChainNeedsExactlyTwoBuffers)
{
    const int64_t S = 4096;
    Program p;
    int n = 12;
    for (int i = 0; i <= n; i++)
        p.buf(S);
    p.ir.bufs[0].input = true;
    p.ir.bufs[n].output = true;
    for (int i = 0; i < n; i++)
        p.op({i}, i + 1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    int64_t peak = check_plan(p);
    EXPECT_EQ(peak, 2 * S);
    EXPECT_EQ(p.ir.arena_bytes, peak);
}

TEST(MemPlan, InPlaceOpIsOneBuffer)
{
    Program p;
    int a = p.buf(1024), b = p.buf(1024);
    p.op({}, a);
    p.op({a}, a);          // e.g. an all-reduce in place
    p.op({a}, b);
    p.op({b}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    EXPECT_EQ(p.ir.arena_bytes, 2048);
}

TEST(MemPlan, OffsetsAndArenaAreAligned)
{
    Program p;
    int a = p.buf(100), b = p.buf(4), c = p.buf(300, TP_BF16);
    p.op({}, a);
    p.op({a}, b);
    p.op({a, b}, c);
    p.op({c}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    for (int x : {a, b, c})
        EXPECT_EQ(p.off(x) % 256, 0);
    EXPECT_EQ(p.ir.arena_bytes, 3 * 256 + 256);   // a, b, c live at op 2; c rounds to 512
}

TEST(MemPlan, ViewsShareTheRootAndKeepItAlive)
{
    const int64_t S = 4096;
    Program p;
    int a = p.buf(S), b = p.buf(S), c = p.buf(S), d = p.buf(S);
    int v = p.buf(S, TP_F32, a), w = p.buf(S, TP_F32, v);   // w -> v -> a
    p.op({}, a);       // t1
    p.op({a}, b);      // t2: a's own last read
    p.op({b}, c);      // t3: c would fit where a was, if a were dead
    p.op({w, c}, d);   // t4: a read through a view of a view
    p.op({d}, -1);     // t5
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    EXPECT_EQ(p.off(v), p.off(a));
    EXPECT_EQ(p.off(w), p.off(a));
    EXPECT_TRUE(disjoint(p.off(a), S, p.off(c), S)) << "a lives to op 3 through w";
    EXPECT_TRUE(disjoint(p.off(a), S, p.off(d), S));
    EXPECT_EQ(p.ir.arena_bytes, 3 * S);   // a, c, d at op 3
}

TEST(MemPlan, ALargerViewGrowsTheRootsBlock)
{
    Program p;
    int a = p.buf(256), v = p.buf(1024, TP_F32, a), b = p.buf(512);
    p.op({}, a);
    p.op({}, b);
    p.op({v, b}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    EXPECT_TRUE(disjoint(p.off(v), 1024, p.off(b), 512));
    EXPECT_EQ(p.ir.arena_bytes, 1536);
}

TEST(MemPlan, DeadOpsAreIgnored)
{
    const int64_t S = 4096;
    Program p;
    int a = p.buf(S), b = p.buf(S), c = p.buf(S), e = p.buf(S);
    p.op({}, a);
    p.op({a}, b);
    p.op({b}, c);
    p.op({a}, e, /*dead=*/true);   // would keep a alive past c's birth
    p.op({c}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    EXPECT_EQ(p.off(e), -1) << "only a dead op writes e: it needs no storage";
    EXPECT_EQ(p.ir.arena_bytes, 2 * S) << "a is dead by the time c is written";
}

TEST(MemPlan, InputsLiveFromTheStartOutputsToTheEnd)
{
    const int64_t S = 4096;
    Program p;
    int in = p.buf(S), x = p.buf(S), y = p.buf(S), out = p.buf(S), unused_in = p.buf(S);
    p.ir.bufs[in].input = p.ir.bufs[unused_in].input = true;
    p.ir.bufs[out].output = true;
    p.op({}, x);       // in is already live here
    p.op({x, in}, out);
    p.op({out}, y);    // out stays live after its last read
    p.op({y}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
    check_plan(p);
    EXPECT_TRUE(disjoint(p.off(in), S, p.off(x), S));
    EXPECT_TRUE(disjoint(p.off(out), S, p.off(y), S));
    EXPECT_GE(p.off(unused_in), 0) << "the runtime fills every input, read or not";
    EXPECT_TRUE(disjoint(p.off(unused_in), S, p.off(in), S));
}

TEST(MemPlan, EmptyProgram)
{
    Program p;
    tp_memplan(&p.ir);
    EXPECT_EQ(p.ir.arena_bytes, 0);
    EXPECT_EQ(verify(p.ir), "");
}

// ---- verify catches broken plans ----

TEST(MemPlanVerify, ReportsOverlap)
{
    Program p;
    int a = p.buf(1024), b = p.buf(1024);
    p.op({}, a);
    p.op({a}, b);
    p.op({b}, -1);
    tp_memplan(&p.ir);
    ASSERT_EQ(verify(p.ir), "");
    p.ir.bufs[b].offset = p.ir.bufs[a].offset + 256;
    std::string e = verify(p.ir);
    EXPECT_NE(e.find("overlap"), std::string::npos) << e;
    EXPECT_NE(e.find("b0"), std::string::npos) << e;
    EXPECT_NE(e.find("b1"), std::string::npos) << e;
}

TEST(MemPlanVerify, ReportsMisplacedViewsMisalignmentAndBadIndices)
{
    Program p;
    int a = p.buf(1024), v = p.buf(1024, TP_F32, a), b = p.buf(1024);
    p.op({}, a);
    p.op({v}, b);
    p.op({b}, -1);
    tp_memplan(&p.ir);
    ASSERT_EQ(verify(p.ir), "");

    int64_t saved = p.ir.bufs[v].offset;
    p.ir.bufs[v].offset = saved + 1024 * 8;
    EXPECT_NE(verify(p.ir).find("view"), std::string::npos) << verify(p.ir);
    p.ir.bufs[v].offset = saved;

    p.ir.bufs[b].offset += 8;
    EXPECT_NE(verify(p.ir).find("offset"), std::string::npos) << verify(p.ir);
    p.ir.bufs[b].offset -= 8;

    p.ir.arena_bytes = 1024;
    EXPECT_NE(verify(p.ir).find("beyond the arena"), std::string::npos) << verify(p.ir);
    tp_memplan(&p.ir);

    p.ir.ops[1].in[0] = 99;
    EXPECT_NE(verify(p.ir).find("outside"), std::string::npos) << verify(p.ir);
    p.ir.ops[1].in[0] = v;

    p.ir.bufs[a].alias_of = v;   // a -> v -> a
    EXPECT_NE(verify(p.ir).find("alias chain"), std::string::npos) << verify(p.ir);
    tp_memplan(&p.ir);           // must not hang on the loop
}

// ---- speed: a Llama-405B-sized program ----

// 126 layers of a Llama block as the lowering records it (norm, q/k/v,
// views, rope, attention, o_proj + all-reduce, residual, MLP + all-reduce),
// with positions and labels live throughout.
void llama_like(Program &p, int layers)
{
    const int64_t H = 2048LL * 16384 * 2, Hl = H / 8, F = 2048LL * 53248 * 2 / 8, KV = 2048LL * 1024 * 2 / 8;
    int ids = p.buf(2048 * 4, TP_I32), labels = p.buf(2048 * 4, TP_I32);
    p.ir.bufs[ids].input = p.ir.bufs[labels].input = true;
    int pos = p.buf(2048 * 4, TP_I32);
    p.op({}, pos);
    int h = p.buf(H);
    p.op({ids}, h);
    int hr = p.buf(H);
    p.op({h}, hr);
    h = hr;
    for (int l = 0; l < layers; l++) {
        int n1s = p.buf(Hl);   // sequence-parallel norm, then the gather
        p.op({h}, n1s);
        int n1 = p.buf(H);
        p.op({n1s}, n1);
        int q = p.buf(Hl), k = p.buf(KV), v = p.buf(KV);
        p.op({n1}, q);
        p.op({n1}, k);
        p.op({n1}, v);
        for (int i = 0; i < 8; i++) {   // the bookkeeping small ops add (masks, scales, casts)
            int t = p.buf(KV / 4 + 256 * i);
            p.op({k}, t);
            p.op({t}, -1);
        }
        int qv = p.buf(Hl, TP_BF16, q), kv = p.buf(KV, TP_BF16, k), vv = p.buf(KV, TP_BF16, v);
        int qr = p.buf(Hl), kr = p.buf(KV);
        p.op({qv, pos}, qr);
        p.op({kv, pos}, kr);
        int at = p.buf(Hl);
        p.op({qr, kr, vv}, at);
        int atv = p.buf(Hl, TP_BF16, at);
        int o = p.buf(H);
        p.op({atv}, o);
        p.op({o}, o);   // all-reduce
        int h2 = p.buf(H);
        p.op({h, o}, h2);
        int n2 = p.buf(H);
        p.op({h2}, n2);
        int g = p.buf(F), u = p.buf(F), s = p.buf(F), m = p.buf(F);
        p.op({n2}, g);
        p.op({n2}, u);
        p.op({g}, s);
        for (int i = 0; i < 8; i++) {   // an activation spelled out elementwise
            int t = p.buf(F);
            p.op({s}, t);
            s = t;
        }
        p.op({s, u}, m);
        int d = p.buf(H);
        p.op({m}, d);
        p.op({d}, d);   // all-reduce
        int h3 = p.buf(H);
        p.op({h2, d}, h3);
        h = h3;
    }
    int nf = p.buf(H);
    p.op({h}, nf);
    int logits = p.buf(2048LL * 16032 * 2);
    p.op({nf}, logits);
    p.ir.bufs[logits].output = true;
    int loss = p.buf(4);
    p.op({logits, labels}, loss);
    p.ir.bufs[loss].output = true;
}

// Large programs are planned validly; how fast is a benchmark's question
// (tools/bench_check.sh compile plans the 405B program), not a test's.
TEST(MemPlan, Llama405BSizedProgramIsValid)
{
    Program p;
    llama_like(p, 126);
    EXPECT_GE(p.ir.nbufs, 4500);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
}

TEST(MemPlan, ManyLongLivedBuffersAreValid)
{
    // 5,000 buffers, 100 of them live for the whole program (a real one
    // has a handful: ids, labels, positions): 500,000 overlapping pairs.
    Program p;
    std::vector<int> keep;
    for (int i = 0; i < 100; i++) {
        keep.push_back(p.buf(256 * (1 + i % 7)));
        p.op({}, keep.back());
    }
    int x = p.buf(4096);
    p.op({}, x);
    for (int i = 0; i < 4900; i++) {
        int y = p.buf(4096 + 256 * (i % 5));
        p.op({x}, y);
        x = y;
    }
    for (size_t i = 0; i < keep.size(); i += 4)
        p.op({keep[i], keep[i + 1], keep[i + 2], keep[i + 3]}, -1);
    tp_memplan(&p.ir);
    EXPECT_EQ(verify(p.ir), "");
}

}  // namespace
