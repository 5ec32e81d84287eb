# Core unit tests and the CPU backend's conformance suite.
add_executable(kda_test_core test_core.cpp)
target_link_libraries(kda_test_core PRIVATE kda::kda kda::reference kda_catch_main kda_program_flags)
add_test(NAME core COMMAND kda_test_core ${kda_catch_strict})

add_executable(kda_test_cpu test_cpu.cpp)
target_link_libraries(kda_test_cpu PRIVATE kda::kda kda::reference kda_catch_main kda_program_flags)
# one ctest entry per part of the suite, so ctest -j runs them side by side
foreach(part "[grid][bf16]" "[grid][fp16]" "[grid][fp32]" "[grid][fp64]" "[varlen]" "[properties]" "[bad-input]" "[policy]" "[threads]" "[exp2]")
  string(REGEX REPLACE "[][]+" "." name "cpu${part}")
  string(REGEX REPLACE "\\.$" "" name "${name}")
  add_test(NAME ${name} COMMAND kda_test_cpu "[cpu]${part}" ${kda_catch_strict})
endforeach()

# The intra stage (kda/intra.hpp) on the CPU: chunk_kda_intra, chunk_kda_intra_diag, chunk_local_cumsum.
add_executable(kda_test_intra_cpu test_intra_cpu.cpp)
target_link_libraries(kda_test_intra_cpu PRIVATE kda::kda kda::reference kda_catch_main kda_program_flags)
foreach(part full diag strong-decay cumsum wy bad-input)
  add_test(NAME cpu.intra.${part} COMMAND kda_test_intra_cpu "[cpu][intra][${part}]" ${kda_catch_strict})
endforeach()

# Compile-fail tests: each file must be refused, with our static_assert's sentence.
foreach(case unknown_backend:no\ implementation\ for\ this\ Backend bad_tile_config:sub-chunk\ size\ BC\ must\ be\ 16)
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 file)
  list(GET parts 1 expect)
  add_test(NAME compile_fail.${file}
           COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -I${CMAKE_SOURCE_DIR}/include
                   ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/${file}.cpp)
  set_tests_properties(compile_fail.${file} PROPERTIES PASS_REGULAR_EXPRESSION "${expect}")
endforeach()
