// kda/io/safetensors.hpp: reading and writing the safetensors format into kda::host_tensor.
//
// Layout of a file (the format PyTorch's `safetensors.torch.save_file` writes):
//   [0, 8)          N, the header length, unsigned 64-bit little endian
//   [8, 8 + N)      a JSON object: name -> {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
//                   plus an optional "__metadata__": {string: string}; may end in spaces
//   [8 + N, end)    the data section; tensor `name` is bytes [b, e) of it, row-major, little endian
// kda reads the dtypes BF16, F16, F32, F64, I32 and I64, and tensors of rank 0 to 4 (host_tensor's
// limit). Everything is checked before a byte is copied: the header length (within the file and
// at most max_header_bytes), the JSON (an object, no duplicate names), every entry (known dtype,
// non-negative integer extents, element count x dtype size == e - b without int64 overflow) and
// the offsets (inside the data section, pairwise disjoint; gaps are tolerated). Every failure is a
// kda::error that names the source, the tensor and the problem.
//
// Writing orders tensors by element size, largest first, and pads the header with spaces to a
// multiple of 8 bytes, so every tensor's data is aligned to its element size in the file. save()
// writes a temporary file beside the target and renames it: the target either appears complete or
// not at all.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../config.hpp"
#include "../reference/host_tensor.hpp"
#include "../types.hpp"

namespace kda::io {

static_assert(std::endian::native == std::endian::little,
              "kda::io::safetensors copies tensor bytes as they are: it needs a little-endian host");

/// Largest header kda accepts (the Python and Rust readers use the same bound).
inline constexpr std::uint64_t max_header_bytes = std::uint64_t{100} << 20;

/// The safetensors spelling of a kda dtype ("BF16", "F16", "F32", "F64", "I32", "I64").
constexpr std::string_view safetensors_name(dtype t) {
    switch (t) {
        case dtype::bf16: return "BF16";
        case dtype::fp16: return "F16";
        case dtype::fp32: return "F32";
        case dtype::fp64: return "F64";
        case dtype::i32: return "I32";
        case dtype::i64: return "I64";
    }
    return "?";
}

/// The kda dtype of a safetensors dtype string, or nothing for strings kda does not read.
inline std::optional<dtype> dtype_from_safetensors(std::string_view s) {
    for (dtype t : {dtype::bf16, dtype::fp16, dtype::fp32, dtype::fp64, dtype::i32, dtype::i64})
        if (s == safetensors_name(t)) return t;
    return std::nullopt;
}

namespace detail {

/// A string from a hostile file, fit for a one-line message: control and non-ASCII bytes, the
/// backslash and (when `quote`) the single quote escaped as \xNN, cut after `max` bytes.
inline std::string escaped(std::string_view s, std::size_t max, bool quote = false) {
    std::string out;
    const std::size_t n = std::min(s.size(), max);
    for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && !(quote && c == '\'') && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    if (s.size() > n) out += "...";
    return out;
}

/// A name from a hostile file, quoted and escaped (at most 64 bytes shown).
inline std::string printable(std::string_view s) { return "'" + escaped(s, 64, true) + "'"; }

/// One validated header entry.
struct entry {
    std::string name;
    dtype type = dtype::fp32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;  // byte range in the data section
};

inline std::string fmt_extents(const std::vector<std::int64_t>& s) {
    std::ostringstream os;
    os << "[";
    for (std::size_t d = 0; d < s.size(); ++d) os << (d ? ", " : "") << s[d];
    os << "]";
    return os.str();
}

/// A non-negative JSON integer that fits in int64, or nothing.
inline std::optional<std::int64_t> as_index(const nlohmann::json& v) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<std::int64_t>(u);
    }
    if (v.is_number_integer()) {
        const auto i = v.get<std::int64_t>();
        if (i < 0) return std::nullopt;
        return i;
    }
    return std::nullopt;
}

