"""kda's torch operators (namespace `kda`) on top of libkda_c, and the Python functions that call
them. The operators are defined with torch.library's schema API (define, impl per device,
register_fake), which costs less per call than a torch.library.custom_op wrapper (docs/PYTORCH.md,
"Binding"). They are not differentiable: the Autograd key falls through, so their outputs never
require grad (FLA's chunk_kda backward has its own kernels and reads the saved Aqk / Akk).

CPU tensors run kda's CPU backend (Eigen, torch.get_num_threads() workers); CUDA tensors run the
CUDA backend on the current stream of their device, with no host synchronisation (see _lib.host_copy
for varlen offsets) and no allocation besides the outputs. Every operator has a fake
implementation, so torch.compile traces it without a graph break.
"""

from __future__ import annotations

import contextlib
import math

import torch

from . import _lib

_PRECISIONS = {"fp32": 0, "tf32": 1}
_library = torch.library.Library("kda", "DEF")


def _define(schema: str, impl, fake) -> None:
    """Defines kda::<name> with `impl` for CPU and CUDA tensors and `fake` for tracing."""
    name = schema.split("(", 1)[0]
    _library.define(schema)
    for key in ("CPU", "CUDA"):
        _library.impl(name, impl, key)
    _library.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"kda::{name}", fake, lib=_library)


_ACTIVATIONS = {None: 0, "none": 0, "kda": 1, "kda_lower_bound": 2}


def _backend_words(x: torch.Tensor, fn: str, name: str = "q") -> tuple[int, int, int]:
    """(device code, stream, threads) for tensors on x's device."""
    if x.device.type == "cpu":
        return _lib.DEVICE_CPU, 0, torch.get_num_threads()
    if x.device.type == "cuda":
        return _lib.DEVICE_CUDA, torch.cuda.current_stream(x.device).cuda_stream, 0
    raise ValueError(f"{fn}: argument '{name}': expected a CPU or CUDA tensor, got device {x.device}")


def _device_of(x: torch.Tensor):
    """A guard making x's CUDA device current for the call (kda checks pointers against it)."""
    if x.device.type == "cuda" and torch.cuda.current_device() != x.device.index:
        return torch.cuda.device(x.device)
    return contextlib.nullcontext()


def _header(op: int, q: torch.Tensor, k: torch.Tensor, HV: int, chunk_size: int, safe_gate: bool, tf32: bool, fn: str,
            fuse: bool = True) -> list[int]:
    device, stream, threads = _backend_words(q, fn)
    B, T, H, K = _sizes(q, k)
    h = [0] * _lib.HEADER
    h[_lib.H_OP], h[_lib.H_DEVICE] = op, device
    h[_lib.H_B], h[_lib.H_T], h[_lib.H_H], h[_lib.H_HV], h[_lib.H_K] = B, T, H, HV, K
    h[_lib.H_BT], h[_lib.H_SAFE_GATE], h[_lib.H_TF32] = chunk_size, int(safe_gate), int(tf32)
    h[_lib.H_THREADS], h[_lib.H_STREAM], h[_lib.H_FUSE] = threads, stream, int(fuse)
    return h


def _sizes(q: torch.Tensor, k: torch.Tensor) -> tuple[int, int, int, int]:
    """(B, T, H, K) of the problem: q's extents, or k's when q is not [B, T, H, K], so that kda's
    check of q's shape names q."""
    for t in (q, k):
        if t.dim() == 4:
            return tuple(t.shape)
    return 0, 0, 0, 0


def _score_shape(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, chunk_size: int) -> list[int]:
    """[B, T, HV, BT]: the shape of Aqk and Akk (kda checks the inputs' shapes)."""
    B, T, H, _ = _sizes(q, k)
    # an unsupported chunk size allocates nothing: kda refuses it before anything is written
    return [B, T, g.shape[2] if g.dim() == 4 else H, chunk_size if chunk_size in (32, 64) else 0]


