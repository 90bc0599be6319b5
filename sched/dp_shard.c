/* dp_shard.c: see dp_shard.h. */
#include "sched/dp_shard.h"
#include <string.h>

const char *const tp_dp_shard_names[TP_DP_SHARD_COUNT] = {"none", "optimizer", "gradients", "parameters"};

int tp_dp_shard_parse(const char *name)
{
    for (int i = 0; i < TP_DP_SHARD_COUNT; i++)
        if (!strcmp(name, tp_dp_shard_names[i]))
            return i;
    return -1;
}
