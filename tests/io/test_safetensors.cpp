// tests/io/test_safetensors.cpp: the safetensors reader and writer (kda/io/safetensors.hpp):
// round trips, the golden files' layout, and one test per defect of a hostile file.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <kda/io/safetensors.hpp>

#include "io/io_support.hpp"
#include "support/catch.hpp"

using kda::dtype;
using kda::host_tensor;
using kda::io::safetensors_file;
namespace kio = kda::testing::io;

namespace {

std::vector<std::byte> image_of(const std::string& header, std::size_t data) { return kio::raw_image(header, data); }

/// Parsing `bytes` fails with a kda::error whose message contains `what`.
void expect_parse_error(const std::vector<std::byte>& bytes, const std::string& what) {
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::parse(bytes, "hostile"); }), Catch::Matchers::Contains(what));
}

std::string entry(const std::string& dt, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":")" + dt + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, scalars, empty tensors, metadata", "[io][safetensors]") {
    std::map<std::string, host_tensor> t;
    t.emplace("a_bf16", kio::iota(dtype::bf16, {3, 5}));
    t.emplace("b_fp16", kio::iota(dtype::fp16, {7}));
    t.emplace("c_fp32", kio::iota(dtype::fp32, {2, 3, 4, 5}));
    t.emplace("d_fp64", kio::iota(dtype::fp64, {1, 1, 3}));
    t.emplace("e_i32", kio::iota(dtype::i32, {4, 2}));
    t.emplace("f_i64", kio::iota(dtype::i64, {9}));
    t.emplace("g_scalar", kio::iota(dtype::fp32, {}));
    t.emplace("h_empty", host_tensor(dtype::bf16, {0, 4}));
    const std::map<std::string, std::string> meta{{"BT", "64"}, {"note", "any \"text\"\n\u00e9"}};

    const auto bytes = safetensors_file::to_bytes(t, meta);
    // header length is a multiple of 8, so every tensor is aligned to its element size
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    CHECK(n % 8 == 0);

    const safetensors_file f = safetensors_file::parse(bytes);
    CHECK(f.metadata == meta);
    REQUIRE(f.tensors.size() == t.size());
    for (const auto& [name, x] : t) {
        INFO(name);
        const host_tensor& y = f.at(name);
        CHECK(y.type() == x.type());
        CHECK(y.shape() == x.shape());
        REQUIRE(y.nbytes() == x.nbytes());
        CHECK(std::memcmp(y.raw(), x.raw(), static_cast<std::size_t>(x.nbytes())) == 0);
    }
    CHECK(f.at("g_scalar").rank() == 0);
    CHECK(f.at("g_scalar").numel() == 1);
    CHECK(f.find("missing") == nullptr);
    CHECK_THAT(kio::error_of([&] { (void)f.at("missing"); }), Catch::Matchers::Contains("tensor 'missing' is not in the file"));

    kio::scratch_dir dir;
    safetensors_file::save(dir / "x.safetensors", t, meta);
    CHECK(kio::read_bytes(dir / "x.safetensors") == bytes);
    CHECK(dir.entries() == std::vector<std::string>{"x.safetensors"});  // no temporary file left
    const safetensors_file g = safetensors_file::load(dir / "x.safetensors");
    CHECK(g.metadata == meta);
    CHECK(safetensors_file::to_bytes(g.tensors, g.metadata) == bytes);
}

TEST_CASE("safetensors reads the golden files' layout", "[io][safetensors]") {
    const safetensors_file f = safetensors_file::load(std::string(KDA_FLA_DATA_DIR) + "/varlen.safetensors");
    CHECK(f.meta("BT") == "64");
    CHECK(f.meta("solve_precision") == "tf32");
    CHECK(f.at("q").type() == dtype::bf16);
    CHECK(f.at("q").shape() == std::vector<std::int64_t>{1, 300, 2, 128});
    CHECK(f.at("g").type() == dtype::fp32);
    CHECK(f.at("cu_seqlens").type() == dtype::i64);
    CHECK(f.at("chunk_indices").shape() == std::vector<std::int64_t>{8, 2});
    const auto* cu = f.at("cu_seqlens").data<std::int64_t>();
    CHECK(cu[0] == 0);
    CHECK(cu[5] == 300);
    // loading from memory gives the same tensors
    const safetensors_file m = safetensors_file::parse(kio::read_bytes(std::string(KDA_FLA_DATA_DIR) + "/varlen.safetensors"));
    CHECK(std::memcmp(m.at("q").raw(), f.at("q").raw(), static_cast<std::size_t>(f.at("q").nbytes())) == 0);
}

