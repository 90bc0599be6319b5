"""tools/prepare_data.py's layouts, split and checks, with a tokenizer
stand-in (each word its length, so ids are easy to follow): CI has no
tokenizers package, and the layouts are what tprun reads. The shipped
data/genesis files are checked against the model they were made for."""
import json
import os
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import prepare_data as pd  # noqa: E402

CONFIG = {"vocab_size": 50, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def encode(text):
    return [3 + len(w) for w in text.split()]


class PrepareData(unittest.TestCase):
    def framing(self, **over):
        return pd.Framing(dict(CONFIG, **over), 40)

    def test_packed_stream_frames_each_document(self):
        out = pd.prepare([(None, "ab c"), (None, "dddd")], encode, self.framing(), "pack", None, 0.0, 0)
        ids = out["train"].ids
        self.assertEqual(ids.tolist(), [1, 5, 4, 2, 1, 7, 2])
        self.assertIsNone(out["train"].labels)          # the loss shifts the ids themselves
        self.assertIsNone(out["train"].position_ids)    # no rows to number them in
        self.assertEqual(ids.dtype, np.int32)

    def test_packed_position_ids_restart_at_documents_and_rows(self):
        docs = [(None, "ab c"), (None, "dddd"), (None, "a b c")]
        out = pd.prepare(docs, encode, self.framing(), "pack", 3, 0.0, 0)["train"]
        self.assertEqual(out.ids.tolist(), [1, 5, 4, 2, 1, 7, 2, 1, 4, 4, 4, 2])
        self.assertEqual(out.position_ids.tolist(), [0, 1, 2, 0, 0, 1, 0, 0, 1, 0, 1, 2])
        self.assertEqual(out.position_ids.dtype, np.int32)

    def test_padded_rows_ignore_their_padding(self):
        out = pd.prepare([(None, "ab c"), (None, "a b c d e f")], encode, self.framing(), "pad", 5, 0.0, 0)
        rows = out["train"]
        self.assertEqual(rows.ids.reshape(2, 5).tolist(), [[1, 5, 4, 2, 0], [1, 4, 4, 4, 4]])   # the second truncated
        self.assertEqual(rows.labels.reshape(2, 5).tolist(), [[1, 5, 4, 2, -100], [1, 4, 4, 4, 4]])
        self.assertEqual(rows.attention_mask.reshape(2, 5).tolist(), [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])

    def test_padding_with_the_eos_is_told_apart_by_the_mask(self):
        out = pd.prepare([(None, "ab")], encode, self.framing(pad_token_id=None), "pad", 5, 0.0, 0)["train"]
        self.assertEqual(out.ids.tolist(), [1, 5, 2, 2, 2])          # padded with the eos
        self.assertEqual(out.attention_mask.tolist(), [1, 1, 1, 0, 0])

    def test_next_token_labels_for_a_loss_that_does_not_shift(self):
        out = pd.prepare([(None, "ab c"), (None, "a b c d e f")], encode, self.framing(), "pad", 5, 0.0, 0, True)
        self.assertEqual(out["train"].labels.reshape(2, 5).tolist(), [[5, 4, 2, -100, -100], [4, 4, 4, 4, -100]])
        packed = pd.prepare([("q", "aa")], encode, self.framing(), "pack", None, 0.0, 0, True)
        self.assertEqual(packed["train"].labels.tolist(), [-100, 5, 2, -100])   # bos predicts the prompt: not scored

    def test_a_prompt_is_not_scored(self):
        out = pd.prepare([("q q", "aa")], encode, self.framing(), "pack", None, 0.0, 0)
        self.assertEqual(out["train"].ids.tolist(), [1, 4, 4, 5, 2])
        self.assertEqual(out["train"].labels.tolist(), [-100, -100, -100, 5, 2])

    def test_held_out_documents_are_drawn_by_the_seed(self):
        docs = [(None, "a " * (n + 1)) for n in range(10)]
        a = pd.prepare(docs, encode, self.framing(), "pack", None, 0.2, 7)
        b = pd.prepare(docs, encode, self.framing(), "pack", None, 0.2, 7)
        self.assertEqual(a["val"].ids.tolist(), b["val"].ids.tolist())
        self.assertEqual(len(a["val"].ids) + len(a["train"].ids), sum(n + 3 for n in range(10)))
        self.assertEqual(int((a["val"].ids == 1).sum()), 2)      # two documents, each starting with bos
        with self.assertRaisesRegex(pd.DataError, "no document is left to train on"):
            pd.prepare(docs[:1], encode, self.framing(), "pack", None, 0.9, 0)

    def test_a_tokenizer_of_another_model_is_refused(self):
        with self.assertRaisesRegex(pd.DataError, "the tokenizer has 60 tokens and the model's vocab_size is 50"):
            pd.Framing(CONFIG, 60)
        with self.assertRaisesRegex(pd.DataError, "token id 53 is outside the model's vocabulary"):
            pd.prepare([(None, "x" * 50)], encode, self.framing(), "pack", None, 0.0, 0)

    def test_jsonl_documents_and_their_errors(self):
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "a.jsonl")
            with open(good, "w") as f:
                f.write('{"text": "a b"}\n\n{"prompt": "q", "completion": "c"}\n')
            self.assertEqual(pd.read_documents(good), [(None, "a b"), ("q", "c")])
            bad = os.path.join(d, "b.jsonl")
            with open(bad, "w") as f:
                f.write('{"text": "a"}\n{"title": "b"}\n')
            with self.assertRaisesRegex(pd.DataError, 'b.jsonl:2: an object needs a "text" string'):
                pd.read_documents(bad)
            text = os.path.join(d, "c.txt")
            with open(text, "w") as f:
                f.write("one\ntwo\n\n\nthree\n")
            self.assertEqual(pd.read_documents(text), [(None, "one\ntwo"), (None, "three")])

    def test_the_shipped_text_fits_its_model(self):
        here = os.path.join(ROOT, "data", "genesis")
        with open(os.path.join(here, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        for name in ("genesis.train.npy", "genesis.val.npy"):
            ids = np.load(os.path.join(here, name))
            self.assertEqual(ids.dtype, np.int32)
            self.assertTrue(((ids >= 0) & (ids < vocab)).all(), name)
            self.assertEqual(int(ids[0]), 1, name)       # a chapter starts with bos
            self.assertEqual(int(ids[-1]), 2, name)      # and ends with eos


if __name__ == "__main__":
    unittest.main()
