/* comm/gpu_share.c: see gpu_share.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm/gpu_share.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

/* The distinct devices among the ranks of `node` and the node's ranks. */
static int devices_on(const tp_rank_gpu *ranks, int world, int node, int *count)
{
    int devices = 0;
    *count = 0;
    for (int r = 0; r < world; r++) {
        if (ranks[r].node.index != node)
            continue;
        ++*count;
        int first = 0;     /* the first rank of the node on this device */
        while (ranks[first].node.index != node || strcmp(ranks[first].bus_id, ranks[r].bus_id))
            first++;
        devices += first == r;
    }
    return devices;
}

int tp_gpu_sharing(const tp_rank_gpu *ranks, int world, char *msg, size_t msglen)
{
    int sharing = 0, nodes = 0;
    for (int r = 0; r < world; r++)
        if (ranks[r].node.index + 1 > nodes)
            nodes = ranks[r].node.index + 1;
    for (int node = 0; node < nodes; node++) {
        int count, devices = devices_on(ranks, world, node, &count);
        if (devices >= count)
            continue;
        if (!sharing++) {
            const char *host = "";
            for (int r = 0; r < world && !*host; r++)
                if (ranks[r].node.index == node)
                    host = ranks[r].node.host;
            snprintf(msg, msglen, "%d ranks share %d GPU%s on node %d (%s)", count, devices, devices == 1 ? "" : "s",
                     node, host);
        }
    }
    return sharing;
}

int tp_gpus_shared(tp_comm *host, const char *bus_id, bool *shared, char *msg, size_t msglen, char *err,
                   size_t errlen)
{
    tp_rank_gpu mine = {.node = host->node};
    snprintf(mine.bus_id, sizeof mine.bus_id, "%s", bus_id);
    tp_rank_gpu *all = host->rank == 0 ? tp_xcalloc((size_t)host->world, sizeof *all) : NULL;
    char why[400];
    if (host->ops->gather_bytes(host, all, &mine, sizeof mine, why, sizeof why)) {
        free(all);
        return tp_error(err, errlen, "gathering which GPU each rank runs on: %s", why);
    }
    /* rank 0's verdict, told to every rank as a max over host memory */
    float verdict = all && tp_gpu_sharing(all, host->world, msg, msglen) ? 1.0f : 0.0f;
    free(all);
    if (host->ops->all_reduce(host, TP_F32, &verdict, 1, 1, why, sizeof why))
        return tp_error(err, errlen, "telling every rank whether GPUs are shared: %s", why);
    *shared = verdict > 0;
    return 0;
}
