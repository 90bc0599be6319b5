#!/usr/bin/env python3
"""The fixtures for tprun's attention masks (tpcc --segments, tprun --pad-id
and --eos-id, --attention-mask and --position-ids): PyTorch's training on
rows of left padding and packed documents, for tests/fixtures/train/.

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
  llama-streams/    the same model and training on what only Hugging Face's
                    streams can say: each row some tokens of left padding
                    (attention_mask 0, position id 1 as generate() writes
                    them), then documents with no EOS between them, each
                    starting at position id 0 (DataCollatorWithFlattening's
                    position_ids), PAD (0) also a token of their text
                    (attention_mask 1, scored). The model is given the
                    attention_mask as the same 4-D mask and the
                    position_ids as they are.

llama-documents holds model.safetensors and config.json (the initial
weights, llama-streams' too), tokens.npy and labels.npy (int32, step i's
[BATCH, SEQ] at (i-1)*BATCH*SEQ), the same padding and documents as
streams (attention_mask.npy: ids != PAD; position_ids.npy: numbered by
document, 1 over the padding), train.json (train_fixtures.py's keys,
"pad_id" and "eos_id") and final.safetensors (the weights after STEPS
steps). llama-streams holds tokens.npy, labels.npy, attention_mask.npy,
position_ids.npy and train.json. The script checks, before it trains, that
a document's logits in a packed row are those of the document alone: the
mask and the positions do what they say.

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


def stream_rows(vocab):
    """Per row 0 to 3 tokens of left padding, then documents of 2 to 6
    tokens, half of them with a PAD among their text; labels -100 over
    padding and each document's first token."""
    gen = np.random.default_rng(11)
    ids, mask, pos, labels = [], [], [], []
    for r in range(STEPS * BATCH):
        n = int(gen.integers(0, 4))
        row, m, p, lab = [PAD] * n, [0] * n, [1] * n, [-100] * n
        while len(row) < SEQ:
            doc = [int(t) for t in gen.integers(3, vocab, int(gen.integers(2, 7)))]
            if gen.random() < 0.5:
                doc[int(gen.integers(1, len(doc)))] = PAD
            row += doc
            m += [1] * len(doc)
            p += list(range(len(doc)))
            lab += [-100] + doc[1:]
        for a, v in ((ids, row), (mask, m), (pos, p), (labels, lab)):
            a.append(v[:SEQ])
    return tuple(np.array(a, np.int32).reshape(-1) for a in (ids, mask, pos, labels))


def segments_of(pad, starts, ends):
    """tprun's rule (runtime/train/segments.c): documents numbered from 0
    in each row, the next after an end (an EOS) or at a start (a position
    id of 0) once the row's first has a token; padding -1."""
    seg = torch.empty(pad.shape, dtype=torch.int64)
    for b in range(pad.shape[0]):
        doc, begun = 0, False
        for t in range(pad.shape[1]):
            if pad[b, t]:
                seg[b, t] = -1
                continue
            if starts[b, t] and begun:
                doc += 1
            seg[b, t], begun = doc, True
            if ends[b, t]:
                doc, begun = doc + 1, False
    return seg


def segments(x):
    """From the ids: PAD is padding, a document ends after each EOS."""
    return segments_of(x == PAD, torch.zeros_like(x, dtype=torch.bool), x == EOS)


def stream_segments(attention_mask, position_ids):
    """From Hugging Face's streams: a mask's 0 is padding, a position id's
    0 starts a document."""
    return segments_of(attention_mask == 0, position_ids == 0, torch.zeros_like(position_ids, dtype=torch.bool))


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


def streams_loss(streams):
    """The loss of a step of llama-streams: train() slices the rows of
    `where`, each value its position in the streams, which give the ids,
    the mask and the position ids there."""
    ids, attention_mask, position_ids = (torch.from_numpy(a.astype(np.int64)) for a in streams)

    def loss(model, where, y):
        seg = stream_segments(attention_mask[where], position_ids[where])
        return model(input_ids=ids[where], attention_mask=mask(seg), position_ids=position_ids[where],
                     labels=y).loss
    return loss


