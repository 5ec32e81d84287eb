#!/usr/bin/env python3
"""bench/compare_chunk_kda.py: FLA's chunk_kda forward with and without kda as its backend, side by
side in one run on the same inputs, with the dispatch point chunk_kda_fwd_intra alone beside it.

    pip install . && python3 bench/compare_chunk_kda.py [--reps 30] [--out DIR]

Inference mode, bf16, K = V = 128 unless the row says otherwise; not safe and safe gate (FLA's
lower-bounded gate, lower_bound -5). "FLA" rows run with FLA_KDA=0 (FLA's Triton kernels), "kda"
rows after `import kda.fla` (kda's fused intra kernel + FLA's recompute_w_u_fwd). Timing as in
compare_fla.py: L2 flushed before every call (512 MiB zeroed), CUDA events, median of --reps.
Each row also checks that the two chunk_kda outputs agree (relative RMS difference) and how many
times kda ran (kda.fla.stats()). Prints a markdown table; writes DIR/compare_chunk_kda.json.
"""
import argparse, datetime, json, os, platform, subprocess

import torch

import kda
import kda.fla
from compare_fla import time_it  # L2 flush, CUDA events, median

SHAPES = [  # name, B, T, H, K
    ("B8 T4096 H32", 8, 4096, 32, 128),
    ("B1 T8192 H96", 1, 8192, 96, 128),
    ("B8 T4096 H32 K64", 8, 4096, 32, 64),
]


def inputs(B, T, H, K, safe, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=gen), dim=-1).to(torch.bfloat16)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=gen), dim=-1).to(torch.bfloat16)
    v = torch.randn(B, T, H, K, device="cuda", generator=gen).to(torch.bfloat16)
    x = torch.randn(B, T, H, K, device="cuda", generator=gen)
    g = -5.0 * torch.sigmoid(x - 2.0) if safe else torch.nn.functional.logsigmoid(x) / 8
    beta = torch.rand(B, T, H, device="cuda", generator=gen).to(torch.bfloat16)
    return q, k, v, g, beta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from fla.ops.kda import chunk_kda
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra
    from fla.ops.utils import chunk_local_cumsum

    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    print("| shape | mode | chunk_kda FLA (ms) | chunk_kda with kda (ms) | speedup | intra FLA (ms) | intra kda (ms) | "
          "speedup | output diff | kda calls |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for name, B, T, H, K in SHAPES:
            for safe in (False, True):
                q, k, v, g, beta = inputs(B, T, H, K, safe)
                kw = dict(scale=K**-0.5, safe_gate=safe, lower_bound=-5.0 if safe else None)
                gk = chunk_local_cumsum(g, chunk_size=64, scale=1.4426950408889634)
                ikw = dict(gk=gk, beta=beta, scale=K**-0.5, chunk_size=64, safe_gate=safe)
                res = {}
                for backend in ("fla", "kda"):
                    os.environ["FLA_KDA"] = "0" if backend == "fla" else "1"
                    kda.fla.reset_stats()
                    out, _ = chunk_kda(q, k, v, g, beta, **kw)
                    res[backend + "_calls"] = kda.fla.stats()["calls"]
                    res[backend + "_out"] = out.float()
                    res[backend] = time_it(lambda: chunk_kda(q, k, v, g, beta, **kw), flush, a.reps, False)
                    res[backend + "_intra"] = time_it(lambda: chunk_kda_fwd_intra(q, k, v, **ikw), flush, a.reps, False)
                diff = float((res["kda_out"] - res["fla_out"]).norm() / res["fla_out"].norm())
                row = dict(shape=name, mode="safe" if safe else "not safe", fla_ms=res["fla"], kda_ms=res["kda"],
                           intra_fla_ms=res["fla_intra"], intra_kda_ms=res["kda_intra"], rel_diff=diff,
                           kda_calls=res["kda_calls"], fla_run_kda_calls=res["fla_calls"])
                rows.append(row)
                print(f"| {name} | {row['mode']} | {res['fla']:.3f} | {res['kda']:.3f} | {res['fla'] / res['kda']:.2f}x | "
                      f"{res['fla_intra']:.3f} | {res['kda_intra']:.3f} | {res['fla_intra'] / res['kda_intra']:.2f}x | "
                      f"{diff:.1e} | {res['kda_calls']} (FLA rows: {res['fla_calls']}) |")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        meta = dict(date=datetime.date.today().isoformat(), device=torch.cuda.get_device_name(), torch=torch.__version__,
                    host=platform.node(), command="python3 bench/compare_chunk_kda.py --reps %d" % a.reps)
        try:
            meta["fla"] = subprocess.run(["pip", "show", "fla-core"], capture_output=True, text=True).stdout.split("\n")[1]
        except Exception:
            pass
        with open(os.path.join(a.out, "compare_chunk_kda.json"), "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
