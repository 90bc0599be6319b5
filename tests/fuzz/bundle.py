#!/usr/bin/env python3
"""bundle.py SAFETENSORS OUT: a sharded checkpoint as fuzz_safetensors reads
it: model.safetensors.index.json, then two shards (the tensors dealt
alternately), joined by the separator fuzz_safetensors.c splits at."""
import json
import struct
import sys

SEPARATOR = b"\n#tpcc-fuzz-file\n"


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {name: (t["dtype"], t["shape"], body[t["data_offsets"][0] : t["data_offsets"][1]]) for name, t in header.items()}


def write(tensors):
    header, body = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def main():
    tensors = read(sys.argv[1])
    names = sorted(tensors)
    shards = [{n: tensors[n] for n in names[k::2]} for k in range(2)]
    files = [f"model-{k + 1:05d}-of-00002.safetensors" for k in range(2)]
    index = {"metadata": {"total_size": sum(len(t[2]) for t in tensors.values())},
             "weight_map": {n: files[k] for k in range(2) for n in shards[k]}}
    parts = [json.dumps(index, indent=2).encode()] + [write(s) for s in shards]
    open(sys.argv[2], "wb").write(SEPARATOR.join(parts))


if __name__ == "__main__":
    main()
