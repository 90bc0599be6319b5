/* output.h: where the diagnostics of a command line go. Text is written
 * to stderr plan by plan, GitHub's workflow commands likewise to stdout
 * (unless stdout carries an export: then to stderr); JSON and SARIF are
 * one document for all the plans (on stdout, or stderr likewise), written
 * at the end, so each plan's diagnostics and sources are kept until
 * then. */
#ifndef TPCC_OUTPUT_H
#define TPCC_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "compiler/diag/diag.h"

/* A plan's diagnostics kept for the document. */
typedef struct tp_kept_plan {
    char *plan;
    tp_diags diags;
    tp_sources src;
    int status;
} tp_kept_plan;

typedef struct tp_output {
    tp_diag_format format;
    FILE *docs;                 /* where JSON, SARIF and GitHub's commands go */
    tp_render_opts render;      /* cwd and root owned */
    tp_kept_plan *kept;         /* JSON, SARIF: the plans so far */
    int count;
    bool summary;               /* text: say when every plan passed */
    int plans, clean;           /* plans added; of them, with no finding and status 0 */
} tp_output;

/* docs: where JSON, SARIF and GitHub's commands go; summary: in text, end
 * with "All checks passed! (N plans)" on stderr when no plan has an
 * error, a warning or an unsupported finding (ruff's line; a plan with findings ends in clang's "N
 * errors generated." instead); sarif_root: --sarif-root or NULL (the
 * working directory). Returns 0, or -1 with a message in err when a
 * directory cannot be resolved. */
int tp_output_init(tp_output *o, tp_diag_format format, int color, bool summary, FILE *docs,
                   const char *sarif_root, char *err, size_t errlen);

/* One plan's diagnostics, with its exit status: text is written now, JSON
 * and SARIF take *diags and *src (leaving them empty). Returns 0, or -1
 * when writing fails. */
int tp_output_add(tp_output *o, const char *plan, tp_diags *diags, tp_sources *src, int status);

/* Write the JSON or SARIF document, or text's summary. Returns 0 or -1. */
int tp_output_finish(tp_output *o);
void tp_output_free(tp_output *o);

#endif /* TPCC_OUTPUT_H */
