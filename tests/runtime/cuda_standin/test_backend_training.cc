// The CUDA backend's training entries (runtime/backends/cuda/backend_cuda.c)
// on the host stand-ins of the CUDA runtime and cuBLAS, the kernels under
// the emulator, against the CPU backend's entries: what the kernel tests
// cannot see — each wrapper's argument order and dtype, the scratch it
// passes, the host's wait in sum_squares, and matmul_tn's cuBLAS call (the
// stand-in checks every operand against its allocation) — in fp32 and
// bf16. The kernels' numerics are test_kernels_grad.cc's; here one case
// each, with the same tolerances. And the table has every kernel of every
// op kind (sched/ops.def's kernels column), forward and training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/gpu.h"
#include "runtime/exec/exec.h"
#include "runtime/exec/kernels_check.h"
#include "tests/support/ce_rule.h"
}
#include "tests/support/random_vec.h"

namespace {

using Vec = std::vector<float>;

using tpcc_test::random_vec;

// bfloat16: the upper half of a float, rounded to nearest even
uint16_t bf16_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

const tp_backend &reference() { return *tp_backend_cpu(); }

// the stand-in device, once per process
void gpu_ready()
{
    static bool ready = false;
    if (ready)
        return;
    char err[512];
    tp_comm host;
    ASSERT_EQ(tp_comm_single(&host), 0);
    ASSERT_EQ(tp_gpu_init(&host, 0, err, sizeof err), 0) << err;
    ready = true;
}

class BackendTraining : public ::testing::TestWithParam<tp_dtype> {
  protected:
    static void SetUpTestSuite() { gpu_ready(); }

    const tp_backend *be() const { return tp_backend_cuda(GetParam()); }
    bool bf16() const { return GetParam() == TP_BF16; }

    // what a kernel of this dtype sees: bf16-rounded for bf16
    Vec stored(Vec v) const
    {
        if (bf16())
            for (float &x : v)
                x = bf16_value(bf16_bits(x));
        return v;
    }

    // device copies of float tensors in the storage dtype, released at the end
    float *device(const Vec &v)
    {
        const size_t esize = bf16() ? 2 : 4;
        void *p = be()->alloc(v.size() * esize + 1);
        EXPECT_NE(p, nullptr);
        if (bf16()) {
            std::vector<uint16_t> h(v.size());
            for (size_t i = 0; i < v.size(); i++)
                h[i] = bf16_bits(v[i]);
            be()->to_device(p, h.data(), h.size() * 2);
        } else {
            be()->to_device(p, v.data(), v.size() * 4);
        }
        held_.push_back(p);
        return static_cast<float *>(p);
    }
    float *device_zeros(size_t n) { return device(Vec(n, 0.0f)); }
    // int32 and float32-only operands, stored as they are
    template <typename E> E *device_raw(const std::vector<E> &v)
    {
        void *p = be()->alloc(v.size() * sizeof(E) + 1);
        be()->to_device(p, v.data(), v.size() * sizeof(E));
        held_.push_back(p);
        return static_cast<E *>(p);
    }
    Vec host(const float *p, size_t n) const
    {
        Vec v(n);
        if (bf16()) {
            std::vector<uint16_t> h(n);
            be()->to_host(h.data(), p, n * 2);
            for (size_t i = 0; i < n; i++)
                v[i] = bf16_value(h[i]);
        } else {
            be()->to_host(v.data(), p, n * 4);
        }
        return v;
    }

    // |got - want| <= atol + rtol |want|, plus 2^-8 relative for bf16's store
    void expect_close(const Vec &got, const Vec &want, double atol, double rtol, const std::string &what) const
    {
        ASSERT_EQ(got.size(), want.size()) << what;
        if (bf16())
            rtol += 1.0 / 256.0;
        int bad = 0;
        for (size_t i = 0; i < got.size() && bad < 5; i++)
            if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
                ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
                bad++;
            }
    }

    void TearDown() override
    {
        for (void *p : held_)
            be()->release(p);
    }

  private:
    std::vector<void *> held_;
};

// out[n, k] = a[m, n]^T . b[m, k] through cuBLAS: ragged sizes, one row,
// and m = 0 (an empty sum: zeros). fp32 sums of up to 70 products.
TEST_P(BackendTraining, HasEveryOpsKernels)
{
    for (int k = 0; k < TP_OP_COUNT; k++)
        EXPECT_EQ(tr_backend_missing_kernel(be(), (tp_op_kind)k), nullptr) << tp_op_names[k];
}

