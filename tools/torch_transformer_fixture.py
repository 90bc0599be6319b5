#!/usr/bin/env python3
"""tests/fixtures/train/torch-transformer/: PyTorch's own test Transformer
(torch.testing._internal.distributed._tensor.common_dtensor, ModelArgs'
defaults as tests/models/torch_transformer.model has them, dropout off) and
the gradients PyTorch's tensor-parallel tests train it with:
output = model(inp); output.sum().backward() (tpcc --train --loss sum).

  model.safetensors  float32 weights (torch.manual_seed(0), the module's own
                     initialisation) under its state_dict names; the tied
                     output.weight once, as tok_embeddings.weight
  tokens.npy         int32 [BATCH * SEQ]: the batch, [BATCH, SEQ] in order
  grads.safetensors  float32 gradients of that step under the same names
                     (tok_embeddings.weight: both uses, summed by autograd)

tests/runtime/test_train_run.cc (TrainGrads) compares tprun --grads-out with
them at tp 1, 2 and 4. Needs torch, safetensors and numpy (and expecttest,
which torch.testing imports); CI never runs it:
  python3 tools/torch_transformer_fixture.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
from comm_counts import sum_step, torch_transformer  # noqa: E402

BATCH = 2
SEQ = 16
VOCAB = 8   # ModelArgs.vocab_size


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(TOOLS), "tests", "fixtures", "train",
                                                             "torch-transformer")
    os.makedirs(out, exist_ok=True)
    tokens = ((np.arange(BATCH * SEQ) * 37 + 11) % VOCAB).astype(np.int32)
    model = torch_transformer()
    weights = {name: p.detach().clone().contiguous() for name, p in model.named_parameters()}
    _, grads = sum_step(model, torch.from_numpy(tokens.astype(np.int64)).reshape(BATCH, SEQ))
    if set(grads) != set(weights) or "output.weight" in weights:
        sys.exit(f"torch_transformer_fixture.py: parameters {sorted(weights)}, gradients {sorted(grads)}")
    save_file(weights, os.path.join(out, "model.safetensors"))
    save_file({name: torch.from_numpy(g) for name, g in grads.items()}, os.path.join(out, "grads.safetensors"))
    np.save(os.path.join(out, "tokens.npy"), tokens)


if __name__ == "__main__":
    main()
