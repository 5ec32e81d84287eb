#!/usr/bin/env python3
"""bench/compare_fla.py: FLA's Triton inter-solve kernel and kda's CUDA backend, side by side.

    python3 bench/compare_fla.py --lib .dev/libkda_capi.so [--out DIR] [--reps 30] [--bt 32]

One invocation times, on identical inputs (torch tensors on the GPU):
  * FLA: fla.ops.kda.chunk_intra.chunk_kda_fwd_kernel_inter_solve_fused (fla-core, tf32 solve as
    FLA picks on this GPU, BK / num_warps autotuned by FLA on the first call),
  * kda: kda_capi_inter_solve from bench/kda_capi.cu (a C ABI .so; torch data_ptrs), tf32 and fp32,
checks kda (tf32) against FLA on the entries the step writes, and prints one table: shape, mode
(not safe / safe gate), FLA time, kda time, speedup, kda TB/s, % of the copy limit, kda fp32 time.
Timing: L2 flushed (512 MiB zeroed) before every call, CUDA events around the call, median of
--reps; B1 T1024 H32 runs as captured CUDA graphs (replay); --bt 32 runs every row at chunk size
32. Traffic = the unique DRAM bytes a perfect kernel moves (q, k once per q/k head, g, beta, Akkd,
Aqk's off-diagonal blocks, Akk's lower block triangle); the copy limit is a 2 GiB device-to-device
copy measured in the same run.
Writes DIR/compare.json and, when matplotlib is present, DIR/compare.png.

--stage intra times the whole intra stage instead: FLA's producer (token-parallel, or the safe-gate
sub-chunk kernel) plus its inter-solve kernel against kda's chunk_kda_intra (the fused kernel) and
kda's two-kernel path (producer + inter-solve, cuda_backend::fuse_intra = false), on the first five
shapes; both kda paths are checked against FLA and against each other (DIR/compare_intra.json).

--stage dispatch times FLA's whole dispatch point chunk_kda_fwd_intra (q, k, v, g, beta -> w, u,
kg, Aqk, Akk; K = V) three ways: FLA alone (Triton), kda's fused kernel followed by FLA's
recompute_w_u_fwd (what `import kda.fla` runs), and kda's fused kernel forming w, u and kg itself
(chunk_kda_intra's WY outputs, one kernel); the one-kernel outputs are checked against both
(DIR/compare_dispatch.json). Traffic: q, k, v, g, beta read once, Aqk, Akk (lower block
triangles), w, u, kg written once.
"""
import argparse, ctypes, datetime, json, math, os, platform, subprocess, sys

import torch

BT, BC, NC = 64, 16, 4
RCP_LN2 = 1.4426950216


class Call(ctypes.Structure):  # mirrors bench/kda_capi.h
    _fields_ = [("dtype", ctypes.c_int32), ("BT", ctypes.c_int32),
                ("B", ctypes.c_int64), ("T", ctypes.c_int64), ("H", ctypes.c_int64), ("HV", ctypes.c_int64), ("K", ctypes.c_int64),
                ("scale", ctypes.c_double),
                ("safe_gate", ctypes.c_int32), ("tf32", ctypes.c_int32), ("beta_fp32", ctypes.c_int32), ("flags", ctypes.c_int32),
                ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("g", ctypes.c_void_p), ("beta", ctypes.c_void_p), ("Akkd", ctypes.c_void_p),
                ("Aqk", ctypes.c_void_p), ("Akk", ctypes.c_void_p),
                ("cu_seqlens", ctypes.c_void_p), ("cu_seqlens_host", ctypes.c_void_p), ("chunk_indices", ctypes.c_void_p),
                ("chunk_indices_host", ctypes.c_void_p),
                ("num_seqs", ctypes.c_int64), ("num_chunks", ctypes.c_int64), ("stream", ctypes.c_void_p)]


def short_seqs():
    g = torch.Generator().manual_seed(7)
    return torch.randint(16, 513, (256,), generator=g).tolist()


