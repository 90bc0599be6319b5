/* gather.c: see gather.h. */
#include "runtime/train/gather.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "util/errmsg.h"
#include "util/xalloc.h"

/* The same weight, padded and logical shapes alike, split the same way
 * into slices of one size: its slices on every rank are gathered one
 * tensor at a time and placed into one tensor of rank 0's shape. */
static bool same_tensor(const tr_weight *a, const tr_weight *b)
{
    if (strcmp(a->name, b->name) || a->rank != b->rank || a->dim != b->dim || a->local_elems != b->local_elems)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d] || a->logical[d] != b->logical[d])
            return false;
    return true;
}

int tr_layouts_load(tr_layouts *l, const char *path, const tp_comm *comm, char *err, size_t errlen)
{
    *l = (tr_layouts){.world = comm->world};
    if (comm->rank != 0)
        return 0;
    l->ranks = tp_xcalloc((size_t)comm->world, sizeof *l->ranks);
    /* the launch size was checked when the schedule was loaded to run; with
     * data parallelism it is not the tp group's, so it is not checked again */
    for (int r = 0; r < comm->world; r++)
        if (tr_schedule_load(&l->ranks[r], path, r, 0, err, errlen)) {
            l->world = r;           /* the ones loaded */
            tr_layouts_free(l);
            return -1;
        }
    for (int r = 1; r < comm->world; r++) {
        const char *differs = l->ranks[r].weight_elems != l->ranks[0].weight_elems ||
                                      l->ranks[r].nweights != l->ranks[0].nweights
                                  ? "weight region differs in size"
                                  : NULL;
        for (int i = 0; !differs && i < l->ranks[0].nweights; i++)
            if (!same_tensor(&l->ranks[r].weights[i], &l->ranks[0].weights[i]))
                differs = "weights differ in name or shape";
        if (differs) {
            tr_layouts_free(l);
            return tp_error(err, errlen, "%s: rank %d's %s from rank 0's; gathering needs equal slices of the same "
                            "weights (recompile the schedule)", path, r, differs);
        }
    }
    return 0;
}

void tr_layouts_free(tr_layouts *l)
{
    for (int r = 0; l->ranks && r < l->world; r++)
        tr_schedule_free(&l->ranks[r]);
    free(l->ranks);
    *l = (tr_layouts){0};
}

/* Rows and columns of w seen as a matrix (a vector is one column). */
static int64_t cols_of(const tr_weight *w) { return w->rank == 2 ? w->shape[1] : 1; }

/* Copies one rank's slice `src` of w into the padded tensor `full`. */
static void place(const tr_weight *w, const float *src, float *full)
{
    int64_t cols = cols_of(w);
    if (w->dim < 0) {
        memcpy(full, src, (size_t)w->local_elems * sizeof *src);
    } else if (w->dim == 0) {
        for (int k = 0; k < w->nsegments; k++) {
            memcpy(full + w->offset[k] * cols, src, (size_t)(w->length[k] * cols) * sizeof *src);
            src += w->length[k] * cols;
        }
    } else {
        for (int64_t r = 0; r < w->shape[0]; r++)
            memcpy(full + r * cols + w->offset[0], src + r * w->length[0], (size_t)w->length[0] * sizeof *src);
    }
}

/* The logical tensor: the padded one without its padding rows and
 * columns, moved to the front of the same memory (each row lands at or
 * before where it was read). */
static void unpad(const tr_weight *w, float *padded)
{
    int64_t rows = w->logical[0], cols = w->rank == 2 ? w->logical[1] : 1;
    for (int64_t r = 0; r < rows; r++)
        memmove(padded + r * cols, padded + r * cols_of(w), (size_t)cols * sizeof *padded);
}

static int64_t padded_elems(const tr_weight *w) { return w->shape[0] * cols_of(w); }

int tr_gather_region(tp_comm *comm, const tr_layouts *l, const float *mine, int64_t elems, float ***full, char *err,
                     size_t errlen)
{
    *full = NULL;
    float *all = comm->rank == 0 ? tp_xmalloc((size_t)(elems * comm->world) * sizeof *all + 1) : NULL;
    if (comm->ops->gather_bytes(comm, all, mine, (size_t)elems * sizeof *mine, err, errlen)) {
        free(all);
        return -1;
    }
    if (comm->rank != 0)
        return 0;
    const tr_schedule *s0 = &l->ranks[0];
    float **out = tp_xcalloc((size_t)s0->nweights + 1, sizeof *out);
    for (int i = 0; i < s0->nweights; i++) {
        const tr_weight *w0 = &s0->weights[i];
        out[i] = tp_xcalloc((size_t)padded_elems(w0) + 1, sizeof *out[i]);
        for (int r = 0; r < l->world; r++) {
            const tr_weight *w = &l->ranks[r].weights[i];
            place(w, all + (size_t)r * (size_t)elems + w->region_offset, out[i]);
        }
        unpad(w0, out[i]);
    }
    free(all);
    *full = out;
    return 0;
}

void tr_gather_rooms(const tr_layouts *l, int64_t *slices, int64_t *full)
{
    const tr_schedule *s0 = &l->ranks[0];
    *slices = *full = 0;
    for (int i = 0; i < s0->nweights; i++) {
        const tr_weight *w = &s0->weights[i];
        int64_t sent = w->dim < 0 ? 0 : w->local_elems * l->world;    /* a replicated weight is not sent */
        *slices = sent > *slices ? sent : *slices;
        *full = padded_elems(w) > *full ? padded_elems(w) : *full;
    }
}

int tr_gather_tensor(tp_comm *comm, const tr_layouts *l, const tr_weight *w, int i, const float *mine,
                     float *slices, float *full, char *err, size_t errlen)
{
    bool replicated = w->dim < 0;      /* rank 0's copy is the tensor */
    if (!replicated && comm->ops->gather_bytes(comm, slices, mine, (size_t)w->local_elems * sizeof *mine, err,
                                               errlen))
        return -1;
    if (comm->rank != 0)
        return 0;
    for (int r = 0; r < (replicated ? 1 : l->world); r++)
        place(&l->ranks[r].weights[i], replicated ? mine : slices + (size_t)r * (size_t)w->local_elems, full);
    unpad(&l->ranks[0].weights[i], full);
    return 0;
}

void tr_full_free(float **full, int n)
{
    for (int i = 0; full && i < n; i++)
        free(full[i]);
    free(full);
}
