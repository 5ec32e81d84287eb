// kda/host_tensor.hpp: an owning, contiguous host tensor that hands out kda's views.
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

#include "config.hpp"
#include "tensor.hpp"
#include "types.hpp"
#include "validate.hpp"

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

}  // namespace kda
