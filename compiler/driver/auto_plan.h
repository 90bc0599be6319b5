/* auto_plan.h: `--tp-plan auto`, the plan transformers itself applies
 * with from_pretrained(..., tp_plan="auto"): the family's
 * base_model_tp_plan under the base model prefix and its causal LM
 * class's _tp_plan, shipped as plans/hf/<model_type>.plan. */
#ifndef TPCC_AUTO_PLAN_H
#define TPCC_AUTO_PLAN_H

#include "compiler/diag/diag.h"

/* Where the shipped plans are: $TPCC_PLANS_DIR, else the installation's
 * share/tpcc/plans beside the running tpcc when it exists, else the source
 * tree's plans/ (TPCC_PLANS_DIR at build time). malloc'ed. */
char *tp_plans_dir(void);

/* The shipped plan for the config.json at `config_path`, chosen by its
 * model_type: a malloc'ed path, or NULL with a finding in diags pointing
 * into config.json (added to src): errors "io" when it cannot be read,
 * "config" without a model_type, "plan" when no plan is shipped for it
 * (the message lists the ones there are, the help the plans of another
 * layout whose model implements it); "unsupported" for a
 * mixture-of-experts family, for which no plan can be written yet. */
char *tp_auto_plan(const char *config_path, const char *plans_dir, tp_sources *src, tp_diags *diags);

#endif /* TPCC_AUTO_PLAN_H */
