"""bench/kda_once.py: a few calls of one kda kernel (tf32, or --fp32: the fp32 mode) through kda_capi on
compare_fla.py's inputs, B8 T4096 H32 bf16 at one K and chunk size (--bt, default 64), for a profiler to
capture one launch of: the inter-solve step (default), with --stage intra the fused intra kernel, or with
--stage wy the fused intra kernel with the WY outputs w, u, kg (V = K; FLA's dispatch point)

    ncu --set full -k 'regex:chunk_kernel' -c 1 python3 bench/kda_once.py .dev/libkda_capi.so 255 [--safe]
    ncu --section SourceCounters -k 'regex:chunk_kernel' -c 1 python3 bench/kda_once.py .dev/libkda_capi.so 128 --stage wy
    ncu --set full -k 'regex:chunk_kernel' -c 1 python3 bench/kda_once.py .dev/libkda_capi.so 37 --safe --bt 32
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
    ap.add_argument("--stage", choices=["inter-solve", "intra", "wy"], default="inter-solve")
    ap.add_argument("--fp32", action="store_true", help="the fp32 mode (not with --stage wy)")
    ap.add_argument("--bt", type=int, choices=[32, 64], default=64, help="chunk size")
    ap.add_argument("--shape", default="8,4096,32,32", metavar="B,T,H,HV", help="batch, tokens, q / k heads, value heads (GVA: HV > H)")
    a = ap.parse_args()
    cf.BT, cf.NC = a.bt, a.bt // cf.BC
    lib = cf.load_capi(a.lib)
    B, T, H, HV = (int(x) for x in a.shape.split(","))
    K = a.K
    if a.stage == "wy" and (HV != H or a.fp32):
        sys.exit("--stage wy runs without GVA (HV = H), in tf32 mode")
    tf32 = 0 if a.fp32 else 1
    q, k, g, beta, Akkd, _ = cf.make_inputs(B, T, H, HV, K, torch.bfloat16, None, a.safe)
    Aqk = torch.zeros(B, T, HV, cf.BT, device="cuda", dtype=torch.bfloat16)
    Akk = torch.zeros_like(Aqk)
    if a.stage == "wy":
        v = torch.randn(B, T, H, K, device="cuda", dtype=torch.bfloat16)
        w, u, kg = (torch.empty(B, T, H, K, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ws = torch.empty(B, T, H, 16, device="cuda")  # the intra stage's diagonal-block workspace
        run = cf.kda_runner(lib.kda_capi_intra, B, T, H, H, K, torch.bfloat16, None, a.safe, K ** -0.5, q, k, g, beta, ws, Aqk, Akk)
        run_wy = cf.kda_wy_runner(lib, run, K, v, w, u, kg)
        for _ in range(a.calls):
            run_wy()
    else:
        fn, ak = (lib.kda_capi_inter_solve, Akkd) if a.stage == "inter-solve" else (lib.kda_capi_intra, torch.zeros_like(Akkd))
        run = cf.kda_runner(fn, B, T, H, HV, K, torch.bfloat16, None, a.safe, K ** -0.5, q, k, g, beta, ak, Aqk, Akk)
        for _ in range(a.calls):
            run(tf32)
    torch.cuda.synchronize()
    print(f"kda_once: {a.calls} calls of {a.stage} ({'fp32' if a.fp32 else 'tf32'}), B {B} T {T} H {H} HV {HV}, BT {a.bt}, K {K}, {'safe' if a.safe else 'not safe'}")


if __name__ == "__main__":
    main()
