// cuda_bridge.cu: kda::bridge, the host-callable wrapper around the CUDA backend (see the header).
#include "cuda_bridge.hpp"

#include <cuda_runtime.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <cstdint>
#include <vector>

#include <kda/cuda/inter_solve.cuh>
#include <kda/cuda/intra.cuh>
#include <kda/validate.hpp>

namespace kda::bridge {

namespace {

/// Owns one device allocation.
class device_buffer {
public:
    explicit device_buffer(std::size_t bytes) { KDA_CUDA_CHECK(cudaMalloc(&p_, bytes > 0 ? bytes : 1)); }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    device_buffer(device_buffer&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    device_buffer& operator=(device_buffer&&) = delete;
    ~device_buffer() {
        if (p_ != nullptr) (void)cudaFree(p_);
    }
    [[nodiscard]] unsigned char* get() const { return static_cast<unsigned char*>(p_); }

private:
    void* p_ = nullptr;
};

class stream_guard {
public:
    stream_guard() { KDA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
    stream_guard(const stream_guard&) = delete;
    stream_guard& operator=(const stream_guard&) = delete;
    ~stream_guard() {
        (void)cudaStreamDestroy(s_);
    }
    [[nodiscard]] cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

class event_guard {
public:
    event_guard() { KDA_CUDA_CHECK(cudaEventCreate(&e_)); }
    event_guard(const event_guard&) = delete;
    event_guard& operator=(const event_guard&) = delete;
    ~event_guard() { (void)cudaEventDestroy(e_); }
    [[nodiscard]] cudaEvent_t get() const { return e_; }

private:
    cudaEvent_t e_ = nullptr;
};

/// Device copies of host tensor views. A view's whole byte range [lo, hi) is copied, so strides
/// (padding included) carry over unchanged, and the copy starts at the same offset modulo 256
/// bytes as the host pointer, so that alignment (and with it the kernel's choice between vector
/// and element-wise loads) is the same as on the host.
class mirror {
public:
    explicit mirror(cudaStream_t s) : s_(s) {}
    mirror(const mirror&) = delete;
    mirror& operator=(const mirror&) = delete;
    ~mirror() { (void)cudaStreamSynchronize(s_); }  // no copy may still run when the buffers go

    template <class Ptr>
    basic_tensor_ref<Ptr> upload(const basic_tensor_ref<Ptr>& t) {
        if (t.data == nullptr || t.numel() == 0) return t;
        const auto r = kda::detail::range_of(t);
        const std::size_t bytes = r.hi - r.lo, lead = r.lo % 256;
        buffers_.emplace_back(bytes + lead);
        unsigned char* dev = buffers_.back().get() + lead;
        KDA_CUDA_CHECK(cudaMemcpyAsync(dev, reinterpret_cast<const void*>(r.lo), bytes, cudaMemcpyHostToDevice, s_));
        basic_tensor_ref<Ptr> d = t;
        d.data = dev;
        return d;
    }

    /// Copies a device view's byte range back into the host view it mirrors.
    void download(const mutable_tensor_ref& host, const mutable_tensor_ref& dev) {
        if (host.data == nullptr || host.numel() == 0) return;
        const auto r = kda::detail::range_of(host);
        KDA_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(r.lo), dev.data, r.hi - r.lo, cudaMemcpyDeviceToHost, s_));
    }

private:
    cudaStream_t s_;
    std::vector<device_buffer> buffers_;
};

}  // namespace

int cuda_device_count(std::string& error) noexcept {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n;
    (void)cudaGetLastError();
    // without libcuda the runtime reports an insufficient driver: no device, unless the kernel
    // driver is loaded (then the user-space driver is too old or broken: an error)
    std::error_code ec;
    if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && !std::filesystem::exists("/proc/driver/nvidia/version", ec))) return 0;
    try {
        error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    } catch (...) {
    }
    return -1;
}

bool cuda_device_present() noexcept {
    std::string error;
    return cuda_device_count(error) > 0;
}

namespace {
/// Runs `launch` between two events on `stream`, then `download`; returns the launch's time in ms.
template <class Launch, class Download>
double timed(cudaStream_t stream, Launch&& launch, Download&& download) {
    event_guard start, stop;
    KDA_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    launch();
    KDA_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    download();
    KDA_CUDA_CHECK(cudaStreamSynchronize(stream));
    float ms = 0.f;
    KDA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return static_cast<double>(ms);
}
}  // namespace

