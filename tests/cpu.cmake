# Core unit tests and the CPU backend's conformance suite.
add_executable(kda_test_core test_core.cpp)
target_link_libraries(kda_test_core PRIVATE kda::kda kda_catch_main kda_program_flags)
add_test(NAME core COMMAND kda_test_core)

add_executable(kda_test_cpu test_cpu.cpp)
target_link_libraries(kda_test_cpu PRIVATE kda::kda kda_catch_main kda_program_flags)
# one ctest entry per part of the suite, so ctest -j runs them side by side
foreach(part "[grid][bf16]" "[grid][fp16]" "[grid][fp32]" "[grid][fp64]" "[varlen]" "[properties]" "[bad-input]" "[policy]" "[threads]")
  string(REGEX REPLACE "[][]+" "." name "cpu${part}")
  string(REGEX REPLACE "\\.$" "" name "${name}")
  add_test(NAME ${name} COMMAND kda_test_cpu "[cpu]${part}")
endforeach()
