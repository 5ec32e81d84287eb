"""The operators as torch citizens: schema and fake-tensor checks (torch.library.opcheck), and
torch.compile(fullgraph=True) tracing without a graph break."""

from __future__ import annotations

import pytest
import torch
from conftest import make_inputs

import kda


def _intra_args(x, BT=64, cu=None):
    return (x["q"], x["k"], x["g"], x["beta"], x["scale"], BT, False, False, cu, None, None, None)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_opcheck_chunk_kda_intra(varlen):
    cu = torch.tensor([0, 3, 70], dtype=torch.int64) if varlen else None
    x = make_inputs(B=1, T=70, H=1, HV=2, K=16, cu_seqlens=cu)
    torch.library.opcheck(torch.ops.kda.chunk_kda_intra.default, _intra_args(x, cu=cu))


@pytest.mark.parametrize("store_qg", [False, True], ids=["no-qg", "qg"])
def test_opcheck_chunk_kda_fwd_intra(store_qg):
    cu = torch.tensor([0, 3, 70], dtype=torch.int64)
    x = make_inputs(B=1, T=70, H=1, HV=2, K=16, cu_seqlens=cu)
    v = torch.randn(1, 70, 2, 8).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.kda.chunk_kda_fwd_intra.default,
                          (x["q"], x["k"], v, x["g"], x["beta"], x["scale"], 64, False, False, store_qg, cu, None, None, None))


def test_opcheck_inter_solve():
    x = make_inputs(B=1, T=40, H=1, K=16)
    Akkd = torch.zeros(1, 40, 1, 16)
    Aqk = torch.zeros(1, 40, 1, 64, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.kda.inter_solve.default,
                          (x["q"], x["k"], x["g"], x["beta"], Akkd, Aqk, x["scale"], 64, False, False, None, None,
                           None, None))


@pytest.mark.parametrize("activation", [0, 1])
def test_opcheck_chunk_local_cumsum(activation):
    g = -torch.rand(1, 30, 2, 8)
    A_log = torch.zeros(2) if activation else None
    torch.library.opcheck(torch.ops.kda.chunk_local_cumsum.default,
                          (g, 64, 1.4426950408889634, activation, A_log, None, -5.0, None, None))


def test_compile_fullgraph():
    # cumsum -> intra stage -> a consumer, traced as one graph (aot_eager: the fake implementations
    # and the functionalisation, without a C++ compiler)
    x = make_inputs(T=80, H=2, K=16)
    decay = -torch.rand(1, 80, 2, 16)

    def stage(q, k, decay, beta):
        g = kda.chunk_local_cumsum(decay, 64)
        Aqk, Akk = kda.chunk_kda_intra(q, k, g, beta)
        return Aqk.float().sum(-1) + Akk.float().sum(-1)

    eager = stage(x["q"], x["k"], decay, x["beta"])
    torch._dynamo.reset()
    compiled = torch.compile(stage, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x["q"], x["k"], decay, x["beta"]), eager)


def test_compile_fullgraph_inplace_inter_solve():
    x = make_inputs(T=64, H=1, K=16)
    Akkd = torch.zeros(1, 64, 1, 16)

    def step(q, k, g, beta, Akkd):
        Aqk = torch.zeros(1, 64, 1, 64, dtype=q.dtype)
        Akk = kda.inter_solve(q, k, g, beta, Akkd, Aqk)
        return Aqk, Akk

    eager = step(x["q"], x["k"], x["g"], x["beta"], Akkd)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(x["q"], x["k"], x["g"], x["beta"], Akkd)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])
