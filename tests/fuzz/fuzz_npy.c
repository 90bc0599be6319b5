/* fuzz_npy.c: libFuzzer entry point. The input is a .npy file, read by
 * every reader tprun has: token ids (--tokens, --labels), float arrays
 * (--compare) and a training token stream (--data: its header, then every
 * value); the same bytes are also read as an llm.c token file (.bin). A
 * file that is refused must come with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/io/npy.h"
#include "runtime/train/tokens.h"
#include "tests/fuzz/scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int rc, const char *what, const char *err)
{
    if (rc && !err[0]) {
        fprintf(stderr, "fuzz_npy: %s failed without a message\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *npy = tp_fuzz_path("input.npy"), *bin = tp_fuzz_path("input.bin");
    if (tp_fuzz_write(npy, data, size) || tp_fuzz_write(bin, data, size))
        return 0;
    char err[800];
    int32_t *ids;
    float *values;
    int64_t shape[TP_NPY_MAX_DIMS];
    int ndim;
    err[0] = '\0';
    int rc = tp_npy_read_tokens(npy, &ids, shape, &ndim, err, sizeof err);
    check(rc, "tp_npy_read_tokens", err);
    free(ids);
    err[0] = '\0';
    rc = tp_npy_read_f32(npy, &values, shape, &ndim, err, sizeof err);
    check(rc, "tp_npy_read_f32", err);
    free(values);
    const char *paths[] = {npy, bin};
    for (int i = 0; i < 2; i++) {
        tr_tokens t;
        err[0] = '\0';
        rc = tr_tokens_open(&t, paths[i], err, sizeof err);
        check(rc, "tr_tokens_open", err);
        if (rc)
            continue;
        /* the header's count is the file's: every value is there to read */
        int64_t *values = malloc((size_t)t.count * sizeof *values + 1);
        if (!values)
            abort();
        rc = tr_tokens_read(&t, 0, t.count, values, err, sizeof err);
        check(rc, "tr_tokens_read", err);
        free(values);
        tr_tokens_close(&t);
    }
    return 0;
}
