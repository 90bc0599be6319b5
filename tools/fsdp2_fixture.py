#!/usr/bin/env python3
"""The oracle of plans/llama-2d.plan: PyTorch's 2-D recipe (tensor
parallelism with sequence parallelism inside, FSDP2 outside) training the
tiny Llama of tests/fixtures/train/llama/ on 4 CPU processes (gloo), dp 2 x
tp 2, for tprun -n 4 to match step by step.

The 4 processes build init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp",
"tp")), load LlamaForCausalLM (float32, "eager" attention) from
tests/fixtures/train/llama/, apply the plan's parallelize_module over
mesh["tp"] (SequenceParallel norms, PrepareModuleInput for self_attn and
mlp, q/k/v ColwiseParallel(output_layouts=Replicate()), o_proj and
down_proj RowwiseParallel(output_layouts=Shard(1)), a row-parallel
embedding, a column-parallel lm_head and the loss under loss_parallel()),
then fully_shard each decoder layer and the model over mesh["dp"], and take
STEPS steps of torch.optim.AdamW (decay on 2-D weights only, as tprun) with
clip_grad_norm_(1.0) and get_cosine_schedule_with_warmup(WARMUP, STEPS).
Each step trains on DP * BATCH sequences of SEQ tokens: dp rank d of step i
(from 0) takes tokens[(i*DP + d)*BATCH*SEQ : ...+BATCH*SEQ] as [BATCH, SEQ],
as tprun feeds its replicas; input ids and labels alike (the loss shifts
them). position_ids and the causal mask are passed whole: under sequence
parallelism transformers would build them from the local, halved length.

tests/fixtures/train/fsdp2-dp2tp2/ gets
  tokens.npy         int32 [STEPS * DP * BATCH * SEQ], the stream
  grads.safetensors  float32 gradients of step 1 (the mean over the global
                     batch, gathered with full_tensor()) under the tensor
                     names of the checkpoint
  train.json         the settings, the checkpoint used (../llama, and its
                     model.safetensors' sha256) and, per step, the loss (the
                     mean over the dp ranks of each one's batch mean, as
                     tprun logs it), the learning rate applied and the
                     gradient norm before clipping
The weights are not copied: tprun reads tests/fixtures/train/llama/.

Before writing, the same training runs in one process without any
parallelism (the global batch as [DP * BATCH, SEQ], transformers' own loss);
its losses must agree within SELF_CHECK relative, its norms and first
gradients are reported.

Needs torch (with torch.distributed, gloo), transformers, safetensors and
numpy; CI never runs it, it reads the committed files:
  python3 tools/fsdp2_fixture.py [OUT_DIR]
"""
import hashlib
import json
import os
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM, get_cosine_schedule_with_warmup

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA = os.path.join(HERE, "..", "tests", "fixtures", "train", "llama")
DP = 2
TP = 2
BATCH = 2      # per dp rank
SEQ = 16
STEPS = 3
WARMUP = 1
LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
# the distributed losses against one process's, relative
SELF_CHECK = 1e-5


def load():
    model = LlamaForCausalLM.from_pretrained(LLAMA, attn_implementation="eager", dtype=torch.float32)
    model.train()
    return model


