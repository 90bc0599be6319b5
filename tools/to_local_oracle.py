"""PyTorch's own behaviour for to_local(grad_placements=...) on 2 gloo ranks
(CPU): the model of tests/models/local_mlp.model written in PyTorch, its
embedding's gradient against one device's, for each case of the README's
table ("to_local and its gradient label" in "Training"). Needs torch; not
part of the tests.

    python3 tools/to_local_oracle.py mlp:partial mlp:default mlp:replicate \
        hooked:default hooked:partial shard:default shard:shard1 shard:replicate shard:partial
"""
import os, sys, torch, torch.distributed as dist, torch.nn.functional as F
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Partial, Shard
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_mlp_fixture import LocalMLPLM, BATCH, SEQ, VOCAB
import numpy as np

def run(rank, world, case, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    ref = LocalMLPLM()
    ids = torch.from_numpy(((np.arange(BATCH*SEQ)*37+11) % VOCAB).astype(np.int64)).reshape(BATCH, SEQ)
    ref(ids).backward()
    E = ref.embed.weight.detach().clone().requires_grad_()
    up = ref.mlp["up"].weight.detach().chunk(world, 0)[rank].clone().requires_grad_()
    down = ref.mlp["down"].weight.detach().chunk(world, 1)[rank].clone().requires_grad_()
    W = ref.lm_head.weight.detach().clone()
    h = F.embedding(ids, E)
    if case[0] == "shard":   # x a Shard(1) DTensor (sequence parallel), the MLP replicated and run on the shard
        x_dt = DTensor.from_local(h, mesh, [Replicate()]).redistribute(mesh, [Shard(1)])
        up = ref.mlp["up"].weight.detach().clone().requires_grad_()
        down = ref.mlp["down"].weight.detach().clone().requires_grad_()
    else:
        x_dt = DTensor.from_local(h, mesh, [Replicate()])        # PrepareModuleInput(use_local_output=False)
    gp = {"partial": [Partial()], "default": None, "replicate": [Replicate()], "shard1": [Shard(1)]}[case[1]]
    x = x_dt.to_local(grad_placements=gp)                      # the model's to_local
    if case[0] == "hooked":   # transformers 5 "colwise": hook relabels then to_local(grad_placements=[Partial()])
        x = DTensor.from_local(x, mesh, [Replicate()]).to_local(grad_placements=[Partial()])
    y = F.linear(F.silu(F.linear(x, up)), down)                # local shards, each rank a partial sum
    if case[0] == "shard":
        y = DTensor.from_local(y, mesh, [Shard(1)]).redistribute(mesh, [Replicate()]).to_local()
    else:
        y = DTensor.from_local(y, mesh, [Partial()]).redistribute(mesh, [Replicate()]).to_local()
    logits = F.linear(h + y, W)
    labels = F.pad(ids, (0, 1), value=-100)[..., 1:]
    try:
        F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100).backward()
    except RuntimeError as e:
        if rank == 0:
            print(case, "raises:", str(e).split("\n")[0], flush=True); q.put((case, "raises"))
        return
    err = (E.grad - ref.embed.weight.grad).abs().max().item() / ref.embed.weight.grad.abs().max().item()
    # the embedding gradient's part through the MLP only
    if rank == 0:
        q.put((case, err))
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    cases = [tuple(c.split(":")) for c in sys.argv[1:]]
    for case in cases:
        q = ctx.Queue()
        ps = [ctx.Process(target=run, args=(r, 2, case, q)) for r in range(2)]
        [p.start() for p in ps]; [p.join() for p in ps]
        print(case, "embed.weight grad, max error relative to its scale:", q.get()[1])
