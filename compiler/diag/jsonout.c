/* diag/jsonout.c: jansson helpers shared by the JSON and SARIF renderers. */
#include "compiler/diag/jsonout.h"

#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "util/xalloc.h"

/* ---- jansson wrappers ----
 * jansson reports allocation failure by returning NULL or -1; like every
 * allocation in tpcc, that aborts (see xalloc.h). */

json_t *tp_json_obj(void)
{
    return tp_xcheck(json_object());
}

json_t *tp_json_arr(void)
{
    return tp_xcheck(json_array());
}

json_t *tp_json_int(long long n)
{
    return tp_xcheck(json_integer(n));
}

void tp_json_set(json_t *obj, const char *key, json_t *value)
{
    if (json_object_set_new(obj, key, value) != 0)
        tp_out_of_memory();
}

void tp_json_push(json_t *arr, json_t *value)
{
    if (json_array_append_new(arr, value) != 0)
        tp_out_of_memory();
}

/* jansson refuses strings that are not UTF-8, and messages quote source
 * text that may not be. Invalid bytes become U+FFFD. */
json_t *tp_json_str(const char *s)
{
    tp_buf b;
    tp_buf_init(&b);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = tp_utf8_sequence(p);
        if (n == 0) {
            tp_buf_append(&b, "\xEF\xBF\xBD");
            p++;
        } else {
            tp_buf_append_n(&b, (const char *)p, (size_t)n);
            p += n;
        }
    }
    char *valid = tp_buf_take(&b);
    json_t *v = tp_xcheck(json_string(valid));
    free(valid);
    return v;
}

/* {"text": s}: SARIF's message and multiformatMessageString objects. */
json_t *tp_json_text(const char *s)
{
    json_t *o = tp_json_obj();
    tp_json_set(o, "text", tp_json_str(s));
    return o;
}

char *tp_json_dump(json_t *root)
{
    char *s = tp_xcheck(json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER));
    json_decref(root);
    char *out = tp_xasprintf("%s\n", s);
    free(s);
    return out;
}

int tp_json_has_file(const tp_sources *src, tp_span sp)
{
    return sp.file >= 0 && sp.file < src->count;
}