SHAPES = [  # name, B, T, H, HV, K, dtype, lengths, graph
    ("B1 T8192 H96", 1, 8192, 96, 96, 128, torch.bfloat16, None, False),
    ("B8 T4096 H32", 8, 4096, 32, 32, 128, torch.bfloat16, None, False),
    ("GVA B4 T4096 H16 HV32", 4, 4096, 16, 32, 128, torch.bfloat16, None, False),
    ("varlen 6 seqs H64", 1, None, 64, 64, 128, torch.bfloat16, [1300, 547, 2048, 963, 271, 3063], False),
    ("B1 T1024 H32 (graph)", 1, 1024, 32, 32, 128, torch.bfloat16, None, True),
    ("B1 T65536 H16", 1, 65536, 16, 16, 128, torch.bfloat16, None, False),
    ("varlen 256 seqs H32", 1, None, 32, 32, 128, torch.bfloat16, "short", False),
    ("B8 T4096 H32 K64", 8, 4096, 32, 32, 64, torch.bfloat16, None, False),
    ("B8 T4096 H32 fp16", 8, 4096, 32, 32, 128, torch.float16, None, False),
    ("B8 T4096 H32 fp32", 8, 4096, 32, 32, 128, torch.float32, None, False),
    # rows that are not a multiple of 16 bytes (200 and 74 bytes of bf16): no per-head tensor map
    ("B8 T4096 H32 K100", 8, 4096, 32, 32, 100, torch.bfloat16, None, False),
    ("B8 T4096 H32 K37", 8, 4096, 32, 32, 37, torch.bfloat16, None, False),
    ("B8 T4096 H32 fp16 K37", 8, 4096, 32, 32, 37, torch.float16, None, False),
    # GVA: one column shift serves a q / k head and its value heads' g where K % 4 == 0 (K 100:
    # maps that join the heads); K 37: q and k through joined maps, g by per-thread copies
    ("GVA B4 T4096 H16 HV32 K100", 4, 4096, 16, 32, 100, torch.bfloat16, None, False),
    ("GVA B4 T4096 H16 HV32 K37", 4, 4096, 16, 32, 37, torch.bfloat16, None, False),
]
DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}  # kda_capi_call.dtype


def traffic(B, T, H, HV, K, es):
    tok = B * T
    return tok * (2 * H * K * es + HV * K * 4 + HV * es + HV * BC * 4 + HV * BC * (NC - 1) / 2 * es + HV * BC * (NC + 1) / 2 * es)


def make_inputs(B, T, H, HV, K, dt, cu, safe, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev, generator=gen), dim=-1).to(dt)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev, generator=gen), dim=-1).to(dt)
    # chunk-local cumsum of log-decays in log2 space (per sequence for varlen)
    lg = -torch.nn.functional.softplus(torch.randn(B, T, HV, K, device=dev, generator=gen) - 2.0) * RCP_LN2
    if cu is None:
        pos = torch.arange(T, device=dev) % BT
    else:
        seq_start = torch.repeat_interleave(torch.tensor(cu[:-1], device=dev), torch.tensor([b - a for a, b in zip(cu[:-1], cu[1:])], device=dev))
        pos = (torch.arange(T, device=dev) - seq_start) % BT
    cs = torch.cumsum(lg, dim=1)
    # g = cs - cs[before the chunk's first row]
    idx0 = torch.arange(T, device=dev) - pos  # first row of each row's chunk
    before = torch.where(idx0 > 0, idx0 - 1, torch.zeros_like(idx0))
    base = cs[:, before] * (idx0 > 0).view(1, T, 1, 1)
    g = (cs - base).float().contiguous()
    beta = torch.sigmoid(torch.randn(B, T, HV, device=dev, generator=gen)).to(dt)
    r = torch.arange(BC, device=dev)
    rowpos = (pos % BC).view(1, T, 1, 1)
    col = r.view(1, 1, 1, BC)
    Akkd = 0.05 * torch.randn(B, T, HV, BC, device=dev, generator=gen)
    if safe:
        Akkd = torch.where(col < rowpos, Akkd, torch.where(col == rowpos, torch.ones_like(Akkd), torch.zeros_like(Akkd)))
    else:
        Akkd = torch.where(col < rowpos, Akkd, torch.zeros_like(Akkd))
    return q, k, g, beta, Akkd.float().contiguous(), pos


