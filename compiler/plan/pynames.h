/* pynames.h: the Python a plan pasted from a training script carries with
 * its dicts: import lines, other names for PyTorch's classes, and
 * conditional expressions over the script's flags.
 *
 *   from torch.distributed.tensor.parallel import ColwiseParallel as colwise_parallel
 *   import torch.distributed.tensor.parallel as tp
 *   rowwise_parallel, prepare_module_input = (RowwiseParallel, PrepareModuleInput)
 *   "output": ColwiseParallel(output_layouts=Shard(-1) if loss_parallel else Replicate())
 *
 * A binding holds from its line to the end of the file and shadows the bare
 * name, as in Python; PyTorch's class names need no import. A value is read
 * by desugaring it: every callee becomes the PyTorch class it names and every
 * `a if c else b`, `not c`, `c and d` over configuration values becomes the
 * branch or the boolean it evaluates to, spans kept, so plan.c reads
 * PyTorch's constructors only. */
#ifndef TPCC_PYNAMES_H
#define TPCC_PYNAMES_H

#include <stdbool.h>
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "util/map.h"

typedef enum tp_pyname_kind {
    TP_PYNAME_CLASS,     /* a PyTorch class or function tpcc knows the module of */
    TP_PYNAME_MODULE,    /* import a.b as c: c is the module a.b */
    TP_PYNAME_FOREIGN,   /* from a module tpcc does not read (torchao, torchtitan, ...) */
} tp_pyname_kind;

typedef struct tp_pyname {
    char *name;          /* the name the file binds */
    tp_pyname_kind kind;
    char *module;        /* where it comes from: "torch.distributed.tensor.parallel" */
    char *target;        /* the class or function's own name ("ColwiseParallel"); NULL for a module */
} tp_pyname;

typedef struct tp_pynames {
    tp_pyname *items;
    int count, cap;
    tp_map index;           /* name -> position in items: a plan binds any number */
    const tp_node *file;    /* for "bound later" notes */
    tp_config *c;
    tp_diags *d;
} tp_pynames;

void tp_pynames_init(tp_pynames *n, const tp_node *file, tp_config *c);
void tp_pynames_free(tp_pynames *n);

/* Whether an item of a plan file binds names (an import or a top-level
 * assignment); tp_pynames_bind reads it, reporting what Python would
 * refuse (a name a module lacks, a module that does not exist, an unpacking
 * of the wrong length). */
bool tp_pynames_is_binding(const tp_node *item);
void tp_pynames_bind(tp_pynames *n, const tp_node *item);

/* The value of a plan entry with its names resolved and its conditions
 * evaluated (a new tree the caller frees), or NULL after reporting why. */
tp_node *tp_pynames_desugar(tp_pynames *n, const tp_node *value);

/* A model file has no imports: report any binding item there. */
void tp_pynames_reject_in_model(const tp_node *model_file, tp_diags *d);

#endif /* TPCC_PYNAMES_H */
