/* export.h: a checked plan written in the formats the Python side reads:
 * --export=pytorch, a module that applies it with parallelize_module, and
 * --export=hf, the tp_plan dict transformers applies (keys relative to the
 * model root, its registered string styles).
 *
 * A style the format cannot express is an `export` error at its entry; a
 * plan is exported only when it checks without errors. */
#ifndef TPCC_EXPORT_H
#define TPCC_EXPORT_H

#include <stddef.h>
#include <stdio.h>
#include "compiler/driver/compile.h"

typedef enum tp_export_format { TP_EXPORT_PYTORCH, TP_EXPORT_HF } tp_export_format;

/* "pytorch" or "hf"; -1 for anything else. */
int tp_export_format_parse(const char *name);

/* The unit's plan (built, without errors) in `fmt`, as a new string; NULL
 * when an entry has no equivalent (each reported in u->diags). */
char *tp_export(tp_unit *u, const char *plan_path, tp_export_format fmt);

/* Write `text` to stdout (out NULL or "-") or atomically to `out`, which
 * must not be one of the unit's inputs (the plan, its model files or
 * config.json). Returns 0, or -1 with a message in err. */
int tp_export_write(const tp_unit *u, const char *text, const char *out, char *err, size_t errlen);

/* --- shared by the formats ---------------------------------------------- */

char *tp_export_pytorch(tp_unit *u, const char *plan_path);
char *tp_export_hf(tp_unit *u);

/* The entry's key as written in its parallelize block's dict. */
const char *tp_export_key(const tp_style *s);

/* A Python string literal in double quotes. */
void tp_export_pystr(FILE *f, const char *s);

#endif /* TPCC_EXPORT_H */
