#!/usr/bin/env python3
"""Fixtures for tests/runtime/test_hf_parity.cc: tiny random Llama, Qwen2 and
Gemma (1 and 2) models run by transformers itself (LlamaForCausalLM,
Qwen2ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM), so that tprun's
logits are checked against Hugging Face's code, RoPE scaling, Qwen2's q/k/v
biases, Gemma's (1 + w) norms, GELU and embedding scale, and Gemma 2's
soft-capping and sandwich norms included.

For each config below, tests/fixtures/hf/<name>/ gets
  config.json        as on the Hugging Face hub (rope_theta and rope_scaling
                     at the top level, legacy keys as old checkpoints write them)
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
}

# GemmaRMSNorm's weights start at 0, where w and 1 + w give the same logits;
# random weights tell them apart.
RANDOM_NORMS = (GEMMA, GEMMA2)


def randomise_norms(model):
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
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
    if any(base is family for family in RANDOM_NORMS):
        randomise_norms(model)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shutil.copy(os.path.join(tmp, "model.safetensors"), os.path.join(out, "model.safetensors"))
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