namespace {
/// Validates host views as the library validates device views, where the index tensors' contents
/// are read from their host copies: here the host views of the index tensors stand in for them.
template <class Problem, class Args>
Args checked(const Problem& p, const Args& a) {
    Args h = a;
    if (h.cu_seqlens_host.data == nullptr) h.cu_seqlens_host = h.cu_seqlens;
    if constexpr (requires { h.chunk_indices_host; })
        if (h.chunk_indices_host.data == nullptr) h.chunk_indices_host = h.chunk_indices;
    const status st = can_implement(p, h, cuda_backend::caps());
    if (!st) throw kda::error(st.message);
    return h;
}

/// Uploads the tensors every call but the cumsum shares (inputs, Aqk, the index tensors).
template <class Args>
Args upload_common(mirror& m, const Args& h) {
    Args d;
    d.q = m.upload(h.q);
    d.k = m.upload(h.k);
    d.g = m.upload(h.g);
    d.beta = m.upload(h.beta);
    d.Aqk = m.upload(h.Aqk);
    d.cu_seqlens = m.upload(h.cu_seqlens);
    d.chunk_indices = m.upload(h.chunk_indices);
    d.cu_seqlens_host = h.cu_seqlens_host;
    d.chunk_indices_host = h.chunk_indices_host;
    return d;
}
}  // namespace

double cuda_inter_solve_host(const inter_solve_problem& p, const inter_solve_args& host_args, const cuda_options& options) {
    const inter_solve_args h = checked(p, host_args);
    if (p.T == 0) return 0.0;
    stream_guard stream;
    mirror m(stream.get());
    inter_solve_args d = upload_common(m, h);
    d.Akkd = m.upload(h.Akkd);
    d.Akk = m.upload(h.Akk);

    return timed(stream.get(), [&] { kda::inter_solve(cuda_backend{.stream = stream.get(), .use_tma = options.use_tma, .fuse_intra = options.fuse_intra}, p, d); }, [&] {
        m.download(h.Aqk, d.Aqk);
        m.download(h.Akk, d.Akk);
    });
}


double cuda_intra_host(const intra_problem& p, const intra_args& host_args, const cuda_options& options) {
    const intra_args h = checked(p, host_args);
    if (p.T == 0) return 0.0;
    stream_guard stream;
    mirror m(stream.get());
    intra_args d = upload_common(m, h);
    d.Akk = m.upload(h.Akk);
    d.v = m.upload(h.v);
    d.w = m.upload(h.w);
    d.u = m.upload(h.u);
    d.kg = m.upload(h.kg);
    d.qg = m.upload(h.qg);
    std::vector<device_buffer> own;
    if (!h.Akkd.empty_view()) {
        d.Akkd = m.upload(h.Akkd);
    } else if (!options.fuse_intra) {
        own.emplace_back(static_cast<std::size_t>(p.B * p.T * p.HV * p.BC) * sizeof(float));
        d.Akkd = make_mutable_tensor(reinterpret_cast<float*>(own.back().get()), {p.B, p.T, p.HV, p.BC});
    }
    return timed(stream.get(), [&] { kda::chunk_kda_intra(cuda_backend{.stream = stream.get(), .use_tma = options.use_tma, .fuse_intra = options.fuse_intra}, p, d); }, [&] {
        m.download(h.Aqk, d.Aqk);
        m.download(h.Akk, d.Akk);
        if (!h.Akkd.empty_view()) m.download(h.Akkd, d.Akkd);
        for (auto [ho, dv] : {std::pair{&h.w, &d.w}, std::pair{&h.u, &d.u}, std::pair{&h.kg, &d.kg}, std::pair{&h.qg, &d.qg}}) m.download(*ho, *dv);
    });
}

double cuda_intra_diag_host(const intra_problem& p, const intra_diag_args& host_args) {
    const intra_diag_args h = checked(p, host_args);
    if (p.T == 0) return 0.0;
    stream_guard stream;
    mirror m(stream.get());
    intra_diag_args d = upload_common(m, h);
    d.Akkd = m.upload(h.Akkd);
    return timed(stream.get(), [&] { kda::chunk_kda_intra_diag(cuda_backend{stream.get()}, p, d); }, [&] {
        m.download(h.Aqk, d.Aqk);
        m.download(h.Akkd, d.Akkd);
    });
}

double cuda_cumsum_host(const cumsum_problem& p, const cumsum_args& host_args) {
    const cumsum_args h = checked(p, host_args);
    if (p.T == 0) return 0.0;
    stream_guard stream;
    mirror m(stream.get());
    cumsum_args d;
    d.g = m.upload(h.g);
    d.A_log = m.upload(h.A_log);
    d.dt_bias = m.upload(h.dt_bias);
    d.g_out = m.upload(h.g_out);
    d.cu_seqlens = m.upload(h.cu_seqlens);
    d.cu_seqlens_host = h.cu_seqlens_host;
    return timed(stream.get(), [&] { kda::chunk_local_cumsum(cuda_backend{stream.get()}, p, d); }, [&] { m.download(h.g_out, d.g_out); });
}

}  // namespace kda::bridge