def written_masks(pos, T, cu):
    """Aqk: off-diagonal blocks (sj < si); Akk: lower block triangle, columns < chunk length."""
    dev = pos.device
    si = (pos // BC).view(T, 1)
    colv = torch.arange(BT, device=dev).view(1, BT)
    sj = colv // BC
    # chunk length of each row
    if cu is None:
        n = torch.clamp(T - (torch.arange(T, device=dev) - pos), max=BT)
    else:
        ends = torch.tensor(cu[1:], device=dev)
        seq = torch.searchsorted(ends, torch.arange(T, device=dev), right=True)
        n = torch.clamp(ends[seq] - (torch.arange(T, device=dev) - pos), max=BT)
    m_aqk = sj < si
    m_akk = (sj <= si) & (colv < n.view(T, 1))
    return m_aqk, m_akk


FLAG_TWO_KERNELS, FLAG_NO_TMA = 1, 2  # kda_capi_call.flags (bench/kda_capi.h)


class Wy(ctypes.Structure):  # mirrors kda_capi_wy in bench/kda_capi.h
    _fields_ = [("V", ctypes.c_int64), ("v", ctypes.c_void_p), ("w", ctypes.c_void_p), ("u", ctypes.c_void_p), ("kg", ctypes.c_void_p),
                ("qg", ctypes.c_void_p)]


def load_capi(path):
    """kda_capi (bench/kda_capi.cu) with the argument types of its two entry points."""
    lib = ctypes.CDLL(os.path.abspath(path))
    for fn in (lib.kda_capi_inter_solve, lib.kda_capi_intra):
        fn.argtypes = [ctypes.POINTER(Call), ctypes.c_char_p, ctypes.c_int]
    if hasattr(lib, "kda_capi_intra_wy"):
        lib.kda_capi_intra_wy.argtypes = [ctypes.POINTER(Call), ctypes.POINTER(Wy), ctypes.c_char_p, ctypes.c_int]
    return lib


def kda_runner(fn, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, akkd, Aqk, Akk, flags=0):
    """run(tf32): one call of a kda_capi entry point (fn) on these torch tensors, on the current stream."""
    keep = []  # the varlen offsets (device, host) must outlive the calls
    calls = {}
    for tf32 in (1, 0):
        c = Call(dtype=DTYPE_CODE[dt], BT=BT, B=B, T=T, H=H, HV=HV, K=K, scale=scale, safe_gate=int(safe), tf32=tf32,
                 beta_fp32=0, flags=flags, q=q.data_ptr(), k=k.data_ptr(), g=g.data_ptr(), beta=beta.data_ptr(), Akkd=akkd.data_ptr(),
                 Aqk=Aqk.data_ptr(), Akk=Akk.data_ptr())
        if cu is not None:
            if not keep:
                keep = [torch.tensor(cu, dtype=torch.int64, device="cuda"), torch.tensor(cu, dtype=torch.int64)]
            c.cu_seqlens = keep[0].data_ptr(); c.cu_seqlens_host = keep[1].data_ptr(); c.num_seqs = len(cu) - 1
        calls[tf32] = c
    err = ctypes.create_string_buffer(512)

    def run(tf32):
        calls[tf32].stream = torch.cuda.current_stream().cuda_stream
        if fn(ctypes.byref(calls[tf32]), err, 512) != 0:
            raise RuntimeError(err.value.decode())
    run.keep = keep
    run.calls = calls
    return run


def kda_wy_runner(lib, run, V, v, w, u, kg):
    """One call of kda's fused intra kernel (tf32) with the WY outputs w, u, kg, on the tensors of run
    (kda_runner of kda_capi_intra), on the current stream."""
    wy = Wy(V=V, v=v.data_ptr(), w=w.data_ptr(), u=u.data_ptr(), kg=kg.data_ptr(), qg=None)
    call = run.calls[1]
    err = ctypes.create_string_buffer(512)

    def run_wy():
        call.stream = torch.cuda.current_stream().cuda_stream
        if lib.kda_capi_intra_wy(ctypes.byref(call), ctypes.byref(wy), err, 512) != 0:
            raise RuntimeError(err.value.decode())
    run_wy.keep = (wy, err)
    return run_wy


def time_it(fn, flush, reps, graph):
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            fn()
        run = gr.replay
    else:
        run = fn
    run()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush.zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".dev/libkda_capi.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default="", metavar="TEXT,TEXT,...", help="only the rows whose name contains one of these")
    ap.add_argument("--k-sweep", default="", metavar="K,K,...",
                    help="the table (either stage) on B8 T4096 H32 bf16 at each of these K instead of the shape list")
    ap.add_argument("--bt", type=int, choices=[32, 64], default=64, help="chunk size of every row (FLA's and kda's)")
    ap.add_argument("--flags", type=int, default=0, help="kda_capi_call.flags for kda's runs of the inter-solve table (2: no tensor copies)")
    ap.add_argument("--stage", choices=["inter-solve", "intra", "dispatch"], default="inter-solve",
                    help="inter-solve: the step alone; intra: the whole intra stage, kda's chunk_kda_intra against FLA's "
                         "producer + inter-solve kernels; dispatch: FLA's chunk_kda_fwd_intra (w, u, kg too) three ways")
    a = ap.parse_args()
    global BT, NC
    BT, NC = a.bt, a.bt // BC
    import triton
    import fla
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_kernel_inter_solve_fused as fla_kernel
    from fla.ops.utils.index import prepare_chunk_indices

    lib = load_capi(a.lib)
    dev = torch.cuda.get_device_name()
    print(f"# {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}  GPU: {dev}  torch {torch.__version__}  triton {triton.__version__}  "
          f"fla {getattr(fla, '__version__', '?')}  CUDA {torch.version.cuda}  python {platform.python_version()}")
    # copy limit
    n = 2 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    best = 1e30
    for i in range(6):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); dst.copy_(src); e1.record(); e1.synchronize()
        if i: best = min(best, e0.elapsed_time(e1))
    copy_tbps = 2 * n / (best * 1e-3) / 1e12
    del src, dst
    print(f"# copy limit (2 GiB device-to-device copy, read + write): {copy_tbps:.2f} TB/s")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    if a.stage == "intra":
        return main_intra(a, lib, copy_tbps, flush, dev, fla_kernel, prepare_chunk_indices)
    if a.stage == "dispatch":
        return main_dispatch(a, lib, copy_tbps, flush, dev, prepare_chunk_indices)
    hdr = f"| {'shape':32s} | {'mode':8s} | FLA ms | kda tf32 ms | speedup | kda TB/s | % copy | kda fp32 ms | fp32/tf32 | FLA TB/s | rel-RMS Aqk / Akk vs FLA |"
    print(hdr)
    print("|" + "|".join("-" * (len(x)) for x in hdr.split("|")[1:-1]) + "|", flush=True)
    rows = []
    for (name, B, T, H, HV, K, dt, cu, graph) in resolve_shapes(a, SHAPES):
        es = 2 if dt != torch.float32 else 4
        tb = traffic(B, T, H, HV, K, es)
        for safe in (False, True):
            q, k, g, beta, Akkd, pos = make_inputs(B, T, H, HV, K, dt, cu, safe)
            scale = K ** -0.5
            cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda") if cu is not None else None
            ci = prepare_chunk_indices(cu_t, BT) if cu is not None else None
            NT = (T + BT - 1) // BT if cu is None else len(ci)
            Aqk_f = torch.zeros(B, T, HV, BT, device="cuda", dtype=dt)
            Akk_f = torch.zeros(B, T, HV, BT, device="cuda", dtype=dt)

            def run_fla():
                fla_kernel[(NT, B * HV)](q=q, k=k, g=g, beta=beta, Aqk=Aqk_f, Akkd=Akkd, Akk=Akk_f, scale=scale, cu_seqlens=cu_t,
                                         chunk_indices=ci, T=T, H=H, HV=HV, K=K, BT=BT, BC=BC, NC=NC, USE_SAFE_GATE=safe)
            try:
                run_fla()  # autotune
                torch.cuda.synchronize()
            except Exception as e:  # a K FLA's kernel does not compile for: no row
                print(f"# {name} {'safe' if safe else 'not safe'}: FLA's kernel failed: {str(e).splitlines()[0][:160]}")
                continue
            Aqk_k = torch.zeros_like(Aqk_f)
            Akk_k = torch.zeros_like(Akk_f)
            run_kda = kda_runner(lib.kda_capi_inter_solve, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, Akkd, Aqk_k, Akk_k, a.flags)
            run_kda(1)
            torch.cuda.synchronize()
            m_aqk, m_akk = written_masks(pos, T, cu)
            ma = m_aqk.view(1, T, 1, BT).expand(B, T, HV, BT)
            mk = m_akk.view(1, T, 1, BT).expand(B, T, HV, BT)
            fa, ka = Aqk_f.float()[ma], Aqk_k.float()[ma]
            fk, kk = Akk_f.float()[mk], Akk_k.float()[mk]
            rel = lambda x, y: (torch.linalg.vector_norm(x - y) / max(torch.linalg.vector_norm(y).item(), 1e-30)).item()
            d_aqk, d_akk = rel(ka, fa), rel(kk, fk)
            untouched = bool((Aqk_k.float()[~ma] == 0).all().item()) and bool((Akk_k.float()[~mk] == 0).all().item())
            t_fla = time_it(run_fla, flush, a.reps, graph)
            t_tf32 = time_it(lambda: run_kda(1), flush, a.reps, graph)
            t_fp32 = time_it(lambda: run_kda(0), flush, a.reps, graph)
            row = dict(shape=name, mode="safe" if safe else "not safe", fla_ms=t_fla, kda_tf32_ms=t_tf32, kda_fp32_ms=t_fp32,
                       speedup=t_fla / t_tf32, kda_tbps=tb / (t_tf32 * 1e-3) / 1e12, fla_tbps=tb / (t_fla * 1e-3) / 1e12,
                       kda_fp32_tbps=tb / (t_fp32 * 1e-3) / 1e12, copy_tbps=copy_tbps, traffic_mb=tb / 1e6,
                       relrms_aqk=d_aqk, relrms_akk=d_akk, untouched_ok=untouched)
            row["pct_copy"] = 100 * row["kda_tbps"] / copy_tbps
            rows.append(row)
            r = row
            print(f"| {r['shape']:32s} | {r['mode']:8s} | {r['fla_ms']:6.3f} | {r['kda_tf32_ms']:11.3f} | {r['speedup']:6.2f}x | {r['kda_tbps']:8.2f} | "
                  f"{r['pct_copy']:5.1f}% | {r['kda_fp32_ms']:11.3f} | {r['kda_fp32_ms'] / r['kda_tf32_ms']:9.2f} | {r['fla_tbps']:8.2f} | "
                  f"{r['relrms_aqk']:.1e} / {r['relrms_akk']:.1e}{'' if r['untouched_ok'] else ' (UNTOUCHED ENTRIES WRITTEN)'} |", flush=True)
            del q, k, g, beta, Akkd, Aqk_f, Akk_f, Aqk_k, Akk_k
            torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "compare.json"), "w") as f:
        json.dump(dict(gpu=dev, torch=torch.__version__, triton=triton.__version__, copy_tbps=copy_tbps, rows=rows), f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{r['shape']}\n{r['mode']}" for r in rows]
        x = range(len(rows))
        fig, ax = plt.subplots(figsize=(max(10, len(rows) * 0.75), 5))
        w = 0.28
        ax.bar([i - w for i in x], [r["fla_tbps"] for r in rows], w, label="FLA (Triton, tf32)")
        ax.bar([i for i in x], [r["kda_tbps"] for r in rows], w, label="kda CUDA (tf32)")
        ax.bar([i + w for i in x], [r["kda_fp32_tbps"] for r in rows], w, label="kda CUDA (fp32)")
        ax.axhline(copy_tbps, color="k", ls="--", lw=1, label=f"copy limit {copy_tbps:.2f} TB/s")
        ax.axhline(0.8 * copy_tbps, color="gray", ls=":", lw=1, label="80% of copy")
        ax.set_xticks(list(x)); ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("effective TB/s (unique traffic / time)"); ax.set_title(f"kda inter-solve vs FLA on {dev}")
        ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(os.path.join(a.out, "compare.png"), dpi=110)
        print("# plot:", os.path.join(a.out, "compare.png"))
    except ImportError as e:
        print("# no matplotlib:", e)


def resolve_shapes(a, shapes):
    """The shapes a run times (--k-sweep instead of `shapes`, --only), each as (name, B, T, H, HV, K,
    dtype, cu_seqlens as a list or None, graph), T the total length for varlen."""
    for (name, B, T, H, HV, K, dt, lens, graph) in (k_sweep_shapes(a.k_sweep) if a.k_sweep else shapes):
        if BT != 64:
            name += f" BT{BT}"
        if a.only and not any(o in name for o in a.only.split(",")):
            continue
        if lens == "short":
            lens = short_seqs()
        cu = None
        if lens is not None:
            cu = [0]
            for n in lens:
                cu.append(cu[-1] + n)
            T = cu[-1]
        yield name, B, T, H, HV, K, dt, cu, graph


def k_sweep_shapes(spec):
    """--k-sweep: B8 T4096 H32 bf16 at each K of the comma-separated list."""
    return [(f"B8 T4096 H32 K{k}", 8, 4096, 32, 32, int(k), torch.bfloat16, None, False) for k in spec.split(",")]


INTRA_SHAPES = [s for s in SHAPES if s[0] in ("B1 T8192 H96", "B8 T4096 H32", "GVA B4 T4096 H16 HV32", "varlen 6 seqs H64", "B1 T1024 H32 (graph)")]


def intra_traffic(B, T, H, HV, K, es):
    """Unique bytes of the whole intra stage: q, k, g, beta read; Aqk and Akk lower block triangles written."""
    tok = B * T
    return tok * (2 * H * K * es + HV * K * 4 + HV * es + 2 * HV * BC * (NC + 1) / 2 * es)


def main_intra(a, lib, copy_tbps, flush, dev, fla_inter, prepare_chunk_indices):
    import triton
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_kernel_intra_sub_chunk as fla_sub_chunk
    from fla.ops.kda.chunk_intra_token_parallel import chunk_kda_fwd_intra_token_parallel as fla_token_parallel
    from fla.ops.utils.constant import RCP_LN2 as FLA_RCP_LN2
    from fla.utils import IS_GATHER_SUPPORTED
    rows = []
    for (name, B, T, H, HV, K, dt, cu, graph) in resolve_shapes(a, INTRA_SHAPES):
        es = 2 if dt != torch.float32 else 4
        tb = intra_traffic(B, T, H, HV, K, es)
        for safe in (False, True):
            q, k, g, beta, _, pos = make_inputs(B, T, H, HV, K, dt, cu, safe)
            scale = K ** -0.5
            cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda") if cu is not None else None
            ci = prepare_chunk_indices(cu_t, BT) if cu is not None else None
            NT = (T + BT - 1) // BT if cu is None else len(ci)
            Aqk_f = torch.zeros(B, T, HV, BT, device="cuda", dtype=dt)
            Akk_f = torch.zeros(B, T, HV, BT, device="cuda", dtype=dt)
            Akkd_f = torch.zeros(B, T, HV, BC, device="cuda", dtype=torch.float32)

            def run_fla():
                if safe:
                    fla_sub_chunk[(NT, NC, B * HV)](q=q, k=k, g=g, beta=beta, Aqk=Aqk_f, Akk=Akkd_f, scale=scale, cu_seqlens=cu_t, chunk_indices=ci,
                                                   T=T, H=H, HV=HV, K=K, BT=BT, BC=BC, BK=triton.next_power_of_2(K), GATE_SHIFT=2.0 * FLA_RCP_LN2,
                                                   USE_GATHER=IS_GATHER_SUPPORTED)
                else:
                    fla_token_parallel(q=q, k=k, gk=g, beta=beta, Aqk=Aqk_f, Akk=Akkd_f, scale=scale, cu_seqlens=cu_t, chunk_size=BT, sub_chunk_size=BC)
                fla_inter[(NT, B * HV)](q=q, k=k, g=g, beta=beta, Aqk=Aqk_f, Akkd=Akkd_f, Akk=Akk_f, scale=scale, cu_seqlens=cu_t,
                                        chunk_indices=ci, T=T, H=H, HV=HV, K=K, BT=BT, BC=BC, NC=NC, USE_SAFE_GATE=safe)
            try:
                run_fla()  # autotune
                torch.cuda.synchronize()
            except Exception as e:  # a K FLA's kernels do not compile for (its safe-gate producer needs K >= 16): no row
                print(f"# {name} {'safe' if safe else 'not safe'}: FLA's kernels failed: {str(e).splitlines()[0][:160]}")
                continue
            Aqk_k = torch.zeros_like(Aqk_f)
            Akk_k = torch.zeros_like(Akk_f)
            ws = torch.empty(B, T, HV, BC, device="cuda", dtype=torch.float32)
            run_kda = kda_runner(lib.kda_capi_intra, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, ws, Aqk_k, Akk_k)
            # kda's two-kernel path (producer + inter-solve, FLA's structure) on its own outputs
            Aqk_2, Akk_2 = torch.zeros_like(Aqk_f), torch.zeros_like(Akk_f)
            run_kda2 = kda_runner(lib.kda_capi_intra, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, ws, Aqk_2, Akk_2, FLAG_TWO_KERNELS)
            run_kda2(1)
            run_kda(1)
            torch.cuda.synchronize()
            _, m_low = written_masks(pos, T, cu)  # lower block triangle, columns < chunk length
            m = m_low.view(1, T, 1, BT).expand(B, T, HV, BT)
            rel = lambda x, y: (torch.linalg.vector_norm(x - y) / max(torch.linalg.vector_norm(y).item(), 1e-30)).item()
            d_aqk, d_akk = rel(Aqk_k.float()[m], Aqk_f.float()[m]), rel(Akk_k.float()[m], Akk_f.float()[m])
            d2_aqk, d2_akk = rel(Aqk_k.float()[m], Aqk_2.float()[m]), rel(Akk_k.float()[m], Akk_2.float()[m])
            untouched = all(bool((t.float()[~m] == 0).all().item()) for t in (Aqk_k, Akk_k, Aqk_2, Akk_2))
            t_fla = time_it(run_fla, flush, a.reps, graph)
            t_tf32 = time_it(lambda: run_kda(1), flush, a.reps, graph)
            t_fp32 = time_it(lambda: run_kda(0), flush, a.reps, graph)
            t_2k = time_it(lambda: run_kda2(1), flush, a.reps, graph)
            row = dict(shape=name, mode="safe" if safe else "not safe", fla_ms=t_fla, kda_tf32_ms=t_tf32, kda_fp32_ms=t_fp32,
                       kda_two_kernels_tf32_ms=t_2k, speedup=t_fla / t_tf32, kda_tbps=tb / (t_tf32 * 1e-3) / 1e12, fla_tbps=tb / (t_fla * 1e-3) / 1e12,
                       copy_tbps=copy_tbps, traffic_mb=tb / 1e6, relrms_aqk=d_aqk, relrms_akk=d_akk, relrms_two_kernels_aqk=d2_aqk,
                       relrms_two_kernels_akk=d2_akk, untouched_ok=untouched)
            row["pct_copy"] = 100 * row["kda_tbps"] / copy_tbps
            rows.append(row)
            del q, k, g, beta, Aqk_f, Akk_f, Akkd_f, Aqk_k, Akk_k, Aqk_2, Akk_2, ws
            torch.cuda.empty_cache()
    hdr = (f"| {'shape':32s} | {'mode':8s} | FLA producer + inter-solve ms | kda intra tf32 ms | speedup | kda TB/s | % copy | kda fp32 ms | "
           f"kda 2 kernels tf32 ms | rel-RMS Aqk / Akk vs FLA | vs kda 2 kernels |")
    print(hdr)
    print("|" + "|".join("-" * (len(x)) for x in hdr.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r['shape']:32s} | {r['mode']:8s} | {r['fla_ms']:28.3f} | {r['kda_tf32_ms']:17.3f} | {r['speedup']:6.2f}x | {r['kda_tbps']:8.2f} | "
              f"{r['pct_copy']:5.1f}% | {r['kda_fp32_ms']:11.3f} | {r['kda_two_kernels_tf32_ms']:21.3f} | "
              f"{r['relrms_aqk']:.1e} / {r['relrms_akk']:.1e}{'' if r['untouched_ok'] else ' (UNTOUCHED ENTRIES WRITTEN)'} | "
              f"{r['relrms_two_kernels_aqk']:.1e} / {r['relrms_two_kernels_akk']:.1e} |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "compare_intra.json"), "w") as f:
        json.dump(dict(gpu=dev, torch=torch.__version__, copy_tbps=copy_tbps, rows=rows), f, indent=1)


DISPATCH_SHAPES = [s for s in SHAPES if s[0] in ("B8 T4096 H32", "B1 T8192 H96", "B8 T4096 H32 K64", "varlen 6 seqs H64", "B1 T1024 H32 (graph)")]


def main_dispatch(a, lib, copy_tbps, flush, dev, prepare_chunk_indices):
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra as fla_dispatch
    from fla.ops.kda.wy_fast import recompute_w_u_fwd as fla_recompute
    rows = []
    hdr = (f"| {'shape':32s} | {'mode':8s} | FLA ms | kda + FLA recompute ms | kda one kernel ms | one kernel / FLA | one kernel / kda + recompute | "
           f"one kernel TB/s | % copy | rel-RMS w / u / kg vs kda + recompute | vs FLA |")
    print(hdr)
    print("|" + "|".join("-" * (len(x)) for x in hdr.split("|")[1:-1]) + "|", flush=True)
    for (name, B, T, H, HV, K, dt, cu, graph) in resolve_shapes(a, DISPATCH_SHAPES):
        V = K
        es = 2 if dt != torch.float32 else 4
        tb = intra_traffic(B, T, H, HV, K, es) + B * T * HV * (V * es + 3 * K * es)  # + v read, w, u, kg written
        for safe in (False, True):
            q, k, g, beta, _, pos = make_inputs(B, T, H, HV, K, dt, cu, safe)
            v = torch.randn(B, T, HV, V, device="cuda", dtype=dt)
            scale = K ** -0.5
            cu_t = torch.tensor(cu, dtype=torch.int64, device="cuda") if cu is not None else None
            ci = prepare_chunk_indices(cu_t, BT) if cu is not None else None
            out_f = {}

            def run_fla():
                w, u, _, kg, Aqk, Akk = fla_dispatch(q=q, k=k, v=v, gk=g, beta=beta, scale=scale, cu_seqlens=cu_t, chunk_size=BT,
                                                     chunk_indices=ci, safe_gate=safe)
                out_f.update(w=w, u=u, kg=kg)
            run_fla()  # autotune
            Aqk_k = torch.zeros(B, T, HV, BT, device="cuda", dtype=dt)
            Akk_k = torch.zeros_like(Aqk_k)
            ws = torch.empty(B, T, HV, BC, device="cuda", dtype=torch.float32)
            run_kda = kda_runner(lib.kda_capi_intra, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, ws, Aqk_k, Akk_k)
            out_r = {}

            def run_kda_recompute():
                run_kda(1)
                w, u, _, kg = fla_recompute(k=k, v=v, beta=beta, A=Akk_k, gk=g, q=None, cu_seqlens=cu_t, chunk_indices=ci)
                out_r.update(w=w, u=u, kg=kg)
            run_kda_recompute()
            Aqk_1, Akk_1 = torch.zeros_like(Aqk_k), torch.zeros_like(Akk_k)
            w1, kg1 = torch.empty(B, T, HV, K, device="cuda", dtype=dt), torch.empty(B, T, HV, K, device="cuda", dtype=dt)
            u1 = torch.empty(B, T, HV, V, device="cuda", dtype=dt)
            run_one = kda_runner(lib.kda_capi_intra, B, T, H, HV, K, dt, cu, safe, scale, q, k, g, beta, ws, Aqk_1, Akk_1)
            run_kda_one = kda_wy_runner(lib, run_one, V, v, w1, u1, kg1)
            run_kda_one()
            torch.cuda.synchronize()
            valid = (torch.ones(T, dtype=torch.bool, device="cuda") if cu is None else pos >= 0).view(1, T, 1, 1)
            rel = lambda x, y: (torch.linalg.vector_norm((x.float() - y.float()) * valid) / max(torch.linalg.vector_norm(y.float() * valid).item(), 1e-30)).item()
            d_r = [rel(t, out_r[n]) for n, t in (("w", w1), ("u", u1), ("kg", kg1))]
            d_f = [rel(t, out_f[n]) for n, t in (("w", w1), ("u", u1), ("kg", kg1))]
            same_a = bool(torch.equal(Aqk_1, Aqk_k)) and bool(torch.equal(Akk_1, Akk_k))
            t_fla = time_it(run_fla, flush, a.reps, graph)
            t_rec = time_it(run_kda_recompute, flush, a.reps, graph)
            t_one = time_it(run_kda_one, flush, a.reps, graph)
            r = dict(shape=name, mode="safe" if safe else "not safe", fla_ms=t_fla, kda_recompute_ms=t_rec, kda_one_ms=t_one,
                     speedup_fla=t_fla / t_one, speedup_recompute=t_rec / t_one, one_tbps=tb / (t_one * 1e-3) / 1e12, copy_tbps=copy_tbps,
                     traffic_mb=tb / 1e6, relrms_vs_recompute=d_r, relrms_vs_fla=d_f, aqk_akk_same_bits=same_a)
            r["pct_copy"] = 100 * r["one_tbps"] / copy_tbps
            rows.append(r)
            print(f"| {name:32s} | {r['mode']:8s} | {t_fla:6.3f} | {t_rec:22.3f} | {t_one:17.3f} | {r['speedup_fla']:15.2f}x | "
                  f"{r['speedup_recompute']:27.2f}x | {r['one_tbps']:15.2f} | {r['pct_copy']:5.1f}% | "
                  f"{' / '.join(f'{x:.1e}' for x in d_r)}{'' if same_a else ' (Aqk/Akk DIFFER)'} | {' / '.join(f'{x:.1e}' for x in d_f)} |", flush=True)
            del q, k, g, beta, v, Aqk_k, Akk_k, Aqk_1, Akk_1, w1, u1, kg1, ws
            out_f.clear(); out_r.clear()
            torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "compare_dispatch.json"), "w") as f:
        json.dump(dict(gpu=dev, torch=torch.__version__, copy_tbps=copy_tbps, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
