#!/usr/bin/env python3
"""The collectives PyTorch itself issues for a tensor-parallel plan, forward
and backward apart, as the oracle for the counts tpcc reads from a training
schedule: tests/fixtures/train/comm_counts.json.

The model is tests/fixtures/train/llama/'s (LlamaForCausalLM, vocab 128,
hidden 32, ffn 64, 2 layers, 4 heads, 4 kv heads; tools/train_fixtures.py
builds it). On tp CPU processes (gloo on loopback,
init_device_mesh("cpu", (tp,))) every `parallelize "PATH" { ... }` block of
the plan is applied with parallelize_module, its dict evaluated as Python
with PyTorch's style classes in scope (tools/torch_fixtures.py's reader); a
plan with `loss_parallel()` computes its loss inside
torch.distributed.tensor.parallel.loss_parallel(). One step's
model(input_ids, labels).loss is run under
torch.distributed.tensor.debug.CommDebugMode, then loss.backward() under a
second one; each records {collective: count} as CommDebugMode names them
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor, ...), the same
on every rank and at tp 2 and 4 (checked; tp 2's are written). Where PyTorch
leaves a gradient Partial after the backward (a replicated parameter that saw
sharded activations), "grad_sync" counts the reduction that makes it
Replicate and "partial_grads" names those parameters. The step is checked
against the one-process fixture as well: its loss (train.json, step 1) and
its gathered gradients (grads.safetensors), to 1e-5.

The attention implementation is "sdpa" with no attention mask and
position_ids given: with sequence parallelism the decoder sees a local
sequence shard, from which transformers would otherwise derive positions
and an eager mask of the wrong length (attention itself sees the whole
sequence after PrepareModuleInput). Neither changes a collective.

PyTorch's own test Transformer (torch.testing._internal.distributed._tensor.
common_dtensor.Transformer, ModelArgs' defaults as
tests/models/torch_transformer.model has them, dropout off as tpcc's
dropout() is) is counted the way PyTorch's test_tp_examples.py trains it:
output = model(inp) under one CommDebugMode, output.sum().backward() under
another (tpcc --train --loss sum). Each tests/plans/torch-transformer-*.plan
is applied with parallelize_module and checked to be
Transformer.parallelize(model, mesh, use_seq_parallel) entry for entry: the
same placement of every parameter and the same counts; its gradients are
checked against one process's autograd.

Needs torch, transformers, safetensors and numpy; CI never runs it:
  python3 tools/comm_counts.py [OUT_FILE] [PLAN_NAME...]
With plan names (llama-sp, torch-transformer-sp, ...), only those entries
are computed and written into OUT_FILE's existing ones, which stay as they
are.
"""
import datetime
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
from torch_fixtures import free_port, parallelize_blocks, plan_uses_loss_parallel  # noqa: E402
from train_fixtures import BATCH, CONFIGS, SEQ, build  # noqa: E402

# The counts written are tp 2's (the plans' default); tp 4 must give the same.
WORLDS = (2, 4)
# the tp step against the one-process fixture (float32, summed in another order)
TOLERANCE = 1e-5
MODEL = "llama"
PLANS = ["plans/llama-megatron.plan", "plans/llama-sp.plan", "plans/llama-tiny.plan"]
# PyTorch's test Transformer as Transformer.parallelize applies it: the plan's
# use_seq_parallel
TORCH_TRANSFORMER_PLANS = {"tests/plans/torch-transformer-sp.plan": True,
                           "tests/plans/torch-transformer-tp.plan": False}


def counts(mode):
    """{collective name: count}: CommDebugMode keys by op overload packet
    (c10d_functional.all_reduce and the like)."""
    return {str(op).rsplit(".", 1)[-1]: n for op, n in sorted(mode.get_comm_counts().items(), key=str)}


