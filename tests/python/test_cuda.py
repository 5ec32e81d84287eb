"""The operators on a CUDA device: accuracy against the float64 evaluation, CUDA-graph capture and
replay, strided views, the current stream, varlen without host synchronisation, and kda's
refusals. Skipped (visibly) without a device or without the CUDA backend in the build."""

from __future__ import annotations

import pytest
import torch
from conftest import make_inputs, requires_cuda

import kda
import reference

pytestmark = requires_cuda

U_TF32 = 2.0**-11


def check_cuda(out, exact, mask=None, precision="fp32", what=""):
    """Bounds of the CUDA backend:
      fp32 mode, bf16 / fp16 outputs: 1.05 x floor + 1e-6 (every product accurate to fp32);
      fp32 mode, fp32 outputs: 32 u_fp32 = 1.9e-6 (3xTF32 products; the C++ suite measures
          <= 8.9e-7 for the fused kernel);
      tf32 mode: 1.05 x floor + u_tf32 (one tf32 rounding of the operands, relative 2^-11)."""
    err, floor = reference.rel_errors(out.cpu(), exact, mask)
    if precision == "tf32":
        bound = 1.05 * floor + U_TF32
    elif out.dtype == torch.float32:
        bound = 32 * 2.0**-24
    else:
        bound = 1.05 * floor + 1e-6
    assert err <= bound, f"{what}: relative RMS error {err:.3e} > {bound:.3e} (floor {floor:.3e})"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("safe_gate", [False, True], ids=["notsafe", "safe"])
@pytest.mark.parametrize("BT", [64, 32])
def test_chunk_kda_intra(dtype, precision, safe_gate, BT):
    x = make_inputs(B=2, T=3 * BT + 21, H=2, HV=4, K=128, dtype=dtype, BT=BT, safe_gate=safe_gate, device="cuda")
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT,
                                   safe_gate=safe_gate, precision=precision)
    cpu = {n: v.cpu() if torch.is_tensor(v) else v for n, v in x.items()}
    eAqk, eAkk = reference.chunk_kda_intra(cpu["q"], cpu["k"], cpu["g"], cpu["beta"], x["scale"], BT)
    check_cuda(Aqk, eAqk, precision=precision, what="Aqk")
    check_cuda(Akk, eAkk, precision=precision, what="Akk")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("BT", [64, 32])
@pytest.mark.parametrize("K, V", [(128, 128), (37, 45)], ids=["K128", "K37-V45"])
def test_chunk_kda_fwd_intra(dtype, precision, BT, K, V):
    # varlen with a length-1 sequence, GVA; w, u, qg, kg against float64; Aqk, Akk the stage's bits
    cu = torch.tensor([0, 1, 2 * BT + 5, 3 * BT + 40], dtype=torch.int64)
    T = int(cu[-1])
    x = make_inputs(B=1, T=T, H=2, HV=4, K=K, dtype=dtype, BT=BT, cu_seqlens=cu, device="cuda")
    v = torch.randn(1, T, 4, V, generator=torch.Generator().manual_seed(1)).to(dtype).cuda()
    w, u, qg, kg, Aqk, Akk = kda.chunk_kda_fwd_intra(x["q"], x["k"], v, x["g"], x["beta"], chunk_size=BT, precision=precision,
                                                     store_qg=True, cu_seqlens=cu.cuda(), cu_seqlens_cpu=cu)
    cpu = {n: t.cpu() if torch.is_tensor(t) else t for n, t in x.items()}
    ew, eu, eqg, ekg = reference.wy_outputs(cpu["q"], cpu["k"], v.cpu(), cpu["g"], cpu["beta"], BT, cu_seqlens=cu)
    check_cuda(w, ew, precision=precision, what="w")
    check_cuda(u, eu, precision=precision, what="u")
    check_cuda(qg, eqg, what="qg")
    check_cuda(kg, ekg, what="kg")
    Aqk2, Akk2 = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], chunk_size=BT, precision=precision, cu_seqlens=cu.cuda(),
                                     cu_seqlens_cpu=cu)
    assert torch.equal(Aqk, Aqk2) and torch.equal(Akk, Akk2)


def test_chunk_kda_fwd_intra_graph_replay_is_bit_identical():
    x = make_inputs(B=2, T=150, H=2, K=64, device="cuda")
    v = torch.randn(2, 150, 2, 64, device="cuda").to(torch.bfloat16)
    call = lambda: kda.chunk_kda_fwd_intra(x["q"], x["k"], v, x["g"], x["beta"], precision="tf32")  # noqa: E731
    eager = call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for _ in range(2):
        for t in out:
            if t is not None:
                t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(out, eager) if a is not None)


