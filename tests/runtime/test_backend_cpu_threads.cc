// Every CPU kernel at 1, 2 and 3 threads (the pool of
// runtime/backends/cpu/pool.h, sized by set_threads as tprun's --threads
// sizes it): the outputs are the same bit for bit. Shapes are chosen so
// that each kernel's work splits (wider than a column block, more rows
// than a part's minimum, several query blocks) and 3 threads put the
// parts' edges elsewhere than 2 do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "tests/support/ce_rule.h"
}

#include "tests/support/random_vec.h"

namespace {

using tpcc_test::random_vec;

const tp_backend *be() { return tp_backend_cpu(); }

// Runs `kernel` (which fills the vector it is given, already sized) at 1,
// 2 and 3 threads and expects the same bytes each time.
void expect_thread_independent(const std::string &what, size_t n, const std::function<void(std::vector<float> &)> &kernel)
{
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
        be()->set_threads(threads);
        std::vector<float> out(n, 12345.0f);
        kernel(out);
        if (threads == 1)
            first = out;
        else
            EXPECT_EQ(std::memcmp(out.data(), first.data(), n * sizeof(float)), 0)
                << what << ": --threads " << threads << " differs from --threads 1";
    }
    be()->set_threads(1);
}

// rows x cols of activations, a [vocab] logits row per token
const int64_t B = 2, S = 150, H = 6, G = 2, D = 32, M = B * S, N = 200, K = 96, V = 300;

std::vector<int32_t> labels(int64_t count, int64_t vocab, int64_t start = 0)
{
    std::vector<int32_t> l(count);
    for (int64_t i = 0; i < count; i++)
        l[i] = i % 17 == 3 ? -100 : int32_t(start + (i * 131 + 7) % vocab);
    return l;
}

TEST(CpuThreads, ForwardKernels)
{
    const auto x = random_vec(M * K, 1), w = random_vec(N * K, 2), bias = random_vec(N, 3), y = random_vec(M * N, 4);
    expect_thread_independent("matmul", M * N, [&](auto &o) { be()->matmul(o.data(), x.data(), w.data(), M, N, K); });
    expect_thread_independent("conv1d", M * N, [&](auto &o) { be()->conv1d(o.data(), x.data(), w.data(), M, N, K); });
    expect_thread_independent("bias_add", M * N,
                              [&](auto &o) { be()->bias_add(o.data(), y.data(), bias.data(), M, N, 0.5f); });
    expect_thread_independent("rmsnorm", M * N,
                              [&](auto &o) { be()->rmsnorm(o.data(), y.data(), bias.data(), M, N, 1e-5f, true); });
    expect_thread_independent("layernorm", M * N, [&](auto &o) {
        be()->layernorm(o.data(), y.data(), bias.data(), bias.data(), M, N, 1e-5f);
    });
    const auto q = random_vec(B * S * H * D, 5), k = random_vec(B * S * G * D, 6), v = random_vec(B * S * G * D, 7);
    std::vector<double> inv_freq(D / 2);
    for (int64_t i = 0; i < D / 2; i++)
        inv_freq[i] = 1.0 / std::pow(10000.0, 2.0 * i / D);
    expect_thread_independent("rope", q.size(), [&](auto &o) {
        be()->rope(o.data(), q.data(), B, S, H, D, D - 8, 3, inv_freq.data(), 1.25, nullptr);
    });
    for (double softcap : {0.0, 5.0})
        expect_thread_independent("attention softcap " + std::to_string(softcap), q.size() + B * H * S, [&](auto &o) {
            be()->attention(o.data(), o.data() + q.size(), q.data(), k.data(), v.data(), B, S, H, G, D, 0.17, softcap,
                            nullptr, nullptr);
        });
    const int64_t n = 3 * 4096 + 5;
    const auto e = random_vec(n, 8, -6.0f, 6.0f), f = random_vec(n, 9);
    for (tp_unary op : {TP_UNARY_SILU, TP_UNARY_GELU_TANH, TP_UNARY_RELU, TP_UNARY_GELU_ERF})
        expect_thread_independent("unary " + std::to_string(op), n,
                                  [&](auto &o) { be()->unary(op, o.data(), e.data(), n); });
    for (tp_binary op : {TP_BINARY_ADD, TP_BINARY_MUL}) {
        expect_thread_independent("binary", n, [&](auto &o) { be()->binary(op, o.data(), e.data(), n, f.data(), n); });
        expect_thread_independent("binary broadcast", M * N,
                                  [&](auto &o) { be()->binary(op, o.data(), y.data(), M * N, bias.data(), N); });
    }
    expect_thread_independent("silu_mul", n, [&](auto &o) { be()->silu_mul(o.data(), e.data(), f.data(), n); });
    expect_thread_independent("scale", n, [&](auto &o) { be()->scale(o.data(), e.data(), n, 0.3f); });
    expect_thread_independent("softcap", n, [&](auto &o) { be()->softcap(o.data(), e.data(), n, 2.0f); });
    // a vocab-parallel shard of V rows from 20: some ids are elsewhere
    std::vector<int32_t> ids = labels(M, V + 40);
    for (int32_t &id : ids)
        id = id < 0 ? 0 : id;
    const auto table = random_vec(V * N, 10);
    expect_thread_independent("embedding", M * N,
                              [&](auto &o) { be()->embedding(o.data(), ids.data(), M, table.data(), V, N, 20, true); });
}

