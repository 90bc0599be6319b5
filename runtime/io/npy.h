/* npy.h: NumPy .npy files: writing float32/int32 outputs (logits, losses,
 * activations for comparison against PyTorch) and reading token ids.
 *
 * Writing produces format version 1.0: the magic "\x93NUMPY", version 1.0,
 * a little-endian uint16 header length, and the header dict
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 16), }
 * padded with spaces and a final '\n' so the data starts at a multiple of
 * 64 bytes; a 1-D shape is written "(n,)" and a 0-D one "()". The file is
 * written to a temporary file in the same directory and renamed over the
 * destination, so readers never see a partial file.
 *
 * Reading accepts versions 1.0, 2.0 and 3.0 and C order (Fortran order
 * only where it is the same bytes: at most one dimension above 1). Token
 * ids: dtype '<i4', '<i8', '<u2' or '<u4' (values must fit in int32), 1-D [n] or
 * 2-D [batch, seq]. Float arrays: '<f4' or '<f8'. Big-endian and other
 * dtypes are rejected, like everything else, with a message naming the file
 * and the problem. The reader checks the file size against the shape
 * before allocating. */
#ifndef TPRUN_NPY_H
#define TPRUN_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tp_npy_dtype { TP_NPY_F32, TP_NPY_I32 } tp_npy_dtype;

#define TP_NPY_MAX_DIMS 8

/* Writes a C-order array of prod(shape) elements (ndim 0..TP_NPY_MAX_DIMS)
 * atomically. Returns 0, or -1 with a message in err (may be NULL). */
int tp_npy_write(const char *path, tp_npy_dtype dtype, const void *data, const int64_t *shape, int ndim, char *err,
                 size_t errlen);
int tp_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, char *err, size_t errlen);
int tp_npy_write_i32(const char *path, const int32_t *data, const int64_t *shape, int ndim, char *err, size_t errlen);

/* Reads token ids. On success returns 0, *out holds the int32 values in C
 * order (free() it; never NULL, even for an empty array), *ndim is 1 or 2,
 * shape[0..ndim) the dimensions and shape[1] = 0 for a 1-D array. Returns
 * -1 with a message in err otherwise, and *out = NULL. */
int tp_npy_read_tokens(const char *path, int32_t **out, int64_t shape[2], int *ndim, char *err, size_t errlen);

/* A token array read in pieces (a training stream, which need not fit in
 * memory): the header of fp, open at the start of `path`, checked as
 * tp_npy_read_tokens checks it, and the file's size against the shape;
 * fp is left at the first id. Returns 0, or -1 with a message in err. */
typedef struct tp_npy_token_layout {
    int64_t offset;        /* bytes before the first id */
    int64_t shape[2];      /* as tp_npy_read_tokens's */
    int ndim;
    size_t item;           /* bytes of one id: 2, 4 or 8 */
    bool is_signed;
} tp_npy_token_layout;
int tp_npy_token_header(FILE *fp, const char *path, tp_npy_token_layout *out, char *err, size_t errlen);

/* The id of `item` bytes at p, little-endian whatever the host (llm.c's
 * .bin files store theirs the same way), signed or not, as an int64. */
int64_t tp_npy_token_value(const unsigned char *p, size_t item, bool is_signed);

/* Reads a float32 ('<f4') or float64 ('<f8', converted) array of any rank
 * up to TP_NPY_MAX_DIMS, C order (e.g. reference logits). On success returns
 * 0, *out holds the values (free() it; never NULL), *ndim the rank and
 * shape[0..ndim) the dimensions (the rest of shape is zeroed). Returns -1
 * with a message in err otherwise, and *out = NULL. */
int tp_npy_read_f32(const char *path, float **out, int64_t shape[TP_NPY_MAX_DIMS], int *ndim, char *err,
                    size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_NPY_H */
