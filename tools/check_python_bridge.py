#!/usr/bin/env python3
"""The Python bridge (python/) against the real torch and transformers, as
python/tests/test_bridge.py checks it against the stand-ins CI has:

  1. the stand-in's LlamaConfig (python/tests/fixtures/llama_config.json)
     is what transformers gives;
  2. tpcc.check on a tiny LlamaForCausalLM (AutoModelForCausalLM.from_config) with real
     ParallelStyle objects: clean plans are clean, a RowwiseParallel on
     q_proj is a relabel error at its key, a custom ParallelStyle subclass
     is refused naming its key;
  3. --export=pytorch of plans/llama-megatron.plan and plans/llama-sp.plan,
     imported and its parallelize() run on a 1-rank gloo mesh: the
     parallelized model's logits match the unparallelized model's;
  4. --export=hf of plans/llama-megatron.plan names only styles transformers
     registers (ALL_PARALLEL_STYLES).

Needs torch and transformers, and a built tpcc (TPCC, default build/tpcc):
  python3 tools/check_python_bridge.py
Prints one line per check and exits non-zero on any failure.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "python", "tests")]
os.environ.setdefault("TPCC", os.path.join(ROOT, "build", "tpcc"))
os.environ.setdefault("TPCC_MODELS", os.path.join(ROOT, "models"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel  # noqa: E402

import tpcc  # noqa: E402
from plans import megatron_plan, sp_layer_plan, sp_root_plan  # noqa: E402  (python/tests/plans.py)

SEQ = 16
# one rank computes what the unsharded model does, in a different order
# of the same float32 operations at most
TOLERANCE = 1e-5
failures = []


def report(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failures.append(name)


def tiny_config():
    return transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def tiny_model():
    return transformers.AutoModelForCausalLM.from_config(tiny_config())


def sp_plan():
    return {"model.layers.*": sp_layer_plan(), "": sp_root_plan()}


def check_fixture():
    with open(os.path.join(ROOT, "python", "tests", "fixtures", "llama_config.json")) as f:
        doc = json.load(f)
    c = tiny_config()
    # through JSON, as the fixture went: id2label's int keys become strings
    report("stand-in LlamaConfig.to_dict() is transformers'", doc["to_dict"] == json.loads(json.dumps(c.to_dict())))
    report("stand-in LlamaConfig.to_json_string() is transformers'",
           doc["to_json_string"] == json.loads(c.to_json_string()))


def check_plans(model):
    diags = tpcc.check(model, megatron_plan(), tp=2, seq=SEQ)
    report("Megatron plan of real styles is clean", diags == [], "; ".join(map(str, diags)))
    diags = tpcc.check(model, sp_plan(), tp=2, seq=SEQ)
    report("sequence-parallel per-block plan is clean", diags == [], "; ".join(map(str, diags)))
    bad = megatron_plan()
    bad["model.layers.*.self_attn.q_proj"] = RowwiseParallel()
    errs = [(d.key, d.check) for d in tpcc.check(model, bad, tp=2, seq=SEQ) if d.level == "error"]
    report("RowwiseParallel on q_proj is a relabel error at its key",
           errs == [("model.layers.*.self_attn.q_proj", "relabel")], str(errs))

    class Custom(ColwiseParallel):
        pass

    bad = megatron_plan()
    bad["lm_head"] = Custom()
    try:
        tpcc.check(model, bad, tp=2, seq=SEQ)
        report("a custom ParallelStyle is refused", False, "no exception")
    except tpcc.UnsupportedStyleError as e:
        report("a custom ParallelStyle is refused naming its key", e.key == "lm_head", str(e))


def export(plan_file, fmt, out):
    p = subprocess.run([os.environ["TPCC"], f"--export={fmt}", plan_file, "-o", out], cwd=ROOT,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tpcc --export={fmt} {plan_file}: {p.stderr}")


def load(path):
    spec = importlib.util.spec_from_file_location("exported_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_rank(rank, world, plan_py, result, port):
    """One rank: the unparallelized model's logits, then the exported
    parallelize() on a gloo mesh of `world` ranks, and the largest
    difference (rank 0 writes it to `result`)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        torch.manual_seed(0)
        model = tiny_model().eval()            # the same weights on every rank
        tokens = torch.randint(0, 128, (2, SEQ))
        with torch.no_grad():
            want = model(tokens).logits
            load(plan_py).parallelize(model, mesh)
            sharded = sum(hasattr(p, "placements") for p in model.parameters())
            # the positions, explicitly: transformers' LlamaModel otherwise
            # counts them from the embedding's output, which under
            # sequence parallelism holds this rank's share of the sequence
            got = model(tokens, position_ids=torch.arange(SEQ).expand(2, SEQ)).logits
        if hasattr(got, "full_tensor"):
            got = got.full_tensor()
        if rank == 0:
            with open(result, "w") as f:
                json.dump({"err": (got - want).abs().max().item(), "dtensor_params": sharded}, f)
    finally:
        dist.destroy_process_group()


def check_export_runs(tmp):
    import torch.multiprocessing as mp
    for i, plan_file in enumerate(("plans/llama-megatron.plan", "plans/llama-sp.plan")):
        out = os.path.join(tmp, os.path.basename(plan_file).replace(".plan", ".py").replace("-", "_"))
        export(plan_file, "pytorch", out)
        diags = tpcc.check(tiny_model(), load(out).PLAN, tp=2, seq=SEQ)
        report(f"{plan_file} exported and checked again through tpcc.check", diags == [],
               "; ".join(map(str, diags)))
        for world in (1, 2):
            result = os.path.join(tmp, "result.json")
            try:
                mp.spawn(run_rank, args=(world, out, result, 29517 + 2 * i + world), nprocs=world)
                with open(result) as f:
                    r = json.load(f)
                ok = r["err"] <= TOLERANCE and r["dtensor_params"] > 0
                detail = f"max |logits - unparallelized| = {r['err']:.2e}, {r['dtensor_params']} DTensor parameters"
            except Exception as e:  # a rank's failure, reported with the others
                ok, detail = False, f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}"
            report(f"{plan_file}: exported parallelize() on a {world}-rank gloo mesh", ok, detail)


def check_export_hf(tmp):
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES
    out = os.path.join(tmp, "tp_plan.json")
    export("plans/llama-megatron.plan", "hf", out)
    with open(out) as f:
        plan = json.load(f)
    unknown = [v for v in plan.values() if v not in ALL_PARALLEL_STYLES]
    report("--export=hf names only registered styles", not unknown and len(plan) == 9, f"{plan}")
    base = {f"model.{k}": v for k, v in tiny_config().base_model_tp_plan.items()}
    same = {k: v for k, v in plan.items() if base.get(k) == v}
    report("--export=hf agrees with LlamaConfig.base_model_tp_plan where both say something",
           all(base.get(k, v) == v for k, v in plan.items()), f"{len(same)} entries equal")


def main():
    check_fixture()
    check_plans(tiny_model())
    with tempfile.TemporaryDirectory() as tmp:
        check_export_runs(tmp)
        check_export_hf(tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
