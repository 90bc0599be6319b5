/* astutil.c: see astutil.h. */
#include <string.h>
#include "compiler/front/astutil.h"
#include "util/xalloc.h"

const char *tp_call_name(const tp_node *call)
{
    if (call->kind != N_CALL || call->nkids < 1 || call->kids[0]->kind != N_NAME)
        return NULL;
    return call->kids[0]->name;
}

const tp_node *tp_call_pos(const tp_node *call, int i)
{
    for (int k = 1; k < call->nkids; k++)
        if (!call->kids[k]->name && i-- == 0)
            return call->kids[k]->kids[0];
    return NULL;
}

int tp_call_npos(const tp_node *call)
{
    int n = 0;
    for (int k = 1; k < call->nkids; k++)
        n += !call->kids[k]->name;
    return n;
}

const tp_node *tp_call_kw_arg(const tp_node *call, const char *kw)
{
    for (int k = 1; k < call->nkids; k++)
        if (call->kids[k]->name && !strcmp(call->kids[k]->name, kw))
            return call->kids[k];
    return NULL;
}

const tp_node *tp_call_kw(const tp_node *call, const char *kw)
{
    const tp_node *a = tp_call_kw_arg(call, kw);
    return a ? a->kids[0] : NULL;
}

const tp_node *tp_call_shard_dim(const tp_node *e)
{
    const char *fn = tp_call_name(e);
    if (!fn || strcmp(fn, "Shard") || e->nkids != 2)
        return NULL;
    return tp_call_npos(e) == 1 ? tp_call_pos(e, 0) : tp_call_kw(e, "dim");
}

const char *tp_call_partial_op(const tp_node *e)
{
    const char *fn = tp_call_name(e);
    if (!fn || strcmp(fn, "Partial") || e->nkids > 2)
        return NULL;
    if (e->nkids == 1)
        return "sum";
    const tp_node *op = tp_call_npos(e) == 1 ? tp_call_pos(e, 0) : tp_call_kw(e, "reduce_op");
    return op && op->kind == N_STR ? op->str : NULL;
}

bool tp_keyword_known(const char *const *keywords, const char *kw)
{
    for (const char *const *k = keywords; k && *k; k++)
        if (!strcmp(*k, kw))
            return true;
    return false;
}

char *tp_keyword_list(const char *const *keywords)
{
    tp_buf b;
    tp_buf_init(&b);
    for (const char *const *k = keywords; k && *k; k++) {
        if (k != keywords)
            tp_buf_append(&b, ", ");
        tp_buf_append(&b, *k);
    }
    return tp_buf_take(&b);
}