TEST_P(BackendTraining, MatmulTn)
{
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7, 5, 3}, {70, 33, 17}, {1, 1, 9}, {0, 4, 6}}) {
        Vec a = stored(random_vec((size_t)(m * n), 1)), b = stored(random_vec((size_t)(m * k), 2));
        Vec want((size_t)(n * k));
        reference().matmul_tn(want.data(), a.data(), b.data(), m, n, k);
        float *out = device(Vec((size_t)(n * k), 7.0f));
        be()->matmul_tn(out, device(a), device(b), m, n, k);
        expect_close(host(out, want.size()), want, 1e-6, 1e-5,
                     "matmul_tn " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
    }
}

// Every other entry once, through the table, against the reference's.
TEST_P(BackendTraining, EachEntryMatchesTheReference)
{
    const tp_backend &r = reference();
    const int64_t m = 12, n = 40;
    Vec x = stored(random_vec((size_t)(m * n), 3, -2.0f, 2.0f)), dy = stored(random_vec((size_t)(m * n), 4));
    Vec w = stored(random_vec((size_t)n, 5, 0.5f, 1.5f));
    float *dx_ = device(x), *ddy = device(dy), *dw_ = device(w), *out = device_zeros((size_t)(m * n));
    Vec want((size_t)(m * n));

    r.sum_rows(want.data(), x.data(), m, n, 0.25f);
    be()->sum_rows(out, dx_, m, n, 0.25f);
    expect_close(host(out, (size_t)n), Vec(want.begin(), want.begin() + n), 1e-5, 1e-5, "sum_rows");
    r.rmsnorm_dx(want.data(), x.data(), dy.data(), w.data(), m, n, 1e-5f, true, nullptr);
    be()->rmsnorm_dx(out, dx_, ddy, dw_, m, n, 1e-5f, true, nullptr);
    expect_close(host(out, want.size()), want, 2e-5, 1e-5, "rmsnorm_dx");
    r.rmsnorm_dw(want.data(), x.data(), dy.data(), m, n, 1e-5f);
    be()->rmsnorm_dw(out, dx_, ddy, m, n, 1e-5f);
    expect_close(host(out, (size_t)n), Vec(want.begin(), want.begin() + n), 1e-4, 1e-5, "rmsnorm_dw");
    r.layernorm_dx(want.data(), x.data(), dy.data(), w.data(), m, n, 1e-5f);
    be()->layernorm_dx(out, dx_, ddy, dw_, m, n, 1e-5f);
    expect_close(host(out, want.size()), want, 5e-5, 1e-5, "layernorm_dx");
    r.layernorm_dw(want.data(), x.data(), dy.data(), m, n, 1e-5f);
    be()->layernorm_dw(out, dx_, ddy, m, n, 1e-5f);
    expect_close(host(out, (size_t)n), Vec(want.begin(), want.begin() + n), 1e-4, 1e-5, "layernorm_dw");
    for (tp_unary op : {TP_UNARY_SILU, TP_UNARY_GELU_TANH, TP_UNARY_RELU, TP_UNARY_GELU_ERF}) {
        r.unary_grad(op, want.data(), x.data(), dy.data(), m * n);
        be()->unary_grad(op, out, dx_, ddy, m * n);
        expect_close(host(out, want.size()), want, 1e-6, 1e-5, "unary_grad " + std::to_string(op));
    }
    r.softcap_grad(want.data(), x.data(), dy.data(), m * n, 1.5f);
    be()->softcap_grad(out, dx_, ddy, m * n, 1.5f);
    expect_close(host(out, want.size()), want, 1e-6, 1e-5, "softcap_grad");
    Vec want_db(want.size());
    float *out_db = device_zeros(want.size());
    r.silu_mul_grad(want.data(), want_db.data(), x.data(), dy.data(), x.data(), m * n);
    be()->silu_mul_grad(out, out_db, dx_, ddy, dx_, m * n);
    expect_close(host(out, want.size()), want, 1e-6, 2e-5, "silu_mul_grad da");
    expect_close(host(out_db, want.size()), want_db, 1e-6, 2e-5, "silu_mul_grad db");
    r.silu_mul(want.data(), x.data(), dy.data(), m * n);
    be()->silu_mul(out, dx_, ddy, m * n);
    expect_close(host(out, want.size()), want, 1e-6, 1e-5, "silu_mul");
    const int64_t shape[] = {m, n + 5};
    Vec wide((size_t)(m * (n + 5)));
    float *dwide = device_zeros(wide.size());
    r.narrow_grad(wide.data(), x.data(), shape, 2, 1, 3, n);
    be()->narrow_grad(dwide, dx_, shape, 2, 1, 3, n);
    expect_close(host(dwide, wide.size()), wide, 0, 0, "narrow_grad");

    // the embedding's rows: m tokens over 5 ids, masked to rows [2, 5)
    std::vector<int32_t> ids((size_t)m);
    for (size_t i = 0; i < ids.size(); i++)
        ids[i] = (int32_t)(i * 3 % 5);
    int32_t *dids = device_raw(ids);
    r.embedding_grad(want.data(), ids.data(), dy.data(), m, 3, n, 2, true);
    be()->embedding_grad(out, dids, ddy, m, 3, n, 2, true);
    expect_close(host(out, (size_t)(3 * n)), Vec(want.begin(), want.begin() + 3 * n), 1e-6, 1e-6, "embedding_grad");

    // logits [2, 6, 40] with 37 real columns, labels with an ignored one
    std::vector<int32_t> labels = {3, 1, 36, -100, 7, 0, 9, 9, 2, 30, 11, 5};
    int32_t *dlabels = device_raw(labels);
    r.cross_entropy_grad(want.data(), x.data(), labels.data(), 2, 6, n, 37, kHfLoss);
    be()->cross_entropy_grad(out, dx_, dlabels, 2, 6, n, 37, kHfLoss);
    expect_close(host(out, want.size()), want, 1e-8, 1e-5, "cross_entropy_grad");
    Vec mx((size_t)m), sum((size_t)m);
    for (int64_t i = 0; i < m; i++) {
        mx[(size_t)i] = *std::max_element(x.begin() + i * n, x.begin() + i * n + 37);
        double s = 0.0;
        for (int64_t c = 0; c < 37; c++)
            s += std::exp((double)x[(size_t)(i * n + c)] - mx[(size_t)i]);
        sum[(size_t)i] = (float)s;
    }
    r.ce_grad(want.data(), x.data(), mx.data(), sum.data(), labels.data(), 2, 6, n, 20, 37, kHfLoss);
    be()->ce_grad(out, dx_, device_raw(mx), device_raw(sum), dlabels, 2, 6, n, 20, 37, kHfLoss);
    expect_close(host(out, want.size()), want, 1e-8, 1e-5, "ce_grad");

    // AdamW's step 2 from a state after step 1, float32 m and v whatever
    // the dtype, the gradient halved by clipping's factor (by the
    // backend; for the reference, on the host): fp32 weights in place (a
    // part without a master: an fp32 backend's), then fp32 master
    // weights, w becoming the master stored (bf16: rounded to nearest
    // even)
    const tp_adamw_step st = {3e-3, 0.9, 0.999, 1e-8, 0.01, 2};
    Vec half = dy;
    for (float &g : half)
        g *= 0.5f;
    const auto reference_step = [&](float *fp32_w, float *mom1, float *mom2) {
        const tp_adamw_part part = {nullptr, fp32_w, mom1, mom2, half.data(), m * n, true};
        r.adamw(&part, 1, 1.0f, &st);
    };
    if (!bf16()) {
        Vec wv = x, mv = random_vec((size_t)(m * n), 6, -0.01f, 0.01f), vv = random_vec((size_t)(m * n), 7, 0.0f, 1e-4f);
        float *dwv = device(wv), *dmv = device_raw(mv), *dvv = device_raw(vv);
        reference_step(wv.data(), mv.data(), vv.data());
        const tp_adamw_part part = {nullptr, dwv, dmv, dvv, ddy, m * n, true};
        be()->adamw(&part, 1, 0.5f, &st);
        expect_close(host(dwv, wv.size()), wv, 1e-6, 1e-6, "adamw w");
        expect_close(host(dmv, mv.size()), mv, 1e-8, 1e-6, "adamw m");
        expect_close(host(dvv, vv.size()), vv, 1e-10, 1e-6, "adamw v");
    }
    Vec master = random_vec((size_t)(m * n), 13), mm = random_vec(master.size(), 6, -0.01f, 0.01f);
    Vec mvv = random_vec(master.size(), 7, 0.0f, 1e-4f);
    float *dmaster = device_raw(master), *dmm = device_raw(mm), *dmvv = device_raw(mvv), *dw = device(master);
    reference_step(master.data(), mm.data(), mvv.data());
    const tp_adamw_part part = {dmaster, dw, dmm, dmvv, ddy, m * n, true};
    be()->adamw(&part, 1, 0.5f, &st);
    Vec got_master(master.size()), got_m(master.size()), got_v(master.size());
    be()->to_host(got_master.data(), dmaster, master.size() * 4);
    be()->to_host(got_m.data(), dmm, master.size() * 4);
    be()->to_host(got_v.data(), dmvv, master.size() * 4);
    for (size_t i = 0; i < master.size(); i++) {
        ASSERT_NEAR(got_master[i], master[i], 1e-6 + 1e-6 * std::fabs(master[i])) << "adamw master " << i;
        ASSERT_NEAR(got_m[i], mm[i], 1e-8 + 1e-6 * std::fabs(mm[i])) << "adamw (master) m " << i;
        ASSERT_NEAR(got_v[i], mvv[i], 1e-10 + 1e-6 * std::fabs(mvv[i])) << "adamw (master) v " << i;
    }
    const Vec w_got = host(dw, master.size()), w_want = stored(got_master);
    EXPECT_TRUE(w_got == w_want) << "adamw: w is the master in the storage dtype";

    const tp_run run = {dx_, m * n}, host_run = {x.data(), m * n};
    const double ss = be()->sum_squares(&run, 1), want_ss = r.sum_squares(&host_run, 1);
    EXPECT_NEAR(ss, want_ss, 1e-12 * want_ss) << "sum_squares";
}

