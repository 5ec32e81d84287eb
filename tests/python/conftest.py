"""Shared inputs of the Python tests: realistic KDA tensors in FLA's layout."""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import reference  # noqa: E402


def cuda_ready() -> bool:
    import kda

    return torch.cuda.is_available() and kda.has_cuda()


requires_cuda = pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and a kda build with the CUDA backend")


def make_inputs(B=1, T=100, H=2, HV=None, K=32, dtype=torch.bfloat16, BT=64, cu_seqlens=None, safe_gate=False,
                beta_fp32=False, seed=0, device="cpu"):
    """q, k (L2-normalised keys, queries of norm ~1), g (log2 chunk-local cumsum of per-token
    log-decays: FLA's lower-bounded gate in [-5, 0) for safe gate, else -exp(A) softplus(x)),
    beta in (0, 1), and the float64 cumsum's inputs."""
    HV = HV or H
    gen = torch.Generator().manual_seed(seed)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
    x = torch.randn(B, T, HV, K, generator=gen, dtype=torch.float64)
    if safe_gate:
        decay = -5.0 * torch.sigmoid(x - 2.0)
    else:
        decay = -0.1 * torch.nn.functional.softplus(x)
    g = reference.chunk_local_cumsum(decay, BT, cu_seqlens=cu_seqlens).to(acc)
    beta = torch.sigmoid(torch.randn(B, T, HV, generator=gen, dtype=torch.float64))
    return {
        "q": q.to(dtype).to(device),
        "k": k.to(dtype).to(device),
        "g": g.to(device),
        "beta": beta.to(torch.float32 if beta_fp32 else dtype).to(device),
        "scale": 1.0 / math.sqrt(K),
    }


def check(out: torch.Tensor, exact: torch.Tensor, mask=None, what=""):
    """Asserts the relative RMS error of `out` against the float64 `exact` is at the rounding
    floor of out's dtype:
      bf16 / fp16: 1.05 x floor + 1e-6 (the C++ suite's bound: fp32 compute error on top of the
          output rounding, which is 4e-3 / 5e-4 relative per entry);
      fp32: 4 u_fp32 = 2.4e-7 (measured <= 1.3e-7 on these shapes: a 3x degradation fails);
      fp64: 6 u_fp64 = 6.7e-16 (measured <= 2.8e-16: a 3x degradation fails)."""
    err, floor = reference.rel_errors(out.cpu(), exact, mask)
    bound = {torch.bfloat16: 1.05 * floor + 1e-6, torch.float16: 1.05 * floor + 1e-6,
             torch.float32: 4 * 2.0**-24, torch.float64: 6 * 2.0**-53}[out.dtype]
    assert err <= bound, f"{what}: relative RMS error {err:.3e} > bound {bound:.3e} (floor {floor:.3e})"
    return err, floor