def check_against_one_process(plan_path, loss, model, world):
    """The parallel step must be the fixture's: its loss (train.json's step 1)
    and its gathered gradients (grads.safetensors)."""
    from safetensors.numpy import load_file
    from torch.distributed.tensor import DTensor
    fixture = os.path.join(ROOT, "tests", "fixtures", "train", MODEL)
    with open(os.path.join(fixture, "train.json")) as f:
        want = json.load(f)["steps"][0]["loss"]
    got = (loss.full_tensor() if isinstance(loss, DTensor) else loss).item()
    if abs(got - want) > TOLERANCE * abs(want):
        sys.exit(f"{plan_path}: loss {got} at tp {world}, {want} in one process")
    grads = load_file(os.path.join(fixture, "grads.safetensors"))
    for name, p in model.named_parameters():
        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        diff = np.abs(g.numpy() - grads[name]).max()
        if diff > TOLERANCE * max(1.0, np.abs(grads[name]).max()):
            sys.exit(f"{plan_path}: {name}'s gradient at tp {world} is {diff:.3g} from one process's")


def partial_grads_synced(model):
    """PyTorch leaves a replicated parameter's gradient Partial where its
    activations were sharded (sequence-parallel norms) and reduces it only
    where the gradient is next used (clipping, the optimizer): that
    reduction, done here, is the gradient sync tpcc puts in the backward.
    Returns its counts and the parameters' names."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    partial = [(name, p) for name, p in model.named_parameters()
               if isinstance(p.grad, DTensor) and any(x.is_partial() for x in p.grad.placements)]
    with CommDebugMode() as sync:
        for _, p in partial:
            p.grad = p.grad.redistribute(placements=p.placements)
    return counts(sync), [name for name, _ in partial]


def count_step(plan_path, mesh, ids):
    from contextlib import nullcontext

    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel
    model = build(CONFIGS[MODEL], attention="sdpa")
    model.train()
    with open(plan_path) as f:
        text = f.read()
    parallelize_blocks(model, mesh, plan_path, text)
    loss_context = loss_parallel if plan_uses_loss_parallel(text) else nullcontext
    positions = torch.arange(SEQ).unsqueeze(0)
    with loss_context():
        with CommDebugMode() as fwd:
            loss = model(input_ids=ids, labels=ids, position_ids=positions).loss
        with CommDebugMode() as bwd:
            loss.backward()
    sync, partial = partial_grads_synced(model)
    check_against_one_process(plan_path, loss, model, mesh.size())
    return {"forward": counts(fwd), "backward": counts(bwd), "grad_sync": sync, "partial_grads": partial}


class HeadLocalAttention:
    """torch.nn.functional for common_dtensor, with
    scaled_dot_product_attention of head-sharded DTensors run on each rank's
    heads. DTensor has no sharding rule for the CPU's fused attention, and
    the math one adds a plain causal mask to DTensor scores; attention over
    Shard(1) heads ([batch, heads, seq, head_dim]) is local either way, as
    it is on GPUs, so the collectives counted are the same."""

    def __getattr__(self, name):
        import torch.nn.functional as F
        return getattr(F, name)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, *args, **kwargs):
        import torch.nn.functional as F
        from torch.distributed.tensor import DTensor, Shard
        if not isinstance(q, DTensor):
            return F.scaled_dot_product_attention(q, k, v, *args, **kwargs)
        if any(tuple(x.placements) != (Shard(1),) for x in (q, k, v)):
            sys.exit(f"attention over {q.placements}, {k.placements}, {v.placements}: not the heads")
        out = F.scaled_dot_product_attention(q.to_local(), k.to_local(), v.to_local(), *args, **kwargs)
        return DTensor.from_local(out, q.device_mesh, q.placements, run_check=False)


def torch_transformer():
    """PyTorch's test Transformer, seeded alike on every rank."""
    from torch.testing._internal.distributed._tensor import common_dtensor
    common_dtensor.F = HeadLocalAttention()
    torch.manual_seed(0)
    return common_dtensor.Transformer(common_dtensor.ModelArgs(dropout_p=0.0))


