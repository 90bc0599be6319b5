#!/usr/bin/env python3
"""The fixture for tprun's attention masks (tpcc --segments, tprun --pad-id
and --eos-id): PyTorch's training on rows of left padding and packed
documents, for tests/fixtures/train/.

  llama-documents/  LlamaForCausalLM (the llama fixture's config, GQA: 2 kv
                    heads) trained as transformers does on a packed batch:
                    each row some PAD (0) tokens on the left, then
                    documents each ended by EOS (2), the last one cut by
                    the row's end. Attention is restricted to each
                    document and padding is seen by no query: the eager
                    attention gets the equivalent 4-D mask (SDPA's boolean
                    mask as an additive one), and position_ids restart at
                    each document's first token, as DataCollatorWithFlattening
                    writes them. The labels are the ids with -100 over the
                    padding and at each document's first token (the token
                    after an EOS is not predicted from the document before).

The directory holds model.safetensors and config.json (the initial
weights), tokens.npy and labels.npy (int32, step i's [BATCH, SEQ] at
(i-1)*BATCH*SEQ), train.json (train_fixtures.py's keys, "pad_id" and
"eos_id") and final.safetensors (the weights after STEPS steps). The script
checks, before it trains, that a document's logits in a packed row are
those of the document alone: the mask and the positions do what they say.

Needs torch, transformers, safetensors and numpy; CI never runs it:
  python3 tools/mask_fixtures.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from label_fixtures import train  # noqa: E402
from train_fixtures import BATCH, LLAMA, LR, MAX_GRAD_NORM, SEQ, STEPS, WARMUP, build, save_pretrained  # noqa: E402

PAD, EOS = 0, 2
KEYS = dict(LLAMA, num_key_value_heads=2)
RECIPE = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "start_factor": 0.0, "min_lr": 0.0,
          "decay_all": False}


def packed_rows(vocab):
    """Per row 0 to 4 PAD tokens, then documents of 2 to 6 tokens and an
    EOS until the row is full; labels -100 over padding and each
    document's first token."""
    gen = np.random.default_rng(7)
    ids, labels = [], []
    for r in range(STEPS * BATCH):
        row = [PAD] * int(gen.integers(0, 5))
        lab = [-100] * len(row)
        while len(row) < SEQ:
            doc = list(gen.integers(3, vocab, int(gen.integers(2, 7)))) + [EOS]
            row += doc
            lab += [-100] + doc[1:]
        ids.append(row[:SEQ])
        labels.append(lab[:SEQ])
    return np.array(ids, np.int32).reshape(-1), np.array(labels, np.int32).reshape(-1)


def segments(x):
    """tprun's rule (runtime/train/segments.c): documents numbered from 0
    in each row, the next after each EOS; PAD -1."""
    seg = torch.empty_like(x)
    for b in range(x.shape[0]):
        doc = 0
        for t in range(x.shape[1]):
            seg[b, t] = -1 if x[b, t] == PAD else doc
            doc += int(x[b, t] == EOS)
    return seg


def positions(seg):
    """Restarting at 0 wherever the segment changes (the first token of a
    document, and of a run of padding)."""
    pos = torch.zeros_like(seg)
    for t in range(1, seg.shape[1]):
        pos[:, t] = torch.where(seg[:, t] == seg[:, t - 1], pos[:, t - 1] + 1, 0)
    return pos


def mask(seg, dtype=torch.float32):
    """[b, 1, s, s]: 0 where query t sees key u (u <= t, one document, not
    padding), the dtype's lowest elsewhere."""
    s = seg.shape[1]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))
    sees = causal & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    return torch.where(sees, 0.0, torch.finfo(dtype).min).to(dtype)[:, None]


def masked_loss(model, x, y):
    seg = segments(x)
    return model(input_ids=x, attention_mask=mask(seg), position_ids=positions(seg), labels=y).loss


def check_documents_alone(model, ids):
    """A packed row's documents give the logits each gives alone."""
    x = torch.from_numpy(ids[:SEQ].astype(np.int64))[None]
    seg = segments(x)
    with torch.no_grad():
        packed = model(input_ids=x, attention_mask=mask(seg), position_ids=positions(seg)).logits[0]
        for d in range(int(seg.max()) + 1):
            at = (seg[0] == d).nonzero().flatten()
            alone = model(input_ids=x[:, at]).logits[0]
            worst = (packed[at] - alone).abs().max().item()
            assert worst < 1e-5, f"document {d}: packed logits differ from its own by {worst}"


def main():
    out = os.path.join(sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "train"), "llama-documents")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    model = build(KEYS)
    save_pretrained(model, out, {"config.json": "config.json", "model.safetensors": "model.safetensors"})
    ids, labels = packed_rows(KEYS["vocab_size"])
    check_documents_alone(model, ids)
    np.save(os.path.join(out, "tokens.npy"), ids)
    np.save(os.path.join(out, "labels.npy"), labels)
    log = train(model, ids, labels, RECIPE, masked_loss)
    settings = {"batch": BATCH, "seq": SEQ, "lr": LR, "betas": list(RECIPE["betas"]), "eps": RECIPE["eps"],
                "weight_decay": RECIPE["weight_decay"], "max_grad_norm": MAX_GRAD_NORM, "warmup": WARMUP,
                "schedule": "cosine", "warmup_start_factor": 0.0, "min_lr": 0.0, "decay_all": False,
                "ignore_index": -100, "pad_id": PAD, "eos_id": EOS, "steps": log}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(settings, f, indent=2)
        f.write("\n")
    save_pretrained(model, out, {"model.safetensors": "final.safetensors"})
    for entry in log:
        print(f"llama-documents: step {entry['step']}: loss {entry['loss']:.6f}, lr {entry['lr']:.3g}, "
              f"grad_norm {entry['grad_norm']:.4f}")


if __name__ == "__main__":
    main()
