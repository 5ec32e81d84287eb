// kda/config.hpp: the library's error type and check macros, shared by every backend.
//
// Every failed check on the host throws kda::error. Its message names the place (file:line), the
// argument, what was expected and what was given. The macros are #ifndef-guarded so that an
// embedder may route them to its own error machinery.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define KDA_HOST_DEVICE __host__ __device__
#else
#define KDA_HOST_DEVICE
#endif

namespace kda {

/// The one exception type kda throws. what() is a complete sentence naming the argument.
class error : public std::runtime_error {
public:
    explicit error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] inline void throw_error(const char* file, int line, const std::string& message) {
    std::ostringstream os;
    os << message << " [" << file << ":" << line << "]";
    throw kda::error(os.str());
}
}  // namespace detail

}  // namespace kda

/// KDA_CHECK(cond, streamed message): throws kda::error when cond is false.
#ifndef KDA_CHECK
#define KDA_CHECK(cond, msg)                                                   \
    do {                                                                       \
        if (!(cond)) {                                                         \
            std::ostringstream kda_check_os_;                                  \
            kda_check_os_ << msg;                                              \
            ::kda::detail::throw_error(__FILE__, __LINE__, kda_check_os_.str()); \
        }                                                                      \
    } while (0)
#endif

/// KDA_DEVICE_ASSERT: debug-only assertion usable in host-device code.
#ifndef KDA_DEVICE_ASSERT
#if defined(KDA_DEBUG)
#include <cassert>
#define KDA_DEVICE_ASSERT(cond) assert(cond)
#else
#define KDA_DEVICE_ASSERT(cond) ((void)0)
#endif
#endif
