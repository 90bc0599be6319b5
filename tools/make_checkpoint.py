#!/usr/bin/env python3
"""Write a small random checkpoint in safetensors format (numpy only, no torch).

    python3 tools/make_checkpoint.py --family llama --out DIR \\
        --config hidden=64 heads=4 kv_heads=2 layers=2 ffn=128 vocab=256 \\
        [--dtype f32|bf16|f16] [--shards N] [--seed S]

Tensor names and layouts are Hugging Face's (nn.Linear weights are
[out, in]):

  llama  model.embed_tokens.weight [vocab, hidden]
         model.layers.N.input_layernorm.weight, .post_attention_layernorm.weight [hidden]
         model.layers.N.self_attn.{q,k,v,o}_proj.weight
             [heads*hd, hidden], [kv*hd, hidden], [kv*hd, hidden], [hidden, heads*hd]
         model.layers.N.mlp.{gate,up}_proj.weight [ffn, hidden], .down_proj.weight [hidden, ffn]
         model.norm.weight [hidden]; lm_head.weight [vocab, hidden] unless tie_embeddings=1
  gpt2   transformer.wte.weight [vocab, hidden], transformer.wpe.weight [positions, hidden]
         transformer.h.N.ln_1.{weight,bias}, .ln_2.{weight,bias} [hidden]
         transformer.h.N.attn.{q_proj,k_proj,v_proj,c_proj}.{weight [hidden, hidden], bias [hidden]}
         transformer.h.N.mlp.c_fc.{weight [ffn, hidden], bias [ffn]}
         transformer.h.N.mlp.c_proj.{weight [hidden, ffn], bias [hidden]}
         transformer.ln_f.{weight,bias}; the head is tied to wte (no lm_head.weight)
         unless tie_embeddings=0

With --names torchtitan, llama's tensors (the same values: each is drawn
under its Hugging Face name) are written under torchtitan's names
(models/llama-torchtitan.model): tok_embeddings, layers.N.attention_norm,
layers.N.attention.{wq,wk,wv,wo}, layers.N.ffn_norm,
layers.N.feed_forward.{w1 (gate), w2 (down), w3 (up)}, norm, output.

Config keys (defaults: plans/llama-tiny.plan's sizes): hidden (64), heads (4),
kv_heads (llama; 2), layers (2), ffn (llama 128, gpt2 4*hidden), vocab (256),
head_dim (llama; hidden // heads), tie_embeddings (llama 0, gpt2 1: with 0,
gpt2 gets an lm_head.weight too), positions (gpt2 n_positions; 1024).

Values are those of tprun's seeded initialisation (runtime/io/weights.h,
tp_weight_init_seeded) for the same --seed: a counter-based generator keyed by
the tensor name, so an f32 checkpoint is bit-identical to what tprun computes
with --seed, whatever the tp degree. Norm weights are 1, norm biases 0.

--out ending in .safetensors writes that one file. Otherwise --out is a
directory (created if needed) that receives model.safetensors, or with
--shards N > 1 model-0000i-of-0000N.safetensors files and
model.safetensors.index.json, plus a Hugging Face config.json.
"""

import argparse
import json
import os
import re
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # pragma: no cover
    # A python3 first on PATH (pyenv, a venv) may not see Debian's
    # python3-numpy; the system interpreter does.
    system = "/usr/bin/python3"
    if (os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system)
            and not os.environ.get("MAKE_CHECKPOINT_REEXEC")):
        os.environ["MAKE_CHECKPOINT_REEXEC"] = "1"
        os.execv(system, [system] + sys.argv)
    sys.exit("make_checkpoint.py: numpy is required (apt-get install python3-numpy, or pip install numpy)")

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SCALE = 0.02 * 1.7320508075688772 / 4294967296.0  # same expression as weights.c


def _mix64_int(z):
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _mix64(z):
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _fnv1a64(name):
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & MASK64
    return h


def seeded_values(name, shape, seed):
    """tp_weight_init_seeded for the whole tensor, as float32."""
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(shape) == 1 and ("norm" in name or "ln_" in name):
        if name.endswith("weight"):
            return np.ones(shape, dtype=np.float32)
        if name.endswith("bias"):
            return np.zeros(shape, dtype=np.float32)
    key = np.uint64(_mix64_int(_fnv1a64(name) ^ (seed & MASK64)))
    k = np.arange(numel, dtype=np.uint64)
    with np.errstate(over="ignore"):
        a = _mix64(key + (np.uint64(2) * k + np.uint64(1)) * np.uint64(GOLDEN))
        b = _mix64(key + (np.uint64(2) * k + np.uint64(2)) * np.uint64(GOLDEN))
    lo = np.uint64(0xFFFFFFFF)
    s = (a & lo) + (a >> np.uint64(32)) + (b & lo) + (b >> np.uint64(32))
    centred = s.astype(np.int64) - np.int64(1 << 33)
    return (centred.astype(np.float64) * SCALE).astype(np.float32).reshape(shape)


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (nan kept nan)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> np.uint64(16)).astype(np.uint16)) | np.uint16(0x40)
    return rounded


