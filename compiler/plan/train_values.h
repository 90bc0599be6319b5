/* train_values.h: the keys of a plan's train { } block that set the
 * optimizer, the clipping and the learning-rate schedule, as a PyTorch
 * script names them (sched/train_settings.h's table):
 *
 *   train {
 *       lr = 3e-4               # torch.optim.AdamW(params, lr=3e-4,
 *       betas = (0.9, 0.95)     #     betas=(0.9, 0.95), eps=1e-8,
 *       eps = 1e-8              #     weight_decay=0.1) over the matrices
 *       weight_decay = 0.1
 *       decay_all = False       # True: over norms and biases too
 *       max_grad_norm = 1.0     # clip_grad_norm_(model.parameters(), 1.0)
 *       schedule = "cosine"     # "cosine", "constant", "linear" or "wsd"
 *       warmup_steps = 100      # LinearLR(start_factor=0.1, total_iters=100)
 *       start_factor = 0.1
 *       min_lr = 3e-5           # CosineAnnealingLR(eta_min=3e-5)
 *       decay_steps = 200       # "wsd": get_wsd_schedule(num_decay_steps=200,
 *       decay_type = "linear"   #        decay_type="linear")
 *       no_decay = ("bias", "norm")   # parameters whose name holds one: no decay
 *       ignore_index = 0        # CrossEntropyLoss(ignore_index=0)
 *       pad_id = 0              # attention_mask = (ids != 0)
 *       eos_id = 2              # a document ends after each 2 (packed rows)
 *   }
 *
 * Each value is checked where it is written (type and range), and the
 * block as a whole for keys that contradict each other. The given ones go
 * into the schedule's "train" object: tprun's defaults, which its flags
 * override. pad_id and eos_id give the schedule its segments input, as
 * tpcc --segments does (runtime/train/segments.h). */
#ifndef TPCC_TRAIN_VALUES_H
#define TPCC_TRAIN_VALUES_H

#include "compiler/front/config.h"
#include "sched/train_settings.h"

struct tp_train_spec;

/* The value `v` of key k into t, or an error at v for a value of the
 * wrong type or out of range, or given a second time. */
void tp_train_value_read(struct tp_train_spec *t, const tp_train_key *k, const tp_node *v, tp_config *c);

/* After the block: errors for keys that contradict each other (min_lr
 * above lr; decay_steps or decay_type without schedule = "wsd"; "wsd"
 * without decay_steps; no_decay with decay_all = True; eos_id equal to
 * pad_id), at the key that does. */
void tp_train_values_check(const struct tp_train_spec *t, tp_diags *d);

#endif /* TPCC_TRAIN_VALUES_H */