/// Parses and validates a header against a data section of `data_size` bytes. Fills `metadata`;
/// returns the entries sorted by offset.
inline std::vector<entry> parse_header(std::string_view header, std::uint64_t data_size, const std::string& src,
                                       std::map<std::string, std::string>& metadata) {
    const std::string where = "kda::io::safetensors: " + src + ": ";
    // Duplicate names would silently replace each other in the parsed object: refuse them.
    std::set<std::string> seen;
    std::optional<std::string> duplicate;
    const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        if (ev == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
            const auto& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second && !duplicate) duplicate = k;
        }
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(header.begin(), header.end(), cb);
    } catch (const nlohmann::json::exception& e) {
        KDA_CHECK(false, where << "the header is not valid JSON (" << escaped(e.what(), 300) << ")");
    }
    KDA_CHECK(j.is_object(), where << "the header is JSON but not an object (got a " << j.type_name() << ")");
    KDA_CHECK(!duplicate, where << "tensor " << printable(*duplicate) << " is named twice in the header");

    std::vector<entry> entries;
    for (const auto& [key, val] : j.items()) {
        const std::string tn = "tensor " + printable(key) + ": ";
        if (key == "__metadata__") {
            KDA_CHECK(val.is_object(), where << "__metadata__ must be an object of strings, got a " << val.type_name());
            for (const auto& [mk, mv] : val.items()) {
                KDA_CHECK(mv.is_string(), where << "__metadata__ entry " << printable(mk) << " must be a string, got a " << mv.type_name());
                metadata[mk] = mv.get<std::string>();
            }
            continue;
        }
        KDA_CHECK(!key.empty(), where << "a tensor has an empty name");
        KDA_CHECK(val.is_object(), where << tn << "expected an object {dtype, shape, data_offsets}, got a " << val.type_name());
        for (const auto& [field, unused] : val.items()) {
            (void)unused;
            KDA_CHECK(field == "dtype" || field == "shape" || field == "data_offsets",
                      where << tn << "unexpected field " << printable(field) << " (expected dtype, shape, data_offsets)");
        }
        KDA_CHECK(val.contains("dtype") && val.contains("shape") && val.contains("data_offsets"),
                  where << tn << "needs the fields dtype, shape and data_offsets");
        entry e;
        e.name = key;
        const auto& jd = val["dtype"];
        KDA_CHECK(jd.is_string(), where << tn << "dtype must be a string, got a " << jd.type_name());
        const auto t = dtype_from_safetensors(jd.get_ref<const std::string&>());
        KDA_CHECK(t.has_value(), where << tn << "unknown or unsupported dtype " << printable(jd.get_ref<const std::string&>())
                                      << " (kda reads BF16, F16, F32, F64, I32, I64)");
        e.type = *t;
        const auto& js = val["shape"];
        KDA_CHECK(js.is_array(), where << tn << "shape must be an array, got a " << js.type_name());
        KDA_CHECK(js.size() <= static_cast<std::size_t>(max_rank), where << tn << "rank " << js.size() << " exceeds " << max_rank << ", the most kda reads");
        std::int64_t numel = 1;
        for (const auto& x : js) {
            const auto v = as_index(x);
            KDA_CHECK(v.has_value(), where << tn << "shape entries must be non-negative integers below 2^63, got " << x.dump());
            e.shape.push_back(*v);
            KDA_CHECK(!kda::detail::mul_overflows(numel, *v, numel), where << tn << "element count of shape " << js.dump() << " overflows int64");
        }
        std::int64_t bytes = 0;
        KDA_CHECK(!kda::detail::mul_overflows(numel, size_of(e.type), bytes),
                  where << tn << "byte size of " << js.dump() << " x " << size_of(e.type) << " overflows int64");
        const auto& jo = val["data_offsets"];
        KDA_CHECK(jo.is_array() && jo.size() == 2, where << tn << "data_offsets must be an array [begin, end], got " << jo.dump());
        const auto b = as_index(jo[0]), en = as_index(jo[1]);
        KDA_CHECK(b.has_value() && en.has_value(), where << tn << "data_offsets must be non-negative integers below 2^63, got " << jo.dump());
        KDA_CHECK(*b <= *en, where << tn << "data_offsets " << jo.dump() << " end before they begin");
        e.begin = static_cast<std::uint64_t>(*b);
        e.end = static_cast<std::uint64_t>(*en);
        KDA_CHECK(e.end <= data_size, where << tn << "data_offsets " << jo.dump() << " reach past the data section of " << data_size << " bytes");
        KDA_CHECK(static_cast<std::uint64_t>(bytes) == e.end - e.begin,
                  where << tn << "shape " << js.dump() << " of " << safetensors_name(e.type) << " needs " << bytes << " bytes, data_offsets "
                        << jo.dump() << " give " << (e.end - e.begin));
        entries.push_back(std::move(e));
    }
    std::sort(entries.begin(), entries.end(), [](const entry& x, const entry& y) { return std::tie(x.begin, x.end) < std::tie(y.begin, y.end); });
    for (std::size_t i = 1; i < entries.size(); ++i)
        KDA_CHECK(entries[i].begin >= entries[i - 1].end, where << "tensor " << printable(entries[i].name) << ": data_offsets [" << entries[i].begin << ", "
                                                                 << entries[i].end << "] overlap those of tensor " << printable(entries[i - 1].name)
                                                                 << " [" << entries[i - 1].begin << ", " << entries[i - 1].end << "]");
    return entries;
}

