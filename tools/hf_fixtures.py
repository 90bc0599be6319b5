#!/usr/bin/env python3
"""Fixtures for tests/runtime/test_hf_parity.cc: tiny random Llama models
run by transformers itself (LlamaForCausalLM), so that tprun's logits are
checked against Hugging Face's code, RoPE scaling included.

For each config below, tests/fixtures/hf/<name>/ gets
  config.json        as on the Hugging Face hub (rope_theta and rope_scaling
                     at the top level, legacy keys as old checkpoints write them)
  model.safetensors  float32 weights (torch.manual_seed(0))
  tokens.npy         int32 [batch, seq]
  logits.npy         float32 [batch, seq, vocab]: transformers' forward

Needs torch, transformers, safetensors and numpy:
  python3 tools/hf_fixtures.py [OUT_DIR]
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SEQ = 16
BATCH = 2
BASE = {
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

# name -> the keys that differ from BASE. original_max_position_embeddings
# is 8, below the 16 positions run, so that Llama 3's scaling matters.
CONFIGS = {
    "llama2-gqa": {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                   "tie_word_embeddings": False},
    "llama3-scaled": {"num_key_value_heads": 2, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
                      "tie_word_embeddings": False,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8}},
    "linear-scaled": {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
                      "tie_word_embeddings": False, "rope_scaling": {"type": "linear", "factor": 2.0}},
    "mha": {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
    "tied": {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
}


def make(name, keys, out_root):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    hub = dict(BASE, **keys)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub, f, indent=2)
        f.write("\n")
    # transformers reads the hub file the way it reads any checkpoint's
    config = LlamaConfig.from_pretrained(out)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()
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
    for name, keys in CONFIGS.items():
        make(name, keys, out_root)


if __name__ == "__main__":
    main()
