# The quickstart (scripts/demo builds and runs it). With the CUDA bridge (built when nvcc exists) it
# also runs the CUDA backend when a device is present; the program decides at run time.
add_executable(01_cpu_minimal ${CMAKE_CURRENT_LIST_DIR}/01_cpu_minimal.cpp)
target_link_libraries(01_cpu_minimal PRIVATE kda::kda kda::reference kda_program_flags)
if(TARGET kda_cuda_bridge)
  target_link_libraries(01_cpu_minimal PRIVATE kda_cuda_bridge)
  target_compile_definitions(01_cpu_minimal PRIVATE KDA_WITH_CUDA_BRIDGE)
  target_include_directories(01_cpu_minimal PRIVATE ${PROJECT_SOURCE_DIR})
endif()

# A small smoke run in the test suite: short last chunk, GVA, K not a multiple of the slice width.
if(KDA_BUILD_TESTS)
  add_test(NAME example.01_cpu_minimal COMMAND 01_cpu_minimal --T=1000 --H=2 --HV=4 --K=80 --threads=2)
endif()
