/* model_path.h: where a plan's `model "..."` file is found. */
#ifndef TPCC_MODEL_PATH_H
#define TPCC_MODEL_PATH_H

/* The directories a plan finds its model in by file name, in order:
 *   - each directory of TPCC_MODEL_PATH (colon-separated);
 *   - the settings' model-path (settings.h), already absolute;
 *   - the models/ directories in the plan's directory and in each one
 *     above it, up to the project's root (project_dirs.h), nearest first:
 *     where a plans/ directory beside a models/ one (the repository's
 *     layout, plans/hf/ included) finds its models, wherever the pair is
 *     copied. Only real directories: a models/ that is a symbolic link
 *     could lead anywhere;
 *   - tpcc's own models (tp_models_dir).
 * Each directory once. The same list says what a plan may read
 * (input_roots.h). */
typedef struct tp_model_dirs {
    char **dirs;
    int count;
} tp_model_dirs;

void tp_model_dirs_for_plan(tp_model_dirs *d, const char *plan_path, char *const *configured, int nconfigured);
void tp_model_dirs_free(tp_model_dirs *d);

/* The model file a plan at plan_path names as ref: ref relative to the
 * plan's directory when that file exists (an absolute ref as it is,
 * whether it exists or not); else ref's file name in the first of dirs
 * that has it; else NULL (tp_model_not_found says where it looked).
 * malloc'ed. */
char *tp_find_model(const char *plan_path, const char *ref, const tp_model_dirs *dirs);

/* For the error at the plan's model line when tp_find_model found
 * nothing: the message in err and where it looked (a note) in looked.
 * malloc'ed strings. */
void tp_model_not_found(const char *plan_path, const char *ref, const tp_model_dirs *dirs, char **err,
                        char **looked);

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
