// Checkpoint file I/O. Every length read from the file is checked against
// the file's size before it is used, so a truncated or corrupted file is an
// Error(kCorrupt), never an out-of-bounds read or a silent partial load.
#include "braid/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/error.h"
#include "braid/module.h"

namespace braid {

namespace {
constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'C', 'K', '1'};
constexpr char kTrailer[8] = {'B', 'R', 'A', 'I', 'D', 'E', 'N', 'D'};
constexpr size_t kAlign = 64;

// Slicing-by-8 tables for the reflected polynomial 0xEDB88320.
struct CrcTables {
  uint32_t t[8][256];
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};
const CrcTables& tables() {
  static const CrcTables t;
  return t;
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw Error(Errc::kCorrupt, "checkpoint " + path + ": " + why);
}

// A count in the header: a whole number >= 0. Asked for an integer,
// nlohmann's get<> would convert a float (5e69, -1.5) with a cast that is
// undefined out of range; the fuzzer found one (docs/FUZZING.md).
uint64_t header_uint(const nlohmann::json& o, const char* key, const std::string& path) {
  const nlohmann::json& v = o.at(key);
  if (!v.is_number_unsigned()) corrupt(path, std::string("header field ") + key + " is not a whole number >= 0");
  return v.get<uint64_t>();
}

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("writing checkpoint " + path);
    }
    c += w;
    n -= size_t(w);
  }
}
}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto& T = tables().t;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^
          T[3][hi & 0xff] ^ T[2][(hi >> 8) & 0xff] ^ T[1][(hi >> 16) & 0xff] ^ T[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = T[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  nlohmann::json h;
  h["version"] = 1;
  h["meta"] = ck.meta;
  auto entries = nlohmann::json::array();
  uint64_t offset = 0;
  for (const auto& [name, t] : ck.tensors) {
    entries.push_back({{"name", name},
                       {"dtype", dtype_name(t.dtype())},
                       {"shape", t.shape()},
                       {"offset", offset},
                       {"nbytes", t.nbytes()}});
    offset = (offset + t.nbytes() + kAlign - 1) / kAlign * kAlign;
  }
  h["tensors"] = entries;
  h["payload_bytes"] = offset;
  std::string header = h.dump();
  uint64_t hlen = header.size();

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("creating checkpoint " + tmp);
  try {
    uint32_t crc = 0;
    auto put = [&](const void* p, size_t n) {
      crc = crc32(p, n, crc);
      write_all(fd, p, n, tmp);
    };
    put(kMagic, 8);
    put(&hlen, 8);
    put(header.data(), header.size());
    static const char zeros[kAlign] = {};
    uint64_t written = 0;
    for (const auto& [name, t] : ck.tensors) {
      put(t.raw(), t.nbytes());
      written += t.nbytes();
      uint64_t pad = (kAlign - written % kAlign) % kAlign;
      put(zeros, pad);
      written += pad;
    }
    write_all(fd, &crc, 4, tmp);
    write_all(fd, kTrailer, 8, tmp);
    if (::fsync(fd) != 0) throw_errno("fsync checkpoint " + tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw_errno("closing checkpoint " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw_errno("renaming checkpoint " + tmp + " to " + path);
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(Errc::kIo, "cannot open checkpoint " + path + ": " + std::strerror(errno));
  std::vector<char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(Errc::kIo, "reading checkpoint " + path + " failed");
  return parse_checkpoint(buf, path);
}

Checkpoint parse_checkpoint(const std::vector<char>& buf, const std::string& path) {
  const size_t n = buf.size();
  if (n < 8 + 8 + 4 + 8) corrupt(path, "truncated (" + std::to_string(n) + " bytes)");
  if (std::memcmp(buf.data(), kMagic, 8) != 0) corrupt(path, "not a braid checkpoint (bad magic)");
  if (std::memcmp(buf.data() + n - 8, kTrailer, 8) != 0)
    corrupt(path, "truncated or damaged (no end marker)");
  uint32_t stored;
  std::memcpy(&stored, buf.data() + n - 12, 4);
  uint32_t actual = crc32(buf.data(), n - 12);
  if (stored != actual) corrupt(path, "checksum mismatch (file is corrupted)");
  uint64_t hlen;
  std::memcpy(&hlen, buf.data() + 8, 8);
  const size_t body = n - 12;
  if (hlen > body - 16) corrupt(path, "header length " + std::to_string(hlen) + " exceeds file");
  Checkpoint ck;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(buf.begin() + 16, buf.begin() + 16 + std::ptrdiff_t(hlen));
    if (header_uint(h, "version", path) != 1) corrupt(path, "unsupported version");
    ck.meta = h.at("meta").get<std::map<std::string, std::string>>();
    const uint64_t payload = header_uint(h, "payload_bytes", path);
    const size_t base = 16 + hlen;
    if (payload != body - base) corrupt(path, "payload size does not match the file size");
    for (const auto& e : h.at("tensors")) {
      std::string name = e.at("name").get<std::string>();
      DType dt = parse_dtype(e.at("dtype").get<std::string>());
      Shape shape;
      if (!e.at("shape").is_array()) corrupt(path, "tensor " + name + " has a bad shape");
      for (const auto& d : e.at("shape")) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
          corrupt(path, "tensor " + name + " has a bad shape");
        shape.push_back(d.get<int64_t>());
      }
      uint64_t off = header_uint(e, "offset", path), nb = header_uint(e, "nbytes", path);
      Tensor t(Shape{0}, dt);
      if (uint64_t(shape_numel(shape)) * dtype_size(dt) != nb)
        corrupt(path, "tensor " + name + " size does not match its shape");
      if (off > payload || nb > payload - off)
        corrupt(path, "tensor " + name + " lies outside the payload");
      t.resize(shape, dt);
      if (nb) std::memcpy(t.raw(), buf.data() + base + off, nb);
      ck.tensors.insert_or_assign(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("malformed header: ") + e.what());
  } catch (const Error& e) {
    if (e.code() == Errc::kCorrupt) throw;
    corrupt(path, e.what());
  }
  return ck;
}

void add_parameters(Checkpoint& ck, const std::vector<nn::Parameter*>& params) {
  for (nn::Parameter* p : params)
    ck.tensors.insert_or_assign("model/" + p->name, Tensor::view(p->data.raw(), p->data.shape()));
}

void load_parameters(const Checkpoint& ck, const std::vector<nn::Parameter*>& params) {
  for (nn::Parameter* p : params) {
    auto it = ck.tensors.find("model/" + p->name);
    if (it == ck.tensors.end())
      throw Error(Errc::kCorrupt, "checkpoint lacks parameter " + p->name);
    if (it->second.shape() != p->data.shape() || it->second.dtype() != DType::kF32)
      throw Error(Errc::kCorrupt, "checkpoint parameter " + p->name + " has shape " +
                                      shape_str(it->second.shape()) + " vs model " +
                                      shape_str(p->data.shape()));
    p->data.copy_from(it->second);
  }
}

int64_t resume_step(const Checkpoint& ck, uint64_t seed, const std::string& path) {
  auto get = [&](const char* k) {
    auto it = ck.meta.find(k);
    if (it == ck.meta.end()) throw Error(Errc::kCorrupt, "checkpoint " + path + " lacks " + k);
    return it->second;
  };
  if (std::stoull(get("seed")) != seed)
    throw Error(Errc::kInvalidArgument, "checkpoint " + path + " was written with seed " +
                                            get("seed") + ", this run uses " +
                                            std::to_string(seed));
  return std::stoll(get("step"));
}

}  // namespace braid
