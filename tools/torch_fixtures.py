#!/usr/bin/env python3
"""Regenerate tests/fixtures/torch/: logits computed by PyTorch's own tensor
parallelism (DTensor, parallelize_module) for tprun to be checked against.

    python3 tools/torch_fixtures.py [--out tests/fixtures/torch] [--family llama gpt2]

Needs PyTorch (2.15.0 was used; CPU is enough), numpy and the safetensors
package, only here: CI and the README's commands never run this script, they
read the committed files it writes.

For each family it
  1. writes a seeded float32 checkpoint with tools/make_checkpoint.py
     (--seed 7) into OUT/<family>/ (model.safetensors, config.json), the
     file tprun reads too;
  2. builds torch.nn modules that mirror models/<family>.model exactly, with
     Hugging Face's module names and semantics, and loads that checkpoint;
  3. runs the forward pass in one process (no TP): logits_tp1.npy, loss_tp1.npy;
  4. runs it again on 2 processes (torch.multiprocessing, gloo on loopback,
     init_device_mesh("cpu", (2,))) after parallelize_module with the
     dicts of the plan file, read from the .plan text itself: each
     `parallelize "PATH" { ... }` block's dict is evaluated as Python with
     PyTorch's style classes in scope and applied to every module matching
     PATH (fnmatch per component; "" is the root): logits_tp2.npy,
     loss_tp2.npy;
  5. checks that both ranks agree, that TP matches the single process
     (max |diff| < 1e-4) and that the single process matches the independent
     NumPy reference (tools/reference.py, float64) before writing anything.

The loss is Hugging Face's causal-LM loss (logits[:, :-1] against
labels[:, 1:], mean), with labels = tokens.
"""
import argparse
import datetime
import fnmatch
import importlib.util
import json
import os
import re
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 7
TOLERANCE = 1e-4
WORLD = 2

# The fixture sizes; the -D set tests/runtime/test_torch_parity.cc compiles the plans with.
CONFIGS = {
    "llama": dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, seq=16, batch=2,
                  rope_theta=10000.0, rms_eps=1e-6),
    "gpt2": dict(vocab=256, hidden=64, layers=2, heads=4, ffn=256, positions=32, seq=16, batch=2,
                 ln_eps=1e-5),
}
PLANS = {"llama": "plans/llama-sp.plan", "gpt2": "plans/gpt2-sp-tied.plan"}
CHECKPOINT_KEYS = {
    "llama": ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"),
    "gpt2": ("vocab", "hidden", "layers", "heads", "ffn", "positions"),
}