TEST_CASE("safetensors tolerates header padding, gaps and any entry order", "[io][safetensors]") {
    const std::string h = "{\"b\":" + entry("F32", "[1]", "[8,12]") + ",\"a\":" + entry("I32", "[2]", "[0,8]") + "}     ";
    const safetensors_file f = safetensors_file::parse(image_of(h, 16));
    CHECK(f.at("a").numel() == 2);
    CHECK(f.at("b").numel() == 1);
    const std::string gap = "{\"a\":" + entry("I32", "[1]", "[4,8]") + "}";
    CHECK(safetensors_file::parse(image_of(gap, 12)).at("a").data<std::int32_t>()[0] == 0x07060504);
}

// ---- hostile files: one test per defect ------------------------------------------------------

TEST_CASE("hostile safetensors: empty file", "[io][safetensors][hostile]") {
    expect_parse_error({}, "hostile: the file is empty");
    kio::scratch_dir dir;
    kio::write_bytes(dir / "empty.safetensors", {});
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::load(dir / "empty.safetensors"); }), Catch::Matchers::Contains("the file is empty"));
}

TEST_CASE("hostile safetensors: shorter than the length prefix", "[io][safetensors][hostile]") {
    expect_parse_error(std::vector<std::byte>(5), "the file has 5 bytes, fewer than the 8-byte header length");
}

TEST_CASE("hostile safetensors: truncated data section", "[io][safetensors][hostile]") {
    auto bytes = safetensors_file::to_bytes([] {
        std::map<std::string, host_tensor> t;
        t.emplace("x", kio::iota(dtype::fp32, {4, 4}));
        return t;
    }());
    bytes.resize(bytes.size() - 3);
    expect_parse_error(bytes, "tensor 'x': data_offsets [0,64] reach past the data section of 61 bytes");
    kio::scratch_dir dir;
    kio::write_bytes(dir / "cut.safetensors", bytes);
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::load(dir / "cut.safetensors"); }), Catch::Matchers::Contains("reach past the data section"));
}

TEST_CASE("hostile safetensors: truncated header", "[io][safetensors][hostile]") {
    auto bytes = image_of("{\"x\":" + entry("F32", "[1]", "[0,4]") + "}", 4);
    bytes.resize(20);
    expect_parse_error(bytes, "reaches past the end of the file (20 bytes, 12 after the length prefix)");
}

TEST_CASE("hostile safetensors: header length beyond the file", "[io][safetensors][hostile]") {
    expect_parse_error(kio::raw_image("{}", 0, 1000), "header length 1000 reaches past the end of the file");
    expect_parse_error(kio::raw_image("{}", 0, UINT64_MAX - 1), "exceeds the limit of 104857600 bytes");
}

TEST_CASE("hostile safetensors: header length above the cap", "[io][safetensors][hostile]") {
    expect_parse_error(kio::raw_image("{}", 0, (std::uint64_t{100} << 20) + 1), "header length 104857601 exceeds the limit of 104857600 bytes");
}

TEST_CASE("hostile safetensors: header that is not JSON", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\": [1, 2", 0), "the header is not valid JSON");
    expect_parse_error(image_of("not json at all", 0), "the header is not valid JSON");
    expect_parse_error(image_of("", 0), "the header is not valid JSON");
    expect_parse_error(image_of("{\"x\":\"\xff\xfe\"}", 0), "the header is not valid JSON");  // ill-formed UTF-8
    // the parser's message quotes the bytes it read: they come out escaped, on one line
    const std::string m = kio::error_of([] { (void)safetensors_file::parse(image_of("{\"x\":\"\xff\n\"}", 0)); });
    CHECK(std::all_of(m.begin(), m.end(), [](char c) { return c >= 0x20 && c < 0x7f; }));
}

TEST_CASE("hostile safetensors: header that is JSON but not an object", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("[1, 2, 3]", 0), "the header is JSON but not an object (got a array)");
}

TEST_CASE("hostile safetensors: a tensor named twice", "[io][safetensors][hostile]") {
    const std::string e = entry("F32", "[1]", "[0,4]");
    expect_parse_error(image_of("{\"x\":" + e + ",\"x\":" + e + "}", 4), "tensor 'x' is named twice in the header");
}

TEST_CASE("hostile safetensors: metadata that is not a string map", "[io][safetensors][hostile]") {
    expect_parse_error(image_of(R"({"__metadata__":{"BT":64}})", 0), "__metadata__ entry 'BT' must be a string, got a number");
    expect_parse_error(image_of(R"({"__metadata__":[1]})", 0), "__metadata__ must be an object of strings");
}

TEST_CASE("hostile safetensors: entry that is not an object or lacks fields", "[io][safetensors][hostile]") {
    expect_parse_error(image_of(R"({"x":[0,4]})", 4), "tensor 'x': expected an object {dtype, shape, data_offsets}, got a array");
    expect_parse_error(image_of(R"({"x":{"dtype":"F32","shape":[1]}})", 4), "tensor 'x': needs the fields dtype, shape and data_offsets");
    expect_parse_error(image_of(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4), "tensor 'x': unexpected field 'extra'");
}

