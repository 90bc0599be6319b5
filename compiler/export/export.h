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
#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"

typedef enum tp_export_format { TP_EXPORT_PYTORCH, TP_EXPORT_HF } tp_export_format;

/* What an export reads of a checked plan (the driver's tp_unit holds
 * them), and where it reports an entry it cannot write. */
typedef struct tp_export_unit {
    const tp_plan *plan;
    const tp_model *model;
    tp_diags *diags;
} tp_export_unit;

/* "pytorch" or "hf"; -1 for anything else. */
int tp_export_format_parse(const char *name);

/* The unit's plan (built, without errors) in `fmt`, as a new string; NULL
 * when an entry has no equivalent (each reported in *u->diags). */
char *tp_export(const tp_export_unit *u, const char *plan_path, tp_export_format fmt);

/* Write `text` to stdout (out NULL or "-") or atomically to `out` (the
 * driver has checked that out is none of the inputs: driver/clobber.h).
 * Returns 0, or -1 with a message in err. */
int tp_export_write(const char *text, const char *out, char *err, size_t errlen);

/* --- the formats tp_export picks from (pytorch.c, hf.c) -------------------- */

char *tp_export_pytorch(const tp_export_unit *u, const char *plan_path);
char *tp_export_hf(const tp_export_unit *u);

#endif /* TPCC_EXPORT_H */
