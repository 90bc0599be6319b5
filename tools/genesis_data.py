#!/usr/bin/env python3
"""The shipped example text's tokenizer and training files (data/genesis/):
a byte-level BPE tokenizer of 512 tokens trained on genesis.txt (Genesis
1-25 of the King James Version, public domain: the bible-kjv-text Debian
package, verse numbers dropped, a chapter a document), a tiny Llama's
config.json naming its special tokens, and tools/prepare_data.py's packed
streams of it (genesis.train.npy, genesis.val.npy: 10% of the chapters
held out, seed 0).

Needs the tokenizers package (pip install tokenizers); CI reads the
committed files:
  python3 tools/genesis_data.py
"""
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

here = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "genesis"))
SPECIAL = ["<pad>", "<s>", "</s>"]        # ids 0, 1, 2
VOCAB = 512

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train([os.path.join(here, "genesis.txt")], trainer)
tok.save(os.path.join(here, "tokenizer.json"))

config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 128,
          "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
          "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
with open(os.path.join(here, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "prepare_data.py"),
                os.path.join(here, "genesis.txt"), "--tokenizer", os.path.join(here, "tokenizer.json"), "--config",
                os.path.join(here, "config.json"), "-o", os.path.join(here, "genesis")], check=True)
