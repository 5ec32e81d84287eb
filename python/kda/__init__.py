"""kda: the intra-chunk stage of chunked Kimi Delta Attention as torch operators.

    import kda
    Aqk, Akk = kda.chunk_kda_intra(q, k, g, beta)          # CPU or CUDA tensors, FLA's layout

Operators (namespace `kda`, usable under torch.compile and CUDA graphs):
    kda.chunk_kda_intra      (q, k, g, beta) -> (Aqk, Akk)
    kda.chunk_kda_fwd_intra  (q, k, v, g, beta) -> (w, u, qg, kg, Aqk, Akk): FLA's dispatch point
    kda.chunk_local_cumsum   per-token log-decays (or KDA gate inputs) -> log2 chunk-local cumsum
    kda.inter_solve          the inter-subchunk + solve step alone, given the diagonal blocks
`import kda.fla` makes kda a backend of flash-linear-attention's chunk_kda (see docs/PYTORCH.md).
kda.cpu_level() names the x86-64 level of the CPU code in use (KDA_CPU_LEVEL chooses one).
"""

from ._lib import cpu_level, has_cuda
from .ops import chunk_kda_fwd_intra, chunk_kda_intra, chunk_local_cumsum, inter_solve

__all__ = ["chunk_kda_intra", "chunk_kda_fwd_intra", "chunk_local_cumsum", "inter_solve", "has_cuda", "cpu_level"]
__version__ = "0.1.0"
