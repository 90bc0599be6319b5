/* bias.c: transformers' rowwise strings add a Linear's bias after the
 * reduction: the Linear's own recording (leaf.c) leaves it out and the
 * output hook (hooks.c) records it. */
#include "compiler/sema/check_impl.h"

/* transformers' rowwise styles hide a Linear's bias during the local
 * matmul and add it once after the all-reduce (RowwiseParallel.
 * context_around_forward and transform_output_post_forward). */
bool tp_bias_after_reduce(const tp_module *mod)
{
    const tp_style *s = mod->style;
    return s && s->hf && s->hf->bias_after_reduce && mod->kind == TP_MOD_LINEAR && tp_module_param(mod, "bias");
}

void tp_record_bias_add(interp *I, tp_module *mod, tp_val *v)
{
    tp_ir_op *op = &tp_record_op(I, TP_OP_BIAS_ADD, v, "out", v, NULL, NULL)->op;
    op->bias = tp_record_param(I, tp_module_param(mod, "bias"));
    op->m = tp_local_rows(I, v);
    op->n = tp_local_size(I, v, v->rank - 1);
    op->scale = 1.0;
}
