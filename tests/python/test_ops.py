"""kda's torch operators on the CPU against the float64 evaluation of docs/ALGORITHM.md, entry by
entry, on every entry each call writes; untouched entries must keep their contents."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import check, make_inputs

import kda
import reference

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("BT", [64, 32])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["notsafe", "safe"])
def test_chunk_kda_intra_dense(dtype, BT, safe_gate):
    # a tail chunk (T % BT != 0) and GVA (HV = 2 H)
    x = make_inputs(B=2, T=BT + 37, H=2, HV=4, K=48, dtype=dtype, BT=BT, safe_gate=safe_gate)
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT,
                                   safe_gate=safe_gate)
    assert Aqk.shape == (2, BT + 37, 4, BT) and Aqk.dtype == dtype and Akk.dtype == dtype
    eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], BT)
    check(Aqk, eAqk, what="Aqk")
    check(Akk, eAkk, what="Akk")


@pytest.mark.parametrize("K", [1, 7, 80, 256])
def test_chunk_kda_intra_head_dims(K):
    # K = 7 and 80: rows that are not a multiple of 16 elements
    x = make_inputs(T=70, H=1, K=K, dtype=torch.bfloat16)
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], K**-0.5, 64)
    check(Aqk, eAqk, what="Aqk")
    check(Akk, eAkk, what="Akk")


@pytest.mark.parametrize("BT", [64, 32])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=["i64", "i32"])
def test_chunk_kda_intra_varlen(BT, index_dtype):
    # sequences of length 1, an empty one, one chunk exactly, tails
    cu = torch.tensor([0, 1, 2, 2, 2 + BT, 3 + BT, 70 + 2 * BT], dtype=index_dtype)
    T = int(cu[-1])
    x = make_inputs(B=1, T=T, H=2, HV=4, K=32, dtype=torch.bfloat16, BT=BT, cu_seqlens=cu, beta_fp32=True)
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT, cu_seqlens=cu)
    eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], BT, cu_seqlens=cu)
    check(Aqk, eAqk, what="Aqk")
    check(Akk, eAkk, what="Akk")
    # the same with FLA's chunk indices given
    ci = torch.tensor([[n, c] for n in range(len(cu) - 1) for c in range(0, int(cu[n + 1] - cu[n]), BT)],
                      dtype=index_dtype).reshape(-1, 2)
    ci[:, 1] //= BT
    Aqk2, Akk2 = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT, cu_seqlens=cu,
                                     chunk_indices=ci)
    assert torch.equal(Aqk2, Aqk) and torch.equal(Akk2, Akk)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("BT", [64, 32])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["notsafe", "safe"])
def test_chunk_kda_fwd_intra_dense(dtype, BT, safe_gate):
    # FLA's dispatch point: the stage plus w, u, qg, kg; a tail chunk, GVA, V != K
    x = make_inputs(B=2, T=BT + 37, H=2, HV=4, K=40, dtype=dtype, BT=BT, safe_gate=safe_gate)
    v = torch.randn(2, BT + 37, 4, 24, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    w, u, qg, kg, Aqk, Akk = kda.chunk_kda_fwd_intra(x["q"], x["k"], v, x["g"], x["beta"], x["scale"], chunk_size=BT,
                                                     safe_gate=safe_gate, store_qg=True)
    assert w.shape == kg.shape == qg.shape == (2, BT + 37, 4, 40) and u.shape == (2, BT + 37, 4, 24)
    assert all(t.dtype == dtype for t in (w, u, qg, kg, Aqk, Akk))
    ew, eu, eqg, ekg = reference.wy_outputs(x["q"], x["k"], v, x["g"], x["beta"], BT)
    for out, exact, what in ((w, ew, "w"), (u, eu, "u"), (qg, eqg, "qg"), (kg, ekg, "kg")):
        check(out, exact, what=what)
    # Aqk and Akk: the bits of chunk_kda_intra
    Aqk2, Akk2 = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT, safe_gate=safe_gate)
    assert torch.equal(Aqk, Aqk2) and torch.equal(Akk, Akk2)
    assert kda.chunk_kda_fwd_intra(x["q"], x["k"], v, x["g"], x["beta"], x["scale"], chunk_size=BT)[2] is None


@pytest.mark.parametrize("BT", [64, 32])
def test_chunk_kda_fwd_intra_varlen(BT):
    # length-1 and empty sequences, GVA, K = V = 7 (rows not a multiple of 16 bytes)
    cu = torch.tensor([0, 1, 2, 2, 2 + BT, 3 + BT, 70 + 2 * BT], dtype=torch.int64)
    T = int(cu[-1])
    x = make_inputs(B=1, T=T, H=2, HV=4, K=7, dtype=torch.bfloat16, BT=BT, cu_seqlens=cu, beta_fp32=True)
    v = torch.randn(1, T, 4, 7, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    w, u, qg, kg, _, _ = kda.chunk_kda_fwd_intra(x["q"], x["k"], v, x["g"], x["beta"], x["scale"], chunk_size=BT, cu_seqlens=cu,
                                                 store_qg=True)
    ew, eu, eqg, ekg = reference.wy_outputs(x["q"], x["k"], v, x["g"], x["beta"], BT, cu_seqlens=cu)
    for out, exact, what in ((w, ew, "w"), (u, eu, "u"), (qg, eqg, "qg"), (kg, ekg, "kg")):
        check(out, exact, what=what)


def test_chunk_kda_intra_varlen_under_inference_mode():
    cu = torch.tensor([0, 1, 70, 200], dtype=torch.int64)
    x = make_inputs(B=1, T=200, H=2, HV=2, K=32, cu_seqlens=cu)
    with torch.inference_mode():
        Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu.clone())
    eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], 64, cu_seqlens=cu)
    check(Aqk, eAqk)
    check(Akk, eAkk)


def test_chunk_kda_intra_strided_views():
    # q, k and beta as slices of one fused projection [B, T, 2 H K + HV]
    B, T, H, K = 1, 90, 2, 32
    x = make_inputs(B=B, T=T, H=H, K=K, dtype=torch.bfloat16)
    fused = torch.zeros(B, T, 2 * H * K + H + 3, dtype=torch.bfloat16)
    fused[..., :H * K] = x["q"].reshape(B, T, H * K)
    fused[..., H * K:2 * H * K] = x["k"].reshape(B, T, H * K)
    fused[..., 2 * H * K:2 * H * K + H] = x["beta"]
    q = fused[..., :H * K].view(B, T, H, K)
    k = fused[..., H * K:2 * H * K].view(B, T, H, K)
    beta = fused[..., 2 * H * K:2 * H * K + H]
    assert not q.is_contiguous() and not beta.is_contiguous()
    Aqk, Akk = kda.chunk_kda_intra(q, k, x["g"], beta)
    rAqk, rAkk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    assert torch.equal(Aqk, rAqk) and torch.equal(Akk, rAkk)


def test_chunk_kda_intra_tf32_on_cpu_is_fp32():
    x = make_inputs(T=64, dtype=torch.float32)
    a = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], precision="tf32")
    b = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], precision="fp32")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_chunk_kda_intra_empty():
    x = make_inputs(T=0)
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    assert Aqk.shape == (1, 0, 2, 64) and Akk.shape == (1, 0, 2, 64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["notsafe", "safe"])
@pytest.mark.parametrize("BT", [64, 32])
def test_inter_solve(dtype, safe_gate, BT):
    cu = torch.tensor([0, 5, 5 + BT + 20, 150], dtype=torch.int64)
    x = make_inputs(B=1, T=150, H=1, HV=2, K=40, dtype=dtype, BT=BT, cu_seqlens=cu, safe_gate=safe_gate)
    Akkd64, Aqk_diag64 = reference.diagonal_blocks(x["q"], x["k"], x["g"], x["beta"], x["scale"], BT, safe_gate,
                                                   cu_seqlens=cu)
    Akkd = Akkd64.float()
    sentinel = 7.0
    Aqk = torch.full((1, 150, 2, BT), sentinel, dtype=dtype)
    before = Aqk.clone()
    Akk = kda.inter_solve(x["q"], x["k"], x["g"], x["beta"], Akkd, Aqk, x["scale"], chunk_size=BT,
                          safe_gate=safe_gate, cu_seqlens=cu)
    eAqk, aqk_mask, eAkk, akk_mask = reference.inter_solve(x["q"], x["k"], x["g"], x["beta"], Akkd, x["scale"], BT,
                                                           safe_gate, cu_seqlens=cu)
    check(Aqk, eAqk, aqk_mask, what="Aqk (off-diagonal blocks)")
    check(Akk, eAkk, akk_mask, what="Akk")
    # the diagonal blocks and everything above them are untouched; Akk is zero there
    assert torch.equal(Aqk[~aqk_mask], before[~aqk_mask])
    assert torch.count_nonzero(Akk[~akk_mask]) == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=["bf16", "fp32", "fp64"])
@pytest.mark.parametrize("activation", [None, "kda", "kda_lower_bound"])
def test_chunk_local_cumsum(dtype, activation):
    cu = torch.tensor([0, 1, 65, 100], dtype=torch.int32)
    HV, K = 3, 20
    gen = torch.Generator().manual_seed(3)
    graw = torch.randn(1, 100, HV, K, generator=gen, dtype=torch.float64)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    opts = {}
    if activation is not None:
        opts = {"activation": activation, "A_log": torch.randn(HV, generator=gen, dtype=torch.float64).to(acc),
                "dt_bias": torch.randn(HV, K, generator=gen, dtype=torch.float64).to(acc)}
    else:
        graw = -torch.nn.functional.softplus(graw)
    g = graw.to(dtype)
    out = kda.chunk_local_cumsum(g, 64, cu_seqlens=cu, **opts)
    assert out.dtype == acc
    exact = reference.chunk_local_cumsum(g, 64, cu_seqlens=cu, **opts)
    err, floor = reference.rel_errors(out, exact)
    # a sum of at most BT same-sign terms in the accumulator: relative error <= BT u (plus the
    # activation's few ulps); fp64: the same with u_fp64
    u = reference.UNIT_ROUNDOFF[acc]
    assert err <= 64 * u, f"cumsum relative RMS error {err:.3e} > {64 * u:.3e} (floor {floor:.3e})"


@pytest.mark.parametrize("BT", [64, 32])
def test_sequence_split_at_a_chunk_boundary(BT):
    # what context parallelism does: each part of a sequence is handed over on its own (split at a
    # chunk boundary); the intra stage is chunk-local, so the parts give the same bits as one call,
    # as does one varlen call whose offsets start the second part mid-sequence
    T, cut = 5 * BT + 17, 3 * BT
    x = make_inputs(B=1, T=T, H=2, HV=4, K=32, dtype=torch.bfloat16, BT=BT)
    whole = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], chunk_size=BT)
    parts = [kda.chunk_kda_intra(x["q"][:, a:b], x["k"][:, a:b], x["g"][:, a:b], x["beta"][:, a:b], chunk_size=BT)
             for a, b in ((0, cut), (cut, T))]
    cu = torch.tensor([0, cut, T])
    varlen = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], chunk_size=BT, cu_seqlens=cu)
    for i in range(2):
        assert torch.equal(torch.cat([parts[0][i], parts[1][i]], dim=1), whole[i])
        assert torch.equal(varlen[i], whole[i])


@pytest.mark.parametrize("level", ["baseline", "x86-64-v3", "x86-64-v4"])
def test_every_cpu_level_at_the_floor(level, monkeypatch):
    # the CPU half built for each x86-64 level this machine runs (the package loads the highest one):
    # every one at the floor, bf16 and fp32, both gate modes
    from kda import _lib
    try:
        lib = _lib.load_cpu_library(level)
    except ImportError as e:
        pytest.skip(str(e))
    monkeypatch.setattr(_lib, "_cpu_run", lib.kda_c_run)
    for dtype in (torch.bfloat16, torch.float32):
        for safe_gate in (False, True):
            x = make_inputs(B=1, T=150, H=2, HV=4, K=80, dtype=dtype, safe_gate=safe_gate)
            Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], safe_gate=safe_gate)
            eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], 64)
            check(Aqk, eAqk, what=f"{level} Aqk")
            check(Akk, eAkk, what=f"{level} Akk")


def test_cpu_level_choice_and_refusal():
    import subprocess
    import sys

    from kda import _lib
    assert kda.cpu_level() in _lib.CPU_LEVELS
    # the default is the highest level this CPU runs among the libraries present
    present = [lvl for lvl in ("x86-64-v4", "x86-64-v3") if _lib.cpu_library_path(lvl).exists()
               and _lib._lib.kda_c_cpu_level() >= _lib.CPU_LEVELS[lvl]]
    assert kda.cpu_level() == (present[0] if present else "baseline")
    # a level that does not exist is refused at import, naming it
    env = dict(os.environ, KDA_CPU_LEVEL="x86-64-v9")
    r = subprocess.run([sys.executable, "-c", "import kda"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "unknown CPU level 'x86-64-v9'" in r.stderr
    env["KDA_CPU_LEVEL"] = "baseline"
    r = subprocess.run([sys.executable, "-c", "import kda; print(kda.cpu_level())"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "baseline"
