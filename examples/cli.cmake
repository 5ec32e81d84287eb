# The kda-inter-solve command: runs the step on a safetensors case file (docs/PYTORCH.md).
find_package(CLI11 REQUIRED)
if(NOT TARGET kda::io)
  message(FATAL_ERROR "kda-inter-solve needs nlohmann_json (kda::io): install nlohmann-json3-dev")
endif()
add_executable(kda-inter-solve ${CMAKE_CURRENT_LIST_DIR}/kda_inter_solve.cpp)
target_link_libraries(kda-inter-solve PRIVATE kda::kda kda::reference kda::io CLI11::CLI11 kda_program_flags)
# The CUDA backend comes through the bridge library (tools/, built by nvcc when it exists), so this
# .cpp never sees a CUDA header. Without it, --backend cuda|both reports "built without CUDA".
if(TARGET kda_cuda_bridge)
  target_link_libraries(kda-inter-solve PRIVATE kda_cuda_bridge)
  target_compile_definitions(kda-inter-solve PRIVATE KDA_WITH_CUDA_BRIDGE=1)
  target_include_directories(kda-inter-solve PRIVATE ${PROJECT_SOURCE_DIR})
endif()
install(TARGETS kda-inter-solve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