/// The header length from the 8-byte prefix, checked against the file size and the cap.
inline std::uint64_t header_length(const unsigned char* prefix, std::uint64_t file_size, const std::string& src) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
    KDA_CHECK(n <= max_header_bytes, "kda::io::safetensors: " << src << ": header length " << n << " exceeds the limit of " << max_header_bytes << " bytes");
    KDA_CHECK(n <= file_size - 8, "kda::io::safetensors: " << src << ": header length " << n << " reaches past the end of the file (" << file_size
                                                            << " bytes, " << file_size - 8 << " after the length prefix)");
    return n;
}

inline void check_size(std::uint64_t file_size, const std::string& src) {
    KDA_CHECK(file_size != 0, "kda::io::safetensors: " << src << ": the file is empty");
    KDA_CHECK(file_size >= 8, "kda::io::safetensors: " << src << ": the file has " << file_size << " bytes, fewer than the 8-byte header length");
}

}  // namespace detail

/// The tensors and metadata of one safetensors file, held in owning host buffers.
struct safetensors_file {
    std::map<std::string, host_tensor> tensors;
    std::map<std::string, std::string> metadata;

    /// Parses a complete file image; `source` names it in error messages.
    static safetensors_file parse(std::span<const std::byte> bytes, const std::string& source = "<memory>") {
        detail::check_size(bytes.size(), source);
        const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
        const std::uint64_t n = detail::header_length(u, bytes.size(), source);
        safetensors_file f;
        const std::string_view header(reinterpret_cast<const char*>(u + 8), static_cast<std::size_t>(n));
        const std::uint64_t data0 = 8 + n;
        for (auto& e : detail::parse_header(header, bytes.size() - data0, source, f.metadata)) {
            host_tensor t(e.type, std::move(e.shape));
            if (t.nbytes() > 0) std::memcpy(t.raw(), u + data0 + e.begin, static_cast<std::size_t>(t.nbytes()));
            f.tensors.emplace(std::move(e.name), std::move(t));
        }
        return f;
    }
    static safetensors_file parse(const void* data, std::size_t size, const std::string& source = "<memory>") {
        return parse(std::span<const std::byte>(static_cast<const std::byte*>(data), size), source);
    }

    /// Reads a file: the header first, then each tensor straight into its buffer.
    static safetensors_file load(const std::filesystem::path& path) {
        const std::string src = detail::printable(path.string());
        std::error_code ec;
        const bool regular = std::filesystem::is_regular_file(path, ec);
        KDA_CHECK(regular, "kda::io::safetensors: " << src << ": cannot open: " << (ec ? ec.message() : std::string("not a regular file")));
        const std::uint64_t size = std::filesystem::file_size(path, ec);
        KDA_CHECK(!ec, "kda::io::safetensors: " << src << ": cannot read its size: " << ec.message());
        detail::check_size(size, src);
        std::ifstream in(path, std::ios::binary);
        KDA_CHECK(in.good(), "kda::io::safetensors: " << src << ": cannot open for reading");
        unsigned char prefix[8];
        in.read(reinterpret_cast<char*>(prefix), 8);
        KDA_CHECK(in.good(), "kda::io::safetensors: " << src << ": cannot read the header length");
        const std::uint64_t n = detail::header_length(prefix, size, src);
        std::string header(static_cast<std::size_t>(n), '\0');
        in.read(header.data(), static_cast<std::streamsize>(n));
        KDA_CHECK(in.good(), "kda::io::safetensors: " << src << ": cannot read the " << n << "-byte header");
        safetensors_file f;
        const std::uint64_t data0 = 8 + n;
        for (auto& e : detail::parse_header(header, size - data0, src, f.metadata)) {
            host_tensor t(e.type, std::move(e.shape));
            if (t.nbytes() > 0) {
                in.seekg(static_cast<std::streamoff>(data0 + e.begin));
                in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
                KDA_CHECK(in.good(), "kda::io::safetensors: " << src << ": tensor " << detail::printable(e.name) << ": cannot read its "
                                                              << t.nbytes() << " bytes (was the file truncated while reading?)");
            }
            f.tensors.emplace(std::move(e.name), std::move(t));
        }
        return f;
    }

