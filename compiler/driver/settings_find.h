/* settings_find.h: which settings file (settings.h) a plan is checked
 * with, as ruff finds its own: --config FILE when given; none under
 * --isolated; else the nearest walking up from the plan's directory to
 * the project's root (project_dirs.h), where in each directory a
 * .tpcc.toml comes before a pyproject.toml, and a pyproject.toml without
 * a [tool.tpcc] table is passed over. Each file is read once a run. */
#ifndef TPCC_SETTINGS_FIND_H
#define TPCC_SETTINGS_FIND_H

#include <stddef.h>

#include "compiler/driver/settings.h"

typedef struct tp_settings_cache {
    char **paths;
    tp_settings **settings;     /* NULL for a pyproject.toml without [tool.tpcc] */
    int count;
} tp_settings_cache;

/* The settings of a plan in directory dir (config: --config FILE, or
 * NULL to look for one): 0 with *out the settings (NULL: none; they live
 * in the cache), or -1 with the message in err. */
int tp_settings_for(tp_settings_cache *c, const char *dir, const char *config, const tp_settings **out, char *err,
                    size_t errlen);
void tp_settings_cache_free(tp_settings_cache *c);

#endif /* TPCC_SETTINGS_FIND_H */
