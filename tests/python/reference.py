"""A float64 evaluation of docs/ALGORITHM.md in torch, independent of kda's code, and the
rounding-floor metrics the Python tests compare against (the C++ suite's, tests/support/metrics.hpp).
"""

from __future__ import annotations

import math

import torch

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24, torch.float64: 2.0**-53}


def sequences(B: int, T: int, cu_seqlens: torch.Tensor | None):
    """(batch row, first token, length) of every sequence."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(x) for x in cu_seqlens.cpu()]
    return [(0, cu[n], cu[n + 1] - cu[n]) for n in range(len(cu) - 1)]


def chunk_rows(B, T, BT, cu_seqlens):
    """(batch row, first token, rows) of every chunk."""
    for b, bos, length in sequences(B, T, cu_seqlens):
        for c0 in range(0, length, BT):
            yield b, bos + c0, min(BT, length - c0)


def _expand_heads(x: torch.Tensor, HV: int) -> torch.Tensor:
    """[B, T, H, K] -> [B, T, HV, K]: value head hv reads head hv / (HV / H)."""
    return x.repeat_interleave(HV // x.shape[2], dim=2)


def chunk_scores(q, k, g, beta, scale, BT, cu_seqlens=None):
    """Per chunk (b, t0, n): S_qk [HV, n, n] (full, unmasked below the diagonal only) and L [HV, n, n]
    (strictly lower), in float64."""
    B, T, H, K = q.shape
    HV = g.shape[2]
    q64 = _expand_heads(q.double(), HV)
    k64 = _expand_heads(k.double(), HV)
    g64, b64 = g.double(), beta.double()
    out = []
    for b, t0, n in chunk_rows(B, T, BT, cu_seqlens):
        qc = q64[b, t0:t0 + n].transpose(0, 1)  # [HV, n, K]
        kc = k64[b, t0:t0 + n].transpose(0, 1)
        gc = g64[b, t0:t0 + n].transpose(0, 1)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        diff = gc[:, :, None, :] - gc[:, None, :, :]  # [HV, i, j, K]
        # G(i, j) = 2^(g_i - g_j) for j <= i; the masked half is set to 0 before exp2 (no overflow)
        gate = torch.where(causal[None, :, :, None], torch.exp2(torch.where(causal[None, :, :, None], diff, 0.0)), 0.0)
        S = scale * torch.einsum("hik,hjk,hijk->hij", qc, kc, gate)
        L = torch.einsum("hik,hjk,hijk->hij", kc, kc, gate) * b64[b, t0:t0 + n].transpose(0, 1)[:, :, None]
        L = L.tril(-1)
        out.append((b, t0, n, S.tril(), L))
    return out


def inverse_unit_lower(L: torch.Tensor) -> torch.Tensor:
    """(I + L)^-1 for strictly lower L [HV, n, n]."""
    n = L.shape[-1]
    eye = torch.eye(n, dtype=torch.float64).expand_as(L)
    return torch.linalg.solve_triangular(eye + L, eye, upper=False, unitriangular=True)


def chunk_kda_intra(q, k, g, beta, scale, BT, cu_seqlens=None):
    """Exact (Aqk, Akk) [B, T, HV, BT] and the mask of the entries chunk_kda_intra writes (the
    rest holds 0: the operators start from zeros)."""
    B, T, H, K = q.shape
    HV = g.shape[2]
    Aqk = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    Akk = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    for b, t0, n, S, L in chunk_scores(q, k, g, beta, scale, BT, cu_seqlens):
        Aqk[b, t0:t0 + n, :, :n] = S.transpose(0, 1)
        Akk[b, t0:t0 + n, :, :n] = inverse_unit_lower(L).transpose(0, 1)
    return Aqk, Akk


def wy_outputs(q, k, v, g, beta, BT, cu_seqlens=None):
    """Exact (w, u, qg, kg) of chunk_kda_fwd_intra in float64: with A = (I + L)^-1 of each chunk,
    w = A (beta k 2^g), u = A (beta v), qg = q 2^g, kg = k 2^(g_last - g)."""
    B, T, H, K = q.shape
    HV, V = g.shape[2], v.shape[-1]
    q64, k64 = _expand_heads(q.double(), HV), _expand_heads(k.double(), HV)
    g64, b64, v64 = g.double(), beta.double(), v.double()
    w = torch.zeros(B, T, HV, K, dtype=torch.float64)
    u = torch.zeros(B, T, HV, V, dtype=torch.float64)
    kg = torch.zeros_like(w)
    for b, t0, n, _, L in chunk_scores(q, k, g, beta, 1.0, BT, cu_seqlens):
        A = inverse_unit_lower(L)  # [HV, n, n]
        rows = slice(t0, t0 + n)
        bc = b64[b, rows].transpose(0, 1)[:, :, None]  # [HV, n, 1]
        gc = g64[b, rows].transpose(0, 1)
        kb = k64[b, rows].transpose(0, 1) * bc * torch.exp2(gc)
        w[b, rows] = (A @ kb).transpose(0, 1)
        u[b, rows] = (A @ (v64[b, rows].transpose(0, 1) * bc)).transpose(0, 1)
        kg[b, rows] = k64[b, rows] * torch.exp2(g64[b, t0 + n - 1][None] - g64[b, rows])
    return w, u, q64 * torch.exp2(g64), kg


def diagonal_blocks(q, k, g, beta, scale, BT, safe_gate, cu_seqlens=None, BC=16):
    """The producer's outputs in float64: Akkd [B, T, HV, BC] (L_ss rows, or (I + L_ss)^-1 rows in
    safe-gate mode) and the diagonal blocks of Aqk [B, T, HV, BT] (zeros elsewhere)."""
    B, T, H, K = q.shape
    HV = g.shape[2]
    Akkd = torch.zeros(B, T, HV, BC, dtype=torch.float64)
    Aqk = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    for b, t0, n, S, L in chunk_scores(q, k, g, beta, scale, BT, cu_seqlens):
        for s0 in range(0, n, BC):
            m = min(BC, n - s0)
            Lss = L[:, s0:s0 + m, s0:s0 + m]
            block = inverse_unit_lower(Lss) if safe_gate else Lss
            Akkd[b, t0 + s0:t0 + s0 + m, :, :m] = block.transpose(0, 1)
            Aqk[b, t0 + s0:t0 + s0 + m, :, s0:s0 + m] = S[:, s0:s0 + m, s0:s0 + m].transpose(0, 1)
    return Akkd, Aqk


def inter_solve(q, k, g, beta, Akkd, scale, BT, safe_gate, cu_seqlens=None, BC=16):
    """Exact outputs of the inter-solve step given the producer's Akkd (as the kernel reads it):
    (Aqk off-diagonal blocks, mask of them, Akk, mask of its lower block triangle)."""
    B, T, H, K = q.shape
    HV = g.shape[2]
    Aqk = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    Akk = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    aqk_mask = torch.zeros(B, T, HV, BT, dtype=torch.bool)
    akk_mask = torch.zeros(B, T, HV, BT, dtype=torch.bool)
    A = Akkd.double()
    for b, t0, n, S, L in chunk_scores(q, k, g, beta, scale, BT, cu_seqlens):
        si = torch.arange(n) // BC
        below = si[:, None] > si[None, :]
        lower_blocks = si[:, None] >= si[None, :]
        # the diagonal blocks of L come from Akkd (safe gate: from the given inverses)
        Lfull = torch.where(below, L, torch.zeros((), dtype=torch.float64))
        for s0 in range(0, n, BC):
            m = min(BC, n - s0)
            blk = A[b, t0 + s0:t0 + s0 + m, :, :m].transpose(0, 1)
            if safe_gate:
                eye = torch.eye(m, dtype=torch.float64).expand_as(blk)
                blk = torch.linalg.solve_triangular(blk, eye, upper=False) - eye
            Lfull[:, s0:s0 + m, s0:s0 + m] = blk.tril(-1)
        Aqk[b, t0:t0 + n, :, :n] = torch.where(below, S, 0.0).transpose(0, 1)
        Akk[b, t0:t0 + n, :, :n] = inverse_unit_lower(Lfull).transpose(0, 1)
        aqk_mask[b, t0:t0 + n, :, :n] = below[:, None, :]
        akk_mask[b, t0:t0 + n, :, :n] = lower_blocks[:, None, :]
    return Aqk, aqk_mask, Akk, akk_mask


def log_decays(g, activation=None, A_log=None, dt_bias=None, lower_bound=-5.0):
    """Per-token log-decays (natural log) in float64, after KDA's gate activation."""
    x = g.double()
    HV, K = g.shape[2], g.shape[3]
    if activation is None:
        return x
    if dt_bias is not None:
        x = x + dt_bias.double().reshape(HV, K)
    if activation == "kda":
        return -torch.exp(A_log.double())[:, None] * torch.nn.functional.softplus(x)
    a = torch.exp(A_log.double())[:, None] if A_log is not None else 1.0
    return lower_bound * torch.sigmoid(a * x)


def chunk_local_cumsum(g, BT, scale=1.0 / math.log(2.0), cu_seqlens=None, **activation):
    B, T = g.shape[:2]
    x = log_decays(g, **activation)
    out = torch.zeros_like(x)
    for b, t0, n in chunk_rows(B, T, BT, cu_seqlens):
        out[b, t0:t0 + n] = x[b, t0:t0 + n].cumsum(0) * scale
    return out


def rel_errors(out: torch.Tensor, exact: torch.Tensor, mask: torch.Tensor | None = None):
    """(err, floor): relative RMS error of `out` and of exact rounded once to out's dtype, over the
    masked entries (absolute RMS when every exact value there is 0)."""
    if mask is None:
        mask = torch.ones_like(exact, dtype=torch.bool)
    x = exact[mask]
    y = out.double()[mask]
    r = x.to(out.dtype).double()
    den = (x * x).sum()
    den = den if den > 0 else torch.tensor(float(max(x.numel(), 1)), dtype=torch.float64)
    err = math.sqrt(float(((y - x) ** 2).sum() / den))
    floor = math.sqrt(float(((r - x) ** 2).sum() / den))
    return err, floor