    /// The file image of `tensors` and `metadata`.
    static std::vector<std::byte> to_bytes(const std::map<std::string, host_tensor>& tensors,
                                           const std::map<std::string, std::string>& metadata = {}) {
        // Largest element first: with the header padded to 8 bytes, every tensor is aligned.
        std::vector<std::pair<const std::string*, const host_tensor*>> order;
        for (const auto& [nm, t] : tensors) {
            KDA_CHECK(!nm.empty() && nm != "__metadata__", "kda::io::safetensors: cannot write a tensor named " << detail::printable(nm));
            KDA_CHECK(t.defined(), "kda::io::safetensors: tensor " << detail::printable(nm) << " is empty (default-constructed) and cannot be written");
            order.emplace_back(&nm, &t);
        }
        std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return size_of(x.second->type()) > size_of(y.second->type()); });
        nlohmann::json h = nlohmann::json::object();
        if (!metadata.empty()) {
            nlohmann::json m = nlohmann::json::object();
            for (const auto& [k, v] : metadata) m[k] = v;
            h["__metadata__"] = std::move(m);
        }
        std::uint64_t off = 0;
        for (const auto& [nm, t] : order) {
            const auto nb = static_cast<std::uint64_t>(t->nbytes());
            h[*nm] = {{"dtype", std::string(safetensors_name(t->type()))}, {"shape", t->shape()}, {"data_offsets", {off, off + nb}}};
            off += nb;
        }
        std::string header;
        try {
            header = h.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
        } catch (const nlohmann::json::exception& e) {
            KDA_CHECK(false, "kda::io::safetensors: cannot write the header (" << detail::escaped(e.what(), 300) << "); names and metadata must be UTF-8");
        }
        header.append((8 - header.size() % 8) % 8, ' ');
        std::vector<std::byte> out(8 + header.size() + off);
        std::uint64_t n = header.size();
        for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
        std::memcpy(out.data() + 8, header.data(), header.size());
        std::size_t pos = 8 + header.size();
        for (const auto& [nm, t] : order) {
            if (t->nbytes() > 0) std::memcpy(out.data() + pos, t->raw(), static_cast<std::size_t>(t->nbytes()));
            pos += static_cast<std::size_t>(t->nbytes());
        }
        return out;
    }

    /// Writes `tensors` and `metadata` to `path` through a temporary file in the same directory
    /// and a rename: on failure the target is untouched and no temporary file is left.
    static void save(const std::filesystem::path& path, const std::map<std::string, host_tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {}) {
        const std::vector<std::byte> bytes = to_bytes(tensors, metadata);
        const std::string src = detail::printable(path.string());
        std::random_device rd;
        std::filesystem::path tmp = path;
        tmp += ".tmp-" + std::to_string(rd()) + std::to_string(rd());
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            KDA_CHECK(out.good(), "kda::io::safetensors: " << src << ": cannot create the temporary file " << detail::printable(tmp.string()));
            out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
            out.close();
            if (!out.good()) {
                std::error_code ec;
                std::filesystem::remove(tmp, ec);
                KDA_CHECK(false, "kda::io::safetensors: " << src << ": writing " << bytes.size() << " bytes failed");
            }
        }
        std::error_code ec;
        std::filesystem::rename(tmp, path, ec);
        if (ec) {
            std::error_code ec2;
            std::filesystem::remove(tmp, ec2);
            KDA_CHECK(false, "kda::io::safetensors: " << src << ": cannot rename the temporary file into place: " << ec.message());
        }
    }
    void save(const std::filesystem::path& path) const { save(path, tensors, metadata); }

    [[nodiscard]] bool contains(const std::string& name) const { return tensors.count(name) != 0; }
    /// The tensor `name`, or nullptr.
    [[nodiscard]] const host_tensor* find(const std::string& name) const {
        const auto it = tensors.find(name);
        return it == tensors.end() ? nullptr : &it->second;
    }
    /// The tensor `name`; a kda::error naming it when absent.
    [[nodiscard]] const host_tensor& at(const std::string& name) const {
        const host_tensor* t = find(name);
        KDA_CHECK(t != nullptr, "kda::io::safetensors: tensor " << detail::printable(name) << " is not in the file");
        return *t;
    }
    /// The metadata value `key`, or nothing.
    [[nodiscard]] std::optional<std::string> meta(const std::string& key) const {
        const auto it = metadata.find(key);
        if (it == metadata.end()) return std::nullopt;
        return it->second;
    }
};

}  // namespace kda::io
