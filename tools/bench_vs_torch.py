#!/usr/bin/env python3
"""tprun against PyTorch eager on the CPU, same model, weights and tokens.

    python3 tools/bench_vs_torch.py [--seqs 256,1024,2048] [--cores 1,2] [--runs 3] [--layers 12]

Needs torch and transformers (PyPI) and a build (build/tpcc, build/tprun);
not part of the tests. Builds a Llama in transformers (from_config, seed 0:
vocab 32000, hidden 768, 12 layers, 12 heads, 4 kv heads, ffn 2048, fp32),
saves it with save_pretrained, compiles plans/llama-sp.plan for it with
--hf-config and times one forward step of batch 1 at each sequence length:

  1 core:  tprun at tp 1 (one BLAS thread) against torch.set_num_threads(1)
  2 cores: tprun -n 2 (tp 2, one thread per rank), and tprun --threads 2
           (tp 1, its CPU kernels on two threads), against 2 threads

tprun runs the forward --repeat times after loading and reports the median
step (its --profile-json); PyTorch runs model(input_ids, labels=input_ids)
under no_grad after one warm-up call, the median of as many calls: the
logits and the loss, as the schedule computes both. The attention alone is
compared too: tprun's attention ops (the slowest rank's, from the same
profile) against torch's scaled_dot_product_attention on the same shapes
(causal, GQA, every layer) with the same threads. The two alternate run by
run, so a busy machine slows both alike. Each tprun run also compares its
logits with PyTorch's (--compare, 1e-3): a fast wrong answer fails here.
OPENBLAS_CORETYPE is removed from the environment (it can force weaker
kernels than the CPU has) unless --coretype sets it: OpenBLAS's own
detection can also pick weaker kernels than the CPU has (OpenBLAS 0.3.21
takes a virtual machine's "Intel Xeon Processor" with AVX-512 for a
Prescott, SSE3 only), and the header says which core it used. Prints a
Markdown table with the ratio of throughputs (PyTorch's time / tprun's)
and the CPU it ran on.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench_vs_torch: %s failed (%d):\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def tprun_seconds(tprun, sched, ranks, threads, tokens, ref, repeat, work, env):
    prof = os.path.join(work, "profile.json")
    cmd = [tprun] + (["-n", str(ranks)] if ranks > 1 else []) + ["--threads", str(threads)] + [
        sched, "--backend", "cpu", "--weights", work, "--tokens", tokens, "--labels", "tokens", "--compare", ref, "--tolerance", "1e-3",
        "--repeat", str(repeat), "--profile-json", prof, "-q"]
    run(cmd, env)
    ranks_json = json.load(open(prof))["ranks"]
    slowest = max(ranks_json, key=lambda r: r["forward_seconds"])
    # -O1 rotates q and k in a rotary model's attention (rope_attention): its time includes RoPE's
    ops = slowest["ops"]
    return slowest["forward_seconds"], sum(ops[k]["seconds"] for k in ("attention", "rope_attention") if k in ops)


def sdpa_seconds(config, seq, repeat):
    """SDPA on the attention's own shapes (causal, GQA), every layer's worth."""
    d = config.hidden_size // config.num_attention_heads
    g = torch.Generator().manual_seed(seq)
    q = torch.randn(1, config.num_attention_heads, seq, d, generator=g)
    k = torch.randn(1, config.num_key_value_heads, seq, d, generator=g)
    v = torch.randn(1, config.num_key_value_heads, seq, d, generator=g)

    def layers():
        for _ in range(config.num_hidden_layers):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    layers()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        layers()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="256,1024,2048")
    ap.add_argument("--cores", default="1,2")
    ap.add_argument("--runs", type=int, default=3, help="alternating runs of each side (default 3)")
    ap.add_argument("--repeat", type=int, default=3, help="forward steps per run (default 3)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--build", default=os.path.join(HERE, "build"))
    ap.add_argument("--coretype", help="OPENBLAS_CORETYPE for tprun (default: OpenBLAS's own detection)")
    a = ap.parse_args()
    tpcc, tprun = os.path.join(a.build, "tpcc"), os.path.join(a.build, "tprun")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if a.coretype:
        env["OPENBLAS_CORETYPE"] = a.coretype

    config = LlamaConfig(vocab_size=32000, hidden_size=768, num_hidden_layers=a.layers, num_attention_heads=12,
                         num_key_value_heads=4, intermediate_size=2048, max_position_embeddings=4096)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().eval()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        model.save_pretrained(work, safe_serialization=True)
        model = LlamaForCausalLM.from_pretrained(work, attn_implementation="sdpa").float().eval()
        for seq in [int(s) for s in a.seqs.split(",")]:
            ids = np.random.default_rng(seq).integers(0, config.vocab_size, (1, seq), dtype=np.int32)
            tokens = os.path.join(work, "tokens.npy")
            np.save(tokens, ids)
            x = torch.from_numpy(ids.astype(np.int64))
            with torch.no_grad():
                logits = model(x).logits.float().numpy()
            ref = os.path.join(work, "ref.npy")
            np.save(ref, logits)
            for cores in [int(c) for c in a.cores.split(",")]:
                # (ranks, threads per rank): every core a rank, or one rank with every core
                for ranks, threads in ([(1, 1)] if cores == 1 else [(cores, 1), (1, cores)]):
                    sched = os.path.join(work, "s%d-tp%d.sched" % (seq, ranks))
                    run([tpcc, os.path.join(HERE, "plans/llama-sp.plan"), "--hf-config", os.path.join(work, "config.json"),
                         "-D", "tp=%d" % ranks, "-D", "seq=%d" % seq, "-D", "batch=1", "-D", "vocab_multiple=1",
                         "-o", sched], env)
                    torch.set_num_threads(cores)
                    ours, theirs, our_attn, their_attn = [], [], [], []
                    with torch.no_grad():
                        model(x, labels=x)                            # warm-up
                        for _ in range(a.runs):
                            step, attn = tprun_seconds(tprun, sched, ranks, threads, tokens, ref, a.repeat, work, env)
                            ours.append(step)
                            our_attn.append(attn)
                            times = []
                            for _ in range(a.repeat):
                                t0 = time.perf_counter()
                                model(x, labels=x)                    # logits and the loss, as the schedule
                                times.append(time.perf_counter() - t0)
                            theirs.append(statistics.median(times))
                            their_attn.append(sdpa_seconds(config, seq, a.repeat))
                    t, p = statistics.median(ours), statistics.median(theirs)
                    ta, pa = statistics.median(our_attn), statistics.median(their_attn)
                    if cores == 1:
                        setting = "1 core"
                    elif ranks > 1:
                        setting = "%d cores (tprun -n %d vs %d threads)" % (cores, ranks, cores)
                    else:
                        setting = "%d cores (tprun --threads %d vs %d threads)" % (cores, threads, cores)
                    rows.append((seq, setting, t, p, ta, pa))
                    print("seq %d, %s: tprun %.1f ms, PyTorch %.1f ms; attention %.1f ms, SDPA %.1f ms"
                          % (seq, setting, t * 1e3, p * 1e3, ta * 1e3, pa * 1e3), file=sys.stderr)
    print("%s, torch %s, %s, OpenBLAS core %s" % (cpu_name(), torch.__version__, time.strftime("%Y-%m-%d"),
                                                 a.coretype or "as detected"))
    print()
    print("| seq | setting | tprun | PyTorch eager (SDPA) | tprun / PyTorch throughput | attention: tprun | SDPA | tprun / SDPA time |")
    print("|---|---|---|---|---|---|---|---|")
    for seq, setting, t, p, ta, pa in rows:
        print("| %d | %s | %.0f ms | %.0f ms | %.2f | %.1f ms | %.1f ms | %.2f |"
              % (seq, setting, t * 1e3, p * 1e3, p / t, ta * 1e3, pa * 1e3, ta / pa))


if __name__ == "__main__":
    main()
