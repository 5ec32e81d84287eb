// kda/reference/host_tensor.hpp: an owning, contiguous host tensor that hands out kda's views.
//
// Used by the reference, the input generator, the tests and the safetensors reader. Storage is a
// byte vector aligned for every dtype (64 bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <vector>

#include "../args.hpp"
#include "../config.hpp"
#include "../intra.hpp"
#include "../tensor.hpp"
#include "../types.hpp"
#include "../validate.hpp"

namespace kda {

class host_tensor {
public:
    host_tensor() = default;
    host_tensor(dtype t, std::vector<std::int64_t> shape) : type_(t), shape_(std::move(shape)) {
        KDA_CHECK(shape_.size() <= static_cast<std::size_t>(max_rank), "kda::host_tensor: rank " << shape_.size() << " exceeds " << max_rank);
        std::int64_t n = 1;
        for (auto e : shape_) {
            KDA_CHECK(e >= 0, "kda::host_tensor: negative extent " << e);
            KDA_CHECK(!detail::mul_overflows(n, e, n), "kda::host_tensor: element count overflows int64");
        }
        std::int64_t bytes = 0;
        KDA_CHECK(!detail::mul_overflows(n, size_of(t), bytes), "kda::host_tensor: byte size overflows int64");
        numel_ = n;
        bytes_ = bytes;
        data_.reset(static_cast<std::byte*>(::operator new(static_cast<std::size_t>(bytes > 0 ? bytes : 1), std::align_val_t{64})));
        std::memset(data_.get(), 0, static_cast<std::size_t>(bytes));
    }

    [[nodiscard]] dtype type() const { return type_; }
    [[nodiscard]] const std::vector<std::int64_t>& shape() const { return shape_; }
    [[nodiscard]] int rank() const { return static_cast<int>(shape_.size()); }
    [[nodiscard]] std::int64_t numel() const { return numel_; }
    [[nodiscard]] std::int64_t nbytes() const { return bytes_; }
    [[nodiscard]] bool defined() const { return data_ != nullptr; }
    [[nodiscard]] void* raw() { return data_.get(); }
    [[nodiscard]] const void* raw() const { return data_.get(); }

    template <class T>
    T* data() {
        KDA_CHECK(dtype_of_v<T> == type_, "kda::host_tensor: requested " << name(dtype_of_v<T>) << " data of a " << name(type_) << " tensor");
        return reinterpret_cast<T*>(data_.get());
    }
    template <class T>
    const T* data() const {
        KDA_CHECK(dtype_of_v<T> == type_, "kda::host_tensor: requested " << name(dtype_of_v<T>) << " data of a " << name(type_) << " tensor");
        return reinterpret_cast<const T*>(data_.get());
    }

    [[nodiscard]] tensor_ref ref() const {
        if (!defined()) return {};
        tensor_ref r;
        fill(r);
        r.data = data_.get();
        return r;
    }
    [[nodiscard]] mutable_tensor_ref mref() {
        if (!defined()) return {};
        mutable_tensor_ref r;
        fill(r);
        r.data = data_.get();
        return r;
    }

    /// Deep copy.
    [[nodiscard]] host_tensor clone() const {
        if (!defined()) return {};
        host_tensor t(type_, shape_);
        std::memcpy(t.raw(), raw(), static_cast<std::size_t>(bytes_));
        return t;
    }

private:
    struct deleter {
        void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{64}); }
    };
    template <class R>
    void fill(R& r) const {
        r.type = type_;
        r.rank = rank();
        for (int d = 0; d < r.rank; ++d) r.shape[d] = shape_[d];
        r.stride = contiguous_strides(r.shape, r.rank);
    }

    dtype type_ = dtype::fp32;
    std::vector<std::int64_t> shape_;
    std::int64_t numel_ = 0, bytes_ = 0;
    std::unique_ptr<std::byte, deleter> data_;
};

/// The input tensors of one call in host memory (any may be undefined: Akkd for the intra stage,
/// cu_seqlens / chunk_indices in dense mode), and the argument bundles over them and given outputs.
/// The index tensors double as their own host copies (cu_seqlens_host, chunk_indices_host), so a
/// bundle serves a backend that reads them on the host and one that validates host copies alike.
/// The reference's generated inputs (reference::inputs) and a golden case (io::inter_solve_case)
/// both build their bundles here.
struct host_inputs {
    host_tensor q, k, g, beta, Akkd, cu_seqlens, chunk_indices;

    /// kda::inter_solve's bundle.
    [[nodiscard]] inter_solve_args args(host_tensor& Aqk, host_tensor& Akk) const {
        inter_solve_args a;
        a.q = q.ref();
        a.k = k.ref();
        a.g = g.ref();
        a.beta = beta.ref();
        a.Akkd = Akkd.ref();
        a.Aqk = Aqk.mref();
        a.Akk = Akk.mref();
        a.cu_seqlens = cu_seqlens.ref();
        a.chunk_indices = chunk_indices.ref();
        a.cu_seqlens_host = a.cu_seqlens;
        a.chunk_indices_host = a.chunk_indices;
        return a;
    }
    /// kda::chunk_kda_intra's bundle (Akkd: the optional workspace, never the inputs' Akkd).
    [[nodiscard]] kda::intra_args intra_args(host_tensor& Aqk, host_tensor& Akk, host_tensor* workspace = nullptr) const {
        kda::intra_args a = kda::detail::with_common<kda::intra_args>(args(Aqk, Akk));
        a.Akk = Akk.mref();
        if (workspace != nullptr) a.Akkd = workspace->mref();
        return a;
    }
    /// kda::chunk_kda_intra_diag's bundle, writing Aqk's diagonal blocks and Akkd_out.
    [[nodiscard]] kda::intra_diag_args diag_args(host_tensor& Aqk, host_tensor& Akkd_out) const {
        kda::intra_diag_args a = kda::detail::with_common<kda::intra_diag_args>(args(Aqk, Aqk));
        a.Akkd = Akkd_out.mref();
        return a;
    }
};

}  // namespace kda
