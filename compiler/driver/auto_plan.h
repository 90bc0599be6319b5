/* auto_plan.h: `--tp-plan auto`, the plan transformers itself applies
 * with from_pretrained(..., tp_plan="auto"): the family's
 * base_model_tp_plan under the base model prefix and its causal LM
 * class's _tp_plan, shipped as plans/hf/<model_type>.plan. */
#ifndef TPCC_AUTO_PLAN_H
#define TPCC_AUTO_PLAN_H

#include <stddef.h>

/* Where the shipped plans are: $TPCC_PLANS_DIR, else the installation's
 * share/tpcc/plans beside the running tpcc when it exists, else the source
 * tree's plans/ (TPCC_PLANS_DIR at build time). malloc'ed. */
char *tp_plans_dir(void);

/* The shipped plan for the config.json at `hf_config` (a file, or a
 * directory holding config.json), chosen by its model_type: a malloc'ed
 * path, or NULL with a message in err (no model_type, or no plan shipped
 * for it: the message lists the ones there are). */
char *tp_auto_plan(const char *hf_config, const char *plans_dir, char *err, size_t errlen);

#endif /* TPCC_AUTO_PLAN_H */
