// Catch2's main(), compiled once and shared by the host test programs. An explicit
// Catch::Session, which Catch2 2.13 (with CATCH_CONFIG_RUNNER) and Catch2 3 both provide.
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
