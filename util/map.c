/* map.c: see map.h. Linear probing at a load of at most one half, so a
 * lookup probes a couple of slots on average; the full 64-bit hash is kept
 * beside each key so that a probe compares bytes only on a hash match. */
#include "util/map.h"

#include <stdlib.h>
#include <string.h>
#include "util/hash.h"
#include "util/xalloc.h"

struct tp_map_slot {
    uint64_t hash;
    char *key;                  /* NULL: empty */
    size_t n;
    int64_t value;
};

void tp_map_init(tp_map *m)
{
    memset(m, 0, sizeof *m);
}

void tp_map_free(tp_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    tp_map_init(m);
}

/* The slot holding key, or the empty slot where it would go. */
static tp_map_slot *probe(const tp_map *m, uint64_t hash, const void *key, size_t n)
{
    for (size_t i = (size_t)hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        tp_map_slot *s = &m->slots[i];
        if (!s->key || (s->hash == hash && s->n == n && !memcmp(s->key, key, n)))
            return s;
    }
}

int64_t tp_map_get(const tp_map *m, const void *key, size_t n)
{
    if (!m->cap)
        return -1;
    const tp_map_slot *s = probe(m, tp_hash(TP_HASH_INIT, key, n), key, n);
    return s->key ? s->value : -1;
}

int64_t tp_map_gets(const tp_map *m, const char *key)
{
    return tp_map_get(m, key, strlen(key));
}

static void grow(tp_map *m)
{
    tp_map old = *m;
    m->cap = old.cap ? old.cap * 2 : 16;
    m->slots = tp_xcalloc(m->cap, sizeof *m->slots);
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key)
            *probe(m, old.slots[i].hash, old.slots[i].key, old.slots[i].n) = old.slots[i];
    free(old.slots);
}

int64_t tp_map_put(tp_map *m, const void *key, size_t n, int64_t value)
{
    if (2 * (m->count + 1) > m->cap)
        grow(m);
    uint64_t hash = tp_hash(TP_HASH_INIT, key, n);
    tp_map_slot *s = probe(m, hash, key, n);
    if (s->key)
        return s->value;
    /* one byte more than the key, so that an empty key is a non-NULL copy */
    s->key = tp_xmalloc(n + 1);
    memcpy(s->key, key, n);
    s->key[n] = '\0';
    s->hash = hash;
    s->n = n;
    s->value = value;
    m->count++;
    return value;
}

int64_t tp_map_puts(tp_map *m, const char *key, int64_t value)
{
    return tp_map_put(m, key, strlen(key), value);
}
