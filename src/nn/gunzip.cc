// gzip decoding through zlib (inflate with gzip framing, every member).
#include "gunzip.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "braid/error.h"

namespace braid::nn {

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& what) {
  auto corrupt = [&](const std::string& why) { throw Error(Errc::kCorrupt, what + ": " + why); };
  if (in.size() < 18 || in[0] != 0x1f || in[1] != 0x8b) corrupt("not a gzip file or truncated");
  std::vector<uint8_t> out;
  uint32_t isize;
  std::memcpy(&isize, in.data() + in.size() - 4, 4);
  // The trailer's size (mod 2^32) is the file's word, not a fact: reserve
  // no more than deflate can expand the input to (at most 1032:1), so a
  // damaged or crafted file cannot make it allocate 4 GiB up front.
  out.reserve(std::min<uint64_t>(isize, uint64_t(in.size()) * 1032));
  size_t pos = 0;
  // One pass per gzip member (concatenated members are legal).
  while (pos < in.size()) {
    z_stream zs{};
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(Errc::kInternal, "zlib inflateInit2 failed");
    zs.next_in = const_cast<Bytef*>(in.data() + pos);
    zs.avail_in = uInt(in.size() - pos);
    int rc = Z_OK;
    uint8_t buf[1 << 16];
    while (rc != Z_STREAM_END) {
      zs.next_out = buf;
      zs.avail_out = sizeof buf;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        std::string msg = zs.msg ? zs.msg : "";
        inflateEnd(&zs);
        if (rc == Z_BUF_ERROR) corrupt("truncated compressed data");
        corrupt("corrupt gzip data (" + (msg.empty() ? std::string("zlib error ") + std::to_string(rc) : msg) + ")");
      }
      out.insert(out.end(), buf, buf + (sizeof buf - zs.avail_out));
      if (rc != Z_STREAM_END && zs.avail_in == 0) {
        inflateEnd(&zs);
        corrupt("truncated compressed data");
      }
    }
    pos = in.size() - zs.avail_in;
    inflateEnd(&zs);
    if (pos + 2 > in.size() || in[pos] != 0x1f || in[pos + 1] != 0x8b) break;
  }
  return out;
}

std::vector<uint8_t> read_file_maybe_gz(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(Errc::kIo, "cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error(Errc::kIo, "reading " + path + " failed");
  if (buf.size() >= 2 && buf[0] == 0x1f && buf[1] == 0x8b) return gunzip(buf, path);
  return buf;
}

}  // namespace braid::nn
