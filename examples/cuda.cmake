# The CUDA backend called directly on device memory (nvcc; no Eigen in the program).
if(NOT KDA_HAS_CUDA)
  return()
endif()
add_executable(02_cuda_minimal ${CMAKE_CURRENT_LIST_DIR}/02_cuda_minimal.cu)
target_link_libraries(02_cuda_minimal PRIVATE kda::cuda)
# the headers are C++20; CMake 3.25 knows no cuda_std_20 for nvcc 13
target_compile_options(02_cuda_minimal PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
if(KDA_BUILD_TESTS)
  add_test(NAME example.02_cuda_minimal COMMAND 02_cuda_minimal 300 2)
  set_tests_properties(example.02_cuda_minimal PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
endif()
