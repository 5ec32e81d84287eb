// tests/cuda/probe.cu: see probe.hpp.
#include "probe.hpp"

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include <cuda_bridge.hpp>
#include <kda/cuda/inter_solve.cuh>
#include <kda/cuda/intra.cuh>

namespace kda::testing::probe {

namespace {

/// Device copies of host views (whole byte ranges, same offset modulo 256), freed at scope exit.
class device_copies {
public:
    device_copies() { KDA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
    device_copies(const device_copies&) = delete;
    device_copies& operator=(const device_copies&) = delete;
    ~device_copies() {
        (void)cudaStreamSynchronize(stream);
        for (void* b : bufs_) (void)cudaFree(b);
        (void)cudaStreamDestroy(stream);
    }
    template <class Ptr>
    basic_tensor_ref<Ptr> up(const basic_tensor_ref<Ptr>& t) {
        if (t.data == nullptr || t.numel() == 0) return t;
        const auto r = kda::detail::range_of(t);
        const std::size_t bytes = r.hi - r.lo, lead = r.lo % 256;
        void* b = nullptr;
        KDA_CUDA_CHECK(cudaMalloc(&b, bytes + lead));
        bufs_.push_back(b);
        auto* dev = static_cast<unsigned char*>(b) + lead;
        KDA_CUDA_CHECK(cudaMemcpyAsync(dev, reinterpret_cast<const void*>(r.lo), bytes, cudaMemcpyHostToDevice, stream));
        basic_tensor_ref<Ptr> d = t;
        d.data = dev;
        return d;
    }
    void down(const mutable_tensor_ref& host, const mutable_tensor_ref& dev) {
        if (host.data == nullptr || host.numel() == 0) return;
        const auto r = kda::detail::range_of(host);
        KDA_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(r.lo), dev.data, r.hi - r.lo, cudaMemcpyDeviceToHost, stream));
    }
    /// Device views of every tensor, host copies of the index tensors.
    inter_solve_args all(const inter_solve_args& h) {
        inter_solve_args d;
        d.q = up(h.q), d.k = up(h.k), d.g = up(h.g), d.beta = up(h.beta), d.Akkd = up(h.Akkd);
        d.Aqk = up(h.Aqk), d.Akk = up(h.Akk);
        d.cu_seqlens = up(h.cu_seqlens), d.chunk_indices = up(h.chunk_indices);
        d.cu_seqlens_host = h.cu_seqlens;
        d.chunk_indices_host = h.chunk_indices;
        return d;
    }
    void finish(const inter_solve_args& h, const inter_solve_args& d) {
        down(h.Aqk, d.Aqk);
        down(h.Akk, d.Akk);
        KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    cudaStream_t stream = nullptr;

private:
    std::vector<void*> bufs_;
};

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const kda::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

int device_count(std::string& error) { return kda::bridge::cuda_device_count(error); }

bool device_has_tensor_copies() { return kda::cuda::device_supports_tma(); }

tensor_copies staging_of(const inter_solve_problem& p, const inter_solve_args& h, bool intra) {
    KDA_CHECK(h.q.type == dtype::bf16 && p.BT == 64, "probe::staging_of: bf16 data and BT = 64 only");
    device_copies dc;
    const inter_solve_args d = dc.all(h);
    const cuda_backend be{.stream = dc.stream};
    using cfg = tile_config<64, 16, cuda_backend::k_slice>;
    kda::cuda::kernel_params<bf16_t> kp;
    kp.group = p.HV / p.H;
    auto maps = [&]<class Step>() {
        kda::cuda::make_tma_maps<bf16_t, kda::cuda::kernel_traits<bf16_t, cfg, Step, precision::tf32>, Step>(kp, be, d);
    };
    if (intra)
        maps.template operator()<kda::cuda::fused_intra_step>();
    else
        maps.template operator()<kda::cuda::inter_solve_step>();
    return {kp.tma, kp.joined, kp.joined_g_threads};
}

copy_widths per_thread_copy_widths(const inter_solve_problem& p, const inter_solve_args& h) {
    device_copies dc;
    const inter_solve_args d = dc.all(h);
    return {kda::cuda::per_thread_copy_bytes(d.q, p.K), kda::cuda::per_thread_copy_bytes(d.k, p.K), kda::cuda::per_thread_copy_bytes(d.g, p.K)};
}

std::string run_with_host_tensor(const inter_solve_problem& p, const inter_solve_args& h, const std::string& keep_on_host) {
    device_copies dc;
    inter_solve_args d = dc.all(h);
    if (keep_on_host == "q") d.q = h.q;
    if (keep_on_host == "k") d.k = h.k;
    if (keep_on_host == "g") d.g = h.g;
    if (keep_on_host == "beta") d.beta = h.beta;
    if (keep_on_host == "Akkd") d.Akkd = h.Akkd;
    if (keep_on_host == "Aqk") d.Aqk = h.Aqk;
    if (keep_on_host == "Akk") d.Akk = h.Akk;
    if (keep_on_host == "cu_seqlens") d.cu_seqlens = h.cu_seqlens;
    if (keep_on_host == "chunk_indices") d.chunk_indices = h.chunk_indices;
    const std::string msg = message_of([&] { kda::inter_solve(cuda_backend{dc.stream}, p, d); });
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    return msg;
}

std::string run_without_host_copies(const inter_solve_problem& p, const inter_solve_args& h, bool drop_cu, bool drop_ci) {
    device_copies dc;
    inter_solve_args d = dc.all(h);
    if (drop_cu) d.cu_seqlens_host = {};
    if (drop_ci) d.chunk_indices_host = {};
    const std::string msg = message_of([&] { kda::inter_solve(cuda_backend{dc.stream}, p, d); });
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    return msg;
}

/// Captures launch() on `stream` into a CUDA graph (global capture mode) and replays it `replays`
/// times (the uploads must be complete).
template <class Launch>
void capture_and_replay(cudaStream_t stream, int replays, Launch&& launch) {
    cudaGraph_t graph = nullptr;
    KDA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
        launch();
    } catch (...) {
        (void)cudaStreamEndCapture(stream, &graph);
        if (graph != nullptr) (void)cudaGraphDestroy(graph);
        throw;
    }
    KDA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    KDA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < replays; ++i) KDA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
    KDA_CUDA_CHECK(cudaGraphExecDestroy(exec));
    KDA_CUDA_CHECK(cudaGraphDestroy(graph));
}