@pytest.mark.parametrize("K", [1, 7, 64, 80, 256])
def test_head_dims_and_unaligned_rows(K):
    x = make_inputs(T=150, H=1, K=K, device="cuda")
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    cpu = {n: v.cpu() if torch.is_tensor(v) else v for n, v in x.items()}
    eAqk, eAkk = reference.chunk_kda_intra(cpu["q"], cpu["k"], cpu["g"], cpu["beta"], x["scale"], 64)
    check_cuda(Aqk, eAqk, what="Aqk")
    check_cuda(Akk, eAkk, what="Akk")


@pytest.mark.parametrize("K", [60, 100, 37])
@pytest.mark.parametrize("BT", [32, 64])
def test_varlen_rows_not_16_byte_aligned(K, BT):
    """Rows of 120 / 200 bytes (8-byte copies) and 74 bytes (runs from aligned words), fp16, varlen: the shape
    of FLA's test_chunk_varlen case with D = 60 and chunk size 32."""
    cu = torch.tensor([0, 31, 96, 160], dtype=torch.int64)
    x = make_inputs(B=1, T=160, H=4, K=K, dtype=torch.float16, BT=BT, cu_seqlens=cu, device="cuda")
    Aqk, Akk = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], chunk_size=BT, cu_seqlens=cu.cuda(),
                                   cu_seqlens_cpu=cu)
    torch.cuda.synchronize()
    cpu = {n: v.cpu() if torch.is_tensor(v) else v for n, v in x.items()}
    eAqk, eAkk = reference.chunk_kda_intra(cpu["q"], cpu["k"], cpu["g"], cpu["beta"], x["scale"], BT, cu_seqlens=cu)
    check_cuda(Aqk, eAqk, what="Aqk")
    check_cuda(Akk, eAkk, what="Akk")


def _varlen_case(BT=64):
    cu = torch.tensor([0, 1, 2, 2 + BT, 70 + 2 * BT, 300], dtype=torch.int64)
    x = make_inputs(B=1, T=300, H=2, HV=4, K=64, cu_seqlens=cu, device="cuda")
    return x, cu


def test_varlen_host_copies_and_no_synchronisation():
    x, cu = _varlen_case()
    cu_dev = cu.cuda()
    ref = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev)  # warms the host copy
    cpu = {n: v.cpu() if torch.is_tensor(v) else v for n, v in x.items()}
    eAqk, eAkk = reference.chunk_kda_intra(cpu["q"], cpu["k"], cpu["g"], cpu["beta"], x["scale"], 64, cu_seqlens=cu)
    check_cuda(ref[0], eAqk, what="Aqk")
    check_cuda(ref[1], eAkk, what="Akk")
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev)
        given = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev, cu_seqlens_cpu=cu)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(again[0], ref[0]) and torch.equal(given[1], ref[1])


def test_varlen_under_inference_mode():
    """FLA's inference path: cu_seqlens made under torch.inference_mode has no version counter, so its
    host copy is taken on every call; an in-place change of the offsets is honoured."""
    x, cu = _varlen_case()
    cpu = {n: v.cpu() if torch.is_tensor(v) else v for n, v in x.items()}
    with torch.inference_mode():
        cu_dev = cu.cuda()
        first = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev)
        cu_dev[2] = 40  # another split of the same tokens, written in place
        second = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev)
    for out, offsets in ((first, cu), (second, cu_dev.cpu())):
        eAqk, eAkk = reference.chunk_kda_intra(cpu["q"], cpu["k"], cpu["g"], cpu["beta"], x["scale"], 64,
                                               cu_seqlens=offsets)
        check_cuda(out[0], eAqk, what=f"Aqk, offsets {offsets.tolist()}")
        check_cuda(out[1], eAkk, what=f"Akk, offsets {offsets.tolist()}")
    assert not torch.equal(first[1], second[1])


def test_cuda_graph_replay_is_bit_identical():
    x, cu = _varlen_case()
    cu_dev = cu.cuda()
    eager = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev, cu_seqlens_cpu=cu,
                                precision="tf32")
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev, cu_seqlens_cpu=cu, precision="tf32")
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        out = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=cu_dev, cu_seqlens_cpu=cu,
                                  precision="tf32")
    for _ in range(3):
        out[0].fill_(float("nan"))
        out[1].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out[0], eager[0]) and torch.equal(out[1], eager[1])


