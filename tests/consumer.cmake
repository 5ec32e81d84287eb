# Packaging tests: tests/consumer/ is a downstream project, configured, built and run twice by ctest.
#   consumer.fetchcontent   FetchContent with SOURCE_DIR = this source tree (offline)
#   consumer.install        fixture: `cmake --install` of this build tree into a fresh prefix
#   consumer.find_package   find_package(kda) from that prefix
# Both builds live under the build tree (tests/consumer-*), never in the source tree.
set(kda_consumer_src ${CMAKE_CURRENT_SOURCE_DIR}/consumer)
set(kda_consumer_bin ${CMAKE_CURRENT_BINARY_DIR}/consumer)
set(kda_consumer_prefix ${kda_consumer_bin}/prefix)
if(CMAKE_BUILD_TYPE)
  set(kda_consumer_config -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE})
endif()
set(kda_consumer_common
  --build-generator ${CMAKE_GENERATOR}
  --build-makeprogram ${CMAKE_MAKE_PROGRAM}
  --build-options
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
    ${kda_consumer_config}
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)

add_test(NAME consumer.fetchcontent
  COMMAND ${CMAKE_CTEST_COMMAND} --build-and-test ${kda_consumer_src} ${kda_consumer_bin}/fetchcontent
    --build-noclean ${kda_consumer_common}
    -DKDA_CONSUMER_MODE=fetchcontent -DKDA_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    --test-command ${CMAKE_CTEST_COMMAND} --output-on-failure)

add_test(NAME consumer.install
  COMMAND ${CMAKE_COMMAND} -DKDA_BUILD_DIR=${PROJECT_BINARY_DIR} -DKDA_PREFIX=${kda_consumer_prefix}
    -P ${kda_consumer_src}/install_and_check.cmake)
set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP kda_installed)

add_test(NAME consumer.find_package
  COMMAND ${CMAKE_CTEST_COMMAND} --build-and-test ${kda_consumer_src} ${kda_consumer_bin}/find_package
    --build-noclean ${kda_consumer_common}
    -DKDA_CONSUMER_MODE=find_package -DCMAKE_PREFIX_PATH=${kda_consumer_prefix}
    -DKDA_EXPECTED_PREFIX=${kda_consumer_prefix}
    --test-command ${CMAKE_CTEST_COMMAND} --output-on-failure)
set_tests_properties(consumer.find_package PROPERTIES FIXTURES_REQUIRED kda_installed)

set_tests_properties(consumer.fetchcontent consumer.install consumer.find_package PROPERTIES
  LABELS "packaging" TIMEOUT 900)
