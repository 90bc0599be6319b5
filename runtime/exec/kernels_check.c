/* kernels_check.c: see kernels_check.h. */
#include <stdio.h>
#include "runtime/exec/kernels_check.h"
#include "runtime/exec/op_view.h"

const char *tr_backend_missing_kernel(const tp_backend *be, tp_op_kind k)
{
#define KERNEL(member) \
    if (!be->member)   \
        return #member;
#define NO_KERNEL
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    case TP_OP_##NAME:                                                                                         \
        kernels break;
    switch (k) {
#include "sched/ops.def"
    case TP_OP_COUNT:
        break;
    }
#undef OP
#undef NO_KERNEL
#undef KERNEL
    return NULL;
}

int tr_exec_check_kernels(const tr_schedule *s, const tp_backend *be, char *err, size_t errlen)
{
    for (int i = 0; i < s->nops; i++) {
        const char *missing = tr_backend_missing_kernel(be, s->ops[i].kind);
        if (!missing)
            continue;
        char name[600];
        snprintf(err, errlen, "%s: the %s backend has no %s kernel; run the schedule with --backend cpu, which has "
                 "every op's kernels%s", tr_op_describe(s, i, name, sizeof name), be->name, missing,
                 s->dtype == TP_F32 ? "" : " (for fp32 schedules: compile it with tpcc --dtype fp32)");
        return -1;
    }
    return 0;
}
