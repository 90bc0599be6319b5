#!/usr/bin/env python3
"""Fixtures for tests/runtime/test_hf_parity.cc: tiny random Llama, Qwen2,
Mistral, Qwen3, Phi-3, Gemma, Gemma 2 and GPT-2 models run by transformers
itself (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM,
Qwen3ForCausalLM, Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM,
GPT2LMHeadModel), so that tprun's logits are checked against Hugging Face's
code, RoPE scaling, Qwen2's q/k/v biases, Qwen3's q_norm/k_norm, Phi-3's
fused projections and partial rotary, Gemma's (1 + w) norms, GELU and
embedding scale, Gemma 2's soft-capping and sandwich norms, and GPT-2's
Conv1D projections and fused c_attn included.

For each config below, tests/fixtures/hf/<name>/ gets
  config.json        as on the Hugging Face hub (rope_theta and rope_scaling
                     at the top level, legacy keys as old checkpoints write them),
                     or, for the *-saved names, as transformers 5 saves it
  model.safetensors  float32 weights (torch.manual_seed(0))
  tokens.npy         int32 [batch, seq]
  logits.npy         float32 [batch, seq, vocab]: transformers' forward

Needs torch, transformers, safetensors and numpy:
  python3 tools/hf_fixtures.py [OUT_DIR [NAME...]]
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

SEQ = 16
BATCH = 2
LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
}

# Qwen2: the same sizes; q/k/v carry biases (always, in Qwen2's code), and
# its sliding window is off as in every published Qwen2/2.5 config.
QWEN2 = dict(LLAMA, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
             sliding_window=None)
for key in ("attention_bias", "mlp_bias"):
    del QWEN2[key]

# Mistral: Llama's layout with MistralConfig's keys; its sliding window (4096
# here) is far above the 16 positions run, so it masks nothing.
MISTRAL = dict(LLAMA, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=4096)
for key in ("attention_bias", "mlp_bias"):
    del MISTRAL[key]

# Qwen3: head_dim its own key (16, not hidden // heads = 8), q_norm/k_norm
# over it, biases only with attention_bias; sliding window off as published.
QWEN3 = dict(LLAMA, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16, use_sliding_window=False,
             sliding_window=None)
del QWEN3["mlp_bias"]
# Phi-3: fused qkv_proj and gate_up_proj. Phi3Config's pad_token_id (32000)
# would lie outside the tiny vocabulary, so the token ids are set as a small
# checkpoint sets them.
PHI3 = dict(LLAMA, architectures=["Phi3ForCausalLM"], model_type="phi3", bos_token_id=1, eos_token_id=2,
            pad_token_id=None)
for key in ("attention_bias", "mlp_bias"):
    del PHI3[key]

# Gemma: head_dim set apart from hidden // heads, as in the published models
# (256 with hidden 3072 and 16 heads); the output head tied to the embedding.
# initializer_range 0.3 makes the MLP's activations large enough that the
# erf and tanh GELUs give logits 3e-3 apart.
GEMMA = dict(LLAMA, architectures=["GemmaForCausalLM"], model_type="gemma", rope_theta=10000.0, rms_norm_eps=1e-6,
             initializer_range=0.3)
for key in ("hidden_act", "attention_bias", "mlp_bias"):
    del GEMMA[key]

# Gemma 2: Gemma's sizes; the activation under Gemma2Config's own key.
GEMMA2 = dict(GEMMA, architectures=["Gemma2ForCausalLM"], model_type="gemma2",
              hidden_activation="gelu_pytorch_tanh")

# GPT-2: GPT2Config's own keys (n_embd, n_layer, n_head, n_positions); n_inner
# absent, so the MLP is 4 * n_embd wide. initializer_range 0.2 gives logits
# large enough that the erf and tanh GELUs differ.
GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 128,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 64,
    "initializer_range": 0.2,
}

# name -> (the family's base config, the keys that differ from it). original_max_position_embeddings
# is 8, below the 16 positions run, so that Llama 3's scaling matters.
CONFIGS = {
    "llama2-gqa": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                           "tie_word_embeddings": False}),
    "llama3-scaled": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
                              "tie_word_embeddings": False,
                              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}),
    "linear-scaled": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                              "tie_word_embeddings": False, "rope_scaling": {"type": "linear", "factor": 2.0}}),
    "mha": (LLAMA, {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}),
    "tied": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                     "tie_word_embeddings": True}),
    "qwen2-gqa": (QWEN2, {"num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                          "tie_word_embeddings": False}),
    "qwen2-tied": (QWEN2, {"num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                           "tie_word_embeddings": True}),
    "mistral-gqa": (MISTRAL, {"num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
                              "tie_word_embeddings": False}),
    "mistral-kv4": (MISTRAL, {"num_attention_heads": 8, "num_key_value_heads": 4, "rope_theta": 1000000.0,
                              "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    "qwen3-gqa": (QWEN3, {"num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                          "tie_word_embeddings": False}),
    "qwen3-bias-tied": (QWEN3, {"num_key_value_heads": 4, "head_dim": 8, "attention_bias": True,
                                "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}),
    "phi3-gqa": (PHI3, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                        "tie_word_embeddings": False}),
    # Phi-4-mini's partial rotary: the first half of each head's 8 dims rotate
    "phi3-partial": (PHI3, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                            "tie_word_embeddings": False, "partial_rotary_factor": 0.5}),
    # 4 kv heads: q, k and v each split over 4 ranks
    "phi3-mha": (PHI3, {"num_key_value_heads": 4, "rope_theta": 250000.0, "rms_norm_eps": 1e-6,
                        "tie_word_embeddings": False, "partial_rotary_factor": 0.75}),
    # MHA, head_dim 16 (hidden // heads is 8), the tanh GELU by its 5.x name
    "gemma-mha": (GEMMA, {"num_key_value_heads": 4, "head_dim": 16, "hidden_act": "gelu_pytorch_tanh",
                          "tie_word_embeddings": True}),
    # GQA with the legacy "gelu" of the published configs (GemmaConfig makes it the tanh form)
    "gemma-gqa": (GEMMA, {"num_key_value_heads": 2, "head_dim": 8, "hidden_act": "gelu",
                          "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}),
    # untied, biased attention, eps 1e-5, GPT-2's gelu_new
    "gemma-bias-untied": (GEMMA, {"num_key_value_heads": 2, "head_dim": 8, "hidden_act": "gelu_new",
                                  "attention_bias": True, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    # GQA; caps low enough to bite, query_pre_attn_scalar apart from head_dim,
    # a sliding window of exactly seq (every key still seen)
    "gemma2-gqa": (GEMMA2, {"num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 24,
                            "attn_logit_softcapping": 10.0, "final_logit_softcapping": 5.0, "sliding_window": 16,
                            "tie_word_embeddings": True}),
    # MHA with Gemma2Config's defaults: caps 50 and 30, query_pre_attn_scalar 256, window 4096
    "gemma2-mha": (GEMMA2, {"num_key_value_heads": 4, "head_dim": 8, "tie_word_embeddings": True}),
    # capping off (null), untied
    "gemma2-nocap": (GEMMA2, {"num_key_value_heads": 2, "head_dim": 8, "attn_logit_softcapping": None,
                              "final_logit_softcapping": None,
                              "tie_word_embeddings": False}),
    # GPT2Config's defaults: gelu_new, eps 1e-5, lm_head tied to wte
    "gpt2-tied": (GPT2, {}),
    # untied, an n_inner of its own, the exact GELU, eps 1e-3
    "gpt2-untied": (GPT2, {"n_inner": 48, "activation_function": "gelu", "layer_norm_epsilon": 1e-3,
                           "tie_word_embeddings": False}),
    # dynamic NTK: max_position_embeddings 8 below the 16 positions run, so
    # the forward recomputes the base at seq_len 16; weights 10 times
    # transformers' default scale, or attention would barely see positions
    "dynamic-scaled": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                               "max_position_embeddings": 8, "tie_word_embeddings": False,
                               "initializer_range": 0.2,
                               "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    # YaRN over an original context of 8: betas apart from the defaults, an
    # untruncated ramp and DeepSeek's mscale ratio for the attention factor
    # (weights at 10 times the default scale, as above)
    "llama-yarn": (LLAMA, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                           "max_position_embeddings": 32, "tie_word_embeddings": False, "initializer_range": 0.2,
                           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                                            "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False,
                                            "mscale": 2.0, "mscale_all_dim": 1.0}}),
    # Qwen2.5's long-context recipe (legacy "type", factor 4, the defaults)
    "qwen2-yarn": (QWEN2, {"num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                           "max_position_embeddings": 32, "tie_word_embeddings": False,
                           "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}),
}

# The same models with the config.json transformers 5 itself saves
# (save_pretrained): rope_parameters instead of rope_theta/rope_scaling,
# head_dim, layer_types, dtype. Weights, tokens and logits equal the
# hub-style fixture's (the same seed and config).
SAVED_BY_TRANSFORMERS = {"llama3-scaled-saved": "llama3-scaled", "qwen2-gqa-saved": "qwen2-gqa",
                         "mistral-gqa-saved": "mistral-gqa", "phi3-partial-saved": "phi3-partial",
                         "gemma-gqa-saved": "gemma-gqa", "gemma2-mha-saved": "gemma2-mha",
                         "gpt2-tied-saved": "gpt2-tied", "llama-yarn-saved": "llama-yarn"}
for saved, hub_style in SAVED_BY_TRANSFORMERS.items():
    CONFIGS[saved] = CONFIGS[hub_style]

# Fixtures whose RMSNorm weights and biases are drawn at random (transformers
# initialises them to ones and zeros, which would hide a norm or bias applied
# to the wrong slice).
RANDOM_NORMS_AND_BIASES = {"mistral-gqa", "mistral-kv4", "qwen3-gqa", "qwen3-bias-tied", "mistral-gqa-saved",
                           "gpt2-tied", "gpt2-untied", "gpt2-tied-saved"}

# Gemma's RMSNorms scale by 1 + w with w initialised to 0, where w and 1 + w
# give the same logits: their weights are drawn around 0 (biases as
# initialised).
GEMMA_FAMILIES = (GEMMA, GEMMA2)


def randomise_norms_and_biases(model, norm_centre=1.0, biases=True):
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or (".ln_" in name and name.endswith(".weight")):
                p.copy_(norm_centre + 0.5 * torch.randn(p.shape, generator=gen))
            elif biases and name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))


def make(name, base, keys, out_root):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    hub = dict(base, **keys)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub, f, indent=2)
        f.write("\n")
    # transformers reads the hub file the way it reads any checkpoint's
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    if name in RANDOM_NORMS_AND_BIASES:
        randomise_norms_and_biases(model)
    elif any(base is family for family in GEMMA_FAMILIES):
        randomise_norms_and_biases(model, norm_centre=0.0, biases=False)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copy(os.path.join(tmp, "model.safetensors"), os.path.join(out, "model.safetensors"))
        if name in SAVED_BY_TRANSFORMERS:
            shutil.copy(os.path.join(tmp, "config.json"), os.path.join(out, "config.json"))
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, hub["vocab_size"], (BATCH, SEQ), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    np.save(os.path.join(out, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(out, "logits.npy"), logits.numpy().astype(np.float32))
    print(f"{name}: logits {tuple(logits.shape)}, |max| {logits.abs().max().item():.4f}")


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf")
    names = sys.argv[2:] or list(CONFIGS)
    for name in names:
        base, keys = CONFIGS[name]
        make(name, base, keys, out_root)


if __name__ == "__main__":
    main()
