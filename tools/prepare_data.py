#!/usr/bin/env python3
"""Text to tprun's training files, through the model's own tokenizer.

    python3 tools/prepare_data.py --tokenizer tokenizer.json --config config.json \\
        INPUT... -o OUT [--pack | --pad] [--seq N] [--val-fraction F] [--seed S]

INPUT is a text file (documents separated by blank lines), a JSONL file
(one document an object: "text", or "prompt" and "completion"), or a
Hugging Face dataset directory (datasets.load_from_disk; its "text"
column). Each document is encoded with the tokenizer (tokenizers'
tokenizer.json, as transformers' fast tokenizers save it) without its
special tokens, and framed with the model's bos_token_id and eos_token_id
from config.json where it has them.

Layouts:
  --pack (default)  the documents end to end, one stream (llm.c's and
                    torchtitan's pretraining data): OUT.train.npy; the loss
                    shifts the ids themselves. With --seq N, beside it
                    OUT.train.position_ids.npy for tprun --position-ids:
                    each document's positions from 0, and again from 0 at
                    each row of N tokens tprun cuts the stream into
                    (DataCollatorWithFlattening's position_ids)
  --pad             one row of --seq tokens a document (seed 003's padded
                    batches): truncated, or padded with the tokenizer's pad
                    token (config pad_token_id, else the eos); labels beside
                    the ids (OUT.train.labels.npy) with -100 over the
                    padding, for tprun --labels, and the padding's
                    attention_mask (OUT.train.attention_mask.npy: 1 a
                    token, 0 padding) for tprun --attention-mask, which
                    tells padding from a token of the same id
A JSONL document with "prompt" and "completion" (fine-tuning) also gets
-100 over its prompt's labels, in either layout (packed: a labels stream
beside the ids).

The labels are Hugging Face's, aligned with the ids: a model's own loss
shifts them. For a schedule whose loss does not (tpcc --loss
cross_entropy, torchtitan's and seed scripts' CrossEntropyLoss over
target_ids), --next-token-labels writes each position's next token
instead, the last of each row (--pad) or of the stream ignored.

--val-fraction F (default 0.1) holds out that fraction of the documents,
drawn with --seed, as OUT.val.npy (and OUT.val.labels.npy, ...) for tprun
--eval-data (--eval-labels, ...). Every id is checked against config.json's
vocab_size: a tokenizer made for another model is an error, before any
file is written. Output arrays are int32 .npy, 1-D.

Needs numpy, and the tokenizers package (and datasets for a dataset
directory) from PyPI; like llm.c's data scripts, nothing else in tpcc
needs them. The layout functions take any encode callable: tests run them
without tokenizers (tests/tools/test_prepare_data.py).
"""
import argparse
import json
import os
import sys

import numpy as np

IGNORE = -100


class DataError(Exception):
    """Input that cannot become training data: what, where, how to fix."""


def read_documents(path, load_dataset_dir=None):
    """[(prompt or None, text)] of a .txt, a .jsonl or a dataset directory."""
    if os.path.isdir(path):
        if load_dataset_dir is None:
            raise DataError(f"{path}: a dataset directory needs the datasets package (pip install datasets)")
        return [(None, t) for t in load_dataset_dir(path)]
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    if not path.endswith(".jsonl"):
        return [(None, d.strip()) for d in raw.split("\n\n") if d.strip()]
    docs = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n}: not JSON ({e.msg}); a JSONL file has one object a line") from None
        if isinstance(obj, dict) and isinstance(obj.get("text"), str):
            docs.append((None, obj["text"]))
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and isinstance(obj.get("completion"), str):
            docs.append((obj["prompt"], obj["completion"]))
        else:
            raise DataError(f"{path}:{n}: an object needs a \"text\" string, or \"prompt\" and \"completion\" strings")
    return docs