// q, k, v [1, 11, h, 24] with GQA (4 query heads over 2 kv heads), capped
// scores; dq, dk and dv in one call through the table, the scratch growing with the
// largest request (a first call with a shorter sequence).
TEST_P(BackendTraining, AttentionGrad)
{
    const int64_t b = 1, h = 4, g = 2, d = 24;
    for (int64_t s : {3, 11}) {
        Vec q = stored(random_vec((size_t)(b * s * h * d), 8)), k = stored(random_vec((size_t)(b * s * g * d), 9));
        Vec v = stored(random_vec(k.size(), 10)), dy = stored(random_vec(q.size(), 11));
        float *dq = device(q), *dk = device(k), *dv = device(v), *ddy = device(dy);
        // the forward the gradient reads: the backend's, which the
        // reference's backward reads too
        float *dev_o = device_zeros(q.size()), *dev_lse = device_raw(Vec((size_t)(b * h * s), 0.0f));
        be()->attention(dev_o, dev_lse, dq, dk, dv, b, s, h, g, d, 0.3, 2.0, nullptr, nullptr);
        Vec o = host(dev_o, q.size()), lse((size_t)(b * h * s));
        be()->to_host(lse.data(), dev_lse, lse.size() * sizeof(float));
        std::vector<Vec> want = {Vec(q.size()), Vec(k.size()), Vec(k.size())};
        reference().attention_grad(want[0].data(), want[1].data(), want[2].data(), q.data(), k.data(), v.data(),
                                   dy.data(), o.data(), lse.data(), b, s, h, g, d, 0.3, 2.0, nullptr, nullptr);
        float *out[3] = {device_zeros(q.size()), device_zeros(k.size()), device_zeros(k.size())};
        be()->attention_grad(out[0], out[1], out[2], dq, dk, dv, ddy, dev_o, dev_lse, b, s, h, g, d, 0.3, 2.0, nullptr, nullptr);
        for (int which = 0; which < 3; which++)
            expect_close(host(out[which], want[which].size()), want[which], 1e-5, 1e-5,
                         "attention_grad " + std::to_string(which) + " s " + std::to_string(s));
    }
}

