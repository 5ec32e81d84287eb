// tests/fuzz/fuzz_safetensors.cpp: libFuzzer target for the safetensors reader and the case
// validation (kda/io/safetensors.hpp, kda/io/case.hpp).
//
// For every input:
//   1. parse it; a kda::error is the expected outcome for most inputs, anything else (a crash, a
//      sanitizer report, another exception type) is a finding;
//   2. when it parses, writing it back and parsing again must give the same tensors and metadata;
//   3. map it to a case; when the case validates and is small, run the CPU backend on it (one
//      thread): validation must exclude every input that would make the backend read or write out
//      of bounds.
// Build and run (clang; see tests/io.cmake):
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DKDA_FUZZ=ON -DKDA_ENABLE_CUDA=OFF
//   cmake --build build-fuzz --target kda_fuzz_safetensors
//   mkdir -p /tmp/corpus && build-fuzz/tests/kda_fuzz_safetensors -dict=tests/fuzz/safetensors.dict \
//       -max_total_time=300 /tmp/corpus tests/fuzz/corpus
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>

namespace {

void same_or_abort(const kda::io::safetensors_file& a, const kda::io::safetensors_file& b) {
    if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) std::abort();
    for (const auto& [name, t] : a.tensors) {
        const kda::host_tensor* u = b.find(name);
        if (u == nullptr || u->type() != t.type() || u->shape() != t.shape() || u->nbytes() != t.nbytes()) std::abort();
        if (t.nbytes() > 0 && std::memcmp(u->raw(), t.raw(), static_cast<std::size_t>(t.nbytes())) != 0) std::abort();
    }
}

// Bound on the work of one input, so that the fuzzer keeps its pace.
constexpr std::int64_t max_outputs = std::int64_t{1} << 18;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    kda::io::safetensors_file f;
    try {
        f = kda::io::safetensors_file::parse(data, size, "fuzz");
    } catch (const kda::error&) {
        return 0;
    }
    same_or_abort(f, kda::io::safetensors_file::parse(kda::io::safetensors_file::to_bytes(f.tensors, f.metadata), "round trip"));
    try {
        const kda::io::inter_solve_case c = kda::io::inter_solve_case::from_file(f, "fuzz");
        const auto& p = c.problem;
        if (p.B * p.T * p.HV * p.BT <= max_outputs) {
            kda::host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
            kda::inter_solve(kda::cpu_backend{1}, p, c.args(Aqk, Akk));
        }
    } catch (const kda::error&) {
    }
    return 0;
}