def encode(x, dtype):
    if dtype == "f32":
        return "F32", np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "f16":
        return "F16", np.ascontiguousarray(x.astype("<f2")).tobytes()
    return "BF16", to_bf16_bits(x).astype("<u2").tobytes()


def parse_config(items):
    cfg = {}
    for item in items or []:
        if "=" not in item:
            sys.exit(f"make_checkpoint.py: --config expects key=value, got '{item}'")
        k, v = item.split("=", 1)
        try:
            cfg[k.strip()] = int(v, 0)
        except ValueError:
            if v.lower() in ("true", "false"):
                cfg[k.strip()] = int(v.lower() == "true")
            else:
                sys.exit(f"make_checkpoint.py: --config {k}: '{v}' is not an integer")
    return cfg


def llama_tensors(cfg):
    hidden, heads, layers, vocab = cfg["hidden"], cfg["heads"], cfg["layers"], cfg["vocab"]
    kv = cfg.get("kv_heads", 2)
    ffn = cfg.get("ffn", 128)
    if heads % kv:
        sys.exit(f"make_checkpoint.py: heads={heads} is not a multiple of kv_heads={kv}")
    if "head_dim" not in cfg and hidden % heads:
        sys.exit(f"make_checkpoint.py: hidden={hidden} is not a multiple of heads={heads}; pass head_dim")
    hd = cfg.get("head_dim", hidden // heads)
    t = [("model.embed_tokens.weight", (vocab, hidden))]
    for n in range(layers):
        p = f"model.layers.{n}."
        t += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "self_attn.q_proj.weight", (heads * hd, hidden)),
            (p + "self_attn.k_proj.weight", (kv * hd, hidden)),
            (p + "self_attn.v_proj.weight", (kv * hd, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, heads * hd)),
            (p + "post_attention_layernorm.weight", (hidden,)),
            (p + "mlp.gate_proj.weight", (ffn, hidden)),
            (p + "mlp.up_proj.weight", (ffn, hidden)),
            (p + "mlp.down_proj.weight", (hidden, ffn)),
        ]
    t.append(("model.norm.weight", (hidden,)))
    tied = bool(cfg.get("tie_embeddings", 0))
    if not tied:
        t.append(("lm_head.weight", (vocab, hidden)))
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": ffn,
        "head_dim": hd,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": cfg.get("positions", 2048),
    }
    return t, hf


def gemma_tensors(cfg):
    """Llama's tensors; Gemma's config. Norm weights are ones, which Gemma's
    (1 + w) makes a scale of 2."""
    t, hf = llama_tensors(cfg)
    hf.update(architectures=["GemmaForCausalLM"], model_type="gemma", hidden_act="gelu_pytorch_tanh")
    return t, hf


def gemma2_tensors(cfg):
    """Gemma's tensors plus each layer's pre_feedforward_layernorm and
    post_feedforward_layernorm."""
    t, hf = gemma_tensors(cfg)
    for n in range(cfg["layers"]):
        p = f"model.layers.{n}."
        t += [(p + "pre_feedforward_layernorm.weight", (cfg["hidden"],)),
              (p + "post_feedforward_layernorm.weight", (cfg["hidden"],))]
    del hf["hidden_act"]
    hf.update(architectures=["Gemma2ForCausalLM"], model_type="gemma2", hidden_activation="gelu_pytorch_tanh")
    return t, hf


def gpt2_tensors(cfg):
    hidden, layers, vocab = cfg["hidden"], cfg["layers"], cfg["vocab"]
    heads = cfg["heads"]
    if hidden % heads:
        sys.exit(f"make_checkpoint.py: hidden={hidden} is not a multiple of heads={heads}")
    ffn = cfg.get("ffn", 4 * hidden)
    positions = cfg.get("positions", 1024)
    tied = bool(cfg.get("tie_embeddings", 1))
    t = [("transformer.wte.weight", (vocab, hidden)), ("transformer.wpe.weight", (positions, hidden))]
    for n in range(layers):
        p = f"transformer.h.{n}."
        t += [(p + "ln_1.weight", (hidden,)), (p + "ln_1.bias", (hidden,))]
        for proj in ("q_proj", "k_proj", "v_proj", "c_proj"):
            t += [(p + f"attn.{proj}.weight", (hidden, hidden)), (p + f"attn.{proj}.bias", (hidden,))]
        t += [(p + "ln_2.weight", (hidden,)), (p + "ln_2.bias", (hidden,))]
        t += [(p + "mlp.c_fc.weight", (ffn, hidden)), (p + "mlp.c_fc.bias", (ffn,))]
        t += [(p + "mlp.c_proj.weight", (hidden, ffn)), (p + "mlp.c_proj.bias", (hidden,))]
    t += [("transformer.ln_f.weight", (hidden,)), ("transformer.ln_f.bias", (hidden,))]
    if not tied:
        t.append(("lm_head.weight", (vocab, hidden)))
    hf = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocab,
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": ffn,
        "n_positions": positions,
        "tie_word_embeddings": tied,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
    }
    return t, hf


