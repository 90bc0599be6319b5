/* vec_loops.h: the loops of vec.h, included by vec.c once per ISA level
 * with VEC_FN(name) naming this level's copy and VEC_TARGET its target
 * attribute. Elementwise loops go through a block of VEC_LANES floats on
 * the stack (all loads, then all stores) so that out may equal x without
 * an alias check that would keep the compiler from vectorising; sums keep
 * VEC_LANES partial sums (vec.h). The tails run the same element
 * functions one at a time. No include guard: meant to be included more
 * than once. */

/* out[i] = f(x[i]) over [0, n), f an element function of vec.c */
#define VEC_MAP(f, out, x, n)                                                                                         \
    do {                                                                                                              \
        int64_t i_ = 0;                                                                                               \
        for (; i_ + VEC_LANES <= (n); i_ += VEC_LANES) {                                                              \
            float t_[VEC_LANES];                                                                                      \
            for (int l_ = 0; l_ < VEC_LANES; l_++)                                                                    \
                t_[l_] = f((x)[i_ + l_]);                                                                             \
            memcpy((out) + i_, t_, sizeof t_);                                                                        \
        }                                                                                                             \
        for (; i_ < (n); i_++)                                                                                        \
            (out)[i_] = f((x)[i_]);                                                                                   \
    } while (0)

/* dx[i] = dy[i] * f'(x[i]), f' an element function of vec.c */
#define VEC_MAP_GRAD(fgrad, dx, x, dy, n)                                                                             \
    do {                                                                                                              \
        int64_t i_ = 0;                                                                                               \
        for (; i_ + VEC_LANES <= (n); i_ += VEC_LANES) {                                                              \
            float t_[VEC_LANES];                                                                                      \
            for (int l_ = 0; l_ < VEC_LANES; l_++)                                                                    \
                t_[l_] = fgrad((x)[i_ + l_], (dy)[i_ + l_]);                                                          \
            memcpy((dx) + i_, t_, sizeof t_);                                                                         \
        }                                                                                                             \
        for (; i_ < (n); i_++)                                                                                        \
            (dx)[i_] = fgrad((x)[i_], (dy)[i_]);                                                                      \
    } while (0)

VEC_TARGET static void VEC_FN(silu)(float *out, const float *x, int64_t n) { VEC_MAP(silu1, out, x, n); }

VEC_TARGET static void VEC_FN(gelu_tanh)(float *out, const float *x, int64_t n) { VEC_MAP(gelu_tanh1, out, x, n); }

VEC_TARGET static void VEC_FN(silu_grad)(float *dx, const float *x, const float *dy, int64_t n)
{
    VEC_MAP_GRAD(silu_grad1, dx, x, dy, n);
}

VEC_TARGET static void VEC_FN(gelu_tanh_grad)(float *dx, const float *x, const float *dy, int64_t n)
{
    VEC_MAP_GRAD(gelu_tanh_grad1, dx, x, dy, n);
}

VEC_TARGET static void VEC_FN(add_scaled)(float *out, const float *x, const float *b, int64_t n, float s)
{
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        float t[VEC_LANES];
        for (int l = 0; l < VEC_LANES; l++)
            t[l] = x[j + l] + s * b[j + l];
        memcpy(out + j, t, sizeof t);
    }
    for (; j < n; j++)
        out[j] = x[j] + s * b[j];
}

#undef VEC_MAP
#undef VEC_MAP_GRAD

VEC_TARGET static float VEC_FN(max)(const float *x, int64_t n)
{
    float m[VEC_LANES];
    for (int l = 0; l < VEC_LANES; l++)
        m[l] = -INFINITY;
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES)
        for (int l = 0; l < VEC_LANES; l++)
            m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
    for (int l = 0; j < n; j++, l++)
        m[l] = x[j] > m[l] ? x[j] : m[l];
    float mx = -INFINITY;
    for (int l = 0; l < VEC_LANES; l++)
        mx = m[l] > mx ? m[l] : mx;
    return mx;
}