class Framing:
    """What a document's ids are framed with: the model's special tokens."""

    def __init__(self, config, vocab_size_of_tokenizer):
        self.vocab = config.get("vocab_size")
        if not isinstance(self.vocab, int) or self.vocab <= 0:
            raise DataError("config.json has no vocab_size: pass the model's own config.json")
        if vocab_size_of_tokenizer > self.vocab:
            raise DataError(f"the tokenizer has {vocab_size_of_tokenizer} tokens and the model's vocab_size is "
                            f"{self.vocab}: the tokenizer is not this model's; pass its own tokenizer.json")
        self.bos = config.get("bos_token_id")
        self.eos = config.get("eos_token_id")
        if isinstance(self.eos, list):   # Llama 3's several end tokens: the first ends a document
            self.eos = self.eos[0]
        pad = config.get("pad_token_id")
        self.pad = pad if isinstance(pad, int) else self.eos

    def frame(self, ids):
        return ([self.bos] if self.bos is not None else []) + list(ids) + ([self.eos] if self.eos is not None else [])


def encode_document(encode, framing, prompt, text):
    """(ids, labels): the document framed, labels -100 over a prompt."""
    if prompt is None:
        ids = framing.frame(encode(text))
        return ids, list(ids)
    p, c = encode(prompt), encode(text)
    ids = framing.frame(p + c)
    start = 1 if framing.bos is not None else 0
    labels = list(ids)
    for i in range(start + len(p)):
        labels[i] = IGNORE
    return ids, labels


def check_ids(ids, framing, where):
    bad = [i for i in ids if not 0 <= i < framing.vocab]
    if bad:
        raise DataError(f"{where}: token id {bad[0]} is outside the model's vocabulary [0, {framing.vocab}): the "
                        f"tokenizer is not this model's")


class Streams:
    """A split's arrays: the ids and the streams beside them (None where the
    layout writes none), each OUT.<split>.<name>.npy but the ids'."""

    def __init__(self, ids, labels, attention_mask=None, position_ids=None):
        self.ids, self.labels, self.attention_mask, self.position_ids = ids, labels, attention_mask, position_ids

    def beside(self):
        return {"labels": self.labels, "attention_mask": self.attention_mask, "position_ids": self.position_ids}


def pack(docs, seq):
    """One stream of every document end to end, its labels, and with a row
    length seq its position ids: from 0 at each document's first token and
    at each row's."""
    ids = [i for d, _ in docs for i in d]
    labels = [l for _, ls in docs for l in ls]
    positions = None
    if seq:
        starts = np.cumsum([0] + [len(d) for d, _ in docs[:-1]])
        doc_start = np.repeat(starts, [len(d) for d, _ in docs])
        at = np.arange(len(ids))
        positions = (at - np.maximum(doc_start, at - at % seq)).astype(np.int32)
    return Streams(np.array(ids, np.int32), np.array(labels, np.int32), position_ids=positions)


def pad(docs, seq, pad_id):
    """A row of seq tokens a document, truncated or padded (labels -100 and
    attention_mask 0 over the padding)."""
    if pad_id is None:
        raise DataError("--pad needs a pad token: config.json has neither pad_token_id nor eos_token_id")
    rows, labels, mask = [], [], []
    for ids, ls in docs:
        ids, ls = ids[:seq], ls[:seq]
        rows.append(ids + [pad_id] * (seq - len(ids)))
        labels.append(ls + [IGNORE] * (seq - len(ls)))
        mask.append([1] * len(ids) + [0] * (seq - len(ids)))
    return Streams(*(np.array(a, np.int32).reshape(-1) for a in (rows, labels, mask)))


def split(n, fraction, seed):
    """The held-out documents' indices, drawn with seed; at least one of
    two or more when fraction > 0."""
    if not 0 <= fraction < 1:
        raise DataError(f"--val-fraction {fraction} is not in [0, 1)")
    k = int(round(n * fraction))
    if fraction > 0 and n > 1:
        k = max(k, 1)
    return set(np.random.default_rng(seed).permutation(n)[:k].tolist())


def next_tokens(labels, seq):
    """Labels for a loss that does not shift: position t's is the label of
    t + 1 within its row of seq (the whole stream for seq None), the last
    ignored."""
    rows = labels.reshape(-1, seq) if seq else labels.reshape(1, -1)
    out = np.full_like(rows, IGNORE)
    out[:, :-1] = rows[:, 1:]
    return out.reshape(-1)


