/* hf_names.c: names transformers defines (see hf_names.h), as
 * transformers 5.23 registers them: modeling_rope_utils.py's
 * ROPE_INIT_FUNCTIONS, activations.py's ACT2CLS and the model_types of its
 * mixture-of-experts families. */
#include <string.h>
#include "compiler/front/hf_names.h"

static const char *const rope_types[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "su"};

static const char *const activations[] = {
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
    "gelu_accurate", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2", "relu6",
    "sigmoid", "silu", "swish", "tanh", "prelu", "xielu",
};

static const char *const moe_model_types[] = {
    "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "phimoe",
    "granitemoe", "jetmoe", "jamba",
};

static bool listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

bool tp_hf_rope_type_defined(const char *type)
{
    return listed(type, rope_types, sizeof rope_types / sizeof *rope_types);
}

bool tp_hf_activation_defined(const char *name)
{
    return listed(name, activations, sizeof activations / sizeof *activations);
}

bool tp_hf_moe_model_type(const char *model_type)
{
    return listed(model_type, moe_model_types, sizeof moe_model_types / sizeof *moe_model_types);
}
