/* grown.c: the dimensions a lying relabel grew tp-fold. The relabel's
 * diagnostic (hooks.c) is completed with what happens downstream: the
 * first op that sees the grown length next to the true one, where PyTorch
 * fails, or, when none does, that it may fail later. */
#include <stdlib.h>
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

void tp_grown_track(interp *I, const tp_diag *g, const tp_val *x, int dim)
{
    I->grown = tp_xgrow(I->grown, I->ngrown, &I->capgrown, sizeof *I->grown, 4);
    I->grown[I->ngrown++] = (grown_dim){(int)(g - I->d->items), x->shape[dim], x->shape[dim] * I->tp, x->is_index,
                                        false};
}

/* The grown tensor meets one of the true length: PyTorch fails there
 * ("The size of tensor a must match the size of tensor b"). */
static void met(interp *I, grown_dim *gd, tp_span span, const char *what)
{
    tp_diag *g = &I->d->items[gd->diag];
    char *m = tp_xasprintf("%s; in this model PyTorch then fails at %s", g->message, what);
    free(g->message);
    g->message = m;
    if (span.file >= 0)
        tp_diag_note_at(g, span, "where the grown tensor meets the true length");
    gd->met = true;
}

void tp_grown_meet(interp *I, int64_t len_a, int64_t len_b, tp_span span, const char *op, const char *with)
{
    for (int i = 0; i < I->ngrown; i++) {
        grown_dim *gd = &I->grown[i];
        if (gd->met || !((len_a == gd->grown_len && len_b == gd->true_len) ||
                         (len_b == gd->grown_len && len_a == gd->true_len)))
            continue;
        char *at = tp_xasprintf("%s with %s of the true length (%lld)", op, with, (long long)gd->true_len);
        met(I, gd, span, at);
        free(at);
    }
}

/* Hugging Face computes RoPE's cos/sin once from the embeddings' length:
 * a tensor grown after them no longer lines up. */
void tp_grown_meet_rope(interp *I, const tp_val *x, tp_span span)
{
    for (int i = 0; i < I->ngrown; i++) {
        grown_dim *gd = &I->grown[i];
        if (gd->met || gd->ids || x->rank < 3 || x->shape[x->rank - 3] != gd->grown_len)
            continue;
        char *at = tp_xasprintf("rope(), whose cos/sin cover the true %lld positions", (long long)gd->true_len);
        met(I, gd, span, at);
        free(at);
    }
}

/* Growths nothing downstream noticed. */
void tp_grown_finish(interp *I)
{
    for (int i = 0; i < I->ngrown; i++) {
        tp_diag *g = &I->d->items[I->grown[i].diag];
        if (I->grown[i].met)
            continue;
        char *m = tp_xasprintf("%s; it may fail later or compute on the wrong sequence", g->message);
        free(g->message);
        g->message = m;
    }
    free(I->grown);
    I->grown = NULL;
    I->ngrown = 0;
}
