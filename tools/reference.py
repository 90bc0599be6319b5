#!/usr/bin/env python3
"""Independent NumPy forward pass of models/llama.model, models/gpt2.model,
models/gemma.model and models/gemma2.model.

Hugging Face semantics, float64 throughout, nothing shared with the C runtime:
the logits and loss it prints are what tprun's output is compared against.

  Llama: embed_tokens; per layer RMSNorm (eps rms_norm_eps) -> q/k/v -> rotate_half
         RoPE (inv_freq = rope_theta^(-2i/d), scaled as rope_scaling says) -> causal
         GQA attention -> o_proj,
         residual; RMSNorm -> down(silu(gate(x)) * up(x)), residual; norm;
         lm_head (tied to embed_tokens when lm_head.weight is absent).
         Biases on any projection are used when present (Qwen2's q/k/v).
  GPT-2: wte(ids) + wpe(positions); per layer LayerNorm (eps layer_norm_epsilon, bias) ->
         separate q/k/v Linear with biases (nn.Linear [out, in], not Conv1D)
         -> causal attention -> c_proj, residual; LayerNorm -> c_proj(gelu_tanh
         (c_fc(x))), residual; ln_f; lm_head tied to wte, no bias.
  Gemma: Llama with RMSNorm scaling by (1 + w), embeddings times
         float32(sqrt(hidden)), head_dim from the config and
         down(gelu_tanh(gate(x)) * up(x)) (GemmaConfig's gelu_pytorch_tanh).
  Gemma 2: Gemma with each sublayer's output normalised before its residual
         add (post_attention_layernorm, post_feedforward_layernorm), the MLP's
         input by pre_feedforward_layernorm, scores scaled by
         query_pre_attn_scalar^-0.5 and capped as c tanh(s / c)
         (attn_logit_softcapping), the logits capped (final_logit_softcapping).

Example:
  tools/reference.py --family llama --weights tiny.safetensors \\
      --config vocab=256 hidden=64 layers=2 heads=4 kv_heads=2 ffn=128 \\
      --tokens 1,2,3,4 --labels 1,2,3,4 --out logits.npy
Tokens and labels are a .npy file or a comma list, reshaped to [batch, -1].
The logits are saved as float32 [batch, seq, vocab] (the logical vocabulary);
with labels, the shifted causal-LM loss (-100 ignored) is printed as
"loss <value>".
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("reference.py: numpy is required (apt-get install python3-numpy)")

# The .model files' defaults (hf(key, default)); --config overrides them.
# tp and vocab_multiple are accepted so that tpcc's -D set can be passed
# unchanged; they do not change the result. Float-valued keys (the norms'
# eps, rope_theta, the RoPE scaling factors) take floats, rope_scaling (the
# type: default, linear, dynamic, llama3, yarn) a string.
DEFAULTS = {
    "llama": dict(vocab=32000, hidden=4096, layers=32, heads=32, kv_heads=8, ffn=11008, seq=2048, batch=1,
                  tie_embeddings=False, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=None, tp=1,
                  vocab_multiple=1, rope_scaling="default", rope_factor=1.0, rope_low_freq_factor=1.0,
                  rope_high_freq_factor=4.0, rope_original_max_positions=2048, rope_beta_fast=32.0,
                  rope_beta_slow=1.0, rope_truncate=True, rope_attention_factor=0.0, rope_mscale=0.0,
                  rope_mscale_all_dim=0.0),
    "gpt2": dict(vocab=50257, hidden=768, layers=12, heads=12, ffn=None, positions=1024, seq=1024, batch=1,
                 tie_embeddings=True, layer_norm_epsilon=1e-5, tp=1, vocab_multiple=1),
    "gemma": dict(vocab=256000, hidden=3072, layers=28, heads=16, kv_heads=16, ffn=24576, seq=2048, batch=1,
                  tie_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256, tp=1,
                  vocab_multiple=1, rope_scaling="default", rope_factor=1.0, rope_low_freq_factor=1.0,
                  rope_high_freq_factor=4.0, rope_original_max_positions=8192),
}
# Gemma2Config's defaults where they differ from GemmaConfig's
DEFAULTS["gemma2"] = dict(DEFAULTS["gemma"], hidden=2304, layers=26, heads=8, kv_heads=4, ffn=9216,
                          query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
IGNORE = -100


# --- safetensors --------------------------------------------------------------

def load_weights(path):
    """A .safetensors file, a directory of them, or a sharded checkpoint's
    model.safetensors.index.json (its weight_map names the files)."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    elif path.endswith(".json"):
        with open(path) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        files = [os.path.join(os.path.dirname(path), s) for s in shards]
    else:
        files = [path]
    if not files:
        sys.exit(f"{path}: no .safetensors files")
    W = {}
    for f in files:
        W.update(load_safetensors(f))
    return W


