#!/usr/bin/env python3
"""Fixtures for tests/runtime/test_hf_parity.cc: tiny random Llama, Qwen2 and
Phi-3 models run by transformers itself (LlamaForCausalLM, Qwen2ForCausalLM,
Phi3ForCausalLM), so that tprun's logits are checked against Hugging Face's
code, RoPE scaling, Qwen2's q/k/v biases and Phi-3's fused projections and
partial rotary included.

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

# Phi-3: fused qkv_proj and gate_up_proj. Phi3Config's pad_token_id (32000)
# would lie outside the tiny vocabulary, so the token ids are set as a small
# checkpoint sets them.
PHI3 = dict(LLAMA, architectures=["Phi3ForCausalLM"], model_type="phi3", bos_token_id=1, eos_token_id=2,
            pad_token_id=None)
for key in ("attention_bias", "mlp_bias"):
    del PHI3[key]

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
    "phi3-gqa": (PHI3, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                        "tie_word_embeddings": False}),
    # Phi-4-mini's partial rotary: the first half of each head's 8 dims rotate
    "phi3-partial": (PHI3, {"num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                            "tie_word_embeddings": False, "partial_rotary_factor": 0.5}),
    # 4 kv heads: q, k and v each split over 4 ranks
    "phi3-mha": (PHI3, {"num_key_value_heads": 4, "rope_theta": 250000.0, "rms_norm_eps": 1e-6,
                        "tie_word_embeddings": False, "partial_rotary_factor": 0.75}),
}


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