VEC_TARGET static double VEC_FN(exp_sum)(float *out, const float *x, int64_t n, float shift)
{
    lanes acc = {{0}, {0}};
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        float e[VEC_LANES];
        double ed[VEC_LANES];
        for (int l = 0; l < VEC_LANES; l++) {
            e[l] = tp_vexpf(x[j + l] - shift);
            ed[l] = e[l];
        }
        lanes_add(&acc, ed);
        if (out)
            memcpy(out + j, e, sizeof e);
    }
    for (int l = 0; j < n; j++, l++) {
        const float e = tp_vexpf(x[j] - shift);
        lane_add(&acc, l, e);
        if (out)
            out[j] = e;
    }
    return lanes_total(&acc);
}

VEC_TARGET static double VEC_FN(exp_dot)(const float *x, const float *y, int64_t n, float shift, double *dot)
{
    lanes acc = {{0}, {0}}, accd = {{0}, {0}};
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        double e[VEC_LANES], ey[VEC_LANES];
        for (int l = 0; l < VEC_LANES; l++) {
            e[l] = tp_vexpf(x[j + l] - shift);
            ey[l] = e[l] * y[j + l];
        }
        lanes_add(&acc, e);
        lanes_add(&accd, ey);
    }
    for (int l = 0; j < n; j++, l++) {
        const double e = tp_vexpf(x[j] - shift);
        lane_add(&acc, l, e);
        lane_add(&accd, l, e * y[j]);
    }
    *dot = lanes_total(&accd);
    return lanes_total(&acc);
}

VEC_TARGET static double VEC_FN(sum)(const float *x, int64_t n)
{
    lanes acc = {{0}, {0}};
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        double v[VEC_LANES];
        for (int l = 0; l < VEC_LANES; l++)
            v[l] = x[j + l];
        lanes_add(&acc, v);
    }
    for (int l = 0; j < n; j++, l++)
        lane_add(&acc, l, x[j]);
    return lanes_total(&acc);
}

VEC_TARGET static double VEC_FN(sum_squares)(const float *x, int64_t n, double mean)
{
    lanes acc = {{0}, {0}};
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        double v[VEC_LANES];
        for (int l = 0; l < VEC_LANES; l++) {
            const double dlt = (double)x[j + l] - mean;
            v[l] = dlt * dlt;
        }
        lanes_add(&acc, v);
    }
    for (int l = 0; j < n; j++, l++) {
        const double dlt = (double)x[j] - mean;
        lane_add(&acc, l, dlt * dlt);
    }
    return lanes_total(&acc);
}

VEC_TARGET static void VEC_FN(norm_row)(float *out, const float *x, const float *w, const float *b, int64_t n,
                                        double mean, double inv, bool unit_offset)
{
    int64_t j = 0;
    for (; j + VEC_LANES <= n; j += VEC_LANES) {
        float t[VEC_LANES];
        if (b)
            for (int l = 0; l < VEC_LANES; l++)
                t[l] = norm_bias1(x[j + l], w[j + l], b[j + l], mean, inv);
        else
            for (int l = 0; l < VEC_LANES; l++)
                t[l] = norm1(x[j + l], w[j + l], mean, inv, unit_offset);
        memcpy(out + j, t, sizeof t);
    }
    for (; j < n; j++)
        out[j] = b ? norm_bias1(x[j], w[j], b[j], mean, inv) : norm1(x[j], w[j], mean, inv, unit_offset);
}

static const tp_cpu_vec VEC_FN(table) = {
    VEC_ISA,          VEC_FN(silu), VEC_FN(gelu_tanh), VEC_FN(silu_grad), VEC_FN(gelu_tanh_grad),
    VEC_FN(add_scaled),
    VEC_FN(max),      VEC_FN(exp_sum), VEC_FN(exp_dot), VEC_FN(sum),       VEC_FN(sum_squares),
    VEC_FN(norm_row),
};
