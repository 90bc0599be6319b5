/* json_quote.h: a JSON string literal for text that comes from outside
 * (schedule paths, op and module names read from a file), for outputs
 * written without building a JSON tree (tprun's --profile-json, --trace). */
#ifndef TPCC_JSON_QUOTE_H
#define TPCC_JSON_QUOTE_H

#include "util/xalloc.h"

/* Appends "s" (NULL as ""): quotes, backslashes and control characters
 * escaped, each byte that is not part of valid UTF-8 replaced by U+FFFD,
 * so the document parses whatever s holds. */
void tp_buf_append_json_string(tp_buf *b, const char *s);

#endif /* TPCC_JSON_QUOTE_H */
