"""kda as a backend of flash-linear-attention (FLA): `import kda.fla` registers it.

FLA's `chunk_kda` forward calls `chunk_kda_fwd_intra(q, k, v, gk, beta, ...) -> (w, u, qg, kg, Aqk,
Akk)` through its backend registry. This backend computes Aqk and Akk with kda's fused intra-stage
kernel and w, u, qg, kg with FLA's own `recompute_w_u_fwd` (from Akk rounded to q's dtype, as FLA
does), so training and inference go on unchanged (FLA's backward reads the Aqk / Akk this
returns). KDA_FLA_WY=1 forms w, u, qg, kg inside kda's kernel instead (kda.chunk_kda_fwd_intra,
from the unrounded Akk; slower today, docs/PYTORCH.md); a v that kda does not take (another dtype
than q, or a last dimension that is not contiguous) then still goes to FLA's recompute_w_u_fwd.

    import kda.fla            # once, before the model runs; FLA_KDA=0 in the environment turns it off
    kda.fla.stats()           # {'calls': ..., 'declined': {reason: count}}

The verifier accepts what kda's CUDA backend supports (CUDA tensors, bf16 / fp16 / fp32 q and k,
fp32 gates, chunk size 32 or 64, K 1..256, GVA, varlen, safe gate or not) and declines everything
else with a reason, so FLA falls back to its Triton kernels. kda's own validation still checks
every argument of an accepted call. The products run in the precision KDA_FLA_PRECISION names:
"tf32" (default, FLA's own mode) or "fp32".
"""

from __future__ import annotations

import collections
import inspect
import os
import threading

import torch

try:
    import fla  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without FLA
    raise ImportError("kda.fla needs flash-linear-attention (pip install fla-core)") from e

from . import _lib
from .ops import chunk_kda_fwd_intra as _kda_fwd_intra
from .ops import chunk_kda_intra

_lock = threading.Lock()
_calls = 0
_declined: collections.Counter = collections.Counter()


def stats() -> dict:
    """How often this process ran kda for FLA, and how often the verifier declined, by reason."""
    with _lock:
        return {"calls": _calls, "declined": dict(_declined)}


def reset_stats() -> None:
    global _calls
    with _lock:
        _calls = 0
        _declined.clear()


def _decline(reason: str) -> tuple[bool, str]:
    with _lock:
        _declined[reason] += 1
    return False, reason


_DATA = (torch.bfloat16, torch.float16, torch.float32)


def _precision() -> str:
    p = os.environ.get("KDA_FLA_PRECISION", "tf32")
    return p if p in ("tf32", "fp32") else "tf32"


