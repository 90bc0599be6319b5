/* astutil.h: small queries on call nodes shared by the evaluators. */
#ifndef TPCC_ASTUTIL_H
#define TPCC_ASTUTIL_H

#include <stdbool.h>
#include "grammar/ast.h"

/* The callee name of an N_CALL whose callee is a plain name, else NULL. */
const char *tp_call_name(const tp_node *call);
/* Positional argument i (0-based) of an N_CALL, or NULL. */
const tp_node *tp_call_pos(const tp_node *call, int i);
int tp_call_npos(const tp_node *call);
/* Keyword argument `kw` of an N_CALL (its value), or NULL. */
const tp_node *tp_call_kw(const tp_node *call, const char *kw);
/* The N_ARG node of keyword `kw`, or NULL. */
const tp_node *tp_call_kw_arg(const tp_node *call, const char *kw);

/* The dimension of a Shard placement as PyTorch's Shard(dim: int) takes
 * it, Shard(1) or Shard(dim=1): its node, or NULL when `e` is no call of
 * Shard with that one argument. */
const tp_node *tp_call_shard_dim(const tp_node *e);

/* The reduce op of a Partial placement as PyTorch's Partial(reduce_op=
 * "sum") takes it, Partial(), Partial("sum") or Partial(reduce_op="sum"):
 * "sum" when not given, the string given, or NULL when `e` is no call of
 * Partial with at most that one string argument. */
const char *tp_call_partial_op(const tp_node *e);

/* Keyword lists of constructors and ops: NULL-terminated; NULL is empty. */
bool tp_keyword_known(const char *const *keywords, const char *kw);
/* "eps, bias" for messages; malloc'ed. */
char *tp_keyword_list(const char *const *keywords);

#endif /* TPCC_ASTUTIL_H */
