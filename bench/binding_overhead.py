"""Python-side cost of one kda operator call, by binding: what the package does (a torch-free C
library through ctypes, operators from torch.library's schema API), the same behind
torch.library.custom_op, a torch C++ extension (TORCH_LIBRARY, compiled here with
torch.utils.cpp_extension.load_inline) calling the same C entry point, and the bare ctypes call.

Each call is a valid no-op (T = 0: kda validates every argument, allocates the two empty outputs
and launches nothing), so the time is the binding's and the validation's alone. Median of
--repeats runs of --calls calls each.

    python bench/binding_overhead.py [--device cuda] [--skip-extension]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import kda
from kda import _lib, ops

CPP = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
#include <dlfcn.h>
#include <cstdint>
#include <vector>

namespace {
using run_fn = int (*)(const int64_t*, int64_t, double, double, char*, int64_t);
run_fn kda_run = nullptr;

void put(std::vector<int64_t>& w, const at::Tensor& t, int64_t code) {
    w.push_back(reinterpret_cast<int64_t>(t.data_ptr()));
    w.push_back(code);
    w.push_back(t.dim());
    for (int d = 0; d < 4; ++d) w.push_back(d < t.dim() ? t.size(d) : 0);
    for (int d = 0; d < 4; ++d) w.push_back(d < t.dim() ? t.stride(d) : 0);
}
int64_t code_of(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kBFloat16: return 0;
        case at::kHalf: return 1;
        case at::kFloat: return 2;
        case at::kDouble: return 3;
        default: return 250;
    }
}

std::tuple<at::Tensor, at::Tensor> intra(const at::Tensor& q, const at::Tensor& k, const at::Tensor& g, const at::Tensor& beta,
                                         double scale, int64_t BT, int64_t stream) {
    auto Aqk = at::zeros({q.size(0), q.size(1), g.size(2), BT}, q.options());
    auto Akk = at::zeros({q.size(0), q.size(1), g.size(2), BT}, q.options());
    std::vector<int64_t> w = {0, q.is_cuda() ? 1 : 0, q.size(0), q.size(1), q.size(2), g.size(2), q.size(3), BT, 0, 0, 0, 1, stream, 1};
    put(w, q, code_of(q));
    put(w, k, code_of(k));
    put(w, g, code_of(g));
    put(w, beta, code_of(beta));
    for (int i = 0; i < 11; ++i) w.push_back(i == 1 ? -1 : 0);  // Akkd absent
    put(w, Aqk, code_of(Aqk));
    put(w, Akk, code_of(Akk));
    for (int s = 0; s < 7; ++s)
        for (int i = 0; i < 11; ++i) w.push_back(i == 1 ? -1 : 0);
    char err[1024];
    const int rc = kda_run(w.data(), static_cast<int64_t>(w.size()), scale, -5.0, err, sizeof err);
    TORCH_CHECK(rc == 0, err);
    return {Aqk, Akk};
}
}  // namespace

void load_kda(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(h != nullptr, dlerror());
    kda_run = reinterpret_cast<run_fn>(dlsym(h, "kda_c_run"));
}

TORCH_LIBRARY(kda_ext, m) {
    m.def("chunk_kda_intra(Tensor q, Tensor k, Tensor g, Tensor beta, float scale, int BT, int stream) -> (Tensor, Tensor)");
    m.def("load(str path) -> ()", [](const std::string& p) { load_kda(p); });
}
TORCH_LIBRARY_IMPL(kda_ext, CPU, m) { m.impl("chunk_kda_intra", &intra); }
TORCH_LIBRARY_IMPL(kda_ext, CUDA, m) { m.impl("chunk_kda_intra", &intra); }
"""


def timed(f, calls: int, repeats: int) -> float:
    for _ in range(200):
        f()
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        runs.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--skip-extension", action="store_true", help="leave out the C++ extension (it compiles ~1 min)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    q = torch.zeros(1, 0, 2, 64, dtype=torch.bfloat16, device=dev)
    k = q.clone()
    g = torch.zeros(1, 0, 2, 64, device=dev)
    beta = torch.zeros(1, 0, 2, dtype=torch.bfloat16, device=dev)
    stream = torch.cuda.current_stream().cuda_stream if dev.type == "cuda" else 0

    rows = []
    rows.append(("kda.chunk_kda_intra (package: ctypes + torch.library schema API)",
                 timed(lambda: kda.chunk_kda_intra(q, k, g, beta), a.calls, a.repeats)))
    rows.append(("torch.ops.kda.chunk_kda_intra (the operator alone)",
                 timed(lambda: torch.ops.kda.chunk_kda_intra(q, k, g, beta, 0.125, 64, False, False, None, None, None,
                                                             None), a.calls, a.repeats)))

    @torch.library.custom_op("kda_bench::chunk_kda_intra", mutates_args=())
    def wrapped(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
                chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return ops._chunk_kda_intra_impl(q, k, g, beta, scale, chunk_size, False, False, None, None, None, None)

    rows.append(("the same implementation behind torch.library.custom_op",
                 timed(lambda: wrapped(q, k, g, beta, 0.125, 64), a.calls, a.repeats)))

    if not a.skip_extension:
        from torch.utils.cpp_extension import load_inline

        t0 = time.perf_counter()
        load_inline("kda_ext", cpp_sources=[CPP], is_python_module=False, extra_cflags=["-O2"], verbose=False)
        build_s = time.perf_counter() - t0
        torch.ops.kda_ext.load(str(_lib._find_library()))
        rows.append((f"torch C++ extension, TORCH_LIBRARY (built in {build_s:.0f} s for torch {torch.__version__})",
                     timed(lambda: torch.ops.kda_ext.chunk_kda_intra(q, k, g, beta, 0.125, 64, stream), a.calls,
                           a.repeats)))

    hdr = ops._header(_lib.OP_INTRA, q, k, 2, 64, False, False, "bench")
    Aqk = torch.zeros(1, 0, 2, 64, dtype=torch.bfloat16, device=dev)
    tensors = {_lib.T_Q: q, _lib.T_K: k, _lib.T_G: g, _lib.T_BETA: beta, _lib.T_AQK: Aqk, _lib.T_AKK: Aqk.clone()}
    rows.append(("kda's C call through ctypes, words packed per call (no dispatcher, no outputs allocated)",
                 timed(lambda: _lib.run(hdr, tensors, 0.125), a.calls, a.repeats)))

    print(f"| binding, {dev.type}, torch {torch.__version__} | us per call (median of {a.repeats} x {a.calls}) |")
    print("|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")


if __name__ == "__main__":
    main()