# --- models/llama.model ------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):  # HF LlamaRMSNorm
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(seq, head_dim, theta):
    """HF LlamaRotaryEmbedding at positions 0..seq-1: [seq, head_dim] each."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    positions = torch.arange(seq, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    """HF repeat_kv: [b, kv, s, d] -> [b, kv * n_rep, s, d]."""
    if n_rep == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.head_dim = c["hidden"] // c["heads"]
        self.num_key_value_groups = c["heads"] // c["kv_heads"]   # from the config, as HF: TP-invariant
        self.rope_theta = c["rope_theta"]
        self.q_proj = nn.Linear(c["hidden"], c["heads"] * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c["hidden"], c["kv_heads"] * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["hidden"], c["kv_heads"] * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c["heads"] * self.head_dim, c["hidden"], bias=False)

    def forward(self, hidden_states):
        b, s = hidden_states.shape[:2]
        shape = (b, s, -1, self.head_dim)   # -1 heads, as HF: local shards keep working under TP
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = rope_cos_sin(s, self.head_dim, self.rope_theta)
        cos, sin = cos.to(q.dtype)[None, None], sin.to(q.dtype)[None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(a)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.up_proj = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.down_proj = nn.Linear(c["ffn"], c["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(c["hidden"], c["rms_eps"])
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(c["hidden"], c["rms_eps"])
        self.mlp = LlamaMLP(c)

    def forward(self, hidden_states):
        residual = hidden_states
        h = self.input_layernorm(hidden_states)
        h = self.self_attn(hidden_states=h)      # by keyword, as HF
        h = residual + h
        residual = h
        h = self.post_attention_layernorm(h)
        h = self.mlp(h)
        return residual + h


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["layers"])])
        self.norm = LlamaRMSNorm(c["hidden"], c["rms_eps"])

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


# --- models/gpt2.model -------------------------------------------------------

class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.head_dim = c["hidden"] // c["heads"]
        self.q_proj = nn.Linear(c["hidden"], c["hidden"])
        self.k_proj = nn.Linear(c["hidden"], c["hidden"])
        self.v_proj = nn.Linear(c["hidden"], c["hidden"])
        self.c_proj = nn.Linear(c["hidden"], c["hidden"])

    def forward(self, hidden_states):
        b, s = hidden_states.shape[:2]
        shape = (b, s, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(a.transpose(1, 2).reshape(b, s, -1))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["hidden"], c["ffn"])
        self.c_proj = nn.Linear(c["ffn"], c["hidden"])
        self.act = nn.GELU(approximate="tanh")   # gelu_new

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["hidden"], eps=c["ln_eps"])
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["hidden"], eps=c["ln_eps"])
        self.mlp = GPT2MLP(c)

    def forward(self, hidden_states):
        x = hidden_states + self.attn(self.ln_1(hidden_states))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(c["positions"], c["hidden"])
        self.h = nn.ModuleList([GPT2Block(c) for _ in range(c["layers"])])
        self.ln_f = nn.LayerNorm(c["hidden"], eps=c["ln_eps"])

    def forward(self, input_ids):
        # positions(input_ids): 0..seq-1 for every sequence of the batch
        position_ids = torch.arange(input_ids.shape[1], dtype=input_ids.dtype).expand(input_ids.shape)
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.tie_weights()

    def tie_weights(self):
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


MODELS = {"llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}
TIES = {"gpt2": [("lm_head.weight", "transformer.wte.weight")]}


def build_model(family, checkpoint):
    torch.manual_seed(0)   # every parameter is overwritten below; this only makes stray ones deterministic
    model = MODELS[family](CONFIGS[family]).float()
    load_checkpoint(model, checkpoint, family)
    model.eval()
    return model


def load_checkpoint(model, path, family):
    from safetensors.numpy import load_file
    tensors = load_file(path)
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = {a for a, _ in TIES.get(family, [])}
    missing = [n for n in params if n not in tensors and n not in tied]
    unused = [n for n in tensors if n not in params]
    if missing or unused:
        sys.exit(f"{path}: missing {missing}, unused {unused}")
    with torch.no_grad():
        for name, p in params.items():
            if name in tensors:
                t = torch.from_numpy(np.array(tensors[name], dtype=np.float32))
                if tuple(t.shape) != tuple(p.shape):
                    sys.exit(f"{path}: {name} is {tuple(t.shape)}, the model has {tuple(p.shape)}")
                p.copy_(t)
    for a, b in TIES.get(family, []):
        assert params[a] is params[b], f"{a} is not tied to {b}"


def causal_lm_loss(logits, labels):
    """HF ForCausalLMLoss: shift, float32, mean over labels != -100."""
    lg = logits[:, :-1, :].float().reshape(-1, logits.shape[-1])
    y = labels[:, 1:].reshape(-1).long()
    return F.cross_entropy(lg, y, ignore_index=-100, reduction="mean")


def make_tokens(batch, seq, vocab):
    """A fixed token array: no RNG, the same on every numpy."""
    b = np.arange(batch)[:, None]
    s = np.arange(seq)[None, :]
    return ((b * 97 + s * 31 + s * s * 13 + 7) % vocab).astype(np.int32)


# --- the plan file -----------------------------------------------------------

def _skip_string_or_comment(text, i):
    """If text[i] opens a string or a comment, the index just past it; else i."""
    ch = text[i]
    if ch == "#":
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if ch in "\"'":
        j = i + 1
        while j < len(text) and text[j] != ch:
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i


def plan_blocks(plan_text):
    """[(path, dict text)] of every `parallelize "PATH" { ... }` block, in order."""
    blocks = []
    i = 0
    head = re.compile(r"""parallelize\s+(["'])(.*?)\1\s*(on\s+["'][^"']*["']\s*)?\{""")
    while i < len(plan_text):
        j = _skip_string_or_comment(plan_text, i)
        if j != i:
            i = j
            continue
        m = head.match(plan_text, i)
        if m and (i == 0 or not (plan_text[i - 1].isalnum() or plan_text[i - 1] == "_")):
            if m.group(3):
                sys.exit("torch_fixtures.py: 2-D meshes (`on \"dim\"`) are not supported here")
            start = m.end() - 1
            depth, k = 0, start
            while k < len(plan_text):
                j = _skip_string_or_comment(plan_text, k)
                if j != k:
                    k = j
                    continue
                if plan_text[k] in "{([":
                    depth += 1
                elif plan_text[k] in "})]":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            blocks.append((m.group(2), plan_text[start:k + 1]))
            i = k + 1
            continue
        i += 1
    return blocks


def plan_uses_loss_parallel(plan_text):
    return any(re.match(r"\s*loss_parallel\s*\(", line) for line in plan_text.splitlines())


def style_namespace():
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleInputOutput,
                                                   PrepareModuleOutput, RowwiseParallel, SequenceParallel)
    return {"__builtins__": {}, "Replicate": Replicate, "Shard": Shard, "Partial": Partial,
            "ColwiseParallel": ColwiseParallel, "RowwiseParallel": RowwiseParallel,
            "SequenceParallel": SequenceParallel, "PrepareModuleInput": PrepareModuleInput,
            "PrepareModuleOutput": PrepareModuleOutput, "PrepareModuleInputOutput": PrepareModuleInputOutput,
            "True": True, "False": False, "None": None}


