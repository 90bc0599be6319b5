/* hf_json.h: reading a Hugging Face config.json, and pointing a
 * diagnostic into it. Both --hf-config and --tp-plan auto read one; a
 * file that cannot be opened or parsed is reported where jansson stopped,
 * like any other finding, never as a bare message. */
#ifndef TPCC_HF_JSON_H
#define TPCC_HF_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "compiler/diag/diag.h"

/* The JSON object in the file at `path`, or NULL with what is wrong in err
 * and where: *line and *col, jansson's 1-based position of a parse error,
 * else 1 and 1 (the file cannot be opened, or is not an object). */
json_t *tp_hf_json_read(const char *path, int *line, int *col, char *err, size_t errlen);

/* Add a finding of `check` at `level` at line:col of the file at `path`,
 * loading it into src so the finding shows its line (line 1 of an unread
 * file when it cannot be read). Returns it, for notes and help. */
tp_diag *tp_hf_json_finding(tp_sources *src, tp_diags *diags, const char *path, int line, int col,
                            tp_diag_level level, const char *check, const char *message);

#endif /* TPCC_HF_JSON_H */
