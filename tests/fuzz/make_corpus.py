#!/usr/bin/env python3
"""Writes the fuzzer's seed corpus (tests/fuzz/corpus/): small valid case files covering each
dtype, dense and varlen layouts, int32 and int64 index tensors, safe gate, GVA, BT 32, T = 0, plus
a few near-miss files. Python's standard library only; the values need not be realistic, only
well-formed (the fuzzer explores the format and the validation).

    python3 tests/fuzz/make_corpus.py tests/fuzz/corpus
"""
import json
import random
import struct
import sys
from pathlib import Path

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I32": 4, "I64": 8}


def pack(dtype, values):
    if dtype == "BF16":  # the upper half of the float32 bits
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    fmt = {"F16": "e", "F32": "f", "F64": "d", "I32": "i", "I64": "q"}[dtype]
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def image(tensors, metadata=None):
    """tensors: name -> (dtype, shape, values). Largest element first, header padded to 8."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dt, shape, values) in sorted(tensors.items(), key=lambda kv: -SIZES[kv[1][0]]):
        blob = pack(dt, values)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def numel(shape):
    n = 1
    for e in shape:
        n *= e
    return n


def case(rng, X="BF16", B=1, T=20, H=1, HV=1, K=4, BT=64, seqlens=None, chunk_indices=True, index="I64",
         safe_gate=False, aqk_diag=False, beta_fp32=False, meta_sizes=False):
    A = "F64" if X == "F64" else "F32"
    if seqlens is not None:
        cu = [0]
        for n in seqlens:
            cu.append(cu[-1] + n)
        T = cu[-1]
    rnd = lambda n: [round(rng.uniform(-1, 1), 3) for _ in range(n)]
    t = {
        "q": (X, [B, T, H, K], rnd(B * T * H * K)),
        "k": (X, [B, T, H, K], rnd(B * T * H * K)),
        "g": (A, [B, T, HV, K], [-0.1 * (i % BT) for i in range(B * T * HV * K)]),
        "beta": ("F32" if beta_fp32 else X, [B, T, HV], [0.5] * (B * T * HV)),
        "Akkd": (A, [B, T, HV, 16], rnd(B * T * HV * 16)),
        "scale": ("F32", [1], [0.5]),
    }
    if aqk_diag:
        t["Aqk_diag"] = (X, [B, T, HV, BT], rnd(B * T * HV * BT))
    if seqlens is not None:
        t["cu_seqlens"] = (index, [len(cu)], cu)
        if chunk_indices:
            ci = []
            for n, length in enumerate(seqlens):
                c = 0
                while c * BT < length:
                    ci += [n, c]
                    c += 1
            t["chunk_indices"] = (index, [len(ci) // 2, 2], ci)
    meta = {"BT": str(BT), "BC": "16", "safe_gate": "true" if safe_gate else "false"}
    if meta_sizes:
        meta.update({"B": str(B), "T": str(T), "H": str(H), "HV": str(HV), "K": str(K), "solve_precision": "tf32"})
    return image(t, meta)


def main(out):
    rng = random.Random(1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = {
        "dense_bf16": case(rng),
        "dense_fp16_tail": case(rng, X="F16", T=19, K=3),
        "dense_fp32_gva_safe": case(rng, X="F32", T=9, H=1, HV=2, K=2, safe_gate=True, aqk_diag=True, meta_sizes=True),
        "dense_fp64_bt32": case(rng, X="F64", T=17, K=2, BT=32),
        "dense_b2_beta_fp32": case(rng, B=2, T=5, K=2, beta_fp32=True),
        "varlen_i64": case(rng, K=2, seqlens=[3, 0, 20], BT=32),
        "varlen_i32_no_chunk_indices": case(rng, K=2, seqlens=[1, 17], index="I32", chunk_indices=False),
        "empty_T0": case(rng, T=0, K=4),
        # near misses: the validation's paths
        "bad_hv_not_multiple": case(rng, T=4, H=2, HV=3, K=2),
        "bad_cu_not_at_T": image({"q": ("BF16", [1, 2, 1, 1], [0, 0]), "k": ("BF16", [1, 2, 1, 1], [0, 0]),
                                  "g": ("F32", [1, 2, 1, 1], [0, 0]), "beta": ("BF16", [1, 2, 1], [0, 0]),
                                  "Akkd": ("F32", [1, 2, 1, 16], [0] * 32), "scale": ("F32", [], [1]),
                                  "cu_seqlens": ("I64", [2], [0, 3])}),
        "bad_overlap": image({"a": ("F32", [2], [1, 2]), "b": ("F32", [1], [3])}).replace(b'"data_offsets":[8,12]', b'"data_offsets":[4,8] '),
        "bad_not_json": struct.pack("<Q", 8) + b"{\"a\":[1" + bytes(4),
    }
    for name, data in seeds.items():
        (out / (name + ".safetensors")).write_bytes(data)
        print("%-32s %6d bytes" % (name, len(data)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent / "corpus"))
