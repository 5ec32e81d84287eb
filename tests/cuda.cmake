# CUDA backend tests ([cuda]): one executable with its own main, which exits 77 without a device
# (CTest: skipped). CPU results come from .cpp files (Eigen); the direct calls of the library on
# device memory live in cuda/probe.cu (nvcc, no Eigen).
if(NOT TARGET kda_cuda_bridge)
  return()
endif()

add_library(kda_cuda_probe STATIC cuda/probe.cu)
target_link_libraries(kda_cuda_probe PUBLIC kda::core PRIVATE kda::cuda kda_cuda_bridge)
target_compile_options(kda_cuda_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)

set(kda_cuda_test_sources cuda/main.cpp cuda/test_conformance.cpp cuda/test_cuda.cpp cuda/test_intra.cpp)
if(TARGET kda::io AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/../include/kda/io/case.hpp)
  list(APPEND kda_cuda_test_sources cuda/test_golden.cpp)
  set(kda_cuda_golden ON)
endif()
add_executable(kda_test_cuda ${kda_cuda_test_sources})
target_link_libraries(kda_test_cuda PRIVATE kda::kda kda::reference kda_cuda_bridge kda_cuda_probe Catch2::Catch2 kda_program_flags)
if(TARGET kda::io)
  target_link_libraries(kda_test_cuda PRIVATE kda::io)
endif()
target_include_directories(kda_test_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(kda_test_cuda PRIVATE KDA_FLA_DATA_DIR="${CMAKE_CURRENT_LIST_DIR}/data/fla")

# one ctest entry per part (name=spec), so that ctest -j runs them side by side; the hidden parts
# run only when asked: kda_test_cuda "[large]" (outputs of more than 2^31 entries), "[timing]".
set(kda_cuda_parts
  grid.bf16=[conformance][grid][bf16] grid.fp16=[conformance][grid][fp16] grid.fp32=[conformance][grid][fp32]
  varlen=[conformance][varlen] properties=[conformance][properties]
  bad-input=[conformance][bad-input] tf32.grid=[tf32][grid] tf32.varlen=[tf32][varlen] tf32.properties=[tf32][properties]
  vs-cpu=[vs-cpu] repeat=[repeat] align=[align] policy=[policy]
  device-pointers=[bad-input]~[conformance]~[intra] graph=[graph]~[intra] sanitize=[sanitize]
  intra.grid=[intra][grid] intra.diag=[intra][diag] intra.decay=[intra][decay] intra.cumsum=[intra][cumsum]
  intra.graph=[intra][graph] intra.bad-input=[intra][bad-input] intra.wy=[intra][wy] tma=[tma]~[intra] intra.tma=[intra][tma])
if(kda_cuda_golden)
  list(APPEND kda_cuda_parts golden=[golden])
endif()
foreach(part IN LISTS kda_cuda_parts)
  string(REGEX REPLACE "=.*" "" name "${part}")
  string(REGEX REPLACE "^[^=]*=" "" spec "${part}")
  add_test(NAME cuda.${name} COMMAND kda_test_cuda "[cuda]${spec}" ${kda_catch_strict})
  set_tests_properties(cuda.${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
endforeach()

# The kda-inter-solve command's CUDA path (--backend both --check) on golden cases, both stages and
# both precisions: exit 1 when an error passes the suite's bound; 77 (skipped) without a device.
if(KDA_BUILD_EXAMPLES)  # kda-inter-solve (examples/ is added after tests/)
  foreach(case basic_tail varlen safe_gate fp16 bt32)
    foreach(stage inter-solve intra)
      foreach(precision tf32 fp32)
        add_test(NAME cuda.cli.${case}.${stage}.${precision}
                 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cuda/cli_check.sh $<TARGET_FILE:kda_test_cuda>
                         $<TARGET_FILE:kda-inter-solve> ${CMAKE_CURRENT_LIST_DIR}/data/fla/${case}.safetensors
                         ${stage} ${precision} ${CMAKE_CURRENT_BINARY_DIR}/cli_out)
        set_tests_properties(cuda.cli.${case}.${stage}.${precision} PROPERTIES SKIP_RETURN_CODE 77 LABELS cuda)
      endforeach()
    endforeach()
  endforeach()
endif()
