/* data_split.c: the data-split check.
 *
 * Every style takes the model's inputs as the same tensor on every rank of
 * the tensor-parallel group: a plain input is labelled Replicate()
 * (DTensor.from_local, which checks nothing), and the ranks then combine
 * what each computed from it (an embedding's masked rows, a Rowwise
 * linear's partial sums). A DistributedSampler built over the whole world,
 * or over a mesh dimension that includes tp, hands each tp rank its own
 * batch instead: nothing fails, and the loss and the gradients are sums of
 * pieces of different batches (pytorch#119343, where the maintainers note
 * that no rank can see the others' data to check it). The sampler must
 * split over the data-parallel dimensions only: DistributedSampler(
 * num_replicas=mesh["dp"].size(), rank=mesh["dp"].get_local_rank()).
 * One that leaves out a data-parallel dimension works but costs: those
 * replicas train on the same batches (a warning). */
#include "compiler/sema/data_split.h"
#include <stdlib.h>
#include "util/xalloc.h"

/* Where the batch enters the model: the root forward's first input. */
static tp_span input_span(const tp_model *m)
{
    const tp_node *fwd = tp_module_forward(m->root);
    for (int i = 0; fwd && i < fwd->nkids; i++)
        if (fwd->kids[i]->kind == N_PARAM)
            return fwd->kids[i]->span;
    return TP_NO_SPAN;
}

/* A data-parallel dimension the sampler leaves out: its replicas read the
 * same batches and repeat each other's steps. */
static void warn_unsplit_replicas(const tp_plan *p, tp_diags *diags)
{
    for (int i = 0; i < p->mesh_ndim; i++) {
        if (i == p->tp_dim || p->mesh_size[i] <= 1 || p->train.sampler_over[i])
            continue;
        tp_diag *d = tp_diag_add(diags, TP_WARNING, p->train.sampler->span, "data-split",
                                 "sampler_dims leaves out the data-parallel dimension '%s': its %lld replicas read "
                                 "the same batches, so their averaged gradients are one replica's and the other "
                                 "replicas' work is repeated (tprun gives each replica its own slice of every step)",
                                 p->mesh_name[i], (long long)p->mesh_size[i]);
        tp_diag_help(d, "split the data over '%s' too: DistributedSampler(num_replicas=mesh[\"%s\"].size(), "
                        "rank=mesh[\"%s\"].get_local_rank())", p->mesh_name[i], p->mesh_name[i], p->mesh_name[i]);
    }
}

void tp_check_data_split(const tp_model *m, const tp_plan *p, tp_diags *diags)
{
    int tp = p->tp_dim;
    if (!p->train.sampler)
        return;
    warn_unsplit_replicas(p, diags);
    if (!p->train.sampler_over[tp] || p->mesh_size[tp] <= 1)
        return;
    tp_diag *d = tp_diag_add(diags, TP_ERROR, p->train.sampler->span, "data-split",
                             "sampler_dims splits the data over '%s': the sampler gives each of the %lld ranks of a "
                             "tensor-parallel group its own batch, but the styles take the model's inputs as the "
                             "same on every '%s' rank (Replicate(), labelled by from_local, which checks nothing); "
                             "the ranks combine embedding rows and partial sums of different batches, so the loss "
                             "and every gradient are silently wrong", p->mesh_name[tp], (long long)p->mesh_size[tp],
                             p->mesh_name[tp]);
    tp_span in = input_span(m);
    if (in.file >= 0)
        tp_diag_note_at(d, in, "the batch enters the model here, one batch per tensor-parallel group");
    tp_buf dims;
    tp_buf_init(&dims);
    int n = 0;
    for (int i = 0; i < p->mesh_ndim; i++)
        if (i != tp && p->train.sampler_over[i])
            tp_buf_appendf(&dims, "%s\"%s\"", n++ ? ", " : "", p->mesh_name[i]);
    if (n == 1)
        tp_buf_append(&dims, ",");
    char *fixed = tp_xasprintf("(%s)", dims.data ? dims.data : "");
    tp_diag_help(d, "split the data over the data-parallel dimensions only: "
                    "DistributedSampler(num_replicas=mesh[\"dp\"].size(), rank=mesh[\"dp\"].get_local_rank()), "
                    "sampler_dims = %s%s", fixed, n ? "" : " (every rank reads the same batch)");
    tp_diag_fixit(d, p->train.sampler->span, fixed);
    free(fixed);
    tp_buf_free(&dims);
}
