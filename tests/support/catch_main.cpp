// Catch2's main(), compiled once and shared by the host test programs.
#define CATCH_CONFIG_MAIN
#include "catch.hpp"
