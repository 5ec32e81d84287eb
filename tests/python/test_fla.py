"""kda as flash-linear-attention's backend (kda.fla): registration, the verifier's decisions, and,
on a CUDA device, FLA's chunk_kda with and without kda. Skipped without FLA installed."""

from __future__ import annotations

import pytest
import torch
from conftest import make_inputs, requires_cuda

pytest.importorskip("fla", reason="flash-linear-attention (fla-core) is not installed")
import kda.fla  # noqa: E402


def _call(**kw):
    x = make_inputs(B=1, T=64, H=2, K=32, **{k: kw.pop(k) for k in list(kw) if k in ("dtype", "device")})
    args = dict(q=x["q"], k=x["k"], v=x["k"], gk=x["g"], beta=x["beta"], scale=x["scale"], chunk_size=64)
    args.update(kw)
    return args


def test_registered_ahead_of_triton():
    assert kda.fla.backend.backend_type == "kda"
    assert kda.fla.backend.is_enabled()


@pytest.mark.parametrize("change, reason", [
    (dict(chunk_size=16), "chunk_size 16"),
    (dict(gk=None), "gk and beta are required"),
    (dict(q=torch.zeros(1, 64, 2, 300, dtype=torch.bfloat16), k=torch.zeros(1, 64, 2, 300, dtype=torch.bfloat16)),
     "K = 300"),
    (dict(dtype=torch.float64), "dtype"),
    (dict(cu_seqlens=torch.tensor([0, 64]), q=torch.zeros(2, 64, 2, 32, dtype=torch.bfloat16)), "varlen with B != 1"),
    ({}, "CUDA"),  # everything else fine: CPU tensors are FLA's own business
])
def test_verifier_declines_with_reason(change, reason):
    kda.fla.reset_stats()
    ok, why = kda.fla.backend.verify("chunk_kda_fwd_intra", **_call(**change))
    assert not ok and reason in why
    assert sum(kda.fla.stats()["declined"].values()) == 1


@requires_cuda
@pytest.mark.parametrize("safe_gate", [False, True], ids=["notsafe", "safe"])
@pytest.mark.parametrize("wy", ["1", "0"], ids=["wy-in-kda", "wy-by-fla"])
def test_chunk_kda_with_kda_matches_triton(safe_gate, wy, monkeypatch):
    monkeypatch.setenv("KDA_FLA_WY", wy)
    from fla.ops.kda import chunk_kda

    torch.manual_seed(0)
    B, T, H, K, V = 2, 300, 4, 128, 128
    q = torch.randn(B, T, H, K, device="cuda", dtype=torch.bfloat16)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).to(torch.bfloat16)
    v = torch.randn(B, T, H, V, device="cuda", dtype=torch.bfloat16)
    g = (-5 * torch.sigmoid(torch.randn(B, T, H, K, device="cuda"))) if safe_gate else \
        torch.nn.functional.logsigmoid(torch.randn(B, T, H, K, device="cuda")) / 8
    beta = torch.rand(B, T, H, device="cuda", dtype=torch.bfloat16)
    kw = dict(scale=K**-0.5, safe_gate=safe_gate, lower_bound=-5.0 if safe_gate else None)
    kda.fla.reset_stats()
    with_kda, _ = chunk_kda(q, k, v, g, beta, **kw)
    assert kda.fla.stats()["calls"] == 1
    monkeypatch.setenv("FLA_KDA", "0")
    triton, _ = chunk_kda(q, k, v, g, beta, **kw)
    assert kda.fla.stats()["calls"] == 1
    diff = (with_kda.float() - triton.float()).norm() / triton.float().norm()
    assert diff < 1e-2, f"chunk_kda output with kda differs from FLA's by {diff:.2e} (relative)"


@requires_cuda
@pytest.mark.parametrize("disable_recompute", [False, True])
def test_wy_in_kernel_against_fla_recompute(disable_recompute, monkeypatch):
    # the dispatch point both ways: w, u, qg, kg from kda's kernel (unrounded Akk) and from FLA's
    # recompute_w_u_fwd (Akk rounded to bf16) agree to bf16 accuracy; Aqk and Akk are the same bits
    x = make_inputs(B=2, T=200, H=2, HV=4, K=64, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(2, 200, 4, 96, device="cuda").to(torch.bfloat16)
    args = dict(q=x["q"], k=x["k"], v=v, gk=x["g"], beta=x["beta"], scale=x["scale"], chunk_size=64,
                disable_recompute=disable_recompute)
    monkeypatch.setenv("KDA_FLA_WY", "1")
    one = kda.fla.chunk_kda_fwd_intra(**args)
    monkeypatch.setenv("KDA_FLA_WY", "0")
    two = kda.fla.chunk_kda_fwd_intra(**args)
    assert torch.equal(one[4], two[4]) and torch.equal(one[5], two[5])
    assert (one[2] is None) == (two[2] is None) == (not disable_recompute)
    for i, name in enumerate(("w", "u", "qg", "kg")):
        if one[i] is None:
            continue
        d = ((one[i].float() - two[i].float()).norm() / two[i].float().norm()).item()
        assert d < 1e-2, f"{name}: kda's kernel and FLA's recompute differ by {d:.2e} (relative)"