def _index_slots(cu_seqlens, chunk_indices, cu_seqlens_cpu, chunk_indices_cpu) -> dict:
    return {
        _lib.T_CU_SEQLENS: cu_seqlens,
        _lib.T_CHUNK_INDICES: chunk_indices,
        _lib.T_CU_SEQLENS_HOST: _lib.host_copy(cu_seqlens, cu_seqlens_cpu),
        _lib.T_CHUNK_INDICES_HOST: _lib.host_copy(chunk_indices, chunk_indices_cpu),
    }


# ---------------------------------------------------------------------------------------------
# kda::chunk_kda_intra


_INDEX_ARGS = "Tensor? cu_seqlens, Tensor? chunk_indices, Tensor? cu_seqlens_cpu, Tensor? chunk_indices_cpu"


def _chunk_kda_intra_impl(q, k, g, beta, scale, chunk_size, safe_gate, tf32, cu_seqlens, chunk_indices,
                          cu_seqlens_cpu, chunk_indices_cpu):
    fn = "kda.chunk_kda_intra"
    shape = _score_shape(q, k, g, chunk_size)
    Aqk = torch.zeros(shape, dtype=q.dtype, device=q.device)
    Akk = torch.zeros(shape, dtype=q.dtype, device=q.device)
    tensors = {_lib.T_Q: q, _lib.T_K: k, _lib.T_G: g, _lib.T_BETA: beta, _lib.T_AQK: Aqk, _lib.T_AKK: Akk}
    tensors.update(_index_slots(cu_seqlens, chunk_indices, cu_seqlens_cpu, chunk_indices_cpu))
    with _device_of(q):
        _lib.run(_header(_lib.OP_INTRA, q, k, shape[2], chunk_size, safe_gate, tf32, fn), tensors, scale, fn=fn)
    return Aqk, Akk


def _chunk_kda_intra_fake(q, k, g, beta, scale, chunk_size, safe_gate, tf32, cu_seqlens, chunk_indices,
                          cu_seqlens_cpu, chunk_indices_cpu):
    shape = _score_shape(q, k, g, chunk_size)
    return q.new_empty(shape), q.new_empty(shape)


_define("chunk_kda_intra(Tensor q, Tensor k, Tensor g, Tensor beta, float scale, int chunk_size, bool safe_gate, "
        f"bool tf32, {_INDEX_ARGS}) -> (Tensor Aqk, Tensor Akk)", _chunk_kda_intra_impl, _chunk_kda_intra_fake)


