/* bytes.h: sizes as users write them, for tpcc --device-memory and tprun
 * --max-shard-size. */
#ifndef TP_UTIL_BYTES_H
#define TP_UTIL_BYTES_H

#include <stdint.h>

/* "80GiB", "80GB", "512MiB", "1e9": a byte count (GiB = 2^30, GB = 10^9,
 * as transformers' max_shard_size reads them), the number decimal
 * (tp_parse_real); -1 when it is not one. */
int64_t tp_parse_bytes(const char *s);

#endif /* TP_UTIL_BYTES_H */
