/* clobber.c: see clobber.h. */
#define _XOPEN_SOURCE 700   /* realpath */
#include "runtime/job/clobber.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/train/save.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/suffix.h"
#include "util/xalloc.h"

typedef struct named {
    const char *option, *path;
} named;

/* A file of a checkpoint directory that a run reads: its tensors and
 * config (model.safetensors, shards, the index, config.json). */
static bool in_checkpoint(const char *dir, const char *out)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return false;
    const char *slash = strrchr(out, '/');
    const char *name = slash ? slash + 1 : out;
    char *parent = tp_path_parent(out);
    bool inside = tp_same_file(parent, dir) &&
                  (tp_ends_with(name, ".safetensors") || tp_ends_with(name, ".index.json") || !strcmp(name, "config.json"));
    free(parent);
    return inside;
}

/* Whether the directory `dir` holds `path` (both resolved: links, ..). */
static bool holds(const char *dir, const char *path)
{
    char *d = realpath(dir, NULL), *p = path ? realpath(path, NULL) : NULL;
    size_t n = d ? strlen(d) : 0;
    bool inside = d && p && !strncmp(d, p, n) && (p[n] == '/' || p[n] == '\0' || n == 1);
    free(d);
    free(p);
    return inside;
}

int tr_outputs_spare_inputs(const tr_options *o, char *err, size_t errlen)
{
    const named outputs[] = {{"--out", o->out}, {"--log-json", o->train.log_json},
                             {"--grads-out", o->train.grads_out}, {"--profile-json", o->profile_json},
                             {"--trace", o->trace}};
    named inputs[6 + 2 * TR_STREAM_KINDS] = {{"the schedule", o->schedule}, {"--weights", o->weights},
                                             {"--tokens", o->tokens}, {"--labels", o->labels},
                                             {"--compare", o->compare}, {"--resume", o->train.resume}};
    named *stream = inputs + 6;   /* --data and the streams beside it, the evaluation's too */
    for (int k = 0; k < TR_STREAM_KINDS; k++) {
        *stream++ = (named){tr_streams[k].flag, o->train.streams[k]};
        *stream++ = (named){tr_streams[k].eval_flag, o->train.eval[k]};
    }
    for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++) {
        if (!outputs[i].path)
            continue;
        for (size_t k = 0; k < sizeof inputs / sizeof *inputs; k++)
            if (tp_same_file(outputs[i].path, inputs[k].path) || in_checkpoint(inputs[k].path, outputs[i].path))
                return tp_error(err, errlen, "%s %s would overwrite %s%s '%s', an input of this run: nothing was "
                                "run; name another output file", outputs[i].option, outputs[i].path,
                                inputs[k].option[0] == '-' ? "the file of " : "", inputs[k].option, inputs[k].path);
    }
    /* --save replaces its directory as a whole, after the last step */
    char *save = o->train.save ? tr_save_name(o->train.save, err, errlen) : NULL;
    if (o->train.save && !save)
        return -1;
    for (size_t k = 0; save && k < sizeof inputs / sizeof *inputs; k++)
        if (holds(save, inputs[k].path)) {
            tp_error(err, errlen, "--save %s would replace the directory holding %s '%s', an input of this run: "
                     "nothing was run; save into another directory", o->train.save, inputs[k].option, inputs[k].path);
            free(save);
            return -1;
        }
    free(save);
    /* the training outputs are written after the steps: their places are
     * checked before the first */
    const named late[] = {{"--log-json", o->train.log_json}, {"--grads-out", o->train.grads_out}};
    char why[600];
    for (size_t i = 0; i < sizeof late / sizeof *late; i++)
        if (late[i].path && tp_check_output_path(late[i].path, false, why, sizeof why))
            return tp_error(err, errlen, "%s: %s: nothing was run", late[i].option, why);
    return 0;
}
