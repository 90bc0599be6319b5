/* hash.c: FNV-1a, 64 bits (see hash.h).
 *
 * Used for the schedule's input_hash: cheap, stable across platforms and
 * runs, and chainable over several inputs. Not a cryptographic hash; it
 * tells a stale schedule from a fresh one, nothing more. */
#include "util/hash.h"

#define FNV_PRIME 0x100000001b3ULL

uint64_t tp_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}