def matching_modules(model, pattern):
    """The modules whose FQN matches pattern, fnmatch per dot-separated component."""
    if pattern == "":
        return [("", model)]
    parts = pattern.split(".")
    out = []
    for name, mod in model.named_modules():
        comps = name.split(".") if name else []
        if len(comps) == len(parts) and all(fnmatch.fnmatchcase(c, p) for c, p in zip(comps, parts)):
            out.append((name, mod))
    return out


def parallelize_blocks(model, mesh, plan_path, text):
    """parallelize_module with each `parallelize` block of the plan text."""
    from torch.distributed.tensor.parallel import parallelize_module
    blocks = plan_blocks(text)
    if not blocks:
        sys.exit(f"{plan_path}: no parallelize blocks")
    for path, dict_text in blocks:
        plan = eval(dict_text, style_namespace())   # the plan dict syntax is Python's
        mods = matching_modules(model, path)
        if not mods:
            sys.exit(f"{plan_path}: parallelize \"{path}\" matches no module")
        for _, mod in mods:
            parallelize_module(mod, mesh, plan)


def apply_plan(model, mesh, plan_path, family):
    text = open(plan_path).read()
    if plan_uses_loss_parallel(text):
        sys.exit(f"{plan_path}: loss_parallel() is not supported by this script")
    parallelize_blocks(model, mesh, plan_path, text)
    # parallelize_module replaces each module's Parameter by a DTensor one, so
    # a tie made before it is broken: tie again, as PyTorch's tests do.
    if family == "gpt2":
        model.tie_weights()
    for a, b in TIES.get(family, []):
        pa, pb = model.get_parameter(a), model.get_parameter(b)
        assert pa is pb, f"{a} is not tied to {b} after parallelizing"
    return model


# --- the runs ----------------------------------------------------------------

def forward(model, tokens):
    ids = torch.from_numpy(tokens.astype(np.int64))
    with torch.no_grad():
        logits = model(ids)
        loss = causal_lm_loss(logits, ids)
    return logits.float().numpy(), float(loss)