def prepare(documents, encode, framing, layout, seq, fraction, seed, next_token_labels=False):
    """{"train": Streams, "val": ...}: labels where the layout, a prompt or
    next-token labels need them."""
    encoded = []
    for n, (prompt, text) in enumerate(documents):
        ids, labels = encode_document(encode, framing, prompt, text)
        check_ids(ids, framing, f"document {n + 1}")
        encoded.append((ids, labels))
    held = split(len(encoded), fraction, seed)
    needs_labels = layout == "pad" or next_token_labels or any(p is not None for p, _ in documents)
    out = {}
    for name, docs in (("train", [d for i, d in enumerate(encoded) if i not in held]),
                       ("val", [d for i, d in enumerate(encoded) if i in held])):
        if not docs:
            continue
        streams = pad(docs, seq, framing.pad) if layout == "pad" else pack(docs, seq)
        if next_token_labels:
            streams.labels = next_tokens(streams.labels, seq if layout == "pad" else None)
        if not needs_labels:
            streams.labels = None
        out[name] = streams
    if "train" not in out:
        raise DataError("no document is left to train on: lower --val-fraction or give more documents")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="text, JSONL or dataset-directory inputs")
    ap.add_argument("--tokenizer", required=True, help="the model's tokenizer.json")
    ap.add_argument("--config", required=True, help="the model's config.json (vocab_size, bos/eos/pad token ids)")
    ap.add_argument("-o", "--out", required=True, help="output prefix: OUT.train.npy, OUT.val.npy, ...")
    layout = ap.add_mutually_exclusive_group()
    layout.add_argument("--pack", dest="layout", action="store_const", const="pack", help="one stream (default)")
    layout.add_argument("--pad", dest="layout", action="store_const", const="pad", help="a row of --seq a document")
    ap.add_argument("--seq", type=int, help="the schedule's seq: --pad's row length; with --pack, position ids "
                                            "restarting at each row of it")
    ap.add_argument("--next-token-labels", action="store_true",
                    help="labels for a loss that does not shift them (tpcc --loss cross_entropy)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    layout = args.layout or "pack"
    if layout == "pad" and (args.seq is None or args.seq < 2):
        ap.error("--pad needs --seq N (N >= 2), the schedule's sequence length")
    if args.seq is not None and args.seq < 2:
        ap.error("--seq N takes the schedule's sequence length, N >= 2")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("prepare_data.py: needs the tokenizers package: pip install tokenizers")
    try:
        with open(args.config, encoding="utf-8") as f:
            config = json.load(f)
        tok = Tokenizer.from_file(args.tokenizer)
        framing = Framing(config, tok.get_vocab_size())

        def load_dataset_dir(path):
            try:
                import datasets
            except ImportError:
                raise DataError(f"{path}: a dataset directory needs the datasets package (pip install datasets)")
            ds = datasets.load_from_disk(path)
            if "text" not in ds.column_names:
                raise DataError(f"{path}: the dataset has no \"text\" column (it has {ds.column_names})")
            return list(ds["text"])

        documents = [d for path in args.inputs for d in read_documents(path, load_dataset_dir)]
        out = prepare(documents, lambda t: tok.encode(t, add_special_tokens=False).ids, framing, layout, args.seq,
                      args.val_fraction, args.seed, args.next_token_labels)
    except (DataError, OSError, json.JSONDecodeError) as e:
        sys.exit(f"prepare_data.py: {e}")
    for name, streams in out.items():
        np.save(f"{args.out}.{name}.npy", streams.ids)
        written = [k for k, a in streams.beside().items() if a is not None]
        for k in written:
            np.save(f"{args.out}.{name}.{k}.npy", streams.beside()[k])
        print(f"{args.out}.{name}.npy: {len(streams.ids)} tokens" + (f" (and {', '.join(written)})" if written else ""))


if __name__ == "__main__":
    main()
