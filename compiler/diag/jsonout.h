/* diag/jsonout.h: jansson helpers shared by the JSON and SARIF renderers.
 * jansson reports allocation failure by returning NULL or -1; like every
 * allocation in tpcc, that aborts (see xalloc.h). */
#ifndef TPCC_JSONOUT_H
#define TPCC_JSONOUT_H

#include <jansson.h>

#include "compiler/diag/diag.h"

json_t *tp_json_obj(void);
json_t *tp_json_arr(void);
json_t *tp_json_int(long long n);
void tp_json_set(json_t *obj, const char *key, json_t *value);
void tp_json_push(json_t *arr, json_t *value);
/* A JSON string of s; bytes that are not UTF-8 become U+FFFD. */
json_t *tp_json_str(const char *s);
/* {"text": s}: SARIF's message and multiformatMessageString objects. */
json_t *tp_json_text(const char *s);
/* The document, indented, with a final newline; releases root. Malloc'ed. */
char *tp_json_dump(json_t *root);
/* Whether sp points into one of src's files. */
int tp_json_has_file(const tp_sources *src, tp_span sp);

#endif /* TPCC_JSONOUT_H */
