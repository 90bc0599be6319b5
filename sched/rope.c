/* rope.c: RoPE inv_freq as transformers computes it (see rope.h). */
#include <math.h>
#include <string.h>
#include "sched/rope.h"

static const char *const type_names[TP_ROPE_TYPES] = {
    [TP_ROPE_DEFAULT] = "default",
    [TP_ROPE_LINEAR] = "linear",
    [TP_ROPE_DYNAMIC] = "dynamic",
    [TP_ROPE_LLAMA3] = "llama3",
    [TP_ROPE_YARN] = "yarn",
};

const char *tp_rope_type_name(tp_rope_type t)
{
    return t >= 0 && t < TP_ROPE_TYPES ? type_names[t] : "?";
}

int tp_rope_type_parse(const char *name)
{
    for (int t = 0; t < TP_ROPE_TYPES; t++)
        if (!strcmp(type_names[t], name))
            return t;
    return -1;
}

const char *tp_rope_scaling_invalid(const tp_rope_scaling *r)
{
    if (r->type < 0 || r->type >= TP_ROPE_TYPES)
        return "an unknown scaling type";
    if (r->type == TP_ROPE_DEFAULT)
        return NULL;
    if (!(r->factor > 0))
        return "factor must be positive";
    if (r->type != TP_ROPE_LINEAR && r->original_max_positions <= 0)
        return "original_max_position_embeddings must be positive";
    if (r->type == TP_ROPE_LLAMA3 && !(r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor))
        return "llama3 needs 0 < low_freq_factor < high_freq_factor";
    if (r->type == TP_ROPE_YARN && !(r->beta_fast > 0 && r->beta_slow > 0 && r->attention_factor > 0))
        return "yarn needs positive beta_fast, beta_slow and attention_factor";
    return NULL;
}

/* _compute_default_rope_parameters: base^(-2i/d). */
static void default_inv_freq(double base, int64_t d, double *inv_freq)
{
    for (int64_t i = 0; i < d / 2; i++)
        inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / (double)d);
}

/* _compute_dynamic_ntk_parameters: beyond the original context the base
 * grows to theta * (factor * seq / max - (factor - 1))^(d / (d - 2)); up to
 * it, the default frequencies. */
static double dynamic_base(const tp_rope_scaling *r, double theta, int64_t d, int64_t seq_len)
{
    if (seq_len <= r->original_max_positions)
        return theta;
    double grow = r->factor * (double)seq_len / (double)r->original_max_positions - (r->factor - 1.0);
    return theta * pow(grow, (double)d / (double)(d - 2));
}

/* _compute_llama3_parameters: wavelengths longer than original / low_freq_factor
 * are divided by factor, shorter than original / high_freq_factor kept, and
 * those between interpolated smoothly. */
static double llama3_inv_freq(const tp_rope_scaling *r, double inv_freq)
{
    const double old_context = (double)r->original_max_positions;
    const double low_freq_wavelen = old_context / r->low_freq_factor;
    const double high_freq_wavelen = old_context / r->high_freq_factor;
    const double wavelen = 2.0 * M_PI / inv_freq;
    if (wavelen > low_freq_wavelen)
        return inv_freq / r->factor;
    if (wavelen < high_freq_wavelen)
        return inv_freq;
    const double smooth = (old_context / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1.0 - smooth) * inv_freq / r->factor + smooth * inv_freq;
}

double tp_rope_cos_sin_scale(const tp_rope_scaling *r)
{
    return r->type == TP_ROPE_YARN ? r->attention_factor : 1.0;
}

/* get_mscale(scale, mscale): 0.1 * mscale * ln(scale) + 1, and 1 for a
 * scale that does not stretch. */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

double tp_rope_yarn_attention_factor(double factor, double mscale, double mscale_all_dim)
{
    if (mscale != 0 && mscale_all_dim != 0)
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
    return yarn_mscale(factor, 1.0);
}

/* find_correction_dim: the dim whose wavelength fits num_rotations times
 * into the original context. */
static double yarn_correction_dim(double num_rotations, int64_t d, double base, int64_t original)
{
    return (double)d * log((double)original / (num_rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* _compute_yarn_parameters: pair i keeps its frequency (extrapolation)
 * below the correction range [low, high] of dims, is divided by factor
 * (interpolation) above it, and ramps linearly between. */
static void yarn_inv_freq(const tp_rope_scaling *r, double base, int64_t d, double *inv_freq)
{
    double low = yarn_correction_dim(r->beta_fast, d, base, r->original_max_positions);
    double high = yarn_correction_dim(r->beta_slow, d, base, r->original_max_positions);
    if (r->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0.0);
    high = fmin(high, (double)(d - 1));
    if (low == high)
        high += 0.001;          /* transformers' guard against a zero-width ramp */
    for (int64_t i = 0; i < d / 2; i++) {
        const double ramp = fmin(fmax(((double)i - low) / (high - low), 0.0), 1.0);
        const double extrapolation = 1.0 - ramp;
        inv_freq[i] = inv_freq[i] / r->factor * ramp + inv_freq[i] * extrapolation;
    }
}

void tp_rope_inv_freq(const tp_rope_scaling *r, double theta, int64_t d, int64_t seq_len, double *inv_freq)
{
    const double base = r->type == TP_ROPE_DYNAMIC ? dynamic_base(r, theta, d, seq_len) : theta;
    default_inv_freq(base, d, inv_freq);
    if (r->type == TP_ROPE_YARN)
        yarn_inv_freq(r, base, d, inv_freq);
    for (int64_t i = 0; i < d / 2; i++) {
        if (r->type == TP_ROPE_LINEAR)          /* _compute_linear_scaling_rope_parameters */
            inv_freq[i] /= r->factor;
        else if (r->type == TP_ROPE_LLAMA3)
            inv_freq[i] = llama3_inv_freq(r, inv_freq[i]);
    }
}