def check_documents_alone(model, x, seg, pos):
    """A packed row's documents give the logits each gives alone."""
    with torch.no_grad():
        packed = model(input_ids=x, attention_mask=mask(seg), position_ids=pos).logits[0]
        for d in range(int(seg.max()) + 1):
            at = (seg[0] == d).nonzero().flatten()
            alone = model(input_ids=x[:, at]).logits[0]
            worst = (packed[at] - alone).abs().max().item()
            assert worst < 1e-5, f"document {d}: packed logits differ from its own by {worst}"


def write_log(out, name, log, ids_named):
    settings = {"batch": BATCH, "seq": SEQ, "lr": LR, "betas": list(RECIPE["betas"]), "eps": RECIPE["eps"],
                "weight_decay": RECIPE["weight_decay"], "max_grad_norm": MAX_GRAD_NORM, "warmup": WARMUP,
                "schedule": "cosine", "warmup_start_factor": 0.0, "min_lr": 0.0, "decay_all": False,
                "ignore_index": -100, **ids_named, "steps": log}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(settings, f, indent=2)
        f.write("\n")
    for entry in log:
        print(f"{name}: step {entry['step']}: loss {entry['loss']:.6f}, lr {entry['lr']:.3g}, "
              f"grad_norm {entry['grad_norm']:.4f}")


def save_streams(out, **streams):
    for name, a in streams.items():
        np.save(os.path.join(out, name + ".npy"), a)


def documents(root):
    out = os.path.join(root, "llama-documents")
    os.makedirs(out, exist_ok=True)
    model = build(KEYS)
    save_pretrained(model, out, {"config.json": "config.json", "model.safetensors": "model.safetensors"})
    ids, labels = packed_rows(KEYS["vocab_size"])
    x = torch.from_numpy(ids.astype(np.int64)).reshape(-1, SEQ)
    seg = segments(x)
    check_documents_alone(model, x[:1], seg[:1], positions(seg[:1]))
    position_ids = torch.where(seg >= 0, positions(seg), 1).to(torch.int32).reshape(-1).numpy()
    save_streams(out, tokens=ids, labels=labels, attention_mask=(ids != PAD).astype(np.int32),
                 position_ids=position_ids)
    log = train(model, ids, labels, RECIPE, masked_loss)
    write_log(out, "llama-documents", log, {"pad_id": PAD, "eos_id": EOS})
    save_pretrained(model, out, {"model.safetensors": "final.safetensors"})


def streams(root):
    out = os.path.join(root, "llama-streams")
    os.makedirs(out, exist_ok=True)
    model = build(KEYS)      # llama-documents' initial weights
    ids, attention_mask, position_ids, labels = stream_rows(KEYS["vocab_size"])
    seg = stream_segments(torch.from_numpy(attention_mask.astype(np.int64)).reshape(-1, SEQ),
                          torch.from_numpy(position_ids.astype(np.int64)).reshape(-1, SEQ))
    pos = torch.from_numpy(position_ids.astype(np.int64)).reshape(-1, SEQ)
    assert bool(((pos == positions(seg)) | (seg < 0)).all()), "the position ids are not numbered as tprun numbers them"
    assert bool(((torch.from_numpy(ids).reshape(-1, SEQ) == PAD) & (seg >= 0)).any()), "no PAD in the text"
    check_documents_alone(model, torch.from_numpy(ids[:SEQ].astype(np.int64))[None], seg[:1], pos[:1])
    save_streams(out, tokens=ids, labels=labels, attention_mask=attention_mask, position_ids=position_ids)
    log = train(model, np.arange(ids.size), labels, RECIPE, streams_loss((ids, attention_mask, position_ids)))
    write_log(out, "llama-streams", log, {"weights": "llama-documents"})


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                              "tests", "fixtures", "train")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    documents(root)
    streams(root)


if __name__ == "__main__":
    main()