def verify_intra(q, k, v=None, gk=None, beta=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                 safe_gate=False, **kwargs) -> tuple[bool, str | None]:
    """(accepted, reason): whether kda can run this chunk_kda_fwd_intra call."""
    if gk is None or beta is None:
        return _decline("gk and beta are required")
    if chunk_size not in (32, 64):
        return _decline(f"chunk_size {chunk_size} (kda: 32 or 64)")
    if q.dim() != 4 or k.dim() != 4 or gk.dim() != 4:
        return _decline("q, k and gk must be [B, T, H, K]")
    if not 1 <= q.shape[-1] <= 256:
        return _decline(f"K = {q.shape[-1]} (kda: 1..256)")
    if q.dtype not in _DATA or k.dtype != q.dtype:
        return _decline(f"q / k dtype {q.dtype} / {k.dtype} (kda: bf16, fp16 or fp32, both alike)")
    if gk.dtype != torch.float32:
        return _decline(f"gk dtype {gk.dtype} (kda: fp32)")
    if beta.dtype not in (q.dtype, torch.float32):
        return _decline(f"beta dtype {beta.dtype} (kda: q's dtype or fp32)")
    if gk.shape[2] % q.shape[2] != 0:
        return _decline(f"HV = {gk.shape[2]} is not a multiple of H = {q.shape[2]}")
    if cu_seqlens is not None and q.shape[0] != 1:
        return _decline("varlen with B != 1")
    for name, t in (("q", q), ("k", k), ("gk", gk), ("beta", beta)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            return _decline(f"{name} is not contiguous in its last dimension")
    if q.device.type != "cuda" or any(t.device != q.device for t in (k, gk, beta)):
        return _decline("not all tensors on one CUDA device")
    if not _lib.has_cuda():
        return _decline("this kda build has no CUDA backend")
    return True, None


def _wy_in_kernel(q, v) -> bool:
    """Whether kda forms w, u, qg, kg itself: KDA_FLA_WY=1 and kda takes v."""
    if os.environ.get("KDA_FLA_WY", "0") != "1":
        return False
    return (v is not None and v.dim() == 4 and v.dtype == q.dtype and v.device == q.device
            and (v.stride(-1) == 1 or v.shape[-1] == 1))


def chunk_kda_fwd_intra(q, k, v, gk=None, beta=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                        safe_gate=False, disable_recompute=False, **kwargs):
    """FLA's chunk_kda_fwd_intra on kda's fused intra kernel (w, u, qg, kg too, see above)."""
    global _calls
    if _wy_in_kernel(q, v):
        out = _kda_fwd_intra(q, k, v, gk, beta, scale, chunk_size=chunk_size, safe_gate=safe_gate, precision=_precision(),
                             store_qg=bool(disable_recompute), cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        with _lock:
            _calls += 1
        return out
    from fla.ops.kda.wy_fast import recompute_w_u_fwd

    Aqk, Akk = chunk_kda_intra(q, k, gk, beta, scale, chunk_size=chunk_size, safe_gate=safe_gate,
                               precision=_precision(), cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
    extra = {}
    if "use_graph" in kwargs and "use_graph" in _recompute_parameters(recompute_w_u_fwd):
        extra["use_graph"] = kwargs["use_graph"]
    w, u, qg, kg = recompute_w_u_fwd(k=k, v=v, beta=beta, A=Akk, q=q if disable_recompute else None, gk=gk,
                                     cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, **extra)
    with _lock:
        _calls += 1
    return w, u, qg, kg, Aqk, Akk


_parameters_cache: dict = {}


def _recompute_parameters(f) -> frozenset:
    if f not in _parameters_cache:
        _parameters_cache[f] = frozenset(inspect.signature(f).parameters)
    return _parameters_cache[f]


def _make_backend(base: type) -> type:
    class KdaBackend(base):
        """kda's fused intra-stage kernel behind FLA's chunk_kda_fwd_intra."""

        backend_type = "kda"
        package_name = "kda"
        env_var = "FLA_KDA"
        default_enable = True
        priority = 2  # ahead of FLA's optional backends (FlashKDA: 3) for the one call kda implements

        def chunk_kda_fwd_intra_verifier(self, *args, **kwargs):
            return verify_intra(*args, **kwargs)

        def chunk_kda_fwd_intra(self, *args, **kwargs):
            return chunk_kda_fwd_intra(*args, **kwargs)

    return KdaBackend


def _register():
    """Registers the backend with whichever registry this FLA has: `fla.ops.kda.backends.kda_registry`
    (fla.ops.backends) or the operation registry of `fla.backends` (fla-core 0.6)."""
    try:
        from fla.ops.kda.backends import kda_registry
        from fla.ops.backends import BaseBackend
    except ImportError:
        kda_registry = None
    if kda_registry is not None:
        backend = _make_backend(BaseBackend)()
        kda_registry.register(backend)
        return backend
    import fla.backends as registry

    backend_cls = _make_backend(registry.BaseBackend)
    registry._load_operation_registry("kda")  # FLA's own backends first, so the registry exists
    registry.register("kda")(backend_cls)
    return registry._get_operation_registry("kda")._backends["kda"]


backend = _register()

__all__ = ["backend", "chunk_kda_fwd_intra", "reset_stats", "stats", "verify_intra"]