def optimizer(model):
    """AdamW as tprun's --weight-decay: decay on weights of rank >= 2 only."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    return opt, get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)


def rows(tokens, step, first, count):
    """count sequences of step `step` (from 0), from the first-th on."""
    start = (step * DP * BATCH + first) * SEQ
    return torch.from_numpy(tokens[start:start + count * SEQ].astype(np.int64)).reshape(count, SEQ)


def parallelize(model, mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    tp = mesh["tp"]
    for layer in model.model.layers:
        parallelize_module(layer, tp, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
            ),
            "self_attn.q_proj": ColwiseParallel(output_layouts=Replicate()),
            "self_attn.k_proj": ColwiseParallel(output_layouts=Replicate()),
            "self_attn.v_proj": ColwiseParallel(output_layouts=Replicate()),
            "self_attn.o_proj": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        })
    parallelize_module(model, tp, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),
    })
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])


def worker(rank, port, tokens, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", rank=rank, world_size=DP * TP)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import loss_parallel

        mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
        d = mesh["dp"].get_local_rank()
        model = load()
        parallelize(model, mesh)
        opt, sched = optimizer(model)
        # whole-sequence positions and causal mask (sequence parallelism halves
        # the length transformers would infer them from)
        position_ids = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
        mask = torch.full((SEQ, SEQ), torch.finfo(torch.float32).min).triu(1).reshape(1, 1, SEQ, SEQ)
        log = []
        for i in range(STEPS):
            ids = rows(tokens, i, d * BATCH, BATCH)
            opt.zero_grad(set_to_none=True)
            with loss_parallel():
                loss = model(input_ids=ids, labels=ids, position_ids=position_ids, attention_mask=mask,
                             use_cache=False).loss
                loss.backward()
            local = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
            mean = local.detach().clone()
            dist.all_reduce(mean, group=mesh["dp"].get_group())
            mean /= DP
            if i == 0:
                grads = {n: p.grad.full_tensor().detach().clone() for n, p in model.named_parameters()}
                if rank == 0:
                    save_file({k: v.float().contiguous() for k, v in grads.items()},
                              os.path.join(out, "grads.safetensors"))
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            lr = sched.get_last_lr()[0]
            opt.step()
            sched.step()
            per_rank = [None] * (DP * TP)
            dist.all_gather_object(per_rank, local.item())
            log.append({"step": i + 1, "loss": mean.item(), "lr": lr, "grad_norm": norm.item(),
                        "rank_losses": per_rank})
        if rank == 0:
            with open(os.path.join(out, "log.json"), "w") as f:
                json.dump(log, f)
    finally:
        dist.destroy_process_group()


def reference(tokens):
    """The same steps in one process, no parallelism: losses, norms and the
    first step's gradients."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = load()
    opt, sched = optimizer(model)
    log, grads = [], None
    for i in range(STEPS):
        ids = rows(tokens, i, 0, DP * BATCH)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if i == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), MAX_GRAD_NORM)
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        log.append({"step": i + 1, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()})
    return log, grads


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "train",
                                                             "fsdp2-dp2tp2")
    os.makedirs(out, exist_ok=True)
    config = json.load(open(os.path.join(LLAMA, "config.json")))
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, config["vocab_size"], (STEPS * DP * BATCH * SEQ,), generator=gen).numpy()
    tokens = tokens.astype(np.int32)

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(free_port(), tokens, tmp), nprocs=DP * TP, join=True)
        log = json.load(open(os.path.join(tmp, "log.json")))
        grads = load_file(os.path.join(tmp, "grads.safetensors"))

    want, want_grads = reference(tokens)
    failed = False
    for got, w in zip(log, want):
        err = abs(got["loss"] - w["loss"]) / abs(w["loss"])
        norm_err = abs(got["grad_norm"] - w["grad_norm"]) / w["grad_norm"]
        print(f"step {got['step']}: loss {got['loss']:.9g} (one process {w['loss']:.9g}, relative {err:.2g}), "
              f"lr {got['lr']:.3g}, grad_norm {got['grad_norm']:.9g} (one process {w['grad_norm']:.9g}, "
              f"relative {norm_err:.2g}); per rank {got['rank_losses']}")
        if err > SELF_CHECK or got["lr"] != w["lr"]:
            failed = True
    if set(grads) != set(want_grads):
        sys.exit(f"gradient names differ: {sorted(set(grads) ^ set(want_grads))}")
    scale = max(v.abs().max().item() for v in want_grads.values())
    worst = max((grads[n] - want_grads[n]).abs().max().item() / max(want_grads[n].abs().max().item(), 1e-5 * scale)
                for n in grads)
    print(f"first step's gradients against one process's: worst {worst:.2g} relative to each tensor's scale")
    if failed:
        sys.exit(f"fsdp2_fixture.py: the dp {DP} x tp {TP} losses differ from one process's by more than {SELF_CHECK}")

    np.save(os.path.join(out, "tokens.npy"), tokens)
    save_file({k: v.contiguous() for k, v in sorted(grads.items())}, os.path.join(out, "grads.safetensors"))
    with open(os.path.join(LLAMA, "model.safetensors"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    settings = {"weights": "../llama", "weights_sha256": digest, "dp": DP, "tp": TP, "batch": BATCH, "seq": SEQ,
                "lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY,
                "max_grad_norm": MAX_GRAD_NORM, "warmup": WARMUP, "schedule": "cosine",
                "torch": torch.__version__,
                "steps": [{k: s[k] for k in ("step", "loss", "lr", "grad_norm")} for s in log]}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(settings, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
