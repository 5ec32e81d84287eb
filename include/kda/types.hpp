// kda/types.hpp: element types and the solve precision.
//
// Half-precision storage: kda's public types kda::bf16_t and kda::fp16_t are 2-byte, trivially
// copyable bit containers with the same layout as torch.bfloat16 / torch.float16, Eigen::bfloat16 /
// Eigen::half and CUDA's __nv_bfloat16 / __half. The core never does arithmetic on them; each
// backend converts through a well-kept implementation (Eigen's on the CPU, cuda_bf16.h / cuda_fp16.h
// on the GPU). A caller may pass buffers of any of those types: only the bytes matter.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace kda {

struct bf16_t {
    std::uint16_t bits;
};
struct fp16_t {
    std::uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && std::is_trivially_copyable_v<bf16_t>, "bf16_t must be a 2-byte POD");
static_assert(sizeof(fp16_t) == 2 && std::is_trivially_copyable_v<fp16_t>, "fp16_t must be a 2-byte POD");

/// Runtime element type of a tensor.
enum class dtype : std::uint8_t { bf16, fp16, fp32, fp64, i32, i64 };

constexpr std::string_view name(dtype t) {
    switch (t) {
        case dtype::bf16: return "bf16";
        case dtype::fp16: return "fp16";
        case dtype::fp32: return "fp32";
        case dtype::fp64: return "fp64";
        case dtype::i32: return "int32";
        case dtype::i64: return "int64";
    }
    return "unknown";
}

constexpr std::int64_t size_of(dtype t) {
    switch (t) {
        case dtype::bf16:
        case dtype::fp16: return 2;
        case dtype::fp32:
        case dtype::i32: return 4;
        case dtype::fp64:
        case dtype::i64: return 8;
    }
    return 0;
}

constexpr bool is_floating(dtype t) { return t == dtype::bf16 || t == dtype::fp16 || t == dtype::fp32 || t == dtype::fp64; }

/// dtype_of<T>: the runtime tag of a storage type. Backends add their own half types
/// (Eigen::bfloat16, __nv_bfloat16, ...) by specialising this template.
template <class T>
struct dtype_of;
template <> struct dtype_of<bf16_t> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<fp16_t> { static constexpr dtype value = dtype::fp16; };
template <> struct dtype_of<float> { static constexpr dtype value = dtype::fp32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::fp64; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::i64; };

template <class T>
inline constexpr dtype dtype_of_v = dtype_of<std::remove_cv_t<T>>::value;

/// Solve precision of the products of the block merge (and, on the GPU, of every product).
/// tf32: FLA's behaviour (10-bit mantissa inputs on tensor cores). fp32: every product accurate
/// to fp32. The CPU backend computes both at full fp32 (fp64 for fp64 data).
enum class precision : std::uint8_t { tf32, fp32 };

constexpr std::string_view name(precision p) { return p == precision::tf32 ? "tf32" : "fp32"; }

/// Accumulator type: fp32 for 16-bit and fp32 data, fp64 for fp64 data. g and Akkd are held in
/// this type.
template <class X>
using acc_t = std::conditional_t<std::is_same_v<X, double>, double, float>;

constexpr dtype acc_dtype(dtype x) { return x == dtype::fp64 ? dtype::fp64 : dtype::fp32; }

}  // namespace kda
