// tests/io/test_cli.cpp: the kda-inter-solve command as a user drives it. Success: exit 0 and a
// result file equal to the library's CPU output. Any bad input: exit 2, exactly one line on
// stderr naming the problem, and no result file (nor a temporary one) left behind.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>

#include "io/io_support.hpp"
#include "support/catch.hpp"

using kda::dtype;
using kda::host_tensor;
using kda::io::safetensors_file;
namespace kio = kda::testing::io;

namespace {

const std::string exe = KDA_INTER_SOLVE_EXE;

/// Runs the command on `in` and checks the failure contract: exit 2, one line on stderr that
/// contains `what`, and nothing but `in` in the directory afterwards.
void expect_refused(const kio::scratch_dir& dir, const std::vector<std::string>& args, const std::string& what) {
    const auto before = dir.entries();
    const auto r = kio::run_command(exe, args, dir.path());
    INFO("stderr: " << r.err);
    CHECK(r.status == 2);
    CHECK(kio::count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Matchers::Contains(what));
    CHECK(dir.entries() == before);  // no result file, no temporary file
}

void expect_refused_case(const safetensors_file& f, const std::string& what) {
    kio::scratch_dir dir;
    safetensors_file::save(dir / "case.safetensors", f.tensors, f.metadata);
    expect_refused(dir, {"--in", (dir / "case.safetensors").string(), "--out", (dir / "out.safetensors").string(), "--backend", "cpu"}, what);
}

bool same_bytes(const host_tensor& a, const host_tensor& b) {
    return a.type() == b.type() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.nbytes())) == 0;
}

}  // namespace

TEST_CASE("kda-inter-solve runs a golden case and writes the CPU result", "[cli]") {
    kio::scratch_dir dir;
    const std::string in = std::string(KDA_FLA_DATA_DIR) + "/varlen.safetensors";
    const auto out = dir / "result.safetensors";
    const auto r = kio::run_command(exe, {"--in", in, "--out", out.string(), "--backend", "cpu", "--threads", "2", "--check"}, dir.path());
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(r.err.empty());
    CHECK_THAT(r.out, Catch::Matchers::Contains("cpu  vs float64: Aqk rel RMS"));
    CHECK_THAT(r.out, Catch::Matchers::Contains("FLA  vs float64: Aqk rel RMS"));
    CHECK(dir.entries() == std::vector<std::string>{"result.safetensors"});

    const safetensors_file res = safetensors_file::load(out);
    CHECK(res.meta("backend") == "cpu");
    CHECK(res.meta("precision") == "fp32");
    REQUIRE(res.meta("milliseconds").has_value());
    CHECK(std::stod(*res.meta("milliseconds")) >= 0);
    CHECK(res.tensors.size() == 2);

    const auto c = kda::io::inter_solve_case::load(in);
    kda::inter_solve_problem p = c.problem;
    p.solve_precision = kda::precision::fp32;
    host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
    kda::inter_solve(kda::cpu_backend{1}, p, c.args(Aqk, Akk));
    CHECK(same_bytes(res.at("Aqk"), Aqk));
    CHECK(same_bytes(res.at("Akk"), Akk));
    CHECK(res.at("Aqk").shape() == std::vector<std::int64_t>{1, 300, 2, 64});
    CHECK(res.at("Akk").type() == dtype::bf16);
}