def chunk_kda_intra(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    scale: float | None = None, *, chunk_size: int = 64, safe_gate: bool = False,
                    precision: str = "fp32", cu_seqlens: torch.Tensor | None = None,
                    chunk_indices: torch.Tensor | None = None, cu_seqlens_cpu: torch.Tensor | None = None,
                    chunk_indices_cpu: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole intra-chunk stage: (Aqk, Akk) from q, k [B, T, H, K], g [B, T, HV, K] (fp32, the
    chunk-local cumsum of the log-decays in log2 space, as FLA's chunk_kda passes it) and
    beta [B, T, HV].

    Aqk holds the gated causal scores on the lower triangle of each chunk (diagonal blocks
    included), Akk = (I + L)^-1 on its lower block triangle; both [B, T, HV, chunk_size] in q's
    dtype, zeros elsewhere. scale defaults to K^-0.5. precision: "fp32" (every product accurate to
    fp32) or "tf32" (FLA's tensor-core products; the CPU computes both at fp32). Varlen: B == 1 and
    cu_seqlens [N + 1] (int32/int64); chunk_indices [NT, 2] optional. On CUDA, pass the host copies
    cu_seqlens_cpu / chunk_indices_cpu to avoid the one-off host synchronisation of a varlen call.
    Raises ValueError naming the argument that kda refuses.
    """
    if precision not in _PRECISIONS:
        raise ValueError(f"kda.chunk_kda_intra: argument 'precision': expected 'fp32' or 'tf32', got {precision!r}")
    if scale is None:
        scale = _lib.default_scale(q.shape[-1])
    return torch.ops.kda.chunk_kda_intra(q, k, g, beta, float(scale), int(chunk_size), bool(safe_gate),
                            _PRECISIONS[precision] == 1, cu_seqlens, chunk_indices, cu_seqlens_cpu,
                            chunk_indices_cpu)


# ---------------------------------------------------------------------------------------------
# kda::chunk_kda_fwd_intra: the stage plus its WY outputs (FLA's dispatch point of the same name)


def _wy_shapes(q, k, v, g, chunk_size):
    """[B, T, HV, K] (w, kg, qg) and [B, T, HV, V] (u); kda checks the inputs' shapes."""
    B, T, HV, _ = _score_shape(q, k, g, chunk_size)
    K = _sizes(q, k)[3]
    return [B, T, HV, K], [B, T, HV, v.shape[-1] if v.dim() == 4 else 0]


def _chunk_kda_fwd_intra_impl(q, k, v, g, beta, scale, chunk_size, safe_gate, tf32, store_qg, cu_seqlens, chunk_indices,
                              cu_seqlens_cpu, chunk_indices_cpu):
    fn = "kda.chunk_kda_fwd_intra"
    shape = _score_shape(q, k, g, chunk_size)
    wk, wv = _wy_shapes(q, k, v, g, chunk_size)
    Aqk = torch.zeros(shape, dtype=q.dtype, device=q.device)
    Akk = torch.zeros(shape, dtype=q.dtype, device=q.device)
    # every row lies in a sequence (kda checks cu_seqlens ends at T), so w, u, kg, qg are written in full
    w = torch.empty(wk, dtype=q.dtype, device=q.device)
    kg = torch.empty(wk, dtype=q.dtype, device=q.device)
    u = torch.empty(wv, dtype=q.dtype, device=q.device)
    qg = torch.empty(wk if store_qg else [0], dtype=q.dtype, device=q.device)
    tensors = {_lib.T_Q: q, _lib.T_K: k, _lib.T_G: g, _lib.T_BETA: beta, _lib.T_AQK: Aqk, _lib.T_AKK: Akk, _lib.T_V: v,
               _lib.T_W: w, _lib.T_U: u, _lib.T_KG: kg, _lib.T_QG: qg if store_qg else None}
    tensors.update(_index_slots(cu_seqlens, chunk_indices, cu_seqlens_cpu, chunk_indices_cpu))
    h = _header(_lib.OP_INTRA, q, k, shape[2], chunk_size, safe_gate, tf32, fn)
    h[_lib.H_V] = wv[3]
    with _device_of(q):
        _lib.run(h, tensors, scale, fn=fn)
    return w, u, qg, kg, Aqk, Akk


def _chunk_kda_fwd_intra_fake(q, k, v, g, beta, scale, chunk_size, safe_gate, tf32, store_qg, cu_seqlens, chunk_indices,
                              cu_seqlens_cpu, chunk_indices_cpu):
    shape = _score_shape(q, k, g, chunk_size)
    wk, wv = _wy_shapes(q, k, v, g, chunk_size)
    return (q.new_empty(wk), q.new_empty(wv), q.new_empty(wk if store_qg else [0]), q.new_empty(wk), q.new_empty(shape),
            q.new_empty(shape))


_define("chunk_kda_fwd_intra(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, float scale, int chunk_size, "
        f"bool safe_gate, bool tf32, bool store_qg, {_INDEX_ARGS}) -> (Tensor w, Tensor u, Tensor qg, Tensor kg, "
        "Tensor Aqk, Tensor Akk)", _chunk_kda_fwd_intra_impl, _chunk_kda_fwd_intra_fake)


def chunk_kda_fwd_intra(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        scale: float | None = None, *, chunk_size: int = 64, safe_gate: bool = False,
                        precision: str = "fp32", store_qg: bool = False, cu_seqlens: torch.Tensor | None = None,
                        chunk_indices: torch.Tensor | None = None, cu_seqlens_cpu: torch.Tensor | None = None,
                        chunk_indices_cpu: torch.Tensor | None = None):
    """The intra stage and its WY outputs in one call, FLA's chunk_kda_fwd_intra:
    (w, u, qg, kg, Aqk, Akk) from q, k [B, T, H, K], v [B, T, HV, V] (q's dtype), g, beta as for
    chunk_kda_intra.

    With A = Akk = (I + L)^-1 before its rounding to q's dtype: w = A (beta k 2^g) and
    kg = k 2^(g_last - g) [B, T, HV, K], u = A (beta v) [B, T, HV, V], and, when store_qg,
    qg = q 2^g (else None); g_last is the gate of the chunk's last row. Aqk and Akk as
    chunk_kda_intra returns them. On CUDA one kernel forms all of them.
    """
    if precision not in _PRECISIONS:
        raise ValueError(f"kda.chunk_kda_fwd_intra: argument 'precision': expected 'fp32' or 'tf32', got {precision!r}")
    if scale is None:
        scale = _lib.default_scale(q.shape[-1])
    w, u, qg, kg, Aqk, Akk = torch.ops.kda.chunk_kda_fwd_intra(q, k, v, g, beta, float(scale), int(chunk_size), bool(safe_gate),
                                                               _PRECISIONS[precision] == 1, bool(store_qg), cu_seqlens,
                                                               chunk_indices, cu_seqlens_cpu, chunk_indices_cpu)
    return w, u, qg if store_qg else None, kg, Aqk, Akk


# ---------------------------------------------------------------------------------------------
# kda::inter_solve


def _inter_solve_impl(q, k, g, beta, Akkd, Aqk, scale, chunk_size, safe_gate, tf32, cu_seqlens, chunk_indices,
                     cu_seqlens_cpu, chunk_indices_cpu):
    fn = "kda.inter_solve"
    shape = _score_shape(q, k, g, chunk_size)
    Akk = torch.zeros(shape, dtype=q.dtype, device=q.device)
    tensors = {_lib.T_Q: q, _lib.T_K: k, _lib.T_G: g, _lib.T_BETA: beta, _lib.T_AKKD: Akkd, _lib.T_AQK: Aqk,
               _lib.T_AKK: Akk}
    tensors.update(_index_slots(cu_seqlens, chunk_indices, cu_seqlens_cpu, chunk_indices_cpu))
    with _device_of(q):
        _lib.run(_header(_lib.OP_INTER_SOLVE, q, k, shape[2], chunk_size, safe_gate, tf32, fn), tensors, scale, fn=fn)
    return Akk


def _inter_solve_fake(q, k, g, beta, Akkd, Aqk, scale, chunk_size, safe_gate, tf32, cu_seqlens, chunk_indices,
                     cu_seqlens_cpu, chunk_indices_cpu):
    return q.new_empty(_score_shape(q, k, g, chunk_size))


_define("inter_solve(Tensor q, Tensor k, Tensor g, Tensor beta, Tensor Akkd, Tensor(a!) Aqk, float scale, "
        f"int chunk_size, bool safe_gate, bool tf32, {_INDEX_ARGS}) -> Tensor Akk", _inter_solve_impl,
        _inter_solve_fake)


def inter_solve(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, Akkd: torch.Tensor,
                Aqk: torch.Tensor, scale: float | None = None, *, chunk_size: int = 64, safe_gate: bool = False,
                precision: str = "fp32", cu_seqlens: torch.Tensor | None = None,
                chunk_indices: torch.Tensor | None = None, cu_seqlens_cpu: torch.Tensor | None = None,
                chunk_indices_cpu: torch.Tensor | None = None) -> torch.Tensor:
    """The inter-subchunk + solve step alone (FLA's chunk_kda_fwd_kernel_inter_solve_fused), given
    the producer's diagonal blocks Akkd [B, T, HV, 16] (fp32): writes Aqk's blocks below the
    diagonal blocks in place and returns Akk = (I + L)^-1 (lower block triangle, zeros above).
    Arguments as for chunk_kda_intra.
    """
    if precision not in _PRECISIONS:
        raise ValueError(f"kda.inter_solve: argument 'precision': expected 'fp32' or 'tf32', got {precision!r}")
    if scale is None:
        scale = _lib.default_scale(q.shape[-1])
    return torch.ops.kda.inter_solve(q, k, g, beta, Akkd, Aqk, float(scale), int(chunk_size), bool(safe_gate),
                        _PRECISIONS[precision] == 1, cu_seqlens, chunk_indices, cu_seqlens_cpu, chunk_indices_cpu)


# ---------------------------------------------------------------------------------------------
# kda::chunk_local_cumsum


def _chunk_local_cumsum_impl(g, chunk_size, scale, activation, A_log, dt_bias, lower_bound, cu_seqlens,
                             cu_seqlens_cpu):
    fn = "kda.chunk_local_cumsum"
    out = torch.empty(g.shape, dtype=torch.float64 if g.dtype == torch.float64 else torch.float32, device=g.device)
    device, stream, threads = _backend_words(g, fn, "g")
    h = [0] * _lib.HEADER
    B, T, HV, K = (list(g.shape) if g.dim() == 4 else [0, 0, 0, 0])
    h[_lib.H_OP], h[_lib.H_DEVICE], h[_lib.H_STREAM], h[_lib.H_THREADS] = _lib.OP_CUMSUM, device, stream, threads
    h[_lib.H_B], h[_lib.H_T], h[_lib.H_HV], h[_lib.H_K], h[_lib.H_H] = B, T, HV, K, 1
    h[_lib.H_BT], h[_lib.H_ACTIVATION] = chunk_size, activation
    tensors = {_lib.T_G: g, _lib.T_A_LOG: A_log, _lib.T_DT_BIAS: dt_bias, _lib.T_G_OUT: out,
               _lib.T_CU_SEQLENS: cu_seqlens, _lib.T_CU_SEQLENS_HOST: _lib.host_copy(cu_seqlens, cu_seqlens_cpu)}
    with _device_of(g):
        _lib.run(h, tensors, scale, lower_bound, fn=fn)
    return out


def _chunk_local_cumsum_fake(g, chunk_size, scale, activation, A_log, dt_bias, lower_bound, cu_seqlens,
                             cu_seqlens_cpu):
    return g.new_empty(g.shape, dtype=torch.float64 if g.dtype == torch.float64 else torch.float32)


_define("chunk_local_cumsum(Tensor g, int chunk_size, float scale, int activation, Tensor? A_log, Tensor? dt_bias, "
        "float lower_bound, Tensor? cu_seqlens, Tensor? cu_seqlens_cpu) -> Tensor", _chunk_local_cumsum_impl,
        _chunk_local_cumsum_fake)


def chunk_local_cumsum(g: torch.Tensor, chunk_size: int = 64, *, scale: float | None = None,
                       activation: str | None = None, A_log: torch.Tensor | None = None,
                       dt_bias: torch.Tensor | None = None, lower_bound: float = -5.0,
                       cu_seqlens: torch.Tensor | None = None, chunk_indices: torch.Tensor | None = None,
                       cu_seqlens_cpu: torch.Tensor | None = None) -> torch.Tensor:
    """Chunk-local cumulative sums of per-token log-decays g [B, T, HV, K], times scale (default
    1 / ln 2: the log2-space g that chunk_kda_intra takes), restarting at every chunk and sequence
    start. Returns fp32 (fp64 for fp64 g).

    activation applies KDA's gate first: None (g holds log-decays), "kda"
    (-exp(A_log[hv]) softplus(g + dt_bias[hv, k]); A_log [HV] required) or "kda_lower_bound"
    (lower_bound sigmoid(exp(A_log[hv]) (g + dt_bias)), FLA's safe gate; A_log optional).
    A_log / dt_bias ([HV * K] or [HV, K]) are fp32 (fp64 with fp64 g). chunk_indices is accepted
    for FLA's signature and not needed: the sums restart at the starts that cu_seqlens gives.
    """
    if activation not in _ACTIVATIONS:
        raise ValueError("kda.chunk_local_cumsum: argument 'activation': expected None, 'kda' or "
                         f"'kda_lower_bound', got {activation!r}")
    if dt_bias is not None and dt_bias.dim() == 2:
        dt_bias = dt_bias.reshape(-1)
    del chunk_indices
    return torch.ops.kda.chunk_local_cumsum(g, int(chunk_size), float(1.0 / math.log(2.0) if scale is None else scale),
                               _ACTIVATIONS[activation], A_log, dt_bias, float(lower_bound), cu_seqlens,
                               cu_seqlens_cpu)
