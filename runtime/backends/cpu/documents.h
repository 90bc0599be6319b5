/* documents.h: the document mask of the CPU backend's attention and its
 * gradient (backend.h: attention's segments), one rule for both. */
#ifndef TPRUN_CPU_DOCUMENTS_H
#define TPRUN_CPU_DOCUMENTS_H

#include <math.h>
#include <stdint.h>

/* Scores row[0 .. seen) of query t against keys k0 .. k0 + seen - 1 of a
 * row whose documents are seg[0 .. s): -inf where the key is of another
 * document than the query's, or the query is padding (-1). */
static inline void tp_cpu_hide_other_documents(float *row, int64_t seen, const int32_t *seg, int64_t t, int64_t k0)
{
    for (int64_t j = 0; j < seen; j++)
        if (seg[t] < 0 || seg[k0 + j] != seg[t])
            row[j] = -INFINITY;
}

#endif /* TPRUN_CPU_DOCUMENTS_H */