TEST_CASE("kda-inter-solve: tf32 precision, a varlen case without chunk_indices, T = 0", "[cli]") {
    kio::scratch_dir dir;
    safetensors_file f = kio::small_case(true);
    f.tensors.erase("chunk_indices");
    safetensors_file::save(dir / "case.safetensors", f.tensors, f.metadata);
    auto r = kio::run_command(exe, {"--in", (dir / "case.safetensors").string(), "--out", (dir / "r.safetensors").string(), "--backend", "cpu", "--precision", "tf32"}, dir.path());
    INFO("stderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK(safetensors_file::load(dir / "r.safetensors").meta("precision") == "tf32");

    safetensors_file z;
    z.tensors.emplace("q", host_tensor(dtype::fp32, {1, 0, 1, 8}));
    z.tensors.emplace("k", host_tensor(dtype::fp32, {1, 0, 1, 8}));
    z.tensors.emplace("g", host_tensor(dtype::fp32, {1, 0, 1, 8}));
    z.tensors.emplace("beta", host_tensor(dtype::fp32, {1, 0, 1}));
    z.tensors.emplace("Akkd", host_tensor(dtype::fp32, {1, 0, 1, 16}));
    z.tensors.emplace("scale", kio::iota(dtype::fp32, {1}));
    safetensors_file::save(dir / "empty.safetensors", z.tensors);
    r = kio::run_command(exe, {"--in", (dir / "empty.safetensors").string(), "--out", (dir / "z.safetensors").string(), "--backend", "cpu"}, dir.path());
    REQUIRE(r.status == 0);
    const auto zr = safetensors_file::load(dir / "z.safetensors");
    CHECK(zr.at("Aqk").shape() == std::vector<std::int64_t>{1, 0, 1, 64});
}

TEST_CASE("kda-inter-solve: bad flags exit 2 with one line", "[cli][hostile]") {
    kio::scratch_dir dir;
    const std::string in = std::string(KDA_FLA_DATA_DIR) + "/k80.safetensors";
    const std::string out = (dir / "out.safetensors").string();
    expect_refused(dir, {"--out", out}, "--in is required");
    expect_refused(dir, {"--in", in}, "--out is required");
    expect_refused(dir, {"--in", in, "--out", out, "--backend", "tpu"}, "--backend");
    expect_refused(dir, {"--in", in, "--out", out, "--precision", "fp16"}, "--precision");
    expect_refused(dir, {"--in", in, "--out", out, "--threads", "-3"}, "--threads");
    expect_refused(dir, {"--in", in, "--out", out, "--frobnicate"}, "frobnicate");
    expect_refused(dir, {"--in", (dir / "absent.safetensors").string(), "--out", out}, "cannot open");
    expect_refused(dir, {"--in", in, "--out", (dir / "no-such-dir" / "out.safetensors").string(), "--backend", "cpu"}, "cannot create the temporary file");
}

TEST_CASE("kda-inter-solve: --backend cuda without CUDA", "[cli][hostile]") {
#if KDA_WITH_CUDA_BRIDGE
    SUCCEED("built with the CUDA bridge: covered by the CUDA suite");
#else
    kio::scratch_dir dir;
    const std::string in = std::string(KDA_FLA_DATA_DIR) + "/k80.safetensors";
    for (const char* b : {"cuda", "both"}) expect_refused(dir, {"--in", in, "--out", (dir / "o.safetensors").string(), "--backend", b}, "built without CUDA");
    // without a GPU the default backend is the CPU
    const auto r = kio::run_command(exe, {"--in", in, "--out", (dir / "o.safetensors").string()}, dir.path());
    CHECK(r.status == 0);
    CHECK(safetensors_file::load(dir / "o.safetensors").meta("backend") == "cpu");
#endif
}

TEST_CASE("kda-inter-solve: hostile files exit 2 with one line and no output", "[cli][hostile]") {
    auto image = [](const std::string& header, std::size_t data, std::uint64_t len = UINT64_MAX) { return kio::raw_image(header, data, len); };
    const std::string ok_entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
    const struct {
        const char* name;
        std::vector<std::byte> bytes;
        const char* what;
    } files[] = {
        {"empty", {}, "the file is empty"},
        {"truncated prefix", std::vector<std::byte>(3), "fewer than the 8-byte header length"},
        {"header beyond the file", image("{}", 0, 4096), "header length 4096 reaches past the end of the file"},
        {"header not JSON", image("{\"q\": nope}", 0), "the header is not valid JSON"},
        {"offsets out of range", image(R"({"q":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), "reach past the data section of 8 bytes"},
        {"overlapping offsets", image("{\"a\":" + ok_entry + ",\"b\":" + ok_entry + "}", 4), "overlap those of tensor"},
        {"unknown dtype", image(R"({"q":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", 1), "unknown or unsupported dtype 'Q8'"},
        {"byte size overflow", image(R"({"q":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8), "overflows int64"},
    };
    for (const auto& f : files) {
        DYNAMIC_SECTION(f.name) {
            kio::scratch_dir dir;
            kio::write_bytes(dir / "case.safetensors", f.bytes);
            expect_refused(dir, {"--in", (dir / "case.safetensors").string(), "--out", (dir / "out.safetensors").string(), "--backend", "cpu"}, f.what);
        }
    }
    // a file cut short in its data section
    DYNAMIC_SECTION("truncated data") {
        kio::scratch_dir dir;
        const safetensors_file f = kio::small_case();
        auto bytes = safetensors_file::to_bytes(f.tensors, f.metadata);
        bytes.resize(bytes.size() - 100);
        kio::write_bytes(dir / "case.safetensors", bytes);
        expect_refused(dir, {"--in", (dir / "case.safetensors").string(), "--out", (dir / "out.safetensors").string(), "--backend", "cpu"}, "reach past the data section");
    }
}

TEST_CASE("kda-inter-solve: defective cases exit 2 with one line and no output", "[cli][hostile]") {
    for (const auto& d : kio::case_defects()) {
        DYNAMIC_SECTION(d.name) {
            safetensors_file f = kio::small_case(d.varlen);
            d.apply(f);
            expect_refused_case(f, d.message);
        }
    }
}
