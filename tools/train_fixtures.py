#!/usr/bin/env python3
"""Fixtures for verifying tprun's training against PyTorch: tiny random
Llama (MHA and GQA), GPT-2 with tied embeddings and Qwen3 (q_norm/k_norm)
models from transformers (LlamaForCausalLM, GPT2LMHeadModel,
Qwen3ForCausalLM), their first step's gradients by autograd and five steps
of torch.optim.AdamW with global-norm clipping and transformers' warm-up +
cosine schedule.

For each config below, tests/fixtures/train/<name>/ gets
  config.json        as transformers 5 saves it (save_pretrained)
  model.safetensors  float32 initial weights (torch.manual_seed(0))
  tokens.npy         int32 [STEPS * BATCH * SEQ]: step i trains on
                     tokens[(i-1)*BATCH*SEQ : i*BATCH*SEQ] as [BATCH, SEQ],
                     input ids and labels alike (the loss shifts them)
  grads.safetensors  float32 gradients of step 1 under the tensor names of
                     model.safetensors (GPT-2's tied wte/lm_head once, as
                     transformer.wte.weight: the sum of both uses)
  train.json         the optimizer's settings and, per step, the loss of its
                     forward, the learning rate it applied and the gradient
                     norm before clipping
  final.safetensors  float32 weights after the STEPS steps
  logits.npy         float32 [BATCH, SEQ, vocab]: the final model's logits
                     on the first batch
(a recipe's fixture, below, has neither grads.safetensors nor logits.npy)

The models run in float32 with the "eager" attention implementation, every
dropout probability 0 and in train() mode (checked to give the same loss as
eval()). Weights are drawn with initializer_range 0.2 rather than 0.02, so
that attention is far from uniform and softmax's backward matters; norm
weights and biases are drawn at random as in tools/hf_fixtures.py. Before
writing, each fixture checks itself: grads.safetensors read back with numpy
against central finite differences of the loss of a float64 copy of the
model at 3 random weight entries, and, for GPT-2, the tied gradient against
the sum of the embedding's and the output head's gradients of an untied
copy.

Needs torch, transformers, safetensors and numpy; CI never runs it, it reads
the committed files:
  python3 tools/train_fixtures.py [OUT_DIR [NAME...]]
"""
import copy
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file
from torch.overrides import TorchFunctionMode
from transformers import AutoConfig, AutoModelForCausalLM, get_cosine_schedule_with_warmup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_fixtures import randomise_norms_and_biases  # noqa: E402

BATCH = 2
SEQ = 16
STEPS = 5
LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
WARMUP = 2
FD_ENTRIES = 3
FD_STEP = 1e-5
# float32 autograd against float64 finite differences
FD_TOLERANCE = 1e-4

LLAMA = {
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
    "initializer_range": 0.2,
    "attention_dropout": 0.0,
}

# GPT2Config's defaults otherwise: gelu_new, eps 1e-5, lm_head tied to wte.
GPT2 = {
    "model_type": "gpt2",
    "vocab_size": 128,
    "n_embd": 32,
    "n_head": 4,
    "n_layer": 2,
    "n_positions": 64,
    "initializer_range": 0.2,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}

CONFIGS = {
    # 4 heads, 4 kv heads, hidden 32, ffn 64, vocab 128: every split at tp 1, 2, 4
    "llama": LLAMA,
    "llama-gqa": dict(LLAMA, num_key_value_heads=2),
    "gpt2-tied": GPT2,
    # head_dim 8 (hidden // heads), q_norm/k_norm over it; sliding window off as published
    "qwen3": dict(LLAMA, model_type="qwen3", head_dim=8, use_sliding_window=False, sliding_window=None),
}

# The training script of each fixture: torch.optim.AdamW and transformers'
# get_cosine_schedule_with_warmup, except where a recipe below says
# otherwise. "llama-recipe" trains the llama fixture's model as seed
# scripts do: AdamW(betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1) and
# SequentialLR(LinearLR(start_factor=0.1, total_iters=WARMUP),
# CosineAnnealingLR(T_max=STEPS - WARMUP, eta_min=MIN_LR)).
DEFAULT_RECIPE = {"betas": BETAS, "eps": EPS, "weight_decay": WEIGHT_DECAY, "start_factor": 0.0, "min_lr": 0.0}
RECIPES = {"llama-recipe": {"betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.1, "start_factor": 0.1,
                            "min_lr": 1e-4}}
