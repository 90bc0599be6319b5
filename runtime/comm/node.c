/* comm/node.c: see node.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/comm/node.h"
#include "util/errmsg.h"

void tp_node_alone(tp_rank_node *node)
{
    *node = (tp_rank_node){.index = 0, .count = 1, .local_rank = 0, .local_size = 1};
    /* the name is only for messages: a machine without one is "localhost" */
    if (gethostname(node->host, sizeof node->host - 1) != 0 || !node->host[0])
        snprintf(node->host, sizeof node->host, "localhost");
}

int tp_node_gpu(const tp_rank_node *node, int visible, char *err, size_t errlen)
{
    if (visible <= 0)
        return tp_error(err, errlen, "node %s shows this rank no usable GPU", node->host);
    /* more ranks than GPUs share them round-robin (gpu_share.h tells) */
    return node->local_rank % visible;
}

/* The marked numbers below n as ranges, "0-3,6" */
static void append_ranges(tp_buf *out, const bool *marked, int n)
{
    const char *sep = "";
    for (int i = 0; i < n; i++) {
        if (!marked[i])
            continue;
        int last = i;
        while (last + 1 < n && marked[last + 1])
            last++;
        if (last > i)
            tp_buf_appendf(out, "%s%d-%d", sep, i, last);
        else
            tp_buf_appendf(out, "%s%d", sep, i);
        sep = ",";
        i = last;
    }
}

/* One node's line: its ranks, and their dp and tp indices; "dp A x tp B"
 * only when the ranks are exactly those pairs, as a node holding whole tp
 * groups of consecutive ranks does. */
static void append_node(tp_buf *out, const tp_rank_node *nodes, int world, int tp, int node, bool *marks)
{
    int dp = world / tp, ranks = 0, replicas = 0, tps = 0;
    bool *rank_of = marks, *dp_of = marks + world, *tp_of = marks + 2 * world;
    memset(marks, 0, 3 * (size_t)world * sizeof *marks);
    const char *host = "";
    for (int r = 0; r < world; r++) {
        if (nodes[r].index != node)
            continue;
        host = nodes[r].host;
        ranks++;
        rank_of[r] = true;
        replicas += !dp_of[r / tp];
        dp_of[r / tp] = true;
        tps += !tp_of[r % tp];
        tp_of[r % tp] = true;
    }
    tp_buf_appendf(out, "node %d (%s): ", node, host);
    append_ranges(out, rank_of, world);
    tp_buf_append(out, ranks == replicas * tps ? " (" : " (part of ");
    if (dp > 1) {
        tp_buf_append(out, "dp ");
        append_ranges(out, dp_of, dp);
        tp_buf_append(out, ranks == replicas * tps ? " x " : ", ");
    }
    tp_buf_append(out, "tp ");
    append_ranges(out, tp_of, tp);
    tp_buf_append(out, ")\n");
}

enum { MAP_NODE_LINES = 8 };     /* a 64-rank job of 8 nodes prints them all */

void tp_node_rank_map(tp_buf *out, const tp_rank_node *nodes, int world, int tp, const char *indent)
{
    int count = 0;
    for (int r = 0; r < world; r++)
        if (nodes[r].index + 1 > count)
            count = nodes[r].index + 1;
    bool *marks = tp_xcalloc(3 * (size_t)world, sizeof *marks);
    for (int node = 0; node < count && node < MAP_NODE_LINES; node++) {
        if (node)
            tp_buf_append(out, indent);
        append_node(out, nodes, world, tp, node, marks);
    }
    if (count > MAP_NODE_LINES)
        tp_buf_appendf(out, "%s... and %d more nodes\n", indent, count - MAP_NODE_LINES);
    free(marks);
}

int tp_node_tp_spans(const tp_rank_node *nodes, int world, int tp, char *msg, size_t msglen)
{
    int spanning = 0, group = -1, other = 0;     /* the first spanning group, and its first rank elsewhere */
    for (int g = 0; g < world / tp; g++) {
        int r = g * tp;
        while (r < (g + 1) * tp && nodes[r].index == nodes[g * tp].index)
            r++;
        if (r == (g + 1) * tp)
            continue;
        if (!spanning++) {
            group = g;
            other = r;
        }
    }
    if (!spanning)
        return 0;
    char more[64] = "";
    if (spanning > 1)
        snprintf(more, sizeof more, " (and %d more group%s)", spanning - 1, spanning > 2 ? "s" : "");
    snprintf(msg, msglen,
             "tensor-parallel group %d (ranks %d-%d) spans nodes %d (%s) and %d (%s)%s: its collectives, on every "
             "layer, cross the network; Megatron keeps tp inside a node; launch with -ppn a multiple of %d "
             "(srun: --ntasks-per-node)",
             group, group * tp, (group + 1) * tp - 1, nodes[group * tp].index, nodes[group * tp].host, nodes[other].index,
             nodes[other].host, more, tp);
    return spanning;
}
