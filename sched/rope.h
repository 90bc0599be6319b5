/* rope.h: RoPE frequency scaling as Hugging Face computes it
 * (transformers/modeling_rope_utils.py, ROPE_INIT_FUNCTIONS). The rope op
 * of a schedule carries the scaling (docs/schedule.md); the runtime turns
 * it into the inv_freq table that every backend's rope kernel reads. */
#ifndef TP_SCHED_ROPE_H
#define TP_SCHED_ROPE_H

#include <stdbool.h>
#include <stdint.h>

/* The rope_type of a config's rope_scaling (or its legacy "type"). */
typedef enum tp_rope_type {
    TP_ROPE_DEFAULT,   /* no rope_scaling */
    TP_ROPE_LINEAR,    /* positions divided by factor */
    TP_ROPE_DYNAMIC,   /* NTK: a larger base beyond original_max_positions */
    TP_ROPE_LLAMA3,    /* Llama 3.1: long wavelengths divided by factor, smoothed */
    TP_ROPE_YARN,      /* YaRN: NTK-by-parts frequencies, cos/sin times attention_factor */
    TP_ROPE_TYPES
} tp_rope_type;

/* What the rope op computes besides theta and the head size. */
typedef struct tp_rope_scaling {
    tp_rope_type type;
    double factor;                   /* linear, dynamic, llama3 */
    double low_freq_factor;          /* llama3 */
    double high_freq_factor;         /* llama3 */
    int64_t original_max_positions;  /* dynamic, llama3, yarn */
    double beta_fast;                /* yarn: rotations where extrapolation ends (HF default 32) */
    double beta_slow;                /* yarn: rotations where interpolation starts (HF default 1) */
    double attention_factor;         /* yarn: cos and sin are multiplied by it */
    bool truncate;                   /* yarn: correction range rounded outward to whole dims */
} tp_rope_scaling;

/* "default", "linear", "dynamic", "llama3", "yarn" */
const char *tp_rope_type_name(tp_rope_type t);
/* The type a rope_type string names; -1 for one tpcc does not compute
 * (longrope, ...). */
int tp_rope_type_parse(const char *name);

/* NULL, or why the scaling's parameters are unusable (a factor that is not
 * positive, llama3's high_freq_factor not above low_freq_factor, ...). */
const char *tp_rope_scaling_invalid(const tp_rope_scaling *r);

/* inv_freq[i], i < d/2, of a head of size d at theta, for a sequence of
 * seq_len positions (dynamic scaling depends on it), as the matching
 * _compute_*_rope_parameters of transformers gives it (in double where
 * transformers computes float32). */
/* What transformers multiplies cos and sin by (its attention_scaling):
 * yarn's attention_factor, 1 for every other type. */
double tp_rope_cos_sin_scale(const tp_rope_scaling *r);

/* YaRN's attention_factor when config.json gives none (get_mscale of
 * _compute_yarn_parameters): from factor alone, or the ratio of the mscale
 * and mscale_all_dim terms when both are set (non-zero). */
double tp_rope_yarn_attention_factor(double factor, double mscale, double mscale_all_dim);

void tp_rope_inv_freq(const tp_rope_scaling *r, double theta, int64_t d, int64_t seq_len, double *inv_freq);

#endif /* TP_SCHED_ROPE_H */
