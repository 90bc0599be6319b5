/* hash.h: FNV-1a, 64 bits, chained: h = tp_hash(h, data, n), starting
 * from TP_HASH_INIT. */
#ifndef TP_UTIL_HASH_H
#define TP_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TP_HASH_INIT 0xcbf29ce484222325ULL
uint64_t tp_hash(uint64_t h, const void *data, size_t n);

#endif /* TP_UTIL_HASH_H */