def load_safetensors(path):
    """8-byte little-endian header length, a JSON header {name: {dtype, shape,
    data_offsets}} (offsets relative to the end of the header), then data."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = blob[base + start:base + end]
        dtype = info["dtype"]
        if dtype == "F32":
            a = np.frombuffer(raw, "<f4")
        elif dtype == "F16":
            a = np.frombuffer(raw, "<f2")
        elif dtype == "BF16":  # the top half of a float32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype == "F64":
            a = np.frombuffer(raw, "<f8")
        else:
            sys.exit(f"{path}: tensor {name}: unsupported dtype {dtype}")
        tensors[name] = a.astype(np.float64).reshape(info["shape"])
    return tensors


# --- building blocks ----------------------------------------------------------

def linear(W, x, name, bias):
    """nn.Linear: x @ weight.T (+ bias). bias: True required, False none,
    None when present in the file."""
    y = x @ W[name + ".weight"].T
    if bias or (bias is None and name + ".bias" in W):
        y = y + W[name + ".bias"]
    return y


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def rope_inv_freq(cfg, d, seq):
    """inv_freq as transformers' ROPE_INIT_FUNCTIONS compute it
    (modeling_rope_utils.py: default, linear, dynamic NTK, llama3, yarn)."""
    theta, kind, factor = cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"]
    old = cfg["rope_original_max_positions"]
    exponents = np.arange(0, d, 2) / d
    if kind == "dynamic" and seq > old:
        theta = theta * ((factor * seq / old) - (factor - 1)) ** (d / (d - 2))
    inv_freq = 1.0 / theta ** exponents
    if kind in ("default", "dynamic"):
        return inv_freq
    if kind == "linear":
        return inv_freq / factor
    if kind == "yarn":
        return yarn_inv_freq(cfg, inv_freq, d, theta)
    if kind != "llama3":
        sys.exit(f"reference.py: RoPE scaling '{kind}' is not implemented")
    low, high = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled)


def yarn_inv_freq(cfg, inv_freq, d, theta):
    """_compute_yarn_parameters: extrapolated below the correction range of
    beta_fast/beta_slow rotations, interpolated (/ factor) above, a linear
    ramp between."""
    old = cfg["rope_original_max_positions"]

    def correction_dim(rotations):
        return d * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(cfg["rope_beta_fast"]), correction_dim(cfg["rope_beta_slow"])
    if cfg["rope_truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    return inv_freq / cfg["rope_factor"] * ramp + inv_freq * (1 - ramp)


def yarn_attention_factor(cfg):
    """attention_factor as given, else get_mscale(factor), or the mscale /
    mscale_all_dim ratio when both are set."""
    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    factor, mscale, mscale_all_dim = cfg["rope_factor"], cfg["rope_mscale"], cfg["rope_mscale_all_dim"]
    if cfg["rope_attention_factor"]:
        return cfg["rope_attention_factor"]
    if mscale and mscale_all_dim:
        return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    return get_mscale(factor)


def rope(x, cfg):
    """HF apply_rotary_pos_emb on x [b, s, h, d]: cos/sin = cat(freqs, freqs)
    (times yarn's attention factor), x * cos + rotate_half(x) * sin,
    rotate_half(x) = cat(-x2, x1)."""
    d = x.shape[-1]
    inv_freq = rope_inv_freq(cfg, d, x.shape[1])
    scale = yarn_attention_factor(cfg) if cfg["rope_scaling"] == "yarn" else 1.0
    freqs = np.outer(np.arange(x.shape[1]), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)[None, :, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return scale * (x * np.cos(emb) + np.concatenate([-x2, x1], axis=-1) * np.sin(emb))


def softcap(x, cap):
    """cap * tanh(x / cap); 0 is none"""
    return cap * np.tanh(x / cap) if cap else x


def attention(q, k, v, scale=None, cap=0.0):
    """Causal softmax(softcap(q k^T * scale)) v, scale 1/sqrt(d) by default;
    q [b, s, h, d], k/v [b, s, g, d]; query head i reads kv head i // (h / g)
    (HF repeat_kv)."""
    rep = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, rep, axis=2), np.repeat(v, rep, axis=2)
    s = q.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = softcap(np.einsum("bqhd,bkhd->bhqk", q, k) * scale, cap)
    scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def heads(x, n):
    """[b, s, n*d] -> [b, s, n, d]"""
    return x.reshape(x.shape[0], x.shape[1], n, -1)


def merge(x):
    return x.reshape(x.shape[0], x.shape[1], -1)


# --- the two families ---------------------------------------------------------

def lm_head(W, cfg, embedding):
    """Tied heads are often absent from the file: no lm_head.weight means tied."""
    tied = cfg["tie_embeddings"] or "lm_head.weight" not in W
    return W[embedding] if tied else W["lm_head.weight"]


def llama(W, ids, cfg):
    eps = cfg["rms_norm_eps"]
    h = W["model.embed_tokens.weight"][ids]
    for n in range(cfg["layers"]):
        p = f"model.layers.{n}."
        x = rmsnorm(h, W[p + "input_layernorm.weight"], eps)
        q = rope(heads(linear(W, x, p + "self_attn.q_proj", None), cfg["heads"]), cfg)
        k = rope(heads(linear(W, x, p + "self_attn.k_proj", None), cfg["kv_heads"]), cfg)
        v = heads(linear(W, x, p + "self_attn.v_proj", None), cfg["kv_heads"])
        h = h + linear(W, merge(attention(q, k, v)), p + "self_attn.o_proj", None)
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"], eps)
        gate, up = linear(W, x, p + "mlp.gate_proj", False), linear(W, x, p + "mlp.up_proj", False)
        h = h + linear(W, silu(gate) * up, p + "mlp.down_proj", False)
    h = rmsnorm(h, W["model.norm.weight"], eps)
    return h @ lm_head(W, cfg, "model.embed_tokens.weight")[:cfg["vocab"]].T


def gpt2(W, ids, cfg):
    s = ids.shape[1]
    if s > cfg["positions"]:
        sys.exit(f"seq {s} exceeds positions {cfg['positions']}")
    eps = cfg["layer_norm_epsilon"]
    h = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][np.arange(s)][None]
    for n in range(cfg["layers"]):
        p = f"transformer.h.{n}."
        x = layernorm(h, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        q, k, v = (heads(linear(W, x, p + f"attn.{m}_proj", True), cfg["heads"]) for m in "qkv")
        h = h + linear(W, merge(attention(q, k, v)), p + "attn.c_proj", True)
        x = layernorm(h, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        h = h + linear(W, gelu_tanh(linear(W, x, p + "mlp.c_fc", True)), p + "mlp.c_proj", True)
    h = layernorm(h, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return h @ lm_head(W, cfg, "transformer.wte.weight")[:cfg["vocab"]].T


def gemma(W, ids, cfg, v2=False):
    eps = cfg["rms_norm_eps"]

    def norm(x, name):
        return rmsnorm(x, 1.0 + W[name], eps)

    h = W["model.embed_tokens.weight"][ids] * float(np.float32(np.sqrt(cfg["hidden"])))
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if v2 else None
    cap = cfg["attn_logit_softcapping"] if v2 else 0.0
    for n in range(cfg["layers"]):
        p = f"model.layers.{n}."
        x = norm(h, p + "input_layernorm.weight")
        q = rope(heads(linear(W, x, p + "self_attn.q_proj", None), cfg["heads"]), cfg)
        k = rope(heads(linear(W, x, p + "self_attn.k_proj", None), cfg["kv_heads"]), cfg)
        v = heads(linear(W, x, p + "self_attn.v_proj", None), cfg["kv_heads"])
        a = linear(W, merge(attention(q, k, v, scale, cap)), p + "self_attn.o_proj", None)
        h = h + (norm(a, p + "post_attention_layernorm.weight") if v2 else a)
        x = norm(h, p + ("pre_feedforward_layernorm.weight" if v2 else "post_attention_layernorm.weight"))
        gate, up = linear(W, x, p + "mlp.gate_proj", False), linear(W, x, p + "mlp.up_proj", False)
        y = linear(W, gelu_tanh(gate) * up, p + "mlp.down_proj", False)
        h = h + (norm(y, p + "post_feedforward_layernorm.weight") if v2 else y)
    h = norm(h, "model.norm.weight")
    logits = h @ lm_head(W, cfg, "model.embed_tokens.weight")[:cfg["vocab"]].T
    return softcap(logits, cfg["final_logit_softcapping"]) if v2 else logits


def causal_lm_loss(logits, labels):
    """HF ForCausalLMLoss: logits[:, :-1] predict labels[:, 1:]; -100 ignored;
    the mean over the rest (NaN when nothing is left, as in torch)."""
    lg, y = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    keep = y != IGNORE
    lg, y = lg[keep], y[keep]
    if len(y) == 0:
        return float("nan")
    mx = lg.max(axis=-1)
    lse = mx + np.log(np.exp(lg - mx[:, None]).sum(axis=-1))
    return float(np.mean(lse - lg[np.arange(len(y)), y]))


# --- command line -------------------------------------------------------------

def parse_config(family, items):
    cfg = dict(DEFAULTS[family])
    given = set()
    for item in items:
        key, sep, val = item.partition("=")
        if not sep or key not in cfg:
            sys.exit(f"--config: expected key=value with key in {', '.join(sorted(cfg))}, got '{item}'")
        if val in ("True", "true", "False", "false"):
            cfg[key] = val in ("True", "true")
        else:
            cfg[key] = val if isinstance(cfg[key], str) else float(val) if isinstance(cfg[key], float) else int(val)
        given.add(key)
    if family == "gpt2" and cfg["ffn"] is None:
        cfg["ffn"] = 4 * cfg["hidden"]
    if family in ("llama", "gemma", "gemma2") and cfg["head_dim"] is None:
        cfg["head_dim"] = cfg["hidden"] // cfg["heads"]
    return cfg, given


def read_ids(arg, batch, what):
    a = np.load(arg) if arg.endswith(".npy") else np.array([int(t) for t in arg.split(",") if t.strip()])
    if a.size % batch:
        sys.exit(f"{what}: {a.size} values do not split into batch {batch}")
    return a.astype(np.int64).reshape(batch, -1)


def check_shapes(W, cfg, family):
    """Catch a config that does not describe the checkpoint before numpy
    broadcasts something meaningless."""
    hd = cfg.get("head_dim") or cfg["hidden"] // cfg["heads"]
    if family != "gpt2":
        emb, p = "model.embed_tokens.weight", "model.layers.0."
        want = {p + "self_attn.q_proj.weight": (cfg["heads"] * hd, cfg["hidden"]),
                p + "self_attn.k_proj.weight": (cfg["kv_heads"] * hd, cfg["hidden"]),
                p + "self_attn.o_proj.weight": (cfg["hidden"], cfg["heads"] * hd),
                p + "mlp.gate_proj.weight": (cfg["ffn"], cfg["hidden"])}
    else:
        emb, p = "transformer.wte.weight", "transformer.h.0."
        want = {p + "attn.q_proj.weight": (cfg["hidden"], cfg["hidden"]),
                p + "mlp.c_fc.weight": (cfg["ffn"], cfg["hidden"]),
                "transformer.wpe.weight": (cfg["positions"], cfg["hidden"])}
    if emb not in W or W[emb].shape[0] < cfg["vocab"] or W[emb].shape[1] != cfg["hidden"]:
        sys.exit(f"{emb}: {W[emb].shape if emb in W else 'missing'}, config says [{cfg['vocab']}, {cfg['hidden']}]")
    for name, shape in want.items():
        if cfg["layers"] > 0 and W.get(name, np.empty(0)).shape != shape:
            sys.exit(f"{name}: {W[name].shape if name in W else 'missing'}, config says {list(shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", required=True, choices=sorted(DEFAULTS))
    ap.add_argument("--weights", required=True, help="a .safetensors file with Hugging Face tensor names "
                    "(or a directory of them, or a model.safetensors.index.json)")
    ap.add_argument("--config", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    ap.add_argument("--tokens", required=True, help="FILE.npy or a comma list")
    ap.add_argument("--labels", help="FILE.npy or a comma list (-100 ignored)")
    ap.add_argument("--out", help="write the logits here (.npy, float32 [batch, seq, vocab])")
    # argparse would take a comma list starting with -100 for an option
    argv = sys.argv[1:]
    for flag in ("--tokens", "--labels"):
        if flag in argv[:-1]:
            i = argv.index(flag)
            argv[i:i + 2] = [f"{flag}={argv[i + 1]}"]
    args = ap.parse_args(argv)

    cfg, given = parse_config(args.family, args.config)
    W = load_weights(args.weights)
    check_shapes(W, cfg, args.family)
    ids = read_ids(args.tokens, cfg["batch"], "--tokens")
    if "seq" in given and ids.shape[1] != cfg["seq"]:
        sys.exit(f"--tokens: {ids.shape[1]} tokens per sequence, config says seq={cfg['seq']}")
    if ids.min() < 0 or ids.max() >= cfg["vocab"]:
        sys.exit(f"--tokens: ids must lie in [0, {cfg['vocab']})")

    forward = {"llama": llama, "gpt2": gpt2, "gemma": gemma, "gemma2": lambda W, ids, cfg: gemma(W, ids, cfg, v2=True)}
    logits = forward[args.family](W, ids, cfg)
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    if args.labels:
        labels = read_ids(args.labels, cfg["batch"], "--labels")
        if labels.shape != ids.shape:
            sys.exit(f"--labels: shape {labels.shape}, tokens are {ids.shape}")
        bad = (labels != IGNORE) & ((labels < 0) | (labels >= cfg["vocab"]))
        if bad.any():
            sys.exit(f"--labels: labels must lie in [0, {cfg['vocab']}) or be {IGNORE}")
        print(f"loss {causal_lm_loss(logits, labels):.9g}")


if __name__ == "__main__":
    main()