// One training step (tpcc --train, tp 1) through the executor: the forward
// and every backward op on the CUDA backend, each weight's gradient against
// the CPU backend's on the same weights and tokens. Llama (RMSNorm, SiLU,
// RoPE, GQA), GPT-2 in HF's layout (LayerNorm, tanh GELU, Conv1D, the
// fused c_attn's narrows, biases, learned positions, vocab-parallel loss)
// and Gemma 2 (soft-capped scores and logits, (1 + w) norms). fp32 here,
// where the CPU computes the same step; bf16 training is compared with
// fp32 training end to end (test_train_bf16.cc). Tolerance relative
// to each gradient's largest entry: 1e-4 (fp32 sums in other orders;
// measured at most 1.2e-6, Gemma 2).
std::vector<Vec> step_gradients(const std::string &sched, const tp_backend *be)
{
    std::vector<Vec> grads;
    char err[1024];
    tr_schedule s;
    if (tr_schedule_load(&s, sched.c_str(), 0, 1, err, sizeof err)) {
        ADD_FAILURE() << err;
        return grads;
    }
    tp_comm comm;
    EXPECT_EQ(tp_comm_single(&comm), 0);
    tr_exec x;
    EXPECT_EQ(tr_exec_init(&x, &s, be, &comm, err, sizeof err), 0) << err;
    Vec w = random_vec((size_t)s.weight_elems, 12, -0.2f, 0.2f);
    tr_exec_write_weights(&x, w.data());
    const tr_buf &ids_buf = s.bufs[s.input_ids];
    std::vector<int32_t> ids((size_t)(ids_buf.shape[0] * ids_buf.shape[1]));
    for (size_t i = 0; i < ids.size(); i++)
        ids[i] = (int32_t)(i * 37 % 256);
    tr_exec_write_buf(&x, s.input_ids, ids.data());
    if (s.labels >= 0 && s.labels != s.input_ids)
        tr_exec_write_buf(&x, s.labels, ids.data());
    EXPECT_EQ(tr_exec_run(&x, err, sizeof err), 0) << err;
    for (int i = 0; i < s.nweights && s.grads; i++) {
        Vec g((size_t)s.weights[i].local_elems);
        tr_exec_read_buf(&x, s.grads[i], g.data());
        grads.push_back(g);
    }
    tr_exec_free(&x);
    tr_schedule_free(&s);
    return grads;
}

