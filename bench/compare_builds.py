"""bench/compare_builds.py: two builds of kda_capi side by side in one process, kda only (no FLA),
L2 flushed, median of 30, the builds alternating per case, and whether their outputs are
bit-identical.

    python3 bench/compare_builds.py A.so B.so 36,37,63,64,100,128,255 [BT [DTYPE]]
        the inter-solve step and the fused intra stage (tf32) on B8 T4096 H32 at each K, both gate
        modes, at chunk size BT (default 64) and data type DTYPE (bf16, fp16 or fp32; default bf16)
    python3 bench/compare_builds.py A.so B.so table [BT [TEXT,TEXT,...]]
        compare_fla.py's shapes (each at its own K and data type; CUDA-graph replay where it says
        so), or those whose name contains one of the TEXTs: the inter-solve step in tf32 and fp32
        mode and the fused intra stage (tf32), both gate modes
"""
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import compare_fla as cf  # noqa: E402


def measure(libs, flush, B, T, H, HV, K, dt, cu, safe, graph, modes):
    """Times (A, B) per (entry point, tf32 flag) in `modes` and whether A's and B's outputs agree bit for bit."""
    q, k, g, beta, Akkd, _ = cf.make_inputs(B, T, H, HV, K, dt, cu, safe)
    times, same = [], []
    for fn, tf32 in modes:
        row, outs = [], []
        for lib in libs:
            Aqk = torch.zeros(B, T, HV, cf.BT, device="cuda", dtype=dt)
            Akk = torch.zeros_like(Aqk)
            ak = Akkd if fn == "kda_capi_inter_solve" else torch.zeros_like(Akkd)  # the intra stage's workspace
            run = cf.kda_runner(getattr(lib, fn), B, T, H, HV, K, dt, cu, safe, K ** -0.5, q, k, g, beta, ak, Aqk, Akk)
            row.append(cf.time_it(lambda: run(tf32), flush, 30, graph))
            outs.append((Aqk.clone(), Akk.clone()))
        times.append(row)
        same.append(all(torch.equal(x, y) for x, y in zip(*outs)))
    return times, same


def main():
    if len(sys.argv) not in (4, 5, 6):
        sys.exit(__doc__)
    if len(sys.argv) >= 5:
        cf.BT = int(sys.argv[4])
        cf.NC = cf.BT // cf.BC
    libs = [cf.load_capi(p) for p in sys.argv[1:3]]
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    if sys.argv[3] == "table":
        only = sys.argv[5] if len(sys.argv) == 6 else ""
        modes = [("kda_capi_inter_solve", 1), ("kda_capi_inter_solve", 0), ("kda_capi_intra", 1)]
        print(f"# {torch.cuda.get_device_name()}  A = {sys.argv[1]}  B = {sys.argv[2]}  BT {cf.BT}")
        print("| shape | mode | step A ms | step B ms | B/A | fp32 step A ms | fp32 step B ms | B/A | intra A ms | intra B ms | B/A | bits equal |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        args = argparse.Namespace(k_sweep="", only=only)
        for (name, B, T, H, HV, K, dt, cu, graph) in cf.resolve_shapes(args, cf.SHAPES):
            for safe in (False, True):
                times, same = measure(libs, flush, B, T, H, HV, K, dt, cu, safe, graph, modes)
                cells = " | ".join(f"{a:.4f} | {b:.4f} | {b / a:.3f}" for a, b in times)
                print(f"| {name} | {'safe' if safe else 'not safe'} | {cells} | {all(same)} |", flush=True)
        return
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    name = sys.argv[5] if len(sys.argv) == 6 else "bf16"
    if name not in dtypes:
        sys.exit(f"DTYPE must be one of {', '.join(dtypes)}, not {name!r}")
    dt = dtypes[name]
    B, T, H = 8, 4096, 32
    print(f"# {torch.cuda.get_device_name()}  A = {sys.argv[1]}  B = {sys.argv[2]}  BT {cf.BT}  {name}")
    print("| K | mode | step A ms | step B ms | B/A | intra A ms | intra B ms | B/A | step bits equal | intra bits equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for K in [int(x) for x in sys.argv[3].split(",")]:
        for safe in (False, True):
            times, same = measure(libs, flush, B, T, H, H, K, dt, None, safe, False, [("kda_capi_inter_solve", 1), ("kda_capi_intra", 1)])
            (sa, sb), (ia, ib) = times
            print(f"| {K} | {'safe' if safe else 'not safe'} | {sa:.3f} | {sb:.3f} | {sb / sa:.3f} | {ia:.3f} | {ib:.3f} | {ib / ia:.3f} "
                  f"| {same[0]} | {same[1]} |", flush=True)


if __name__ == "__main__":
    main()
