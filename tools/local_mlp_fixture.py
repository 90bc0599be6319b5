#!/usr/bin/env python3
"""tests/fixtures/train/local-mlp/: tests/models/local_mlp.model on one
device (embedding, h + down(silu(up(h))), lm_head, Hugging Face's shifted
cross-entropy against the input ids) and PyTorch autograd's gradients of
its first step: what tests/plans/local-mlp.plan must reproduce at every tp
when its to_local() labels the local gradient Partial().

  model.safetensors  float32 weights (torch.manual_seed(0), nn.Linear's and
                     nn.Embedding's own initialisation) under the model's names
  tokens.npy         int32 [BATCH * SEQ]: the batch, [BATCH, SEQ] in order
  grads.safetensors  float32 gradients of that step under the same names

tests/runtime/test_train_run.cc (TrainGrads) compares tprun --grads-out with
them at tp 1, 2 and 4. Needs torch, safetensors and numpy; CI never runs it:
  python3 tools/local_mlp_fixture.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

BATCH, SEQ, VOCAB, HIDDEN, FFN = 2, 16, 128, 32, 64


class LocalMLPLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mlp = torch.nn.ModuleDict({"up": torch.nn.Linear(HIDDEN, FFN, bias=False),
                                        "down": torch.nn.Linear(FFN, HIDDEN, bias=False)})
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        h = h + self.mlp["down"](F.silu(self.mlp["up"](h)))
        logits = self.lm_head(h)
        # transformers' ForCausalLMLoss: labels shifted left, the last position ignored
        labels = F.pad(ids, (0, 1), value=-100)[..., 1:]
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(), labels.reshape(-1), ignore_index=-100)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tests", "fixtures", "train", "local-mlp")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = LocalMLPLM()
    tokens = ((np.arange(BATCH * SEQ) * 37 + 11) % VOCAB).astype(np.int32)
    weights = {name: p.detach().clone().contiguous() for name, p in model.named_parameters()}
    loss = model(torch.from_numpy(tokens.astype(np.int64)).reshape(BATCH, SEQ))
    loss.backward()
    grads = {name: p.grad.detach().clone().contiguous() for name, p in model.named_parameters()}
    save_file(weights, os.path.join(out, "model.safetensors"))
    save_file(grads, os.path.join(out, "grads.safetensors"))
    np.save(os.path.join(out, "tokens.npy"), tokens)
    print(f"loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