std::string compile_training(const std::string &plan)
{
    const std::string out = ::testing::TempDir() + plan + "-train.sched";
    const std::string sizes = plan.rfind("gpt2", 0) == 0 ? " -D positions=32" : " -D kv_heads=4";
    const std::string cmd = std::string(TPCC_BINARY_DIR) + "/tpcc " + TPCC_SOURCE_DIR + "/plans/" + plan +
                            ".plan --train" + sizes + " -D vocab=256 -D hidden=64 -D layers=2 -D heads=8 -D ffn=128 -D seq=16 -D batch=2"
                            " -D tp=1 -o " + out;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
}

class TrainingStep : public ::testing::TestWithParam<std::string> {
  protected:
    static void SetUpTestSuite() { gpu_ready(); }
};

TEST_P(TrainingStep, GradientsMatchTheCpu)
{
    const std::string sched = compile_training(GetParam());
    const std::vector<Vec> want = step_gradients(sched, tp_backend_cpu());
    const std::vector<Vec> got = step_gradients(sched, tp_backend_cuda(TP_F32));
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(want.empty()) << "a training schedule lists every weight's gradient";
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        double top = 0.0, err = 0.0;
        for (size_t j = 0; j < want[i].size(); j++) {
            top = std::max(top, (double)std::fabs(want[i][j]));
            err = std::max(err, (double)std::fabs(got[i][j] - want[i][j]));
        }
        EXPECT_GT(top, 0.0) << "weight " << i << " has a gradient";
        EXPECT_LE(err, 1e-4 * top) << "weight " << i;
        worst = std::max(worst, err / top);
    }
    std::printf("max error, relative to each gradient's largest entry: %.3g\n", worst);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BackendTraining, ::testing::Values(TP_F32, TP_BF16),
                         [](const ::testing::TestParamInfo<tp_dtype> &info) {
                             return std::string(info.param == TP_F32 ? "f32" : "bf16");
                         });

INSTANTIATE_TEST_SUITE_P(Fp32, TrainingStep, ::testing::Values("llama-sp", "gpt2-hf-sp", "gemma2-sp"),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                             std::string name = info.param;
                             std::replace(name.begin(), name.end(), '-', '_');
                             return name;
                         });

} // namespace
