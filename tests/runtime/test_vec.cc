// The CPU backend's vectorised loops (runtime/backends/cpu/vec.h): the fp32
// exp against libm's exp in double over a sweep of every float range, the
// specials included; the activations and sums against double references;
// and every ISA copy this CPU runs giving the same bits as the baseline's.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/cpu/vec.h"
}

#include "tests/support/random_vec.h"

namespace {

using tpcc_test::random_vec;

std::vector<const tp_cpu_vec *> variants()
{
    const tp_cpu_vec *list[3];
    int n = tp_cpu_vec_all(list);
    return std::vector<const tp_cpu_vec *>(list, list + n);
}

float from_bits(uint32_t b)
{
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
}

// One unit in the last place of a float near ref (> 0): 2^-149 in the
// denormal range; inf counts as 2^128, one ulp above FLT_MAX's binade.
double ulp_of(double ref)
{
    if (ref < FLT_MIN)
        return std::ldexp(1.0, -149);
    int e;
    std::frexp(ref, &e);
    return std::ldexp(1.0, (e > 128 ? 128 : e) - 24);
}

// The error of got = exp(x) in ulps of the exact value (libm's exp in
// double, 29 bits more than a float holds); NaN in, NaN out is 0.
double exp_ulps(float x, float got)
{
    if (std::isnan(x))
        return std::isnan(got) ? 0.0 : INFINITY;
    const double big = std::ldexp(1.0, 128);
    const double ref = std::fmin(std::exp((double)x), big);
    const double g = std::isinf(got) ? big : (double)got;
    if (std::isnan(got) || got < 0)
        return INFINITY;
    return std::fabs(g - ref) / ulp_of(ref);
}

// The floats the sweep covers, in chunks of a million: every 251st bit
// pattern of all 2^32 (both signs, every exponent, denormals, infinities
// and NaNs), every float in windows around the edges (overflow near 88.72,
// the denormal results from -87.34 down, the rounding to 0 near -103.97, 0,
// 1 and the clamps), and the specials.
std::vector<std::vector<float>> sweep()
{
    std::vector<std::vector<float>> chunks(1);
    auto add = [&](float x) {
        if (chunks.back().size() == (1u << 20))
            chunks.emplace_back();
        chunks.back().push_back(x);
    };
    for (uint64_t b = 0; b < (1ull << 32); b += 251)
        add(from_bits((uint32_t)b));
    for (float centre : {88.72283935546875f, -87.33654475f, -103.972077f, -104.0f, 89.0f, 0.0f, -0.0f, 1.0f, -1.0f})
        for (int i = -20000; i <= 20000; i++) {
            uint32_t b;
            std::memcpy(&b, &centre, sizeof b);
            add(from_bits(b + (uint32_t)i));
        }
    for (float x : {INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, FLT_TRUE_MIN,
                    -FLT_TRUE_MIN, 0.0f, -0.0f, 88.7f, 88.73f, -103.9f, -150.0f, 1e-30f, -1e-30f})
        add(x);
    return chunks;
}

// Measured: 0.990 ulp at worst over all 2^32 floats (x = 70.403). The
// bound holds the error there: a change to the reduction or the
// polynomial that loses accuracy fails here.
const double kExpUlps = 1.0;

TEST(CpuVec, ExpWithinOneUlpOfLibmOverEveryFloatRange)
{
    const std::vector<std::vector<float>> chunks = sweep();
    for (const tp_cpu_vec *vec : variants()) {
        double worst = 0.0;
        float worst_x = 0.0f;
        std::vector<float> got;
        for (const std::vector<float> &xs : chunks) {
            got.resize(xs.size());
            vec->exp_sum(got.data(), xs.data(), (int64_t)xs.size(), 0.0f); // x - 0 = x, NaN and -0 included
            for (size_t i = 0; i < xs.size(); i++) {
                double err = exp_ulps(xs[i], got[i]);
                if (err > worst) {
                    worst = err;
                    worst_x = xs[i];
                }
            }
        }
        EXPECT_LE(worst, kExpUlps) << vec->isa << ": exp(" << worst_x << ") is " << worst << " ulp off";
        // the specials exactly, as expf gives them
        const float specials[] = {-INFINITY, INFINITY, -200.0f, 200.0f, 0.0f, -0.0f, NAN};
        float out[7];
        vec->exp_sum(out, specials, 7, 0.0f);
        EXPECT_EQ(out[0], 0.0f) << vec->isa;
        EXPECT_EQ(out[1], INFINITY) << vec->isa;
        EXPECT_EQ(out[2], 0.0f) << vec->isa;
        EXPECT_EQ(out[3], INFINITY) << vec->isa;
        EXPECT_EQ(out[4], 1.0f) << vec->isa;
        EXPECT_EQ(out[5], 1.0f) << vec->isa;
        EXPECT_TRUE(std::isnan(out[6])) << vec->isa;
        // a denormal result, rounded as a denormal: e^-100 = 3.72e-44, 26.6 ulps of 2^-149
        float tiny = -100.0f, e;
        vec->exp_sum(&e, &tiny, 1, 0.0f);
        EXPECT_LE(std::fabs((double)e - std::exp(-100.0)), std::ldexp(1.0, -149)) << vec->isa;
    }
}

// The activations in double, from libm; gelu_new as x sigmoid(2u), equal
// to 0.5 x (1 + tanh(u)), whose 1 + tanh(u) cancels in double for x << 0
// (13 digits lost at x = -8).
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_tanh_ref(double x)
{
    return x / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double silu_grad_ref(double x)
{
    double s = 1.0 / (1.0 + std::exp(-x));
    return s * (1.0 + x * (1.0 - s));
}
double gelu_tanh_grad_ref(double x)
{
    const double kc = 0.7978845608028654;
    double th = std::tanh(kc * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kc * (1.0 + 3.0 * 0.044715 * x * x);
}

// The forward: |got - ref| <= 2.5e-7 |ref|: the exp's 1 ulp (1.2e-7
// relative at most) weighs at most 1 in x / (1 + e), plus the rounding to
// float (6e-8). The gradients: plus 2.5e-7 |dy|, as the sigmoid's error
// is absolute where the derivative crosses 0 (silu' at x = -1.28: 1 +
// x (1 - s) cancels), where the old double-exp kernels were relatively
// exact; the derivatives are at most 1.13 in magnitude. And 1e-37 for
// results in or below fp32's denormals, whose e^x holds few digits.
void expect_close(const std::string &what, const std::vector<float> &x, const std::vector<float> &got,
                  double (*ref)(double), const std::vector<float> *dy = nullptr)
{
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; i++) {
        double r = ref(x[i]) * (dy ? (double)(*dy)[i] : 1.0);
        if (!(std::fabs(got[i] - r) <= 2.5e-7 * std::fabs(r) + (dy ? 2.5e-7 * std::fabs((*dy)[i]) : 0.0) + 1e-37)) {
            ADD_FAILURE() << what << "(" << x[i] << ") = " << got[i] << ", reference " << r;
            bad++;
        }
    }
}

TEST(CpuVec, ActivationsMatchTheDoubleReference)
{
    // wide enough for the saturated tails and the overflow of e^-x
    std::vector<float> x = random_vec(5001, 11, -30.0f, 30.0f);
    for (float s : {0.0f, -0.0f, 1e-20f, -1e-20f, 100.0f, -100.0f, 1e4f, -1e4f})
        x.push_back(s);
    const std::vector<float> dy = random_vec(x.size(), 12);
    for (const tp_cpu_vec *vec : variants()) {
        const int64_t n = (int64_t)x.size();
        std::vector<float> out(x.size());
        vec->silu(out.data(), x.data(), n);
        expect_close(std::string(vec->isa) + " silu", x, out, silu_ref);
        vec->gelu_tanh(out.data(), x.data(), n);
        expect_close(std::string(vec->isa) + " gelu_tanh", x, out, gelu_tanh_ref);
        vec->silu_grad(out.data(), x.data(), dy.data(), n);
        expect_close(std::string(vec->isa) + " silu_grad", x, out, silu_grad_ref, &dy);
        vec->gelu_tanh_grad(out.data(), x.data(), dy.data(), n);
        expect_close(std::string(vec->isa) + " gelu_tanh_grad", x, out, gelu_tanh_grad_ref, &dy);
    }
}

TEST(CpuVec, SumsMatchTheDoubleReference)
{
    const std::vector<float> x = random_vec(32003, 21, -8.0f, 3.0f), y = random_vec(32003, 22);
    const int64_t n = (int64_t)x.size();
    double max = -INFINITY, sum = 0.0, sq = 0.0, sumexp = 0.0, dot = 0.0;
    for (float v : x)
        max = std::fmax(max, v);
    for (size_t j = 0; j < x.size(); j++) {
        sum += x[j];
        sq += ((double)x[j] - 0.25) * ((double)x[j] - 0.25);
        sumexp += std::exp((double)x[j] - max);
        dot += std::exp((double)x[j] - max) * y[j];
    }
    for (const tp_cpu_vec *vec : variants()) {
        EXPECT_EQ(vec->max(x.data(), n), (float)max) << vec->isa;
        EXPECT_EQ(vec->max(x.data(), 0), -INFINITY) << vec->isa;
        EXPECT_NEAR(vec->sum(x.data(), n), sum, 1e-9 * std::fabs(sum) + 1e-9) << vec->isa;
        EXPECT_NEAR(vec->sum_squares(x.data(), n, 0.25), sq, 1e-12 * sq) << vec->isa;
        // each fp32 exp within 1 ulp (6e-8): so is the sum of positive terms
        EXPECT_NEAR(vec->exp_sum(nullptr, x.data(), n, (float)max), sumexp, 6e-8 * sumexp) << vec->isa;
        double d = 0.0, s = vec->exp_dot(x.data(), y.data(), n, (float)max, &d);
        EXPECT_NEAR(s, sumexp, 6e-8 * sumexp) << vec->isa;
        EXPECT_NEAR(d, dot, 6e-8 * sumexp) << vec->isa;
    }
}

// Every copy (AVX-512, AVX2, baseline: those this CPU runs) gives the
// baseline's bits, for lengths that leave a tail and in place; on a CPU
// with only the baseline this compares it with itself.
TEST(CpuVec, EveryIsaGivesTheSameBits)
{
    const std::vector<const tp_cpu_vec *> all = variants();
    const tp_cpu_vec *base = all.back();
    ASSERT_EQ(std::string(base->isa), "baseline");
    const std::vector<float> x = random_vec(4099, 31, -40.0f, 40.0f), y = random_vec(4099, 32);
    for (int64_t n : {(int64_t)0, (int64_t)1, (int64_t)15, (int64_t)16, (int64_t)17, (int64_t)4099}) {
        auto same = [&](const char *what, const std::vector<float> &a, const std::vector<float> &b) {
            // bit for bit (NaNs included); an empty vector's data() may be null,
            // which memcmp must never see
            ASSERT_EQ(a.size(), b.size()) << what;
            EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
                << what << " n=" << n;
        };
        for (const tp_cpu_vec *vec : all) {
            std::vector<float> o1(n), o2(n), in_place(x.begin(), x.begin() + n);
            vec->silu(o1.data(), x.data(), n);
            base->silu(o2.data(), x.data(), n);
            same((std::string(vec->isa) + " silu").c_str(), o1, o2);
            vec->silu(in_place.data(), in_place.data(), n);
            same((std::string(vec->isa) + " silu in place").c_str(), in_place, o2);
            vec->gelu_tanh(o1.data(), x.data(), n);
            base->gelu_tanh(o2.data(), x.data(), n);
            same((std::string(vec->isa) + " gelu_tanh").c_str(), o1, o2);
            vec->silu_grad(o1.data(), x.data(), y.data(), n);
            base->silu_grad(o2.data(), x.data(), y.data(), n);
            same((std::string(vec->isa) + " silu_grad").c_str(), o1, o2);
            vec->gelu_tanh_grad(o1.data(), x.data(), y.data(), n);
            base->gelu_tanh_grad(o2.data(), x.data(), y.data(), n);
            same((std::string(vec->isa) + " gelu_tanh_grad").c_str(), o1, o2);
            const double s1 = vec->exp_sum(o1.data(), x.data(), n, 3.5f), s2 = base->exp_sum(o2.data(), x.data(), n, 3.5f);
            same((std::string(vec->isa) + " exp_sum").c_str(), o1, o2);
            EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0) << vec->isa << " exp_sum's sum n=" << n;
            double d1 = 0, d2 = 0;
            const double e1 = vec->exp_dot(x.data(), y.data(), n, 3.5f, &d1);
            const double e2 = base->exp_dot(x.data(), y.data(), n, 3.5f, &d2);
            EXPECT_TRUE(e1 == e2 && d1 == d2) << vec->isa << " exp_dot n=" << n;
            vec->add_scaled(o1.data(), x.data(), y.data(), n, 0.37f);
            base->add_scaled(o2.data(), x.data(), y.data(), n, 0.37f);
            same((std::string(vec->isa) + " add_scaled").c_str(), o1, o2);
            std::vector<float> sum(n);
            for (int64_t j = 0; j < n; j++)
                sum[j] = x[j] + y[j];
            vec->add_scaled(in_place.data(), x.data(), y.data(), n, 1.0f);
            same((std::string(vec->isa) + " add_scaled by 1: x + y").c_str(), in_place, sum);
            in_place.assign(x.begin(), x.begin() + n);
            vec->add_scaled(in_place.data(), in_place.data(), y.data(), n, 0.37f);
            same((std::string(vec->isa) + " add_scaled in place").c_str(), in_place, o2);
            EXPECT_EQ(vec->max(x.data(), n), base->max(x.data(), n)) << vec->isa;
            EXPECT_EQ(vec->sum(x.data(), n), base->sum(x.data(), n)) << vec->isa;
            EXPECT_EQ(vec->sum_squares(x.data(), n, 0.5), base->sum_squares(x.data(), n, 0.5)) << vec->isa;
            for (bool unit_offset : {false, true}) {
                vec->norm_row(o1.data(), x.data(), y.data(), nullptr, n, 0.25, 1.5, unit_offset);
                base->norm_row(o2.data(), x.data(), y.data(), nullptr, n, 0.25, 1.5, unit_offset);
                same((std::string(vec->isa) + " norm_row").c_str(), o1, o2);
            }
            vec->norm_row(o1.data(), x.data(), y.data(), y.data(), n, 0.25, 1.5, false);
            base->norm_row(o2.data(), x.data(), y.data(), y.data(), n, 0.25, 1.5, false);
            same((std::string(vec->isa) + " norm_row with a bias").c_str(), o1, o2);
        }
    }
}

TEST(CpuVec, HostRunsTheWidestCopy)
{
    EXPECT_EQ(tp_cpu_vec_host(), variants().front());
}

} // namespace
