// tests/support/catch.hpp: the one include of Catch2 (v3 when present, else Debian's v2.13).
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
