# safetensors I/O, the case loader, the golden FLA cases ([golden]), hostile input, and the
# kda-inter-solve command. Data: tests/data/fla (README.md there gives its provenance).
if(NOT TARGET kda::io)
  message(FATAL_ERROR "kda's I/O tests need nlohmann_json (kda::io): install nlohmann-json3-dev")
endif()
set(KDA_FLA_DATA_DIR ${CMAKE_CURRENT_LIST_DIR}/data/fla)

add_executable(kda_test_io io/test_safetensors.cpp io/test_case.cpp io/test_golden.cpp)
target_link_libraries(kda_test_io PRIVATE kda_catch_main kda::kda kda::reference kda::io kda_program_flags)
target_include_directories(kda_test_io PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(kda_test_io PRIVATE KDA_FLA_DATA_DIR="${KDA_FLA_DATA_DIR}")
add_test(NAME io.safetensors COMMAND kda_test_io "[safetensors]" ${kda_catch_strict})
add_test(NAME io.case COMMAND kda_test_io "[case]" ${kda_catch_strict})
add_test(NAME io.golden COMMAND kda_test_io "[golden]" ${kda_catch_strict})

# The intra stage (kda/intra.hpp) on the golden FLA cases: producer and one-call path against
# float64 and against FLA's own outputs.
add_executable(kda_test_intra_golden io/test_intra_golden.cpp)
target_link_libraries(kda_test_intra_golden PRIVATE kda_catch_main kda::kda kda::reference kda::io kda_program_flags)
target_include_directories(kda_test_intra_golden PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(kda_test_intra_golden PRIVATE KDA_FLA_DATA_DIR="${KDA_FLA_DATA_DIR}")
add_test(NAME io.intra_golden COMMAND kda_test_intra_golden "[intra-golden]" ${kda_catch_strict})

# The command, driven as a user would: exit status, one-line errors, no output file on failure.
if(KDA_BUILD_EXAMPLES)
  add_executable(kda_test_cli io/test_cli.cpp)
  target_link_libraries(kda_test_cli PRIVATE kda_catch_main kda::kda kda::reference kda::io kda_program_flags)
  target_include_directories(kda_test_cli PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_definitions(kda_test_cli PRIVATE KDA_FLA_DATA_DIR="${KDA_FLA_DATA_DIR}"
                             KDA_INTER_SOLVE_EXE="$<TARGET_FILE:kda-inter-solve>"
                             $<$<TARGET_EXISTS:kda_cuda_bridge>:KDA_WITH_CUDA_BRIDGE=1>)
  add_dependencies(kda_test_cli kda-inter-solve)
  add_test(NAME io.cli COMMAND kda_test_cli "[cli]" ${kda_catch_strict})
endif()

# libFuzzer target for the safetensors reader and the case validation (clang only; see
# tests/fuzz/fuzz_safetensors.cpp):
#   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DKDA_FUZZ=ON -DKDA_ENABLE_CUDA=OFF
#   cmake --build build-fuzz --target kda_fuzz_safetensors
#   mkdir -p /tmp/corpus && build-fuzz/tests/kda_fuzz_safetensors -dict=tests/fuzz/safetensors.dict \
#       -max_total_time=300 /tmp/corpus tests/fuzz/corpus
if(KDA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KDA_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_executable(kda_fuzz_safetensors fuzz/fuzz_safetensors.cpp)
  target_link_libraries(kda_fuzz_safetensors PRIVATE kda::kda kda::reference kda::io)
  target_compile_options(kda_fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  target_link_options(kda_fuzz_safetensors PRIVATE -fsanitize=fuzzer,address,undefined)
  # regression: every seed once (no mutation)
  add_test(NAME io.fuzz.corpus COMMAND kda_fuzz_safetensors -runs=0 ${CMAKE_CURRENT_LIST_DIR}/fuzz/corpus)
endif()