def test_side_stream_and_strided_views():
    B, T, H, K = 1, 200, 2, 64
    x = make_inputs(B=B, T=T, H=H, K=K, device="cuda")
    fused = torch.zeros(B, T, 2 * H * K + H, dtype=torch.bfloat16, device="cuda")
    fused[..., :H * K] = x["q"].reshape(B, T, H * K)
    fused[..., H * K:2 * H * K] = x["k"].reshape(B, T, H * K)
    fused[..., 2 * H * K:] = x["beta"]
    q = fused[..., :H * K].view(B, T, H, K)
    k = fused[..., H * K:2 * H * K].view(B, T, H, K)
    beta = fused[..., 2 * H * K:]
    ref = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = kda.chunk_kda_intra(q, k, x["g"], beta)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def test_cpu_and_cuda_agree_with_the_reference_alike():
    x = make_inputs(T=130, H=2, K=32, dtype=torch.bfloat16)
    cpu = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"])
    gpu = kda.chunk_kda_intra(x["q"].cuda(), x["k"].cuda(), x["g"].cuda(), x["beta"].cuda())
    eAqk, eAkk = reference.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], x["scale"], 64)
    for a, b, e in ((cpu[0], gpu[0], eAqk), (cpu[1], gpu[1], eAkk)):
        ea, fa = reference.rel_errors(a, e)
        eb, fb = reference.rel_errors(b.cpu(), e)
        assert eb <= 1.05 * fb + 1e-6 and ea <= 1.05 * fa + 1e-6


def test_cumsum_and_inter_solve_on_cuda():
    x = make_inputs(T=100, H=1, K=32, dtype=torch.bfloat16)
    decay = -torch.rand(1, 100, 1, 32)
    g_cpu = kda.chunk_local_cumsum(decay, 64)
    g_gpu = kda.chunk_local_cumsum(decay.cuda(), 64)
    assert reference.rel_errors(g_gpu.cpu(), reference.chunk_local_cumsum(decay, 64))[0] <= 64 * 2.0**-24
    Akkd, _ = reference.diagonal_blocks(x["q"], x["k"], g_cpu, x["beta"], x["scale"], 64, False)
    Aqk = torch.zeros(1, 100, 1, 64, dtype=torch.bfloat16, device="cuda")
    Akk = kda.inter_solve(x["q"].cuda(), x["k"].cuda(), g_cpu.cuda(), x["beta"].cuda(), Akkd.float().cuda(), Aqk)
    eAqk, aqk_mask, eAkk, akk_mask = reference.inter_solve(x["q"], x["k"], g_cpu, x["beta"], Akkd.float(),
                                                           x["scale"], 64, False)
    check_cuda(Aqk, eAqk, aqk_mask, what="Aqk")
    check_cuda(Akk, eAkk, akk_mask, what="Akk")


def test_refusals_on_cuda():
    x = make_inputs(T=70, H=2, K=16, device="cuda")
    with pytest.raises(ValueError, match="argument 'cu_seqlens'"):
        # offsets in host memory beside device data
        kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 70]).cuda(),
                            cu_seqlens_cpu=torch.tensor([0, 60]))
    with pytest.raises(ValueError, match="argument 'g'"):
        kda.chunk_kda_intra(x["q"], x["k"], x["g"].double(), x["beta"])
    with pytest.raises(ValueError, match="fp64"):
        kda.chunk_kda_intra(x["q"].double(), x["k"].double(), x["g"].double(), x["beta"].double())


@pytest.mark.parametrize("precision", ["tf32", "fp32"])
def test_sequence_split_at_a_chunk_boundary(precision):
    # context parallelism hands each rank a part of a sequence (split at chunk boundaries): the parts,
    # and one varlen call with chunk_indices given, give the bits of one call over the whole sequence
    T, cut = 5 * 64 + 17, 3 * 64
    x = make_inputs(B=1, T=T, H=2, HV=4, K=128, device="cuda")
    whole = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], precision=precision)
    parts = [kda.chunk_kda_intra(x["q"][:, a:b], x["k"][:, a:b], x["g"][:, a:b], x["beta"][:, a:b], precision=precision)
             for a, b in ((0, cut), (cut, T))]
    cu = torch.tensor([0, cut, T])
    ci = torch.tensor([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]])
    varlen = kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], precision=precision, cu_seqlens=cu.cuda(),
                                 chunk_indices=ci.cuda(), cu_seqlens_cpu=cu, chunk_indices_cpu=ci)
    for i in range(2):
        assert torch.equal(torch.cat([parts[0][i], parts[1][i]], dim=1), whole[i])
        assert torch.equal(varlen[i], whole[i])


def test_mixed_devices_are_refused():
    x = make_inputs(T=70, H=2, K=16, device="cuda")
    with pytest.raises(ValueError, match="argument 'cu_seqlens_cpu'"):
        kda.chunk_kda_intra(x["q"], x["k"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 70]).cuda(),
                            cu_seqlens_cpu=torch.tensor([0, 70]).cuda())
    with pytest.raises(ValueError, match="argument 'g'"):
        # q on the host, g on the device: the dispatcher picks the CUDA kernel, kda refuses g's memory
        kda.chunk_kda_intra(x["q"].cpu(), x["k"].cpu(), x["g"], x["beta"].cpu())
