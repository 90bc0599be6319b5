#!/usr/bin/env python3
"""Fixtures for tprun's training on labels that are not the input ids:
PyTorch's losses over masked and padded batches, for tests/fixtures/train/.

  llama-labels/   fine-tuning as transformers does it: LlamaForCausalLM
                  (the llama fixture's config) with labels beside the input
                  ids, -100 over each row's prompt and over its right
                  padding; model(input_ids, labels=labels).loss, the mean
                  over the labelled tokens of the whole batch. The rows'
                  labelled counts differ a lot, so a mean of the two rows'
                  means (what data-parallel replicas of one row each would
                  average) is another number.
  llama-accum/    gradient accumulation as transformers' Trainer does it:
                  the llama-labels model and kind of labels, each step 4
                  micro-batches of one row, each loss
                  model(input_ids, labels, num_items_in_batch=N).loss with
                  N the step's labelled tokens over all 4, backward after
                  each, one optimizer step: the mean over the step's 4 rows.
  llama-seed003/  seed 003's training loop: torchtitan's Llama layout (a
                  model returning its logits), sequences [BOT] + text +
                  [EOT] padded with [PAD] to seq + 1, x = tokens[:seq],
                  y = tokens[1:seq + 1]; logits = model(x, padding mask);
                  CrossEntropyLoss(ignore_index=PAD)(logits, y) with no
                  shift; AdamW(betas=(0.9, 0.99), eps=1e-8,
                  weight_decay=0.1) over every parameter;
                  SequentialLR(LinearLR(start_factor=0.1), CosineAnnealingLR
                  (eta_min=0)); clip_grad_norm_(1.0). Computed with
                  transformers' LlamaForCausalLM (rms_norm_eps 1e-5,
                  rope_theta 10000, no RoPE scaling: models/llama-
                  torchtitan.model's function, tests/runtime/
                  test_torchtitan.cc), the weights written under
                  torchtitan's names (tools/make_checkpoint.py).

Each directory holds model.safetensors (the initial weights), tokens.npy
(int32 input ids, step i's [BATCH, SEQ] at (i-1)*BATCH*SEQ), labels.npy
(int32, the same length: llama-labels' aligned with the ids, -100 ignored;
llama-seed003's the next tokens, PAD ignored) and train.json (train_fixtures.py's
keys, and "ignore_index"); llama-labels also config.json, final.safetensors (the weights after STEPS
steps) and eval.json (the initial weights' loss over the whole stream: the
validation loss --eval-data gives before any update).

Needs torch, transformers, safetensors and numpy; CI never runs it:
  python3 tools/label_fixtures.py [OUT_DIR [NAME...]]
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_checkpoint import torchtitan_name  # noqa: E402
from train_fixtures import (BATCH, LLAMA, LR, MAX_GRAD_NORM, SEQ, STEPS, WARMUP, build, make_all,  # noqa: E402
                            print_log, save_pretrained, scheduler)

PAD, BOT, EOT = 0, 1, 2
ACCUM = 4   # llama-accum's micro-batches per step


def fine_tuning_batches(vocab, rows_per_step=BATCH):
    """Per row a prompt (labels -100), a response and, in odd rows, right
    padding (PAD ids, labels -100)."""
    gen = np.random.default_rng(5)
    ids = gen.integers(3, vocab, (STEPS * rows_per_step, SEQ)).astype(np.int32)
    labels = ids.copy()
    for r in range(STEPS * rows_per_step):
        prompt = 2 if r % 2 == 0 else 9
        labels[r, :prompt] = -100
        if r % 2:
            ids[r, 13:] = PAD
            labels[r, 13:] = -100
    return ids.reshape(-1), labels.reshape(-1)


def seed003_batches(vocab):
    """seed 003's PretrainingDataset: [BOT] + text + [EOT], padded to
    SEQ + 1, cut into x and y."""
    gen = np.random.default_rng(6)
    xs, ys = [], []
    for r in range(STEPS * BATCH):
        text = list(gen.integers(3, vocab, int(gen.integers(4, SEQ + 4))))
        tokens = ([BOT] + text + [EOT])[:SEQ + 1]
        tokens += [PAD] * (SEQ + 1 - len(tokens))
        xs.append(tokens[:SEQ])
        ys.append(tokens[1:SEQ + 1])
    return np.array(xs, np.int32).reshape(-1), np.array(ys, np.int32).reshape(-1)


def step_rows(a, step, rows=BATCH):
    n = rows * SEQ
    return torch.from_numpy(a[(step - 1) * n:step * n].astype(np.int64)).reshape(rows, SEQ)


def hf_loss(model, x, y):
    return model(input_ids=x, labels=y).loss


def seed003_loss(model, x, y):
    logits = model(input_ids=x, attention_mask=(x != PAD).long()).logits
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=PAD)


def accumulated_loss(model, x, y):
    """One step of ACCUM micro-batches of a row each, as transformers'
    Trainer accumulates: every micro-batch's summed loss over the step's
    labelled tokens, backward after each; returns the step's loss (their
    sum, the mean over the step) detached, the gradients accumulated."""
    n = int((y[:, 1:] != -100).sum())
    total = 0.0
    for m in range(ACCUM):
        loss = model(input_ids=x[m:m + 1], labels=y[m:m + 1], num_items_in_batch=n).loss
        loss.backward()
        total += loss.detach()
    return total


def train(model, ids, labels, recipe, loss_fn, rows=BATCH):
    params = list(model.parameters())
    if recipe["decay_all"]:
        groups = [{"params": params, "weight_decay": recipe["weight_decay"]}]
    else:
        groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": recipe["weight_decay"]},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=recipe["betas"], eps=recipe["eps"], foreach=False)
    sched = scheduler(opt, recipe)
    log = []
    for step in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, step_rows(ids, step, rows), step_rows(labels, step, rows))
        if loss.requires_grad:   # an accumulated step has run its backwards
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        log.append({"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()})
    return log


def torchtitan_state(model):
    return {torchtitan_name(k): v.detach().float().contiguous() for k, v in model.state_dict().items()
            if not k.endswith("rotary_emb.inv_freq")}


FIXTURES = {
    "llama-labels": {"keys": LLAMA, "batches": fine_tuning_batches, "loss": hf_loss, "ignore_index": -100, "eval": True,
                     "names": "hf", "recipe": {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01,
                                               "start_factor": 0.0, "min_lr": 0.0, "decay_all": False}},
    "llama-accum": {"keys": LLAMA, "batches": lambda vocab: fine_tuning_batches(vocab, ACCUM),
                    "loss": accumulated_loss, "ignore_index": -100, "names": "hf", "rows": ACCUM,
                    "recipe": {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "start_factor": 0.0,
                               "min_lr": 0.0, "decay_all": False}},
    "llama-seed003": {"keys": dict(LLAMA, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0),
                      "batches": seed003_batches, "loss": seed003_loss, "ignore_index": PAD, "names": "torchtitan",
                      "recipe": {"betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1, "start_factor": 0.1,
                                 "min_lr": 0.0, "decay_all": True}},
}


def make(name, spec, out_root):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model = build(spec["keys"])
    if spec["names"] == "hf":
        save_pretrained(model, out, {"config.json": "config.json", "model.safetensors": "model.safetensors"})
    else:
        save_file(torchtitan_state(model), os.path.join(out, "model.safetensors"))
    ids, labels = spec["batches"](spec["keys"]["vocab_size"])
    np.save(os.path.join(out, "tokens.npy"), ids)
    np.save(os.path.join(out, "labels.npy"), labels)
    if spec.get("eval"):
        # the validation loss of the initial weights over the whole stream
        with torch.no_grad():
            whole = model(input_ids=torch.from_numpy(ids.astype(np.int64)).reshape(-1, SEQ),
                          labels=torch.from_numpy(labels.astype(np.int64)).reshape(-1, SEQ)).loss.item()
        with open(os.path.join(out, "eval.json"), "w") as f:
            json.dump({"loss": whole}, f, indent=2)
            f.write("\n")
    recipe = spec["recipe"]
    rows = spec.get("rows", BATCH)
    log = train(model, ids, labels, recipe, spec["loss"], rows)
    settings = {"batch": rows, "seq": SEQ, "lr": LR, "betas": list(recipe["betas"]), "eps": recipe["eps"],
                "weight_decay": recipe["weight_decay"], "max_grad_norm": MAX_GRAD_NORM, "warmup": WARMUP,
                "schedule": "cosine", "warmup_start_factor": recipe["start_factor"], "min_lr": recipe["min_lr"],
                "decay_all": recipe["decay_all"], "ignore_index": spec["ignore_index"], "steps": log}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(settings, f, indent=2)
        f.write("\n")
    if spec["names"] == "hf":   # --save writes a Hugging Face directory: the other has no config.json
        save_pretrained(model, out, {"model.safetensors": "final.safetensors"})
    print_log(name, log)


if __name__ == "__main__":
    make_all(FIXTURES, make, "label_fixtures.py")
