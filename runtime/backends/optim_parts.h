/* optim_parts.h: the parts an optimizer step and a gradient norm take
 * many of at once (backend.h's adamw and sum_squares), shared with
 * the CUDA kernels that take them as they are (kernels/kernels.h). As
 * everywhere in the backends, a float * names a buffer in the backend's
 * storage dtype unless said otherwise. */
#ifndef TPRUN_OPTIM_PARTS_H
#define TPRUN_OPTIM_PARTS_H

#include <stdbool.h>
#include <stdint.h>

/* One weight's (or data-parallel run's) share of an AdamW step: master, m
 * and v float32, w and g in the storage dtype, n elements of each; master
 * NULL where the weights are fp32 (w is then the one the step updates);
 * decay: whether the step's weight decay applies to it (torch's parameter
 * groups). */
typedef struct tp_adamw_part {
    float *master, *w, *m, *v;
    const float *g;
    int64_t n;
    bool decay;
} tp_adamw_part;

/* n elements from x, in the storage dtype: one term of a sum over many
 * buffers. */
typedef struct tp_run {
    const float *x;
    int64_t n;
} tp_run;

#endif /* TPRUN_OPTIM_PARTS_H */