def tp_worker(rank, world, port, family, checkpoint, plan, tokens, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        model = build_model(family, checkpoint)
        apply_plan(model, mesh, plan, family)
        placements = parameter_placements(model)
        logits, loss = forward(model, tokens)
        if rank == 0:
            with open(os.path.join(outdir, "placements.json"), "w") as f:
                json.dump(placements, f)
        np.save(os.path.join(outdir, f"logits_rank{rank}.npy"), logits)
        with open(os.path.join(outdir, f"loss_rank{rank}.json"), "w") as f:
            json.dump({"loss": loss}, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def parameter_placements(model):
    """{parameter FQN: its placement and local shape}; every parameter must be
    a DTensor after the plan (the plans shard or replicate all of them)."""
    from torch.distributed.tensor import DTensor
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if not isinstance(p.data, DTensor) and not isinstance(p, DTensor):
            raise RuntimeError(f"{name} is not a DTensor after parallelize_module")
        out[name] = f"{', '.join(str(x) for x in p.placements)} local {list(p.to_local().shape)}"
    return out


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tp(family, checkpoint, plan, tokens):
    with tempfile.TemporaryDirectory(prefix="torch-tp-") as d:
        mp.spawn(tp_worker, args=(WORLD, free_port(), family, checkpoint, plan, tokens, d), nprocs=WORLD, join=True)
        logits = [np.load(os.path.join(d, f"logits_rank{r}.npy")) for r in range(WORLD)]
        losses = [json.load(open(os.path.join(d, f"loss_rank{r}.json")))["loss"] for r in range(WORLD)]
        placements = json.load(open(os.path.join(d, "placements.json")))
    for r in range(1, WORLD):
        if not np.array_equal(logits[0], logits[r]) or losses[0] != losses[r]:
            sys.exit(f"{family}: rank {r}'s logits or loss differ from rank 0's")
    return logits[0], losses[0], placements


def numpy_reference(family, checkpoint, tokens):
    spec = importlib.util.spec_from_file_location("tpcc_reference", os.path.join(ROOT, "tools", "reference.py"))
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    c = CONFIGS[family]
    cfg, _ = ref.parse_config(family, [f"{k}={c[k]}" for k in CHECKPOINT_KEYS[family] + ("seq", "batch")])
    W = ref.load_weights(checkpoint)
    ids = tokens.astype(np.int64)
    logits = (ref.llama if family == "llama" else ref.gpt2)(W, ids, cfg)
    return logits, ref.causal_lm_loss(logits, ids)


def make_checkpoint(family, outdir):
    spec = importlib.util.spec_from_file_location("tpcc_make_checkpoint",
                                                  os.path.join(ROOT, "tools", "make_checkpoint.py"))
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    c = CONFIGS[family]
    rc = mc.main(["--family", family, "--out", outdir, "--seed", str(SEED), "--dtype", "f32",
                  "--config"] + [f"{k}={c[k]}" for k in CHECKPOINT_KEYS[family]])
    if rc:
        sys.exit(f"make_checkpoint.py failed for {family}")
    return os.path.join(outdir, "model.safetensors")


def atomic_save(path, array):
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=os.path.basename(path) + ".tmp.", suffix=".npy")
    os.close(fd)
    np.save(tmp, array)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def do_family(family, out):
    c = CONFIGS[family]
    fdir = os.path.join(out, family)
    checkpoint = make_checkpoint(family, fdir)
    plan = os.path.join(ROOT, PLANS[family])
    tokens = make_tokens(c["batch"], c["seq"], c["vocab"])

    torch.set_num_threads(1)
    logits1, loss1 = forward(build_model(family, checkpoint), tokens)
    logits2, loss2, placements = run_tp(family, checkpoint, plan, tokens)
    ref_logits, ref_loss = numpy_reference(family, checkpoint, tokens)

    shape = (c["batch"], c["seq"], c["vocab"])
    for name, a in (("tp1", logits1), ("tp2", logits2)):
        if a.shape != shape or a.dtype != np.float32 or not np.isfinite(a).all():
            sys.exit(f"{family}: {name} logits are {a.dtype}{a.shape}, expected finite float32{shape}")
    d_tp = float(np.abs(logits2 - logits1).max())
    d_ref = float(np.abs(logits1.astype(np.float64) - ref_logits).max())
    stats = {
        "max_abs_diff_tp2_vs_tp1": d_tp,
        "max_abs_diff_tp1_vs_numpy_f64": d_ref,
        "loss_diff_tp2_vs_tp1": abs(loss2 - loss1),
        "loss_diff_tp1_vs_numpy_f64": abs(loss1 - ref_loss),
    }
    print(f"{family}: loss tp1 {loss1:.9g}, tp2 {loss2:.9g}, numpy f64 {ref_loss:.9g}; "
          f"max |logits tp2 - tp1| {d_tp:.3g}, max |logits tp1 - numpy| {d_ref:.3g}")
    for k, v in stats.items():
        if not v < TOLERANCE:
            sys.exit(f"{family}: {k} = {v:.3g} is not below {TOLERANCE}; nothing written")

    atomic_save(os.path.join(fdir, "tokens.npy"), tokens)
    atomic_save(os.path.join(fdir, "logits_tp1.npy"), logits1)
    atomic_save(os.path.join(fdir, "logits_tp2.npy"), logits2)
    atomic_save(os.path.join(fdir, "loss_tp1.npy"), np.array([loss1], dtype=np.float64))
    atomic_save(os.path.join(fdir, "loss_tp2.npy"), np.array([loss2], dtype=np.float64))
    meta = {
        "family": family, "plan": PLANS[family], "torch": torch.__version__, "seed": SEED,
        "config": {k: v for k, v in c.items()}, "tokens_shape": list(tokens.shape),
        "loss_tp1": loss1, "loss_tp2": loss2, "loss_numpy_f64": ref_loss, **stats,
        "tp2_parameter_placements": placements,
    }
    with open(os.path.join(fdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return meta


README = """\
# PyTorch tensor-parallel fixtures

Logits and losses computed by PyTorch {torch} itself (DTensor,
`parallelize_module`, gloo on CPU, 2 processes) for tprun to be checked
against (tests/runtime/test_torch_parity.cc). Regenerate with

    python3 tools/torch_fixtures.py

(needs torch, numpy and safetensors; CI and the README's commands never
do). The script checks, before writing anything, that both ranks agree,
that the TP logits match the single-process ones and that the
single-process ones match tools/reference.py (NumPy, float64), each within
1e-4.

| directory | model | plan (dicts read from the file) | sizes |
|---|---|---|---|
| `llama/` | models/llama.model | plans/llama-sp.plan | vocab 256, hidden 64, layers 2, heads 4, kv_heads 2, ffn 128, seq 16, batch 2 |
| `gpt2/` | models/gpt2.model | plans/gpt2-sp-tied.plan | vocab 256, hidden 64, layers 2, heads 4, ffn 256, positions 32, seq 16, batch 2; lm_head tied to transformer.wte |

PyTorch has no vocabulary padding: the vocabulary (256) divides over the
2 ranks as it is, and is already a multiple of gpt2-sp-tied.plan's
`vocab_multiple = 128`, so tpcc pads nothing either (the tests compile it
with `-D vocab_multiple=1`, and once with the plan's 128). The torch
version is PyPI's default (CUDA) build, run on the CPU only.

Each directory holds:

| file | what |
|---|---|
| `model.safetensors`, `config.json` | the checkpoint, float32, from `tools/make_checkpoint.py --seed 7` (Hugging Face names); the one file both PyTorch and tprun read |
| `tokens.npy` | int32 [2, 16]: the input ids; the labels are the same ids (shifted inside the loss, Hugging Face style) |
| `logits_tp1.npy` | float32 [2, 16, 256]: the logits of one process, no tensor parallelism |
| `logits_tp2.npy` | float32 [2, 16, 256]: the logits of the 2-rank run under the plan (lm_head's output is Replicate(), so every rank holds all of them; rank 0's are saved, rank 1's are checked equal) |
| `loss_tp1.npy`, `loss_tp2.npy` | float64 [1]: the causal-LM loss (mean cross entropy of logits[:, :-1] against labels[:, 1:]) of each run |
| `meta.json` | torch version, sizes, losses (also from NumPy) and the measured differences |

Measured when generated:

{table}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "torch"))
    ap.add_argument("--family", nargs="+", default=["llama", "gpt2"], choices=sorted(CONFIGS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    metas = {f: do_family(f, args.out) for f in args.family}
    # The README describes every family there; re-read the ones not rerun.
    for f in CONFIGS:
        p = os.path.join(args.out, f, "meta.json")
        if f not in metas and os.path.exists(p):
            metas[f] = json.load(open(p))
    rows = ["| family | loss tp1 | loss tp2 | max abs diff tp2 vs tp1 | max abs diff tp1 vs NumPy f64 |",
            "|---|---|---|---|---|"]
    for f in CONFIGS:
        if f in metas:
            m = metas[f]
            rows.append(f"| {f} | {m['loss_tp1']:.7f} | {m['loss_tp2']:.7f} | {m['max_abs_diff_tp2_vs_tp1']:.3g} "
                        f"| {m['max_abs_diff_tp1_vs_numpy_f64']:.3g} |")
    with open(os.path.join(args.out, "README.md"), "w") as fh:
        fh.write(README.format(torch=torch.__version__, table="\n".join(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
