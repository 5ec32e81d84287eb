"""bench/kda_once.py: a few calls of kda's inter-solve step (tf32) through kda_capi on compare_fla.py's
inputs, B8 T4096 H32 bf16 at one K, for a profiler to capture one launch of:

    ncu --set full -k 'regex:chunk_kernel' -c 1 python3 bench/kda_once.py .dev/libkda_capi.so 255 [--safe]
"""
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import compare_fla as cf  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("K", type=int)
    ap.add_argument("--safe", action="store_true")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    lib = cf.load_capi(a.lib)
    B, T, H, K = 8, 4096, 32, a.K
    q, k, g, beta, Akkd, _ = cf.make_inputs(B, T, H, H, K, torch.bfloat16, None, a.safe)
    Aqk = torch.zeros(B, T, H, cf.BT, device="cuda", dtype=torch.bfloat16)
    Akk = torch.zeros_like(Aqk)
    run = cf.kda_runner(lib.kda_capi_inter_solve, B, T, H, H, K, torch.bfloat16, None, a.safe, K ** -0.5, q, k, g, beta, Akkd, Aqk, Akk)
    for _ in range(a.calls):
        run(1)
    torch.cuda.synchronize()
    print(f"kda_once: {a.calls} calls, K {K}, {'safe' if a.safe else 'not safe'}")


if __name__ == "__main__":
    main()
