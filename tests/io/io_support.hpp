// tests/io/io_support.hpp: helpers shared by the I/O tests: scratch directories, raw safetensors
// images, a small valid case, the table of defective cases (used at the library level and at the
// command level), and a way to run the kda-inter-solve command.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/reference/host_tensor.hpp>
#include <kda/reference/reference.hpp>

namespace kda::testing::io {

namespace fs = std::filesystem;

/// A fresh directory under the system's temp directory, removed with its contents at scope exit.
class scratch_dir {
public:
    scratch_dir() {
        std::random_device rd;
        path_ = fs::temp_directory_path() / ("kda-io-test-" + std::to_string(rd()) + std::to_string(rd()));
        fs::create_directories(path_);
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    [[nodiscard]] const fs::path& path() const { return path_; }
    [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }
    /// Names of the entries in the directory.
    [[nodiscard]] std::vector<std::string> entries() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
        return out;
    }

private:
    fs::path path_;
};

inline void write_bytes(const fs::path& p, const std::vector<std::byte>& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::byte> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(c.size());
    if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
    return out;
}

/// A raw safetensors image: the 8-byte length of `header`, `header` itself, then `data_bytes`
/// bytes of data (0, 1, 2, ...). No validation: for hostile inputs.
inline std::vector<std::byte> raw_image(const std::string& header, std::size_t data_bytes, std::uint64_t length_field = UINT64_MAX) {
    const std::uint64_t n = length_field == UINT64_MAX ? header.size() : length_field;
    std::vector<std::byte> out(8 + header.size() + data_bytes);
    for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
    std::memcpy(out.data() + 8, header.data(), header.size());
    for (std::size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = static_cast<std::byte>(i & 0xff);
    return out;
}

/// A host tensor of dtype t and shape s holding 0, 1, 2, ... (rounded to t).
inline host_tensor iota(dtype t, std::vector<std::int64_t> s) {
    host_tensor x(t, std::move(s));
    for (std::int64_t i = 0; i < x.numel(); ++i) reference::store(x, i, static_cast<double>(i % 97));
    return x;
}

/// A small valid case as a safetensors file: bf16, H = HV = 2, K = 16, BT = 64; varlen with
/// sequences {5, 30, 0, 17} (T = 52) when `varlen`, else B = 1, T = 40.
inline kda::io::safetensors_file small_case(bool varlen = false, dtype X = dtype::bf16) {
    inter_solve_problem p;
    p.B = 1;
    p.T = 40;
    p.H = 2;
    p.HV = 2;
    p.K = 16;
    p.scale = 0.25;
    reference::generator_options opt;
    opt.seed = 7;
    if (varlen) opt.seqlens = {5, 30, 0, 17};
    reference::inputs in = reference::make_inputs(p, X, opt);
    kda::io::safetensors_file f;
    f.tensors.emplace("q", std::move(in.q));
    f.tensors.emplace("k", std::move(in.k));
    f.tensors.emplace("g", std::move(in.g));
    f.tensors.emplace("beta", std::move(in.beta));
    f.tensors.emplace("Akkd", std::move(in.Akkd));
    host_tensor scale(dtype::fp32, {1});
    *scale.data<float>() = 0.25f;
    f.tensors.emplace("scale", std::move(scale));
    if (varlen) {
        f.tensors.emplace("cu_seqlens", std::move(in.cu_seqlens));
        f.tensors.emplace("chunk_indices", std::move(in.chunk_indices));
    }
    f.metadata = {{"BT", "64"}, {"BC", "16"}, {"safe_gate", "false"}};
    return f;
}

/// Sets entry i of an int64 tensor.
inline void set_i64(kda::io::safetensors_file& f, const std::string& name, std::int64_t i, std::int64_t v) {
    f.tensors.at(name).data<std::int64_t>()[i] = v;
}

/// One defect: how to make it from a valid case, and a piece of the message that must name it.
struct defect {
    std::string name;
    bool varlen;
    std::function<void(kda::io::safetensors_file&)> apply;
    std::string message;
};

/// The case-level defects (the byte-level ones live in test_safetensors.cpp and test_cli.cpp).
inline std::vector<defect> case_defects() {
    using F = kda::io::safetensors_file;
    auto replace = [](F& f, const std::string& nm, host_tensor t) { f.tensors.insert_or_assign(nm, std::move(t)); };
    std::vector<defect> d;
    for (const char* nm : {"q", "k", "g", "beta", "Akkd", "scale"})
        d.push_back({std::string("missing ") + nm, false, [nm](F& f) { f.tensors.erase(nm); }, std::string("tensor '") + nm + "' is missing"});
    d.push_back({"q vs k shapes", false, [=](F& f) { replace(f, "k", iota(dtype::bf16, {1, 40, 2, 8})); }, "tensor 'k' has shape [1, 40, 2, 8] but q has [1, 40, 2, 16]"});
    d.push_back({"k dtype", false, [=](F& f) { replace(f, "k", iota(dtype::fp16, {1, 40, 2, 16})); }, "tensor 'k' has dtype F16 but q has BF16"});
    d.push_back({"q rank", false, [=](F& f) { replace(f, "q", iota(dtype::bf16, {40, 2, 16})); }, "tensor 'q': expected rank 4 [B, T, H, K], got [40, 2, 16]"});
    d.push_back({"g vs q", false, [=](F& f) { replace(f, "g", iota(dtype::fp32, {1, 39, 2, 16})); }, "tensor 'g' has shape [1, 39, 2, 16] but q [1, 40, 2, 16]"});
    d.push_back({"beta vs g", false, [=](F& f) { replace(f, "beta", iota(dtype::bf16, {1, 40, 4})); }, "tensor 'beta' has shape [1, 40, 4] but q and g say [B, T, HV] = [1, 40, 2]"});
    d.push_back({"Akkd vs g", false, [=](F& f) { replace(f, "Akkd", iota(dtype::fp32, {1, 40, 3, 16})); }, "tensor 'Akkd' has shape [1, 40, 3, 16] but q and g say"});
    d.push_back({"g dtype", false, [=](F& f) { replace(f, "g", iota(dtype::bf16, {1, 40, 2, 16})); }, "argument 'g': expected dtype fp32, got bf16"});
    d.push_back({"BC vs Akkd width", false, [=](F& f) { replace(f, "Akkd", iota(dtype::fp32, {1, 40, 2, 8})); }, "tensor 'Akkd' has 8 columns but BC = 16 (metadata)"});
    d.push_back({"BT metadata vs Aqk_diag width", false, [=](F& f) { replace(f, "Aqk_diag", iota(dtype::bf16, {1, 40, 2, 64})); f.metadata["BT"] = "32"; },
                 "tensor 'Aqk_diag' has 64 columns but BT = 32 (metadata)"});
    d.push_back({"BT metadata not 32 or 64", false, [](F& f) { f.metadata["BT"] = "48"; }, "metadata 'BT': expected 32 or 64, got 48"});
    d.push_back({"BT metadata that wraps around int", false, [](F& f) { f.metadata["BT"] = "4294967360"; }, "metadata 'BT': expected a size in [0, 1048576], got 4294967360"});
    d.push_back({"BT metadata not an integer", false, [](F& f) { f.metadata["BT"] = "64x"; }, "metadata 'BT': expected an integer, got '64x'"});
    d.push_back({"safe_gate metadata", false, [](F& f) { f.metadata["safe_gate"] = "maybe"; }, "metadata 'safe_gate': expected true or false, got 'maybe'"});
    d.push_back({"T metadata vs q", false, [](F& f) { f.metadata["T"] = "41"; }, "metadata 'T' = 41 disagrees with the tensors (T = 40"});
    d.push_back({"HV not a multiple of H", false,
                 [=](F& f) {
                     replace(f, "g", iota(dtype::fp32, {1, 40, 3, 16}));
                     replace(f, "beta", iota(dtype::bf16, {1, 40, 3}));
                     replace(f, "Akkd", iota(dtype::fp32, {1, 40, 3, 16}));
                 },
                 "argument 'HV': expected a multiple of H = 2, got HV = 3"});
    d.push_back({"scale shape", false, [=](F& f) { replace(f, "scale", iota(dtype::fp32, {2})); }, "tensor 'scale': expected one value (shape [] or [1]), got [2]"});
    d.push_back({"scale not finite", false, [](F& f) { *f.tensors.at("scale").data<float>() = INFINITY; }, "argument 'scale': expected a finite number"});
    d.push_back({"K = 0", false,
                 [=](F& f) {
                     replace(f, "q", host_tensor(dtype::bf16, {1, 40, 2, 0}));
                     replace(f, "k", host_tensor(dtype::bf16, {1, 40, 2, 0}));
                     replace(f, "g", host_tensor(dtype::fp32, {1, 40, 2, 0}));
                 },
                 "argument 'K': expected 1 <= K <= 256, got 0"});
    // varlen: cu_seqlens = {0, 5, 35, 35, 52}, chunk_indices = {(0,0), (1,0), (3,0)}
    d.push_back({"cu_seqlens not starting at 0", true, [](F& f) { set_i64(f, "cu_seqlens", 0, 1); }, "expected cu_seqlens[0] == 0, got 1"});
    d.push_back({"cu_seqlens decreasing", true, [](F& f) { set_i64(f, "cu_seqlens", 2, 4); }, "expected non-decreasing offsets, got cu_seqlens[2] = 4 < cu_seqlens[1] = 5"});
    d.push_back({"cu_seqlens negative", true, [](F& f) { set_i64(f, "cu_seqlens", 1, -5); }, "expected non-negative offsets, got cu_seqlens[1] = -5"});
    d.push_back({"cu_seqlens not ending at T", true, [](F& f) { set_i64(f, "cu_seqlens", 4, 51); }, "expected the last offset to equal T = 52, got cu_seqlens[4] = 51"});
    d.push_back({"cu_seqlens with B > 1", true,
                 [=](F& f) {
                     replace(f, "q", iota(dtype::bf16, {2, 52, 2, 16}));
                     replace(f, "k", iota(dtype::bf16, {2, 52, 2, 16}));
                     replace(f, "g", iota(dtype::fp32, {2, 52, 2, 16}));
                     replace(f, "beta", iota(dtype::bf16, {2, 52, 2}));
                     replace(f, "Akkd", iota(dtype::fp32, {2, 52, 2, 16}));
                 },
                 "argument 'B': expected B == 1 with cu_seqlens (varlen), got B = 2"});
    d.push_back({"chunk_indices entry", true, [](F& f) { set_i64(f, "chunk_indices", 5, 1); }, "chunk_indices': does not match cu_seqlens: entry [2, 1] expected 0, got 1"});
    d.push_back({"chunk_indices count", true, [=](F& f) { replace(f, "chunk_indices", host_tensor(dtype::i64, {2, 2})); },
                 "chunk_indices': does not match cu_seqlens: expected 3 chunks of BT = 64, got 2"});
    d.push_back({"chunk_indices without cu_seqlens", true, [](F& f) { f.tensors.erase("cu_seqlens"); }, "argument 'chunk_indices': was given without cu_seqlens"});
    return d;
}

/// The message of the kda::error that f() throws, or a note that it threw none (any other
/// exception escapes and fails the test).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const kda::error& e) {
        return e.what();
    }
    return "<no kda::error was thrown>";
}

/// The result of running a command: exit status, stdout and stderr.
struct command_result {
    int status = -1;
    std::string out, err;
};

inline std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

/// Runs `exe` with `args` (each quoted), capturing stdout and stderr through files in `dir`.
inline command_result run_command(const std::string& exe, const std::vector<std::string>& args, const fs::path& dir) {
    const fs::path o = dir / "cmd.stdout", e = dir / "cmd.stderr";
    std::ostringstream cmd;
    cmd << shell_quote(exe);
    for (const auto& a : args) cmd << ' ' << shell_quote(a);
    cmd << " > " << shell_quote(o.string()) << " 2> " << shell_quote(e.string()) << " < /dev/null";
    const int rc = std::system(cmd.str().c_str());
    command_result r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    r.out = slurp(o);
    r.err = slurp(e);
    fs::remove(o);
    fs::remove(e);
    return r;
}

inline int count_lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    if (!s.empty() && s.back() != '\n') ++n;
    return n;
}

}  // namespace kda::testing::io
