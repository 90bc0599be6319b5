/* rope_table.c: see rope_table.h. A few tables, found by comparing their
 * inputs (the executor gives each rope op its own inv_freq array, with the
 * same values in every layer), the oldest replaced first. */
#include "runtime/backends/cpu/rope_table.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/xalloc.h"

typedef struct rope_table {
    double *freq;    /* inv_freq[0 .. half) as given */
    int64_t half, pos_offset, s;
    double scale;
    double *cos_sin; /* [s][half][2] */
} rope_table;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rope_table tables[TP_ROPE_TABLES];
static unsigned next; /* the slot replaced next */

static bool same(const rope_table *t, const double *inv_freq, int64_t half, int64_t pos_offset, int64_t s,
                 double scale)
{
    return t->cos_sin && t->half == half && t->pos_offset == pos_offset && t->s == s && t->scale == scale &&
           !memcmp(t->freq, inv_freq, (size_t)half * sizeof *inv_freq);
}

const double *tp_cpu_rope_table(const double *inv_freq, int64_t half, int64_t pos_offset, int64_t s, double scale)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < TP_ROPE_TABLES; i++)
        if (same(&tables[i], inv_freq, half, pos_offset, s, scale)) {
            pthread_mutex_unlock(&lock);
            return tables[i].cos_sin;
        }
    rope_table *t = &tables[next];
    next = (next + 1) % TP_ROPE_TABLES;
    free(t->freq);
    free(t->cos_sin);
    t->freq = tp_xmalloc((size_t)half * sizeof *t->freq + 1);
    memcpy(t->freq, inv_freq, (size_t)half * sizeof *inv_freq);
    t->half = half;
    t->pos_offset = pos_offset;
    t->s = s;
    t->scale = scale;
    t->cos_sin = tp_xmalloc((size_t)(2 * s * half) * sizeof *t->cos_sin + 1);
    for (int64_t j = 0; j < s; j++) {
        const double pos = (double)(pos_offset + j);
        for (int64_t i = 0; i < half; i++) {
            double ang = pos * inv_freq[i];
            t->cos_sin[2 * (j * half + i)] = cos(ang) * scale;
            t->cos_sin[2 * (j * half + i) + 1] = sin(ang) * scale;
        }
    }
    pthread_mutex_unlock(&lock);
    return t->cos_sin;
}