void run_in_graph(const inter_solve_problem& p, const inter_solve_args& h, int replays) {
    device_copies dc;
    const inter_solve_args d = dc.all(h);
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));  // uploads done before the capture starts
    capture_and_replay(dc.stream, replays, [&] { kda::inter_solve(cuda_backend{dc.stream}, p, d); });
    dc.finish(h, d);
}

void run_policy(const inter_solve_problem& p, const inter_solve_args& h, int BK) {
    device_copies dc;
    const inter_solve_args d = dc.all(h);
    const cuda_backend be{dc.stream};
    kda::detail::dispatch_bt(p.BT, [&]<int BT>() {
        kda::detail::dispatch_bk(int_list<16, 32>{}, BK, [&]<int BK_>() { chunk_kda_inter_solve<cuda_backend, BT, 16, BK_>::run(be, p, d); });
    });
    dc.finish(h, d);
}

std::string run_intra(const intra_problem& p, const intra_args& h, bool drop_workspace, const std::string& keep_on_host, bool fuse) {
    device_copies dc;
    intra_args d;
    d.q = keep_on_host == "q" ? h.q : dc.up(h.q);
    d.k = dc.up(h.k), d.g = dc.up(h.g), d.beta = dc.up(h.beta);
    d.Aqk = keep_on_host == "Aqk" ? h.Aqk : dc.up(h.Aqk);
    d.Akk = dc.up(h.Akk);
    d.cu_seqlens = dc.up(h.cu_seqlens), d.chunk_indices = dc.up(h.chunk_indices);
    d.cu_seqlens_host = h.cu_seqlens;
    d.chunk_indices_host = h.chunk_indices;
    if (!drop_workspace) d.Akkd = keep_on_host == "Akkd" ? h.Akkd : dc.up(h.Akkd);
    const std::string msg = message_of([&] { kda::chunk_kda_intra(cuda_backend{.stream = dc.stream, .fuse_intra = fuse}, p, d); });
    if (keep_on_host.empty()) {
        dc.down(h.Aqk, d.Aqk);
        dc.down(h.Akk, d.Akk);
    }
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    return msg;
}

std::string run_cumsum_with_host_tensor(const cumsum_problem& p, const cumsum_args& h, const std::string& keep_on_host) {
    device_copies dc;
    cumsum_args d;
    d.g = keep_on_host == "g" ? h.g : dc.up(h.g);
    d.A_log = keep_on_host == "A_log" ? h.A_log : dc.up(h.A_log);
    d.dt_bias = keep_on_host == "dt_bias" ? h.dt_bias : dc.up(h.dt_bias);
    d.g_out = keep_on_host == "g_out" ? h.g_out : dc.up(h.g_out);
    d.cu_seqlens = dc.up(h.cu_seqlens);
    d.cu_seqlens_host = h.cu_seqlens;
    const std::string msg = message_of([&] { kda::chunk_local_cumsum(cuda_backend{dc.stream}, p, d); });
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    return msg;
}

void run_intra_in_graph(const intra_problem& p, const intra_args& h, int replays, bool fuse) {
    device_copies dc;
    intra_args d;
    d.q = dc.up(h.q), d.k = dc.up(h.k), d.g = dc.up(h.g), d.beta = dc.up(h.beta);
    d.Aqk = dc.up(h.Aqk), d.Akk = dc.up(h.Akk), d.Akkd = dc.up(h.Akkd);
    d.cu_seqlens = dc.up(h.cu_seqlens), d.chunk_indices = dc.up(h.chunk_indices);
    d.cu_seqlens_host = h.cu_seqlens;
    d.chunk_indices_host = h.chunk_indices;
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    capture_and_replay(dc.stream, replays, [&] { kda::chunk_kda_intra(cuda_backend{.stream = dc.stream, .fuse_intra = fuse}, p, d); });
    dc.down(h.Aqk, d.Aqk);
    dc.down(h.Akk, d.Akk);
    KDA_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
}

}  // namespace kda::testing::probe