TORCHTITAN_NAMES = [
    (r"model\.embed_tokens\.", "tok_embeddings."),
    (r"model\.layers\.(\d+)\.input_layernorm\.", r"layers.\1.attention_norm."),
    (r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.", r"layers.\1.attention.w\2."),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.ffn_norm."),
    (r"model\.layers\.(\d+)\.mlp\.gate_proj\.", r"layers.\1.feed_forward.w1."),
    (r"model\.layers\.(\d+)\.mlp\.down_proj\.", r"layers.\1.feed_forward.w2."),
    (r"model\.layers\.(\d+)\.mlp\.up_proj\.", r"layers.\1.feed_forward.w3."),
    (r"model\.norm\.", "norm."),
    (r"lm_head\.", "output."),
]


def torchtitan_name(name):
    """A Llama tensor's name in torchtitan's Transformer."""
    for pattern, repl in TORCHTITAN_NAMES:
        renamed, n = re.subn("^" + pattern, repl, name)
        if n:
            return renamed
    sys.exit(f"make_checkpoint.py: no torchtitan name for '{name}'")


def safetensors_bytes(entries):
    """entries: list of (name, dtype_name, shape, bytes) -> the file's bytes."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dt, shape, data in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # data aligned to 8 bytes, as the reference writer does
    return struct.pack("<Q", len(text)) + text + b"".join(e[3] for e in entries)


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=os.path.basename(path) + ".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True, choices=["llama", "gpt2", "gemma", "gemma2"])
    ap.add_argument("--out", required=True, help="a .safetensors file or a directory")
    ap.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--names", default="hf", choices=["hf", "torchtitan"],
                    help="tensor names: Hugging Face's, or torchtitan's (llama only)")
    args = ap.parse_args(argv)
    if args.names == "torchtitan" and args.family != "llama":
        sys.exit("make_checkpoint.py: --names torchtitan is for --family llama")

    cfg = parse_config(args.config)
    known = {"hidden", "heads", "kv_heads", "layers", "ffn", "vocab", "head_dim", "tie_embeddings", "positions"}
    unknown = sorted(set(cfg) - known)
    if unknown:
        sys.exit(f"make_checkpoint.py: unknown --config key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    defaults = {"hidden": 64, "heads": 4, "layers": 2, "vocab": 256}
    for k, v in defaults.items():
        cfg.setdefault(k, v)
    for k in ("hidden", "heads", "layers", "vocab", "ffn", "kv_heads", "positions", "head_dim"):
        if k in cfg and cfg[k] <= 0:
            sys.exit(f"make_checkpoint.py: {k} must be positive")
    if args.shards < 1:
        sys.exit("make_checkpoint.py: --shards must be at least 1")
    tensors, hf = {"llama": llama_tensors, "gpt2": gpt2_tensors, "gemma": gemma_tensors,
                   "gemma2": gemma2_tensors}[args.family](cfg)
    hf["torch_dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[args.dtype]

    entries = []
    for name, shape in tensors:
        dt, data = encode(seeded_values(name, shape, args.seed), args.dtype)
        entries.append((torchtitan_name(name) if args.names == "torchtitan" else name, dt, shape, data))

    single_file = args.out.endswith(".safetensors")
    if single_file and args.shards > 1:
        sys.exit("make_checkpoint.py: --shards needs a directory for --out")
    if single_file:
        parent = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(parent, exist_ok=True)
        write_atomic(args.out, safetensors_bytes(entries))
        return 0

    os.makedirs(args.out, exist_ok=True)
    write_atomic(os.path.join(args.out, "config.json"), (json.dumps(hf, indent=2) + "\n").encode())
    # Leftovers of an earlier run with another layout would shadow or mix
    # with this one (loaders prefer the index).
    stale = [f for f in os.listdir(args.out) if re.fullmatch(r"model-\d+-of-\d+\.safetensors", f)]
    stale += ["model.safetensors.index.json", "model.safetensors"]
    for f in stale:
        if os.path.exists(os.path.join(args.out, f)):
            os.unlink(os.path.join(args.out, f))
    if args.shards == 1:
        write_atomic(os.path.join(args.out, "model.safetensors"), safetensors_bytes(entries))
        return 0

    # Consecutive tensors, balanced by bytes; never an empty shard.
    n = min(args.shards, len(entries))
    total = sum(len(e[3]) for e in entries)
    groups, cur, acc = [], [], 0
    for i, e in enumerate(entries):
        cur.append(e)
        acc += len(e[3])
        left = len(entries) - i - 1
        need = n - len(groups) - 1  # groups still to open after this one
        if need > 0 and (acc >= total * (len(groups) + 1) / n or left == need):
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    weight_map = {}
    for i, g in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write_atomic(os.path.join(args.out, fname), safetensors_bytes(g))
        for e in g:
            weight_map[e[0]] = fname
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_atomic(os.path.join(args.out, "model.safetensors.index.json"), (json.dumps(index, indent=2) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
