/* project_dirs.h: the directories a plan's project spans, for the
 * settings files (settings_find.c) and the models/ directories
 * (model_path.c) looked for around a plan. */
#ifndef TPCC_PROJECT_DIRS_H
#define TPCC_PROJECT_DIRS_H

/* `dir` resolved (realpath) and each directory above it, nearest first,
 * up to and including the first that holds a `.git` (a repository's root;
 * a file in a worktree or a submodule) or the filesystem's root: the walk
 * ruff and git make. *out holds count malloc'ed paths (free with
 * tp_project_dirs_free); 0 when `dir` cannot be resolved. */
int tp_project_dirs(const char *dir, char ***out);
void tp_project_dirs_free(char **dirs, int count);

#endif /* TPCC_PROJECT_DIRS_H */