TEST(CpuThreads, LossKernels)
{
    const auto logits = random_vec(M * V, 11, -4.0f, 4.0f);
    const auto l = labels(M, V - 10);
    expect_thread_independent("cross_entropy", 1,
                              [&](auto &o) { be()->cross_entropy(o.data(), logits.data(), l.data(), B, S, V, V - 10, kHfLoss); });
    expect_thread_independent("ce_max", M, [&](auto &o) { be()->ce_max(o.data(), logits.data(), M, V, 100, 350); });
    std::vector<float> mx(M);
    be()->ce_max(mx.data(), logits.data(), M, V, 100, 350);
    expect_thread_independent("ce_sumexp", M,
                              [&](auto &o) { be()->ce_sumexp(o.data(), logits.data(), mx.data(), M, V, 100, 350); });
    std::vector<float> se(M);
    be()->ce_sumexp(se.data(), logits.data(), mx.data(), M, V, 100, 350);
    expect_thread_independent("cross_entropy_grad", M * V, [&](auto &o) {
        be()->cross_entropy_grad(o.data(), logits.data(), l.data(), B, S, V, V - 10, kHfLoss);
    });
    expect_thread_independent("ce_grad", M * V, [&](auto &o) {
        be()->ce_grad(o.data(), logits.data(), mx.data(), se.data(), l.data(), B, S, V, 100, 350, kHfLoss);
    });
}

TEST(CpuThreads, BackwardKernels)
{
    const auto x = random_vec(M * N, 12), dy = random_vec(M * N, 13), w = random_vec(N, 14), a = random_vec(M * K, 15);
    expect_thread_independent("matmul_tn", N * K, [&](auto &o) { be()->matmul_tn(o.data(), dy.data(), a.data(), M, N, K); });
    expect_thread_independent("sum_rows", N, [&](auto &o) { be()->sum_rows(o.data(), dy.data(), M, N, 0.5f); });
    expect_thread_independent("rmsnorm_dx", M * N, [&](auto &o) {
        be()->rmsnorm_dx(o.data(), x.data(), dy.data(), w.data(), M, N, 1e-5f, false, nullptr);
    });
    expect_thread_independent("rmsnorm_dw", N,
                              [&](auto &o) { be()->rmsnorm_dw(o.data(), x.data(), dy.data(), M, N, 1e-5f); });
    expect_thread_independent("layernorm_dx", M * N, [&](auto &o) {
        be()->layernorm_dx(o.data(), x.data(), dy.data(), w.data(), M, N, 1e-5f);
    });
    expect_thread_independent("layernorm_dw", N,
                              [&](auto &o) { be()->layernorm_dw(o.data(), x.data(), dy.data(), M, N, 1e-5f); });
    for (tp_unary op : {TP_UNARY_SILU, TP_UNARY_GELU_TANH, TP_UNARY_RELU, TP_UNARY_GELU_ERF})
        expect_thread_independent("unary_grad " + std::to_string(op), M * N,
                                  [&](auto &o) { be()->unary_grad(op, o.data(), x.data(), dy.data(), M * N); });
    expect_thread_independent("softcap_grad", M * N,
                              [&](auto &o) { be()->softcap_grad(o.data(), x.data(), dy.data(), M * N, 2.0f); });
    const auto up = random_vec(M * N, 20);
    expect_thread_independent("silu_mul_grad", 2 * M * N, [&](auto &o) {
        be()->silu_mul_grad(o.data(), o.data() + M * N, x.data(), up.data(), dy.data(), M * N);
    });
    // attention's three gradients in one call, GQA (3 query heads a kv head), capped and not
    const auto q = random_vec(B * S * H * D, 16), k = random_vec(B * S * G * D, 17), v = random_vec(B * S * G * D, 18),
               dout = random_vec(B * S * H * D, 19);
    const size_t nq = q.size(), nkv = k.size();
    std::vector<float> fwd(nq), lse((size_t)(B * H * S));
    for (double softcap : {0.0, 5.0}) {
        be()->attention(fwd.data(), lse.data(), q.data(), k.data(), v.data(), B, S, H, G, D, 0.17, softcap, nullptr, nullptr);
        expect_thread_independent("attention_grad softcap " + std::to_string(softcap), nq + 2 * nkv, [&](auto &o) {
            be()->attention_grad(o.data(), o.data() + nq, o.data() + nq + nkv, q.data(), k.data(), v.data(),
                                 dout.data(), fwd.data(), lse.data(), B, S, H, G, D, 0.17, softcap, nullptr, nullptr);
        });
    }
    // repeated ids: rows that several tokens add into
    std::vector<int32_t> ids(M);
    for (int64_t t = 0; t < M; t++)
        ids[t] = int32_t((t * 7) % 40);
    expect_thread_independent("embedding_grad", 30 * N, [&](auto &o) {
        be()->embedding_grad(o.data(), ids.data(), dy.data(), M, 30, N, 5, true);
    });
}

TEST(CpuThreads, Optimizer)
{
    const int64_t n = 5 * 4096 + 3;
    const auto g = random_vec(n, 16), w0 = random_vec(n, 17), m0 = random_vec(n, 18), v0 = random_vec(n, 19, 0.0f, 1.0f);
    const tp_adamw_step step = {1e-3, 0.9, 0.95, 1e-8, 0.1, 3};
    expect_thread_independent("adamw", 3 * n, [&](auto &o) {
        std::copy(w0.begin(), w0.end(), o.begin());
        std::copy(m0.begin(), m0.end(), o.begin() + n);
        std::copy(v0.begin(), v0.end(), o.begin() + 2 * n);
        const tp_adamw_part part = {nullptr, o.data(), o.data() + n, o.data() + 2 * n, g.data(), n, true};
        be()->adamw(&part, 1, 0.5f, &step);
    });
}

}  // namespace
