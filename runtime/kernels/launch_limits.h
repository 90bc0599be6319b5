/* launch_limits.h: the largest sizes the CUDA kernels launch for, in one place.
 *
 * Plain C, no CUDA: the kernels include it for their launch shapes and
 * their last-defence checks (TP_KCHECK), and the backend (backend_cuda.c)
 * hands the same numbers to the executor as its tp_backend_limits, which
 * tprun compares with every op of a schedule before it allocates anything
 * (runtime/exec/limits_check.c). A schedule the CPU backend runs may pass one
 * of these; it is then refused with the op, the size and the limit. */
#ifndef TPRUN_KERNELS_LAUNCH_LIMITS_H
#define TPRUN_KERNELS_LAUNCH_LIMITS_H

/* A launch grid: at most 2^31 - 1 blocks along x, 65535 along y and z. */
#define TP_CUDA_GRID_X_MAX 2147483647LL
#define TP_CUDA_GRID_YZ_MAX 65535LL

/* attention.cuh: queries (or keys) per block, one warp each; the largest
 * head dimension, a lane holding d / 32 elements of a row in registers. */
#define ATTN_WARPS 8
#define ATTN_MAX_D 256

/* rope.cu: the inverse frequencies travel by value with the launch, 2 KiB
 * of the 4 KiB a launch may carry. */
#define ROPE_MAX_PAIRS 256

/* norms_grad.cu: columns per block of the column sums (norm weight
 * gradients, sum_rows). */
#define COL_WIDTH 32

/* embedding_grad.cu: threads per block and columns per thread. */
#define EMB_THREADS 256
#define EMB_COLS 4

/* The sizes that follow from them: a block per row or token along x
 * (norms, RoPE, embeddings, the loss's rows); attention's grid (query
 * tiles, heads, batch); column blocks of the column sums along x and of
 * the embedding gradient along y. */
#define TP_CUDA_MAX_ROWS TP_CUDA_GRID_X_MAX
#define TP_CUDA_MAX_ATTN_SEQ (ATTN_WARPS * TP_CUDA_GRID_X_MAX)
#define TP_CUDA_MAX_ATTN_HEADS TP_CUDA_GRID_YZ_MAX
#define TP_CUDA_MAX_ATTN_BATCH TP_CUDA_GRID_YZ_MAX
#define TP_CUDA_MAX_HEAD_DIM ATTN_MAX_D
#define TP_CUDA_MAX_ROTARY_DIM (2 * ROPE_MAX_PAIRS)
#define TP_CUDA_MAX_NORM_COLS (COL_WIDTH * TP_CUDA_GRID_X_MAX)
#define TP_CUDA_MAX_EMBEDDING_GRAD_DIM (EMB_THREADS * EMB_COLS * TP_CUDA_GRID_YZ_MAX)

#endif /* TPRUN_KERNELS_LAUNCH_LIMITS_H */
