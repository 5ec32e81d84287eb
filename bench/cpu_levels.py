"""bench/cpu_levels.py: kda's CPU operators through the Python package, timed for each x86-64 level
of the CPU code that this machine runs (the package picks the highest; KDA_CPU_LEVEL forces one).

    python3 bench/cpu_levels.py [--T 4096] [--H 16] [--K 128] [--threads 2] [--reps 5]

Each level runs in a fresh interpreter (KDA_CPU_LEVEL is read at import). Prints the median
milliseconds of chunk_kda_intra (the whole intra stage) per level, bf16, B1.
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time, torch, kda
T, H, K, threads, reps = map(int, sys.argv[1:6])
torch.set_num_threads(threads)
g0 = torch.Generator().manual_seed(0)
q = torch.nn.functional.normalize(torch.randn(1, T, H, K, generator=g0), dim=-1).to(torch.bfloat16)
k = torch.nn.functional.normalize(torch.randn(1, T, H, K, generator=g0), dim=-1).to(torch.bfloat16)
beta = torch.rand(1, T, H, generator=g0).to(torch.bfloat16)
g = kda.chunk_local_cumsum(torch.nn.functional.logsigmoid(torch.randn(1, T, H, K, generator=g0)) / 8)
def timed(f):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)
stage = timed(lambda: kda.chunk_kda_intra(q, k, g, beta))
print(json.dumps({"level": kda.cpu_level(), "stage_ms": stage}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import kda
    from kda import _lib
    print(f"# kda.chunk_kda_intra on the CPU, B1 T{a.T} H{a.H} K{a.K} bf16, {a.threads} threads, median of {a.reps}")
    print(f"# default level here: {kda.cpu_level()}")
    for level in _lib.CPU_LEVELS:
        try:
            _lib.load_cpu_library(level)
        except ImportError as e:
            print(f"{level:10s}  not run: {e}")
            continue
        env = dict(os.environ, KDA_CPU_LEVEL=level)
        out = subprocess.run([sys.executable, "-c", CHILD, str(a.T), str(a.H), str(a.K), str(a.threads), str(a.reps)],
                             env=env, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['level']:10s}  chunk_kda_intra {r['stage_ms']:8.2f} ms")


if __name__ == "__main__":
    main()
