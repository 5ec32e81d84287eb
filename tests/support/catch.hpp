// tests/support/catch.hpp: the one include of Catch2, 2.13 (Debian 12, Ubuntu 22.04) or 3.x
// (Ubuntu 24.04). With Catch2 3 it adds the 2.13 spellings the suite uses: the substring matcher
// Catch::Contains / Catch::Matchers::Contains (Catch2 3: ContainsSubstring; its own Contains
// matches range elements) and Approx at global scope (Catch2 3: Catch::Approx).
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

namespace Catch::Matchers {
// One overload per argument form, so that each beats Catch2 3's Contains(T&&) template.
inline StringContainsMatcher Contains(const char* s, CaseSensitive cs = CaseSensitive::Yes) { return ContainsSubstring(s, cs); }
inline StringContainsMatcher Contains(std::string& s, CaseSensitive cs = CaseSensitive::Yes) { return ContainsSubstring(s, cs); }
inline StringContainsMatcher Contains(const std::string& s, CaseSensitive cs = CaseSensitive::Yes) { return ContainsSubstring(s, cs); }
inline StringContainsMatcher Contains(std::string&& s, CaseSensitive cs = CaseSensitive::Yes) { return ContainsSubstring(s, cs); }
}  // namespace Catch::Matchers
namespace Catch {
using Matchers::Contains;
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
