# CUDA backend benchmark (Google Benchmark) and the C ABI library the FLA side-by-side harness
# (bench/compare_fla.py) loads with ctypes. Included by bench/CMakeLists.txt.
#   kda_capi        shared library: kda_capi_inter_solve / kda_capi_fill_inputs (bench/kda_capi.h),
#                   static CUDA runtime inside, so it loads on a machine with only the driver
#   kda_bench_cuda  Google Benchmark program (bench/bench_cuda.cpp): every benchmark shape, both
#                   gate modes and precisions, L2 flushed, CUDA events, TB/s and fraction of copy
# A GPU machine without Google Benchmark needs libbenchmark.so.1debian next to the binary (the
# RPATH below looks in $ORIGIN/lib), see bench/README.md.
if(NOT KDA_HAS_CUDA)
  return()
endif()

add_library(kda_capi_objects OBJECT ${CMAKE_CURRENT_LIST_DIR}/kda_capi.cu)
target_link_libraries(kda_capi_objects PRIVATE kda::cuda)
target_compile_options(kda_capi_objects PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
set_target_properties(kda_capi_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(kda_capi SHARED $<TARGET_OBJECTS:kda_capi_objects>)
target_link_libraries(kda_capi PRIVATE CUDA::cudart_static)
set_target_properties(kda_capi PROPERTIES LINKER_LANGUAGE CXX)

add_executable(kda_bench_cuda ${CMAKE_CURRENT_LIST_DIR}/bench_cuda.cpp $<TARGET_OBJECTS:kda_capi_objects>)
target_include_directories(kda_bench_cuda PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(kda_bench_cuda PRIVATE benchmark::benchmark CUDA::cudart_static kda_program_flags)
set_target_properties(kda_bench_cuda PROPERTIES LINKER_LANGUAGE CXX BUILD_RPATH "\$ORIGIN/lib" INSTALL_RPATH "\$ORIGIN/lib")