CONFIGS["llama-recipe"] = LLAMA

# The tensor save_pretrained writes for each tied pair (the other name is dropped).
TIED = {"gpt2-tied": ("transformer.wte.weight", "lm_head.weight")}


def build(keys, attention="eager"):
    config = AutoConfig.for_model(**keys)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention).float()
    randomise_norms_and_biases(model)
    return model


def batch(tokens, step):
    n = BATCH * SEQ
    return torch.from_numpy(tokens[(step - 1) * n:step * n].astype(np.int64)).reshape(BATCH, SEQ)


def loss_of(model, ids):
    return model(input_ids=ids, labels=ids).loss


class Float64Throughout(TorchFunctionMode):
    """Turns every cast to float32 into one to float64: transformers computes
    norms, softmax, RoPE and the loss in float32 whatever the model's dtype,
    which would leave a float64 copy's loss too coarse for differencing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.float:
            return args[0].double()
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        kwargs = {k: torch.float64 if v is torch.float32 else v for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)


def gradients(model, ids):
    """{HF tensor name: gradient} of one forward and backward; a tied pair's
    gradient appears once, under the name save_pretrained keeps."""
    model.zero_grad(set_to_none=True)
    loss = loss_of(model, ids)
    loss.backward()
    return loss, {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def save_pretrained(model, out, files):
    """Copies files of what save_pretrained writes into out ({its name: the
    name in out}); returns the tensor names of its model.safetensors."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        for f, dest in files.items():
            shutil.copy(os.path.join(tmp, f), os.path.join(out, dest))
        return set(load_file(os.path.join(tmp, "model.safetensors")))


def check_train_mode(model, ids):
    """train() must change nothing but the mode: every dropout is 0."""
    with torch.no_grad():
        model.eval()
        eval_loss = loss_of(model, ids)
        model.train()
        train_loss = loss_of(model, ids)
    if not torch.equal(eval_loss, train_loss):
        sys.exit(f"train() changes the loss: {train_loss.item()} against eval()'s {eval_loss.item()}")


def check_tied_sum(name, keys, model, ids, grads):
    """The tied gradient is the sum of the embedding's and the head's: an
    untied copy with the same weights gives the two parts apart."""
    if name not in TIED:
        return
    kept, dropped = TIED[name]
    untied = AutoModelForCausalLM.from_config(AutoConfig.for_model(**dict(keys, tie_word_embeddings=False)),
                                              attn_implementation="eager").float()
    state = model.state_dict()
    state[dropped] = state[kept].clone()
    untied.load_state_dict(state)
    untied.train()
    _, parts = gradients(untied, ids)
    diff = (grads[kept] - (parts[kept] + parts[dropped])).abs().max().item()
    scale = grads[kept].abs().max().item()
    print(f"{name}: tied {kept} gradient against the sum of both uses: max |diff| {diff:.3g} (|max| {scale:.3g})")
    if diff > 1e-6 * max(scale, 1.0):
        sys.exit(f"{name}: the tied gradient is not the sum of the embedding's and the head's")


def check_finite_differences(name, model, ids, grads_path):
    """grads.safetensors, read back, against central differences of the loss
    of a float64 copy at FD_ENTRIES random entries."""
    grads = load_file(grads_path)
    model64 = copy.deepcopy(model).double()
    params = dict(model64.named_parameters())
    names = sorted(grads)
    rng = np.random.default_rng(3)
    for _ in range(FD_ENTRIES):
        tensor = names[rng.integers(len(names))]
        index = tuple(int(rng.integers(n)) for n in grads[tensor].shape)
        p = params[tensor]
        with torch.no_grad(), Float64Throughout():
            saved = p[index].item()
            p[index] = saved + FD_STEP
            up = loss_of(model64, ids).item()
            p[index] = saved - FD_STEP
            down = loss_of(model64, ids).item()
            p[index] = saved
        fd = (up - down) / (2 * FD_STEP)
        ag = float(grads[tensor][index])
        err = abs(fd - ag) / max(abs(fd), 1e-3)
        print(f"{name}: d loss / d {tensor}{list(index)}: finite difference {fd:.9g}, autograd {ag:.9g}, "
              f"relative error {err:.2g}")
        if err > FD_TOLERANCE:
            sys.exit(f"{name}: autograd and finite differences disagree at {tensor}{list(index)}")


