/* model_path.h: where a plan's `model "..."` file is found. */
#ifndef TPCC_MODEL_PATH_H
#define TPCC_MODEL_PATH_H

/* The model file a plan at plan_path names as ref: ref relative to the
 * plan's directory (absolute refs as they are) when that file exists;
 * else, for a relative ref, its file name in each directory of
 * TPCC_MODEL_PATH (colon-separated), then in the models directory of
 * this installation (BIN/../share/tpcc/models, next to the running tpcc),
 * the first that exists; else the plan-relative path, so the error names
 * it. malloc'ed. */
char *tp_find_model(const char *plan_path, const char *ref);

/* BIN/../share/tpcc/<what> beside the bin/ directory holding the running
 * tpcc (Linux: /proc/self/exe), so an installation works under any
 * prefix; it may not exist. malloc'ed, or NULL when the executable's path
 * is unknown. */
char *tp_installed_dir(const char *what);

/* The models directory tpcc ships: the installation's
 * (BIN/../share/tpcc/models) when it exists, else the source tree's
 * models/ this tpcc was built from (TPCC_MODELS_DIR at build time), as
 * tp_plans_dir() finds the plans. malloc'ed. */
char *tp_models_dir(void);

#endif /* TPCC_MODEL_PATH_H */
