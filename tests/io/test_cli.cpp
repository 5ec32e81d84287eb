// tests/io/test_cli.cpp: the kda-inter-solve command as a user drives it. Success: exit 0 and a
// result file equal to the library's CPU output. Any bad input: exit 2, exactly one line on
// stderr naming the problem, and no result file (nor a temporary one) left behind.
// --stage intra (the whole intra stage) and --gate raw|kda|kda-lower-bound (the gate cumsum first)
// are checked against the float64 reference and against the library's own calls.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <kda/io/case.hpp>
#include <kda/io/safetensors.hpp>
#include <kda/kda.hpp>

#include "io/io_support.hpp"
#include "support/catch.hpp"
#include "support/metrics.hpp"

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

TEST_CASE("kda-inter-solve --check: exit 1 when an error exceeds its bound, which --max-error-ratio sets", "[cli]") {
    kio::scratch_dir dir;
    const std::string in = std::string(KDA_FLA_DATA_DIR) + "/k80.safetensors";
    const std::string out = (dir / "r.safetensors").string();
    for (const char* st : {"inter-solve", "intra"}) {
        INFO("--stage " << st);
        // the suite's bound (1.05x the floor for bf16) and an explicit one just above it: exit 0
        for (const std::vector<std::string>& extra : {std::vector<std::string>{"--check"}, {"--max-error-ratio", "1.01"}}) {
            std::vector<std::string> args = {"--in", in, "--out", out, "--stage", st, "--backend", "cpu", "--threads", "2"};
            args.insert(args.end(), extra.begin(), extra.end());
            const auto r = kio::run_command(exe, args, dir.path());
            INFO("stdout: " << r.out << "\nstderr: " << r.err);
            CHECK(r.status == 0);
            CHECK(r.err.empty());
        }
        // a bound below the rounding floor cannot be met: exit 1, one line per output, the result written
        std::filesystem::remove(out);
        const auto r = kio::run_command(exe, {"--in", in, "--out", out, "--stage", st, "--backend", "cpu", "--max-error-ratio", "0.99"}, dir.path());
        INFO("stdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.status == 1);
        CHECK(kio::count_lines(r.err) == 2);
        CHECK_THAT(r.err, Catch::Matchers::Contains("check failed: cpu  Aqk rel RMS error"));
        CHECK_THAT(r.err, Catch::Matchers::Contains("check failed: cpu  Akk rel RMS error"));
        CHECK(std::filesystem::exists(out));
    }
    expect_refused(dir, {"--in", in, "--out", out, "--max-error-ratio", "0"}, "--max-error-ratio");
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

// ---------------------------------------------------------------------------------------------
// --stage intra and --gate

TEST_CASE("kda-inter-solve --stage intra on golden cases: at the rounding floor of float64", "[cli][intra]") {
    for (const char* name : {"basic_tail", "safe_gate"}) {
        DYNAMIC_SECTION(name) {
            kio::scratch_dir dir;
            const std::string in = std::string(KDA_FLA_DATA_DIR) + "/" + name + ".safetensors";
            const auto out = dir / "result.safetensors";
            const auto r = kio::run_command(exe, {"--in", in, "--out", out.string(), "--stage", "intra", "--backend", "cpu", "--threads", "2", "--check"}, dir.path());
            INFO("stdout: " << r.out << "\nstderr: " << r.err);
            REQUIRE(r.status == 0);
            CHECK(r.err.empty());
            CHECK_THAT(r.out, Catch::Matchers::Contains("intra stage"));
            CHECK_THAT(r.out, Catch::Matchers::Contains("cpu  vs float64: Aqk rel RMS"));
            CHECK_THAT(r.out, Catch::Matchers::Contains("FLA  vs float64: Aqk rel RMS"));
            CHECK(dir.entries() == std::vector<std::string>{"result.safetensors"});

            const safetensors_file res = safetensors_file::load(out);
            CHECK(res.meta("stage") == "intra");
            CHECK(res.meta("gate") == "cumulated");
            CHECK(res.meta("backend") == "cpu");
            CHECK(res.tensors.size() == 2);

            // the case without Akkd / Aqk_diag: the file's are ignored
            const auto c = kda::io::inter_solve_case::load(in, kda::io::case_kind::intra);
            CHECK_FALSE(c.Akkd.defined());
            kda::inter_solve_problem p = c.problem;
            p.solve_precision = kda::precision::fp32;
            host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
            const kda::reference::result ref = kda::reference::intra(p, c.intra_args(a0, k0));
            const auto cmp = kda::testing::compare(ref, res.at("Aqk"), res.at("Akk"), a0, k0);
            INFO("Aqk " << cmp.aqk.err << " (floor " << cmp.aqk.floor << "), Akk " << cmp.akk.err << " (floor " << cmp.akk.floor << ")");
            CHECK(cmp.aqk.err <= kda::testing::full_precision_tolerance(dtype::bf16, cmp.aqk.floor));
            CHECK(cmp.akk.err <= kda::testing::full_precision_tolerance(dtype::bf16, cmp.akk.floor));
            CHECK(cmp.untouched_changed == 0);  // zeros above the diagonal blocks

            // the library's own call, byte for byte
            host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
            kda::chunk_kda_intra(kda::cpu_backend{1}, p, c.intra_args(Aqk, Akk));
            CHECK(same_bytes(res.at("Aqk"), Aqk));
            CHECK(same_bytes(res.at("Akk"), Akk));
        }
    }
}

namespace {

/// A small varlen intra-stage case (bf16, H = HV = 2, K = 16, sequences {5, 30, 0, 17}) whose g holds
/// the raw gate inputs of `act` (A_log / dt_bias from the generator, as the activation takes them);
/// no Akkd.
safetensors_file raw_gate_case(kda::gate_activation act, kda::reference::gate_inputs& gin) {
    safetensors_file f = kio::small_case(true);
    f.tensors.erase("Akkd");
    f.tensors.erase("chunk_indices");
    kda::cumsum_problem cp;
    cp.B = 1;
    cp.HV = 2;
    cp.K = 16;
    cp.BT = 64;
    cp.activation = act;
    cp.lower_bound = -3.0;
    kda::reference::gate_options opt;
    opt.seed = 11;
    opt.seqlens = {5, 30, 0, 17};
    gin = kda::reference::make_gate_inputs(cp, dtype::bf16, opt);
    f.tensors.insert_or_assign("g", gin.g.clone());
    if (gin.A_log.defined()) f.tensors.emplace("A_log", gin.A_log.clone());
    if (gin.dt_bias.defined()) f.tensors.emplace("dt_bias", gin.dt_bias.clone());
    return f;
}

}  // namespace

TEST_CASE("kda-inter-solve --stage intra --gate raw|kda|kda-lower-bound: the library's cumsum + intra", "[cli][intra]") {
    const struct {
        const char* gate;
        kda::gate_activation act;
    } gates[] = {{"raw", kda::gate_activation::none}, {"kda", kda::gate_activation::kda}, {"kda-lower-bound", kda::gate_activation::kda_lower_bound}};
    for (const auto& gt : gates) {
        DYNAMIC_SECTION(gt.gate) {
            kio::scratch_dir dir;
            kda::reference::gate_inputs gin;
            const safetensors_file f = raw_gate_case(gt.act, gin);
            safetensors_file::save(dir / "case.safetensors", f.tensors, f.metadata);
            std::vector<std::string> args = {"--in", (dir / "case.safetensors").string(), "--out", (dir / "r.safetensors").string(), "--stage", "intra",
                                              "--gate", gt.gate, "--backend", "cpu", "--check"};
            if (gt.act == kda::gate_activation::kda_lower_bound) args.insert(args.end(), {"--lower-bound", "-3"});
            const auto r = kio::run_command(exe, args, dir.path());
            INFO("stdout: " << r.out << "\nstderr: " << r.err);
            REQUIRE(r.status == 0);
            CHECK_THAT(r.out, Catch::Matchers::Contains("cpu  gate cumsum vs float64: g rel RMS"));
            const safetensors_file res = safetensors_file::load(dir / "r.safetensors");
            CHECK(res.meta("stage") == "intra");
            CHECK(res.meta("gate") == gt.gate);
            REQUIRE(res.meta("milliseconds_gate").has_value());

            // the same two calls through the library
            const kda::cumsum_problem cp = gin.problem;
            host_tensor g = gin.make_output(0.0);
            kda::chunk_local_cumsum(kda::cpu_backend{1}, cp, gin.args(g));
            safetensors_file cum;  // q, k, beta, scale, cu_seqlens; g replaced by the cumulated gates
            for (const auto& [nm, t] : f.tensors) cum.tensors.emplace(nm, t.clone());
            cum.metadata = f.metadata;
            cum.tensors.insert_or_assign("g", std::move(g));
            const auto c = kda::io::inter_solve_case::from_file(cum, "<cumulated>", kda::io::case_kind::intra);
            kda::inter_solve_problem p = c.problem;
            p.solve_precision = kda::precision::fp32;
            host_tensor Aqk = c.initial_aqk(), Akk = c.initial_akk();
            kda::chunk_kda_intra(kda::cpu_backend{1}, p, c.intra_args(Aqk, Akk));
            CHECK(same_bytes(res.at("Aqk"), Aqk));
            CHECK(same_bytes(res.at("Akk"), Akk));

            // and near the float64 pipeline (cumsum in float64, then the float64 stage)
            const std::vector<double> g64v = kda::reference::chunk_local_cumsum(cp, gin.args(Aqk));
            host_tensor g64(dtype::fp64, c.g.shape());
            std::copy(g64v.begin(), g64v.end(), g64.data<double>());
            host_tensor a0 = c.initial_aqk(), k0 = c.initial_akk();
            kda::intra_args ra = c.intra_args(a0, k0);
            ra.g = g64.ref();
            const auto cmp = kda::testing::compare(kda::reference::intra(p, ra), res.at("Aqk"), res.at("Akk"), a0, k0);
            INFO("Aqk " << cmp.aqk.err << " (floor " << cmp.aqk.floor << "), Akk " << cmp.akk.err << " (floor " << cmp.akk.floor << ")");
            CHECK(cmp.aqk.err <= kda::testing::full_precision_tolerance(dtype::bf16, cmp.aqk.floor));
            CHECK(cmp.akk.err <= kda::testing::full_precision_tolerance(dtype::bf16, cmp.akk.floor));
        }
    }
}

TEST_CASE("kda-inter-solve: bad --stage / --gate combinations exit 2 with one line", "[cli][intra][hostile]") {
    kio::scratch_dir dir;
    const std::string in = std::string(KDA_FLA_DATA_DIR) + "/k80.safetensors";
    const std::string out = (dir / "out.safetensors").string();
    expect_refused(dir, {"--in", in, "--out", out, "--stage", "producer"}, "--stage");
    expect_refused(dir, {"--in", in, "--out", out, "--gate", "sigmoid"}, "--gate");
    expect_refused(dir, {"--in", in, "--out", out, "--gate", "raw", "--lower-bound", "-3"}, "--lower-bound applies to --gate kda-lower-bound only");
    expect_refused(dir, {"--in", in, "--out", out, "--gate", "kda-lower-bound", "--lower-bound", "0.5"}, "--lower-bound: expected a finite negative number");

    kda::reference::gate_inputs gin;
    const auto run_on = [&](const safetensors_file& f, const std::vector<std::string>& extra, const std::string& what) {
        kio::scratch_dir d;
        safetensors_file::save(d / "case.safetensors", f.tensors, f.metadata);
        std::vector<std::string> args = {"--in", (d / "case.safetensors").string(), "--out", (d / "out.safetensors").string(), "--backend", "cpu"};
        args.insert(args.end(), extra.begin(), extra.end());
        expect_refused(d, args, what);
    };
    // --gate kda without A_log: named
    safetensors_file f = raw_gate_case(kda::gate_activation::kda, gin);
    f.tensors.erase("A_log");
    run_on(f, {"--stage", "intra", "--gate", "kda"}, "tensor 'A_log' [HV] (F32) is missing");
    // A_log of the wrong shape
    f = raw_gate_case(kda::gate_activation::kda, gin);
    f.tensors.insert_or_assign("A_log", host_tensor(dtype::fp32, {3}));
    run_on(f, {"--stage", "intra", "--gate", "kda"}, "tensor 'A_log': expected [2] F32 ([HV]), got [3] F32");
    // --gate raw with the activation's tensors in the file: a forgotten --gate kda
    f = raw_gate_case(kda::gate_activation::kda, gin);
    run_on(f, {"--stage", "intra", "--gate", "raw"}, "the file holds tensor 'A_log'");
    // the intra stage still needs q, k, g, beta, scale; the inter-solve stage still needs Akkd
    f = raw_gate_case(kda::gate_activation::none, gin);
    run_on(f, {"--stage", "inter-solve", "--gate", "raw"}, "tensor 'Akkd' is missing (a case needs q, k, g, beta, Akkd and scale)");
    f.tensors.erase("beta");
    run_on(f, {"--stage", "intra", "--gate", "raw"}, "tensor 'beta' is missing (an intra-stage case needs q, k, g, beta and scale)");
    // the cumulated g of the intra stage must be fp32, as for the step: a hint at --gate
    f = raw_gate_case(kda::gate_activation::none, gin);
    run_on(f, {"--stage", "intra"}, "tensor 'g' has dtype BF16, but --gate cumulated (the default) takes the chunk-local cumulated log2 gates in F32");
}

TEST_CASE("kda::io::inter_solve_case, case_kind::intra: Akkd and Aqk_diag are ignored", "[cli][intra]") {
    safetensors_file f = kio::small_case();
    f.tensors.insert_or_assign("Akkd", host_tensor(dtype::fp32, {3}));         // would be refused by the inter-solve kind
    f.tensors.insert_or_assign("Aqk_diag", kio::iota(dtype::bf16, {1, 40, 2, 64}));  // not the starting Aqk
    const auto c = kda::io::inter_solve_case::from_file(f, "<memory>", kda::io::case_kind::intra);
    CHECK(c.kind == kda::io::case_kind::intra);
    CHECK_FALSE(c.Akkd.defined());
    const host_tensor a0 = c.initial_aqk();
    CHECK(same_bytes(a0, host_tensor(dtype::bf16, {1, 40, 2, 64})));
    CHECK_THROWS_WITH(kda::io::inter_solve_case::from_file(f, "<memory>"), Catch::Matchers::Contains("tensor 'Akkd': expected rank 4"));
}
