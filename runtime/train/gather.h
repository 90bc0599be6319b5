/* gather.h: full tensors on rank 0 from every rank's slices, for the files
 * a training run writes (--grads-out, --save): gradients, weights and
 * optimizer state are each held in a region laid out like the rank's
 * weight region (weight i at region_offset, its slice's segments one after
 * another). Rank 0 loads the schedule once per rank to know where each
 * rank's slice goes (the layout docs/schedule.md describes), places every
 * slice into the padded global tensor, and drops the vocabulary padding. */
#ifndef TPRUN_TRAIN_GATHER_H
#define TPRUN_TRAIN_GATHER_H

#include "runtime/comm/comm.h"
#include "runtime/io/weights.h"
#include "sched/load.h"

typedef struct tr_layouts {
    tr_schedule *ranks;     /* rank 0: every rank's schedule; elsewhere NULL */
    int world;
} tr_layouts;

/* Returns 0 or -1 with a message. */
int tr_layouts_load(tr_layouts *l, const char *path, const tp_comm *comm, char *err, size_t errlen);
void tr_layouts_free(tr_layouts *l);

/* Collective: every rank passes its region (weight_elems floats, host
 * memory). On rank 0 *full receives one malloc'ed tensor per weight in its
 * logical (checkpoint) shape, row-major (free with tr_full_free); NULL
 * elsewhere. Returns 0 or -1 with a message. */
int tr_gather_region(tp_comm *comm, const tr_layouts *l, const float *mine, int64_t elems, float ***full, char *err,
                     size_t errlen);
void tr_full_free(float **full, int n);

/* The same one tensor at a time, so that rank 0 holds one full tensor,
 * not the model. Rank 0: the rooms, in floats, the largest weight needs:
 * every rank's slice of it, and its padded tensor. */
void tr_gather_rooms(const tr_layouts *l, int64_t *slices, int64_t *full);

/* Collective (but for a replicated weight, which rank 0 holds whole):
 * every rank passes its weight w, the schedule's weight i, and its slice
 * `mine` (w->local_elems floats, host memory); on rank 0 `full` receives
 * the logical tensor, row-major, `slices` (tr_gather_rooms) the slices on
 * the way; both unused elsewhere. Returns 0 or -1 with a message. */
int tr_gather_tensor(tp_comm *comm, const tr_layouts *l, const tr_weight *w, int i, const float *mine,
                     float *slices, float *full, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_GATHER_H */
