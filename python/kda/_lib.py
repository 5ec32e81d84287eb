"""ctypes binding of libkda_c (python/csrc/kda_c.h): one C call per kda operation.

The call is a flat list of int64 words, converted in one step (the layout is kda_c.h's; keep the
two in step). Nothing here checks arguments: kda's C++ entry points validate every one and their
message, naming the argument, comes back as a ValueError (refused argument) or RuntimeError
(failed CUDA call, or a build without the requested backend).
"""

from __future__ import annotations

import array
import ctypes
import math
import os
import sys
import weakref
from pathlib import Path

import torch

# ---- kda_c.h
OK, BAD_ARGUMENT, RUNTIME_ERROR, NO_BACKEND = 0, 1, 2, 3
OP_INTRA, OP_INTER_SOLVE, OP_CUMSUM, OP_INTRA_DIAG = 0, 1, 2, 3
DEVICE_CPU, DEVICE_CUDA = 0, 1
(H_OP, H_DEVICE, H_B, H_T, H_H, H_HV, H_K, H_BT, H_SAFE_GATE, H_TF32, H_ACTIVATION, H_THREADS, H_STREAM,
 H_FUSE, H_V, HEADER) = range(16)
(T_Q, T_K, T_G, T_BETA, T_AKKD, T_AQK, T_AKK, T_CU_SEQLENS, T_CHUNK_INDICES, T_CU_SEQLENS_HOST,
 T_CHUNK_INDICES_HOST, T_A_LOG, T_DT_BIAS, T_G_OUT, T_V, T_W, T_U, T_KG, T_QG, SLOTS) = range(20)
TENSOR = 11
WORDS = HEADER + SLOTS * TENSOR
ABI_VERSION = 3

_DTYPE_CODE = {
    torch.bfloat16: 0,
    torch.float16: 1,
    torch.float32: 2,
    torch.float64: 3,
    torch.int32: 4,
    torch.int64: 5,
}
_ABSENT = [0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0]


def _find_library() -> Path:
    """libkda_c next to this file (installed package), or KDA_LIBRARY (a build tree's copy)."""
    explicit = os.environ.get("KDA_LIBRARY")
    if explicit:
        return Path(explicit)
    name = "libkda_c.dylib" if sys.platform == "darwin" else "libkda_c.so"
    return Path(__file__).with_name(name)


def _open(path: Path) -> ctypes.CDLL:
    """Loads one of the package's libraries and checks its C ABI version."""
    lib = ctypes.CDLL(str(path))
    # the words and the message buffer travel as addresses (array.array and ctypes buffers)
    lib.kda_c_run.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_double, ctypes.c_void_p,
                              ctypes.c_int64]
    lib.kda_c_run.restype = ctypes.c_int
    lib.kda_c_has_cuda.restype = ctypes.c_int
    lib.kda_c_abi_version.restype = ctypes.c_int
    if lib.kda_c_abi_version() != ABI_VERSION:
        raise ImportError(f"kda: {path} has C ABI version {lib.kda_c_abi_version()}, this package expects "
                          f"{ABI_VERSION}: reinstall the package")
    lib.kda_c_cpu_level.restype = ctypes.c_int
    return lib


def _load() -> ctypes.CDLL:
    path = _find_library()
    if not path.exists():
        raise ImportError(
            f"kda: the compiled library {path} is missing: install the package with `pip install .` "
            "from the repository root, or point KDA_LIBRARY at a build tree's libkda_c.so"
        )
    return _open(path)


_lib = _load()
_run = _lib.kda_c_run

# ---- the CPU library: libkda_c's CPU half built for a higher x86-64 level, where this CPU runs it
CPU_LEVELS = {"baseline": 0, "x86-64-v3": 3, "x86-64-v4": 4}


def cpu_library_path(level: str) -> Path:
    """Where the package keeps the CPU library of `level` (libkda_c itself for "baseline")."""
    if level == "baseline":
        return _find_library()
    base = _find_library()
    return base.with_name(f"libkda_c_{level.replace('-', '_')}{base.suffix}")


def load_cpu_library(level: str) -> ctypes.CDLL:
    """Loads the CPU library of `level`; ImportError when this CPU cannot run it or it was not built."""
    if level not in CPU_LEVELS:
        raise ImportError(f"kda: unknown CPU level {level!r}: expected one of {', '.join(CPU_LEVELS)}")
    if level == "baseline":
        return _lib
    cpu = _lib.kda_c_cpu_level()
    if cpu < CPU_LEVELS[level]:
        raise ImportError(f"kda: this CPU does not run {level} code (it runs x86-64 level {cpu or 'baseline'})")
    path = cpu_library_path(level)
    if not path.exists():
        raise ImportError(f"kda: {path} was not built (x86-64 with GCC or Clang only, KDA_PYTHON_CPU_LEVELS=ON)")
    return _open(path)


def _choose_cpu_library() -> tuple[str, ctypes.CDLL]:
    """KDA_CPU_LEVEL if set (an error if this CPU or build cannot honour it), else the highest
    level that this CPU runs and the package holds."""
    forced = os.environ.get("KDA_CPU_LEVEL")
    if forced:
        return forced, load_cpu_library(forced)
    for level in ("x86-64-v4", "x86-64-v3"):
        try:
            return level, load_cpu_library(level)
        except ImportError:
            continue
    return "baseline", _lib


