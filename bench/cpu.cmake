# CPU backend benchmark with the machine's SGEMM and memcpy ceilings (see bench/bench_cpu.cpp).
#   build/bench/bench_cpu                       every case, 1 and 2 threads
#   build/bench/bench_cpu --threads=2 --benchmark_filter=bf16
add_executable(bench_cpu ${CMAKE_CURRENT_LIST_DIR}/bench_cpu.cpp)
target_link_libraries(bench_cpu PRIVATE kda::kda benchmark::benchmark kda_program_flags)
