#!/usr/bin/env python3
"""tprun's --save checkpoint through transformers, end to end.

A tiny random Llama (LlamaForCausalLM from a LlamaConfig, save_pretrained)
is trained three steps by tprun at tp 2 with sequence parallelism, saved
with --save and --max-shard-size small enough to shard it; transformers'
from_pretrained loads the saved directory (through its
model.safetensors.index.json) and must report no missing, unexpected or
mismatched tensor; its logits on a batch are compared with those tprun
computes from the same directory at tp 2. Prints the shard count and the
largest logit difference; exits 1 above 1e-4.

Needs torch, transformers, numpy and a build; not part of the tests (CI
has no torch: the committed fixtures of tools/train_fixtures.py cover the
same path there, through tprun alone):
  python3 tools/save_roundtrip.py [--build BUILD] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, BATCH, STEPS, TP = 16, 2, 3, 2


def run(*cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "build"))
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    scratch = None if a.keep else tempfile.TemporaryDirectory()   # removed at exit
    out = a.keep or scratch.name
    os.makedirs(out, exist_ok=True)
    tpcc, tprun = os.path.join(a.build, "tpcc"), os.path.join(a.build, "tprun")
    plan = os.path.join(HERE, "plans", "llama-sp.plan")

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(os.path.join(out, "init"))
    tokens = np.random.RandomState(0).randint(0, 256, size=STEPS * BATCH * SEQ).astype(np.int32)
    np.save(os.path.join(out, "tokens.npy"), tokens)
    batch = tokens[:BATCH * SEQ].reshape(BATCH, SEQ)
    np.save(os.path.join(out, "batch.npy"), batch)

    sizes = ["-D", "seq=%d" % SEQ, "-D", "batch=%d" % BATCH, "-D", "tp=%d" % TP]
    run(tpcc, plan, "--hf-config", os.path.join(out, "init", "config.json"), *sizes, "--train",
        "-o", os.path.join(out, "train.sched"))
    trained = os.path.join(out, "trained")
    run(tprun, "-n", str(TP), os.path.join(out, "train.sched"), "--weights", os.path.join(out, "init"),
        "--data", os.path.join(out, "tokens.npy"), "--steps", str(STEPS), "--save", trained,
        "--max-shard-size", "40KB", "-q")
    index = json.load(open(os.path.join(trained, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))

    model, info = AutoModelForCausalLM.from_pretrained(trained, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    with torch.no_grad():
        want = model(torch.tensor(batch, dtype=torch.long)).logits.float().numpy()

    run(tpcc, plan, "--hf-config", os.path.join(trained, "config.json"), *sizes,
        "-o", os.path.join(out, "forward.sched"))
    got_path = os.path.join(out, "logits.npy")
    run(tprun, "-n", str(TP), os.path.join(out, "forward.sched"), "--weights", trained,
        "--tokens", os.path.join(out, "batch.npy"), "--labels", "tokens", "--out", got_path, "-q")
    diff = float(np.abs(np.load(got_path) - want).max())
    print("torch %s, transformers %s: %d shards (%s ... %s), loading info %s, max |tprun - transformers| "
          "logits %.3g (logits up to %.3g)" % (torch.__version__, transformers.__version__, len(shards),
                                             shards[0], shards[-1], problems or "clean", diff,
                                             float(np.abs(want).max())))
    return 0 if diff <= 1e-4 and not problems and len(shards) > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
