/* map.h: a hash map from byte strings to integers (FNV-1a, open
 * addressing), for the lookups by name whose linear scans made large
 * inputs quadratic: config.json's keys, plan keys against module names,
 * configuration names, suppressions by line.
 *
 * The map copies each key; values are the caller's (an index into its
 * own array, as a rule). A zeroed tp_map is valid and empty. */
#ifndef TP_UTIL_MAP_H
#define TP_UTIL_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tp_map_slot tp_map_slot;

typedef struct tp_map {
    tp_map_slot *slots;
    size_t cap, count;          /* cap: 0 or a power of two */
} tp_map;

void tp_map_init(tp_map *m);
void tp_map_free(tp_map *m);

/* The value stored under the n bytes at key, or -1. */
int64_t tp_map_get(const tp_map *m, const void *key, size_t n);
/* tp_map_get with a NUL-terminated key. */
int64_t tp_map_gets(const tp_map *m, const char *key);

/* Store value under key unless the key is there already. Returns the
 * value the key holds afterwards: value, or the one stored before (so the
 * first of several equal keys wins, and a caller tells a repeat by a
 * return other than value). value must not be -1. */
int64_t tp_map_put(tp_map *m, const void *key, size_t n, int64_t value);
int64_t tp_map_puts(tp_map *m, const char *key, int64_t value);

#endif /* TP_UTIL_MAP_H */