def sum_step(model, ids):
    """model(inp) and output.sum().backward(), as test_tp_examples.py's
    test_transformer_training: their counts and the gradients, whole."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    model.train()
    with CommDebugMode() as fwd:
        output = model(ids)
    with CommDebugMode() as bwd:
        output.sum().backward()
    sync, partial = partial_grads_synced(model)
    grads = {name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().numpy()
             for name, p in model.named_parameters()}
    return {"forward": counts(fwd), "backward": counts(bwd), "grad_sync": sync, "partial_grads": partial}, grads


def count_torch_transformer(plan_path, mesh, ids):
    """The plan file applied with parallelize_module against
    Transformer.parallelize: the same placements and counts, and gradients
    equal to one process's."""
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed._tensor.common_dtensor import Transformer
    with open(plan_path) as f:
        text = f.read()
    model, reference, single = torch_transformer(), torch_transformer(), torch_transformer()
    parallelize_blocks(model, mesh, plan_path, text)
    model.output.weight = model.tok_embeddings.weight   # the model file's tie(), as Transformer.parallelize ties
    Transformer.parallelize(reference, mesh, use_seq_parallel=TORCH_TRANSFORMER_PLANS[os.path.relpath(plan_path, ROOT)])
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        placements = [tuple(x.placements) if isinstance(x, DTensor) else None for x in (p, q)]
        if placements[0] != placements[1]:
            sys.exit(f"{plan_path}: {name} is {placements[0]}, Transformer.parallelize makes it {placements[1]}")
    result, grads = sum_step(model, ids)
    expected, _ = sum_step(reference, ids)
    if result != expected:
        sys.exit(f"{plan_path}: counts {result}, Transformer.parallelize's {expected}")
    _, want = sum_step(single, ids)
    for name, g in grads.items():
        if np.abs(g - want[name]).max() > TOLERANCE * max(1.0, np.abs(want[name]).max()):
            sys.exit(f"{plan_path}: {name}'s gradient at tp {mesh.size()} is not one process's")
    return result


def worker(rank, world, port, ids, plans, outdir):
    torch.set_num_threads(1)
    # CommDebugMode's module tracker hooks every module, transformers' output classes included
    warnings.filterwarnings("ignore", message="For backward hooks to be called")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        result = {}
        for plan in plans:
            name = os.path.splitext(os.path.basename(plan))[0]
            path = os.path.join(ROOT, plan)
            if plan in TORCH_TRANSFORMER_PLANS:
                result[name] = dict(tp=world, **count_torch_transformer(path, mesh, ids["torch_transformer"]))
            else:
                result[name] = dict(tp=world, **count_step(path, mesh, ids["llama"]))
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(world, ids, plans):
    """{plan name: counts} of a run on world processes, the same on each."""
    with tempfile.TemporaryDirectory(prefix="comm-counts-") as d:
        mp.spawn(worker, args=(world, free_port(), ids, plans, d), nprocs=world, join=True)
        results = []
        for r in range(world):
            with open(os.path.join(d, f"rank{r}.json")) as f:
                results.append(json.load(f))
    for r in range(1, world):
        if results[r] != results[0]:
            sys.exit(f"comm_counts.py: at tp {world}, rank {r}'s counts differ from rank 0's")
    return results[0]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "train", "comm_counts.json")
    plans = PLANS + list(TORCH_TRANSFORMER_PLANS)
    names = sys.argv[2:]
    if names:
        plans = [p for p in plans if os.path.splitext(os.path.basename(p))[0] in names]
        if len(plans) != len(names):
            sys.exit(f"comm_counts.py: unknown plan among {names}")
    tokens = np.load(os.path.join(ROOT, "tests", "fixtures", "train", MODEL, "tokens.npy"))
    ids = torch.from_numpy(tokens[:BATCH * SEQ].astype(np.int64)).reshape(BATCH, SEQ)
    # the test Transformer's vocabulary is 8 (ModelArgs.vocab_size): the same tokens, modulo 8
    ids = {"llama": ids, "torch_transformer": ids % 8}
    runs = [run(world, ids, plans) for world in WORLDS]
    for world, result in zip(WORLDS[1:], runs[1:]):
        for plan, phases in result.items():
            if dict(phases, tp=WORLDS[0]) != runs[0][plan]:
                sys.exit(f"comm_counts.py: {plan}'s counts at tp {world} differ from tp {WORLDS[0]}'s")
    written = runs[0]
    if names:
        with open(out) as f:
            written = json.load(f)
        written.update(runs[0])
    with open(out, "w") as f:
        json.dump(written, f, indent=2)
        f.write("\n")
    print(json.dumps(runs[0], indent=2))


if __name__ == "__main__":
    main()
