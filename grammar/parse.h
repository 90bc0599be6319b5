/* parse.h: the flex/bison front end (grammar/lexer.l, grammar/parser.y). */
#ifndef TPCC_PARSE_H
#define TPCC_PARSE_H

#include "grammar/ast.h"
#include "compiler/diag/diag.h"

/* Parse file `file` of `src`. Always returns an N_FILE node (possibly with
 * fewer items when there were syntax errors, which go to diags with check
 * "syntax"). Never prints, never exits. */
tp_node *tp_parse(tp_sources *src, int file, tp_diags *diags);

#endif /* TPCC_PARSE_H */
