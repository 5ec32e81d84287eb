// kda/cpu/backend.hpp: the Eigen CPU backend's state and declared capabilities.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <thread>

#include "../args.hpp"
#include "../config.hpp"
#include "../dispatch.hpp"
#include "../tile_config.hpp"
#include "../types.hpp"
#include "../validate.hpp"

namespace kda {

// Eigen's half types carry the same bits as kda's storage types and may be passed directly.
template <> struct dtype_of<Eigen::bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<Eigen::half> { static constexpr dtype value = dtype::fp16; };

/// CPU backend: Eigen fixed-size 16 x 16 tiles, parallel over (chunk, value head) work items.
/// Precision: both tf32 and fp32 compute at full fp32 (fp64 for fp64 data); tf32 is accepted and
/// folded into fp32.
struct cpu_backend {
    /// Worker threads; 0 means std::thread::hardware_concurrency().
    int threads = 0;

    using element_types = type_list<bf16_t, fp16_t, float, double>;
    /// The K slices kda::inter_solve and kda::chunk_kda_intra instantiate, and the one a call takes.
    using k_slices = int_list<32, 64>;
    static constexpr int default_bk(std::int64_t K) { return kda::default_bk(K); }

    static backend_caps caps() {
        backend_caps c;
        c.name = "cpu";
        c.supports_fp64 = true;
        c.alignment = 0;
        c.index_tensors_on_host = true;
        return c;
    }
    static constexpr precision effective_precision(precision) { return precision::fp32; }

    /// Backend-specific checks beyond kda::can_implement.
    void check(const inter_solve_problem&, const inter_solve_args&) const {
        KDA_CHECK(threads >= 0, "kda::inter_solve: argument 'threads': expected >= 0 (0 = all hardware threads), got " << threads);
    }

    [[nodiscard]] int resolved_threads() const {
        if (threads > 0) return threads;
        const unsigned hw = std::thread::hardware_concurrency();
        return hw == 0 ? 1 : static_cast<int>(hw);
    }
};

namespace cpu {
/// Eigen scalar type holding the bits of a kda storage type.
template <class X> struct eigen_scalar { using type = X; };
template <> struct eigen_scalar<bf16_t> { using type = Eigen::bfloat16; };
template <> struct eigen_scalar<fp16_t> { using type = Eigen::half; };
template <class X>
using eigen_scalar_t = typename eigen_scalar<X>::type;

/// Converts one stored value to the accumulator type (through Eigen's half types).
template <class Acc, class X>
inline Acc to_acc(const X& x) {
    return static_cast<Acc>(Eigen::numext::bit_cast<eigen_scalar_t<X>>(x));
}
/// Rounds an accumulator value to the storage type (round to nearest even).
template <class X, class Acc>
inline X from_acc(Acc v) {
    return Eigen::numext::bit_cast<X>(static_cast<eigen_scalar_t<X>>(v));
}
}  // namespace cpu

}  // namespace kda