def scheduler(opt, recipe):
    """transformers' warm-up and cosine, or PyTorch's LinearLR then
    CosineAnnealingLR where the recipe starts the warm-up above 0."""
    if not recipe["start_factor"]:
        assert not recipe["min_lr"], "transformers' cosine here has no floor"
        return get_cosine_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=STEPS)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=recipe["start_factor"], end_factor=1.0,
                                             total_iters=WARMUP)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS - WARMUP, eta_min=recipe["min_lr"])
    return torch.optim.lr_scheduler.SequentialLR(opt, schedulers=[warm, cosine], milestones=[WARMUP])


def train(model, tokens, recipe):
    """STEPS steps of AdamW; the log of train.json's "steps"."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=recipe["betas"], eps=recipe["eps"], foreach=False)
    sched = scheduler(opt, recipe)
    log = []
    for step in range(1, STEPS + 1):
        ids = batch(tokens, step)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, ids)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), MAX_GRAD_NORM)
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        log.append({"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()})
    return log


def make(name, keys, out_root):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model = build(keys)
    saved_names = save_pretrained(model, out, {"config.json": "config.json", "model.safetensors": "model.safetensors"})

    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, keys["vocab_size"], (STEPS * BATCH * SEQ,), generator=gen).numpy().astype(np.int32)
    np.save(os.path.join(out, "tokens.npy"), tokens)

    first = batch(tokens, 1)
    check_train_mode(model, first)
    loss, grads = gradients(model, first)
    # named_parameters() lists a tied tensor once, under the name save_pretrained keeps
    if set(grads) != saved_names:
        sys.exit(f"{name}: gradient names {sorted(set(grads) ^ saved_names)} differ from model.safetensors'")
    grads_path = os.path.join(out, "grads.safetensors")
    save_file({k: v.float().contiguous() for k, v in grads.items()}, grads_path)
    check_tied_sum(name, keys, model, first, grads)
    check_finite_differences(name, model, first, grads_path)

    recipe = RECIPES.get(name, DEFAULT_RECIPE)
    log = train(model, tokens, recipe)
    if log[0]["loss"] != loss.item():
        sys.exit(f"{name}: step 1's loss {log[0]['loss']} differs from the gradient pass's {loss.item()}")
    settings = {"batch": BATCH, "seq": SEQ, "lr": LR, "betas": list(recipe["betas"]), "eps": recipe["eps"],
                "weight_decay": recipe["weight_decay"], "max_grad_norm": MAX_GRAD_NORM, "warmup": WARMUP,
                "schedule": "cosine", "steps": log}
    if name in RECIPES:
        settings.update(warmup_start_factor=recipe["start_factor"], min_lr=recipe["min_lr"])
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(settings, f, indent=2)
        f.write("\n")

    save_pretrained(model, out, {"model.safetensors": "final.safetensors"})
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=first).logits
    np.save(os.path.join(out, "logits.npy"), logits.numpy().astype(np.float32))
    if name in RECIPES:
        # the same model and data as the fixture of its config: its first
        # step's gradients are that fixture's, and nothing reads the logits
        for unused in ("grads.safetensors", "logits.npy"):
            os.remove(os.path.join(out, unused))
    print_log(name, log)


def print_log(name, log):
    for entry in log:
        print(f"{name}: step {entry['step']}: loss {entry['loss']:.6f}, lr {entry['lr']:.3g}, "
              f"grad_norm {entry['grad_norm']:.4f}")


def make_all(table, make_one, script):
    """`script` [OUT_DIR [NAME...]]: make_one(name, table[name], out) for
    each name (all of the table's by default), deterministically."""
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "train")
    names = sys.argv[2:] or list(table)
    for name in names:
        if name not in table:
            sys.exit(f"{script}: no fixture named {name!r}; known: {', '.join(table)}")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names:
        make_one(name, table[name], out_root)


if __name__ == "__main__":
    make_all(CONFIGS, make, "train_fixtures.py")
