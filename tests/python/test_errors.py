"""Bad input raises ValueError carrying kda's message, which names the argument; nothing is
written and the interpreter survives."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from conftest import make_inputs

import kda


def _x(**kw):
    return make_inputs(B=1, T=70, H=2, K=16, **kw)


def _intra(x, **kw):
    args = {k: x[k] for k in ("q", "k", "g", "beta")}
    args.update(kw)
    return kda.chunk_kda_intra(args["q"], args["k"], args["g"], args["beta"],
                               **{k: v for k, v in kw.items() if k not in ("q", "k", "g", "beta")})


CASES = {
    "g shape": (lambda x: dict(g=x["g"][..., :8]), "argument 'g'"),
    "g dtype": (lambda x: dict(g=x["g"].to(torch.bfloat16)), "argument 'g'"),
    "k dtype": (lambda x: dict(k=x["k"].float()), "argument 'k'"),
    "q integer": (lambda x: dict(q=x["q"].to(torch.int32), k=x["k"].to(torch.int32)), "argument 'q'"),
    "q rank": (lambda x: dict(q=x["q"][0]), "argument 'q'"),
    "beta shape": (lambda x: dict(beta=x["beta"][:, :, :1]), "argument 'beta'"),
    "chunk size": (lambda x: dict(chunk_size=48), "argument 'BT'"),
    "huge chunk size": (lambda x: dict(chunk_size=2**40), "argument 'BT'"),
    "K too large": (lambda x: {n: torch.zeros(1, 70, 2, 300, dtype=torch.float32 if n == "g" else torch.bfloat16)
                               for n in ("q", "k", "g")}, "argument 'K'"),
    "HV not a multiple": (lambda x: dict(q=x["q"].expand(1, 70, 2, 16)[:, :, :1].expand(1, 70, 3, 16).contiguous(),
                                         k=x["k"][:, :, :1].expand(1, 70, 3, 16).contiguous()), "argument 'HV'"),
    "inner stride": (lambda x: dict(q=x["q"].transpose(2, 3).contiguous().transpose(2, 3)), "argument 'q'"),
    "cu_seqlens end": (lambda x: dict(cu_seqlens=torch.tensor([0, 10, 60])), "argument 'cu_seqlens'"),
    "cu_seqlens order": (lambda x: dict(cu_seqlens=torch.tensor([0, 50, 40, 70])), "argument 'cu_seqlens'"),
    "cu_seqlens float": (lambda x: dict(cu_seqlens=torch.tensor([0.0, 70.0])), "argument 'cu_seqlens'"),
    "chunk_indices mismatch": (lambda x: dict(cu_seqlens=torch.tensor([0, 70]), chunk_indices=torch.tensor([[0, 0]])),
                               "argument 'chunk_indices'"),
    "precision": (lambda x: dict(precision="fp16"), "argument 'precision'"),
    "five dimensions": (lambda x: dict(q=x["q"][None]), "argument 'q'"),
    "complex": (lambda x: dict(q=x["q"].to(torch.complex64)), "argument 'q'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_chunk_kda_intra_refuses(case):
    x = _x()
    change, expect = CASES[case]
    with pytest.raises(ValueError, match=expect):
        _intra(x, **change(x))


@pytest.mark.parametrize("change, expect", [
    (lambda x, v: dict(v=v.float()), "argument 'v'"),
    (lambda x, v: dict(v=v[:, :, :1]), "argument 'v'"),
    (lambda x, v: dict(v=v[:, :-1]), "argument 'v'"),
    (lambda x, v: dict(v=v.transpose(2, 3).contiguous().transpose(2, 3)), "argument 'v'"),
], ids=["v dtype", "v heads", "v tokens", "v inner stride"])
def test_chunk_kda_fwd_intra_refuses(change, expect):
    x = _x()
    v = torch.randn(1, 70, 2, 12).to(torch.bfloat16)
    args = dict(v=v)
    args.update(change(x, v))
    with pytest.raises(ValueError, match=expect):
        kda.chunk_kda_fwd_intra(x["q"], x["k"], args["v"], x["g"], x["beta"])


def test_varlen_needs_batch_of_one():
    x = make_inputs(B=2, T=70, H=2, K=16)
    with pytest.raises(ValueError, match="argument 'B'"):
        kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 70]))


def test_inter_solve_refuses_and_writes_nothing():
    x = _x()
    Aqk = torch.full((1, 70, 2, 64), 3.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'Akkd'"):
        kda.inter_solve(x["q"], x["k"], x["g"], x["beta"], torch.zeros(1, 70, 2, 8), Aqk)
    assert torch.all(Aqk == 3.0)
    with pytest.raises(ValueError, match="argument 'Aqk'"):
        kda.inter_solve(x["q"], x["k"], x["g"], x["beta"], torch.zeros(1, 70, 2, 16), Aqk[..., :32])


def test_cumsum_refuses():
    g = -torch.rand(1, 10, 2, 4)
    with pytest.raises(ValueError, match="argument 'A_log'"):
        kda.chunk_local_cumsum(g, activation="kda")
    with pytest.raises(ValueError, match="argument 'lower_bound'"):
        kda.chunk_local_cumsum(g, activation="kda_lower_bound", lower_bound=1.0)
    with pytest.raises(ValueError, match="argument 'activation'"):
        kda.chunk_local_cumsum(g, activation="relu")
    with pytest.raises(ValueError, match="argument 'BT'"):
        kda.chunk_local_cumsum(g, 0)


def test_unsupported_device():
    x = _x()
    meta = {n: x[n].to("meta") for n in ("q", "k", "g", "beta")}
    # the meta device has no kda backend: the fake implementation gives shapes only
    Aqk, Akk = kda.chunk_kda_intra(meta["q"], meta["k"], meta["g"], meta["beta"])
    assert Aqk.device.type == "meta" and Aqk.shape == (1, 70, 2, 64)


def test_not_differentiable():
    # no backward: the outputs do not require grad even when the inputs do
    x = _x()
    q = x["q"].clone().requires_grad_()
    Aqk, Akk = kda.chunk_kda_intra(q, x["k"], x["g"], x["beta"])
    assert not Aqk.requires_grad and not Akk.requires_grad


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("nm") is None, reason="needs Linux and binutils' nm")
def test_libraries_export_only_the_c_abi():
    # anything else in the dynamic symbol table (a statically linked libstdc++ above all) can be interposed
    # by the libstdc++ that torch loads: the mixed copies crash while formatting an error message
    from kda import _lib
    paths = [_lib.cpu_library_path(level) for level in _lib.CPU_LEVELS]
    paths = [p for p in paths if p.exists()]
    assert paths
    for path in paths:
        out = subprocess.run(["nm", "-D", "--defined-only", str(path)], check=True, capture_output=True, text=True).stdout
        names = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
        assert names == ["kda_c_abi_version", "kda_c_cpu_level", "kda_c_has_cuda", "kda_c_run"], (path, names[:5])
