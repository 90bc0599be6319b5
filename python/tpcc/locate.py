"""Finding the tpcc binary and the model file of a model's family."""

import os
import shutil

# transformers' model_type -> the shipped model file that implements it
# (GPT-2 in Hugging Face's layout, Conv1D projections: gpt2-hf.model)
FAMILIES = {
    "llama": "llama.model",
    "mistral": "mistral.model",
    "qwen2": "qwen2.model",
    "qwen3": "qwen3.model",
    "phi3": "phi3.model",
    "gemma": "gemma.model",
    "gemma2": "gemma2.model",
    "gpt2": "gpt2-hf.model",
}

# the architecture names config.json gives, for configs without model_type
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Phi3ForCausalLM": "phi3", "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2", "GPT2LMHeadModel": "gpt2",
}


class TpccNotFound(RuntimeError):
    """The tpcc binary or the model files could not be found."""


def binary():
    """TPCC, else tpcc on PATH."""
    path = os.environ.get("TPCC") or shutil.which("tpcc")
    if not path or not os.access(path, os.X_OK):
        raise TpccNotFound("tpcc not found: put it on PATH or set TPCC=/path/to/tpcc "
                           "(build it with cmake, or install the package)")
    return path


def models_dir(tpcc_path):
    """TPCC_MODELS, else models/ next to the binary, one level up (a build
    directory in the source tree), or share/tpcc/models of an install."""
    env = os.environ.get("TPCC_MODELS")
    if env:
        if not os.path.isdir(env):
            raise TpccNotFound(f"TPCC_MODELS={env} is not a directory")
        return env
    here = os.path.dirname(os.path.realpath(tpcc_path))
    for d in (os.path.join(here, "models"), os.path.join(here, "..", "models"),
              os.path.join(here, "..", "share", "tpcc", "models")):
        if os.path.isfile(os.path.join(d, "llama.model")):
            return os.path.normpath(d)
    raise TpccNotFound(f"no models/ directory next to {tpcc_path}: set TPCC_MODELS to the directory "
                       "holding llama.model")


def family(config):
    """The family key of a transformers config dict: model_type, else the
    first architecture."""
    mt = config.get("model_type")
    if mt in FAMILIES:
        return mt
    for arch in config.get("architectures") or ():
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    raise TpccNotFound(f"no tpcc model file for model_type {mt!r} (architectures "
                       f"{config.get('architectures')}); tpcc ships {', '.join(sorted(FAMILIES))}: "
                       "pass model_file= for another")


def model_file(config, tpcc_path):
    return os.path.join(models_dir(tpcc_path), FAMILIES[family(config)])
