/* layout.h: placements of a tensor over the mesh, and what it costs to
 * change them.
 *
 * A placement says what each rank's local data is relative to the logical
 * (single-device) tensor: a full copy (Replicate), the rank's chunk along a
 * dimension (Shard), a summand of it (Partial), or the summand a
 * vocab-sharded embedding produces, whose out-of-range rows still have to
 * be zeroed (MaskPartial; PyTorch's _MaskPartial). Placements are kept per
 * mesh dimension so a 2-D dp x tp mesh extends rather than rewrites. */
#ifndef TPCC_LAYOUT_H
#define TPCC_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#define TP_MAX_MESH_DIMS 2
#define TP_MAX_RANK 8
/* Segments of a packed (fused) dimension: q/k/v, gate/up */
#define TP_MAX_SEGMENTS 8

typedef enum tp_placement_kind {
    TP_REPLICATE,
    TP_SHARD,
    TP_PARTIAL,
    TP_MASK_PARTIAL,
} tp_placement_kind;

typedef struct tp_placement {
    tp_placement_kind kind;
    int dim;            /* TP_SHARD: tensor dimension; may be negative until normalised */
} tp_placement;

static inline tp_placement tp_replicate(void) { return (tp_placement){TP_REPLICATE, 0}; }
static inline tp_placement tp_shard(int d) { return (tp_placement){TP_SHARD, d}; }
static inline tp_placement tp_partial(void) { return (tp_placement){TP_PARTIAL, 0}; }
static inline tp_placement tp_mask_partial(void) { return (tp_placement){TP_MASK_PARTIAL, 0}; }

/* Shard(-1) on a rank-3 tensor is Shard(2): PyTorch normalises negative
 * dims before comparing placements. */
tp_placement tp_placement_norm(tp_placement p, int rank);
bool tp_placement_eq(tp_placement a, tp_placement b, int rank);
bool tp_placement_is_partial(tp_placement p);

/* "Replicate()", "Shard(1)", "Partial()", "MaskPartial()": written the way
 * a plan spells them. buf must hold at least 24 bytes. */
const char *tp_placement_str(tp_placement p, char *buf, size_t len);

/* The collective (or local step) that changes a placement, as PyTorch's
 * redistribute_local_tensor does on a 1-D mesh. */
typedef enum tp_redist_kind {
    TP_REDIST_NONE,          /* equal placements */
    TP_REDIST_ALL_GATHER,    /* S(i) -> R */
    TP_REDIST_ALL_REDUCE,    /* P -> R (MaskPartial: mask, then all-reduce) */
    TP_REDIST_REDUCE_SCATTER,/* P -> S(i) */
    TP_REDIST_ALL_TO_ALL,    /* S(i) -> S(j) */
    TP_REDIST_LOCAL_SLICE,   /* R -> S(i): torch.chunk, no communication */
    TP_REDIST_LOCAL_DIVIDE,  /* R -> P: divide by the mesh size, no communication */
    TP_REDIST_INVALID,       /* S -> P: PyTorch raises in the forward pass */
} tp_redist_kind;

tp_redist_kind tp_redist_classify(tp_placement from, tp_placement to, int rank);
const char *tp_redist_name(tp_redist_kind k);     /* "all_gather", "local_slice", ... */
bool tp_redist_communicates(tp_redist_kind k);

#endif /* TPCC_LAYOUT_H */