TEST_CASE("hostile safetensors: unknown dtype strings", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F31", "[1]", "[0,4]") + "}", 4), "tensor 'x': unknown or unsupported dtype 'F31'");
    expect_parse_error(image_of("{\"x\":" + entry("U8", "[4]", "[0,4]") + "}", 4), "unknown or unsupported dtype 'U8' (kda reads BF16, F16, F32, F64, I32, I64)");
    expect_parse_error(image_of("{\"x\":" + entry("bf16", "[2]", "[0,4]") + "}", 4), "unknown or unsupported dtype 'bf16'");
    expect_parse_error(image_of(R"({"x":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4), "tensor 'x': dtype must be a string");
}

TEST_CASE("hostile safetensors: negative or non-integer extents", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[-1]", "[0,4]") + "}", 4), "tensor 'x': shape entries must be non-negative integers below 2^63, got -1");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1.5]", "[0,4]") + "}", 4), "shape entries must be non-negative integers");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "\"1\"", "[0,4]") + "}", 4), "tensor 'x': shape must be an array");
}

TEST_CASE("hostile safetensors: rank above 4", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1,1,1,1,1]", "[0,4]") + "}", 4), "tensor 'x': rank 5 exceeds 4");
}

TEST_CASE("hostile safetensors: element count overflows 64 bits", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[4294967296,4294967296]", "[0,4]") + "}", 4), "tensor 'x': element count of shape");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[18446744073709551615]", "[0,4]") + "}", 4), "below 2^63");
}

TEST_CASE("hostile safetensors: byte size overflows 64 bits", "[io][safetensors][hostile]") {
    // 2^61 elements fit int64, 2^61 x 8 bytes do not
    expect_parse_error(image_of("{\"x\":" + entry("F64", "[2305843009213693952]", "[0,8]") + "}", 8), "tensor 'x': byte size of [2305843009213693952] x 8 overflows int64");
}

TEST_CASE("hostile safetensors: byte range disagrees with the shape", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[2]", "[0,4]") + "}", 8), "tensor 'x': shape [2] of F32 needs 8 bytes, data_offsets [0,4] give 4");
}

TEST_CASE("hostile safetensors: offsets out of range", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1]", "[8,12]") + "}", 8), "tensor 'x': data_offsets [8,12] reach past the data section of 8 bytes");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1]", "[-4,0]") + "}", 8), "data_offsets must be non-negative integers");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[0]", "[4,0]") + "}", 8), "tensor 'x': data_offsets [4,0] end before they begin");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1]", "[0]") + "}", 8), "data_offsets must be an array [begin, end]");
    expect_parse_error(image_of("{\"x\":" + entry("F32", "[1]", "[18446744073709551612,18446744073709551616]") + "}", 8),
                       "data_offsets must be non-negative integers below 2^63");
}

TEST_CASE("hostile safetensors: overlapping offsets", "[io][safetensors][hostile]") {
    const std::string h = "{\"a\":" + entry("F32", "[2]", "[0,8]") + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}";
    expect_parse_error(image_of(h, 12), "tensor 'b': data_offsets [4, 12] overlap those of tensor 'a' [0, 8]");
    const std::string same = "{\"a\":" + entry("F32", "[1]", "[0,4]") + ",\"b\":" + entry("I32", "[1]", "[0,4]") + "}";
    expect_parse_error(image_of(same, 4), "overlap those of tensor");
}

TEST_CASE("hostile safetensors: names are printed safely", "[io][safetensors][hostile]") {
    expect_parse_error(image_of("{\"a\\nb\":" + entry("F31", "[1]", "[0,4]") + "}", 4), "tensor 'a\\x0ab': unknown");
}

TEST_CASE("safetensors load and save report file-system errors", "[io][safetensors][hostile]") {
    kio::scratch_dir dir;
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::load(dir / "absent.safetensors"); }), Catch::Matchers::Contains("cannot open"));
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::load(dir.path()); }), Catch::Matchers::Contains("not a regular file"));
    std::map<std::string, host_tensor> t;
    t.emplace("x", kio::iota(dtype::fp32, {2}));
    CHECK_THROWS_AS(safetensors_file::save(dir / "no-such-dir" / "x.safetensors", t), kda::error);
    CHECK(dir.entries().empty());
    std::map<std::string, host_tensor> bad;
    bad.emplace("__metadata__", kio::iota(dtype::fp32, {2}));
    CHECK_THAT(kio::error_of([&] { (void)safetensors_file::save(dir / "y.safetensors", bad); }), Catch::Matchers::Contains("cannot write a tensor named '__metadata__'"));
    CHECK(dir.entries().empty());
}
