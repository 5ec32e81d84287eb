// kda/cpu/inter_solve.hpp: chunk_kda_inter_solve for kda::cpu_backend.
//
// Work items are (chunk, value head) pairs; a pool of cpu_backend::threads workers takes them in
// blocks from an atomic counter. Each item stages its rows, reads the next item's rows into cache
// (tile_ops::touch_rows) and runs detail::inter_solve_chunk with Eigen tiles. Items
// write disjoint rows, so no synchronisation is needed beyond joining the workers. The chunk axis
// is make_chunk_grid's (params.hpp), as on every backend: a varlen call without chunk_indices
// walks the slots of the cu_seqlens search, and an idle slot does nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "../detail/schedule.hpp"
#include "../inter_solve.hpp"
#include "../params.hpp"
#include "backend.hpp"
#include "tile_ops.hpp"

namespace kda {

namespace cpu {
/// Runs body(item, worker) for item in [0, count) on `threads` workers (the caller's thread is
/// worker 0).
template <class Body>
void parallel_for(std::int64_t count, int threads, const Body& body) {
    const int nt = static_cast<int>(std::min<std::int64_t>(threads, count));
    if (nt <= 1) {
        for (std::int64_t i = 0; i < count; ++i) body(i, 0);
        return;
    }
    // Blocks of a few items keep the counter cold; 8 blocks per worker balance tails.
    const std::int64_t grain = std::max<std::int64_t>(1, count / (8 * static_cast<std::int64_t>(nt)));
    std::atomic<std::int64_t> next{0};
    auto worker = [&](int w) {
        for (;;) {
            const std::int64_t lo = next.fetch_add(grain, std::memory_order_relaxed);
            if (lo >= count) return;
            const std::int64_t hi = std::min(count, lo + grain);
            for (std::int64_t i = lo; i < hi; ++i) body(i, w);
        }
    };
    std::vector<std::jthread> pool;
    pool.reserve(static_cast<std::size_t>(nt - 1));
    for (int t = 1; t < nt; ++t) pool.emplace_back(worker, t);
    worker(0);
}

}  // namespace cpu

template <int BT, int BC, int BK>
struct chunk_kda_inter_solve<cpu_backend, BT, BC, BK> {
    using config = tile_config<BT, BC, BK>;

    /// Validates, then computes. See kda/inter_solve.hpp.
    static void run(const cpu_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
        detail::run_policy<chunk_kda_inter_solve, cpu_backend, BT, BC>(be, p, a);
    }

    /// Computes on validated arguments (called by the dispatcher).
    template <class X, class Mode>
    static void launch(const cpu_backend& be, const inter_solve_problem& p, const inter_solve_args& a) {
        const chunk_grid grid = make_chunk_grid(p, a);
        const inter_solve_params<X> P = make_params<X>(p, a, grid);
        using ops_t = cpu::tile_ops<X, config, Mode>;
        const int nt = static_cast<int>(std::min<std::int64_t>(be.resolved_threads(), std::max<std::int64_t>(1, P.num_items())));
        std::vector<cpu::scratch<acc_t<X>>> scratch(static_cast<std::size_t>(nt));
        for (auto& s : scratch) s.reserve(static_cast<std::size_t>(BT * ops_t::padded_k(p.K)));
        cpu::parallel_for(P.num_items(), nt, [&](std::int64_t item, int worker) {
            const chunk_coords c = grid(item / P.HV);
            if (c.n <= 0) return;  // an idle slot of the varlen search
            cpu::scratch<acc_t<X>>& buf = scratch[static_cast<std::size_t>(worker)];
            ops_t ops(P, c, item % P.HV, buf);
            if (item + 1 < P.num_items()) ops_t::touch_rows(P, grid((item + 1) / P.HV), (item + 1) % P.HV, buf);
            detail::inter_solve_chunk<config, Mode>(ops);
        });
    }
};

}  // namespace kda
