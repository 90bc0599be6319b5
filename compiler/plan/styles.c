/* styles.c: the rows of compiler/plan/styles.def (see styles.h). */
#include <string.h>
#include "compiler/plan/styles.h"

#define KEYWORDS(...) __VA_ARGS__
#define R {TP_REPLICATE, 0}
#define S_LAST {TP_SHARD, -1}
#define UNUSED {TP_REPLICATE, 0}
#define NO_HF -1

#define EXPORTS(...) __VA_ARGS__
#define STYLE(NAME, class, keywords, modules, params, hf, input, output, local_in, local_out, exports) \
    static const char *const keywords_##NAME[] = {keywords, NULL};                                  \
    static const tp_style_arg exports_##NAME[] = {exports, TP_ARG_END};
#include "compiler/plan/styles.def"
#undef STYLE

const tp_style_row tp_style_rows[TP_STYLE_NCLASSES] = {
#define STYLE(NAME, class, keywords, modules, params, hf, input, output, local_in, local_out, exports)                    \
    [TP_STYLE_##NAME] = {#class, keywords_##NAME, (int)(sizeof keywords_##NAME / sizeof *keywords_##NAME) - 1, \
                         TP_STYLE_TAKES_##modules, TP_STYLE_PARAMS_##params, hf, input, output, local_in, local_out, \
                         exports_##NAME},
#include "compiler/plan/styles.def"
#undef STYLE
};

const char *const tp_style_class_names[TP_STYLE_NCLASSES] = {
#define STYLE(NAME, class, keywords, modules, params, hf, input, output, local_in, local_out, exports) [TP_STYLE_##NAME] = #class,
#include "compiler/plan/styles.def"
#undef STYLE
};

int tp_style_find_class(const char *name)
{
    for (int k = 0; k < TP_STYLE_NCLASSES; k++)
        if (!strcmp(name, tp_style_class_names[k]))
            return k;
    return -1;
}

tp_style_kind tp_style_of_hf(tp_hf_hooks hooks)
{
    for (int k = 0; k < TP_STYLE_NCLASSES; k++)
        if (tp_style_rows[k].hf == (int)hooks)
            return (tp_style_kind)k;
    return TP_STYLE_IDENTITY;
}

bool tp_style_distributes_params(tp_style_kind kind)
{
    return kind < TP_STYLE_NCLASSES && tp_style_rows[kind].params != TP_STYLE_PARAMS_UNTOUCHED;
}
