# cmake -DKDA_BUILD_DIR=<build tree> -DKDA_PREFIX=<empty or stale prefix> -P install_and_check.cmake
# Installs the library's component of the build tree (kda_Development: headers + package files; the
# programs are not needed) into a fresh prefix with `cmake --install`, then checks that the package
# holds what find_package(kda) needs: the headers, kdaConfig.cmake, kdaConfigVersion.cmake and the
# exported targets.
foreach(v KDA_BUILD_DIR KDA_PREFIX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_and_check.cmake: -D${v}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${KDA_PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${KDA_BUILD_DIR}" --component kda_Development
                        --prefix "${KDA_PREFIX}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}")
endif()

# The package directory: lib/cmake/kda or lib64/cmake/kda, depending on GNUInstallDirs.
file(GLOB_RECURSE config LIST_DIRECTORIES false "${KDA_PREFIX}/*/kdaConfig.cmake")
list(LENGTH config n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one kdaConfig.cmake under ${KDA_PREFIX}, found ${n}: ${config}")
endif()
get_filename_component(pkg "${config}" DIRECTORY)
set(missing "")
foreach(f "${pkg}/kdaConfigVersion.cmake" "${pkg}/kdaTargets.cmake"
          "${KDA_PREFIX}/include/kda/kda.hpp" "${KDA_PREFIX}/include/kda/cpu/inter_solve.hpp"
          "${KDA_PREFIX}/include/kda/reference/reference.hpp" "${KDA_PREFIX}/include/kda/reference/host_tensor.hpp"
          "${KDA_PREFIX}/include/kda/detail/schedule.hpp")
  if(NOT EXISTS "${f}")
    list(APPEND missing "${f}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "the installed package lacks:\n  ${missing}")
endif()
message(STATUS "kda installed into ${KDA_PREFIX} (package files in ${pkg})")