_cpu_level, _cpu_lib = _choose_cpu_library()
_cpu_run = _cpu_lib.kda_c_run


def has_cuda() -> bool:
    """Whether the compiled library has the CUDA backend."""
    return bool(_lib.kda_c_has_cuda())


def cpu_level() -> str:
    """The x86-64 level of the code that runs kda's CPU calls: "baseline", "x86-64-v3" or "x86-64-v4"."""
    return _cpu_level


def describe(t: torch.Tensor | None, slot: int, fn: str) -> list[int]:
    """The 11 words of one tensor slot (absent: dtype -1). A dtype or rank that kda_c.h cannot
    carry is refused here, naming the argument; everything else is kda's to check."""
    if t is None:
        return _ABSENT
    code = _DTYPE_CODE.get(t.dtype)
    if code is None:
        raise ValueError(f"{fn}: argument '{_SLOT_NAMES[slot]}': unsupported dtype {t.dtype}")
    rank = t.dim()
    if rank > 4:
        raise ValueError(f"{fn}: argument '{_SLOT_NAMES[slot]}': expected at most 4 dimensions, got {rank}")
    pad = _PAD[4 - rank]
    return [t.data_ptr(), code, rank, *t.shape, *pad, *t.stride(), *pad]


_EMPTY_SLOTS = array.array("q", _ABSENT * SLOTS)
_HOST_SLOTS = (T_CU_SEQLENS_HOST, T_CHUNK_INDICES_HOST)
_PAD = [[0] * n for n in range(5)]


def run(header: list[int], tensors: dict[int, torch.Tensor | None], scale: float, lower_bound: float = -5.0,
        fn: str = "kda") -> None:
    """Runs one call; raises ValueError / RuntimeError with kda's message on failure."""
    buf = array.array("q", header)
    buf.extend(_EMPTY_SLOTS)
    on_cpu = header[H_DEVICE] == DEVICE_CPU
    for s, t in tensors.items():
        if t is None:
            continue
        # what kda cannot see: where a pointer lives. The CPU backend and the host copies of the
        # index tensors are read on the host (the CUDA backend checks its own pointers).
        if (on_cpu or s in _HOST_SLOTS) and t.device.type != "cpu":
            raise ValueError(f"{fn}: argument '{_SLOT_NAMES[s]}': expected a CPU tensor"
                             f"{' like the other inputs' if on_cpu else ''}, got one on {t.device}")
        at = HEADER + s * TENSOR
        buf[at:at + TENSOR] = array.array("q", describe(t, s, fn))
    err = ctypes.create_string_buffer(1024)
    code = (_cpu_run if on_cpu else _run)(buf.buffer_info()[0], WORDS, scale, lower_bound, ctypes.addressof(err), 1024)
    if code == OK:
        return
    message = err.value.decode("utf-8", "replace")
    if code == BAD_ARGUMENT:
        raise ValueError(message)
    raise RuntimeError(message)


_SLOT_NAMES = {
    T_Q: "q", T_K: "k", T_G: "g", T_BETA: "beta", T_AKKD: "Akkd", T_AQK: "Aqk", T_AKK: "Akk",
    T_CU_SEQLENS: "cu_seqlens", T_CHUNK_INDICES: "chunk_indices", T_CU_SEQLENS_HOST: "cu_seqlens_cpu",
    T_CHUNK_INDICES_HOST: "chunk_indices_cpu", T_A_LOG: "A_log", T_DT_BIAS: "dt_bias", T_G_OUT: "g_out",
    T_V: "v", T_W: "w", T_U: "u", T_KG: "kg", T_QG: "qg",
}


# ---- host copies of device index tensors
# The CUDA backend validates cu_seqlens / chunk_indices from host copies and never copies them
# itself. When the caller passes none, the operator copies the device tensor once (a host
# synchronisation) and keeps the copy for as long as that tensor object lives unmodified (its
# version counter unchanged), so repeated calls with the same offsets, and CUDA-graph capture after
# a first call, synchronise no more. Inference tensors (made under torch.inference_mode) have no
# version counter, so an in-place change to one could not be seen: their copy is made afresh on
# every call.
_host_copies: dict[int, tuple[weakref.ref, int, int, torch.Tensor]] = {}


def host_copy(t: torch.Tensor | None, given: torch.Tensor | None) -> torch.Tensor | None:
    """The host copy of device index tensor `t`: `given` when the caller passed one, else a cached
    copy (see above). CPU tensors need none."""
    if t is None or given is not None or t.device.type == "cpu":
        return given
    if t.is_inference():
        return t.to("cpu")
    hit = _host_copies.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == t._version and hit[2] == t.data_ptr():
        return hit[3]
    copy = t.to("cpu")
    key = id(t)
    _host_copies[key] = (weakref.ref(t, lambda _r, k=key: _host_copies.pop(k, None)), t._version, t.data_ptr(), copy)
    return copy


def default_scale(K: int) -> float:
    return 1.0 / math.sqrt(K)
