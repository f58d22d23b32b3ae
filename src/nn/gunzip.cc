// gzip/DEFLATE decoder. Huffman codes decode through a 9-bit lookup table
// with a canonical bit-by-bit fallback for longer codes. Reads past the
// end of input yield zero bits up to a small bound, after which the input
// is declared truncated — so no malformed file can loop or read out of
// bounds.
#include "gunzip.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "braid/checkpoint.h"
#include "braid/error.h"

namespace braid::nn {

namespace {
constexpr int kFastBits = 9;

struct Huffman {
  uint16_t count[16] = {};
  uint16_t symbol[320] = {};
  uint16_t fast[1 << kFastBits] = {};  // (symbol << 4) | length, 0 = slow path
};

class Inflater {
 public:
  Inflater(const uint8_t* p, const uint8_t* end, const std::string& what)
      : p_(p), end_(end), what_(what) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(Errc::kCorrupt, what_ + ": " + why);
  }

  void need(int n) {
    while (bitcnt_ < n) {
      uint64_t b = 0;
      if (p_ < end_) {
        b = *p_++;
      } else if (++overrun_ > 8) {
        fail("truncated compressed data");
      }
      bitbuf_ |= b << bitcnt_;
      bitcnt_ += 8;
    }
  }
  uint32_t bits(int n) {
    if (n == 0) return 0;
    need(n);
    uint32_t v = uint32_t(bitbuf_ & ((uint64_t(1) << n) - 1));
    bitbuf_ >>= n;
    bitcnt_ -= n;
    return v;
  }

  void build(Huffman& h, const uint8_t* lengths, int n) {
    std::memset(h.count, 0, sizeof h.count);
    std::memset(h.fast, 0, sizeof h.fast);
    for (int i = 0; i < n; ++i) h.count[lengths[i]]++;
    h.count[0] = 0;
    int left = 1;
    for (int len = 1; len < 16; ++len) {
      left = left * 2 - h.count[len];
      if (left < 0) fail("over-subscribed Huffman code");
    }
    uint16_t offs[16];
    offs[1] = 0;
    for (int len = 1; len < 15; ++len) offs[len + 1] = uint16_t(offs[len] + h.count[len]);
    for (int i = 0; i < n; ++i)
      if (lengths[i]) h.symbol[offs[lengths[i]]++] = uint16_t(i);
    // Fast table: canonical codes in order, bit-reversed (DEFLATE sends
    // codes MSB first; our buffer's first bit is its LSB).
    int code = 0, idx = 0;
    for (int len = 1; len <= kFastBits; ++len) {
      for (int k = 0; k < h.count[len]; ++k, ++code, ++idx) {
        int rev = 0;
        for (int b = 0; b < len; ++b) rev |= ((code >> b) & 1) << (len - 1 - b);
        for (int fill = rev; fill < (1 << kFastBits); fill += 1 << len)
          h.fast[fill] = uint16_t((h.symbol[idx] << 4) | len);
      }
      code <<= 1;
    }
  }

  int decode(const Huffman& h) {
    need(kFastBits);
    uint16_t e = h.fast[bitbuf_ & ((1u << kFastBits) - 1)];
    if (e) {
      int len = e & 15;
      bitbuf_ >>= len;
      bitcnt_ -= len;
      return e >> 4;
    }
    int code = 0, first = 0, index = 0;
    for (int len = 1; len < 16; ++len) {
      code |= int(bits(1));
      int count = h.count[len];
      if (code - count < first) return h.symbol[index + (code - first)];
      index += count;
      first = (first + count) << 1;
      code <<= 1;
    }
    fail("invalid Huffman code");
  }

  void codes(const Huffman& lit, const Huffman& dist, std::vector<uint8_t>& out) {
    static const uint16_t lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                       31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const uint8_t lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                     2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const uint16_t dbase[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                       33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static const uint8_t dext[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                     6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    for (;;) {
      int sym = decode(lit);
      if (sym < 256) {
        out.push_back(uint8_t(sym));
      } else if (sym == 256) {
        return;
      } else {
        sym -= 257;
        if (sym >= 29) fail("bad length code");
        size_t len = lbase[sym] + bits(lext[sym]);
        int ds = decode(dist);
        if (ds >= 30) fail("bad distance code");
        size_t d = dbase[ds] + bits(dext[ds]);
        if (d > out.size() - member_start_) fail("distance too far back");
        size_t from = out.size() - d;
        for (size_t i = 0; i < len; ++i) out.push_back(out[from + i]);
      }
    }
  }

  void fixed(std::vector<uint8_t>& out) {
    static Huffman lit, dist;
    static bool built = false;
    if (!built) {
      uint8_t l[288], d[30];
      for (int i = 0; i < 144; ++i) l[i] = 8;
      for (int i = 144; i < 256; ++i) l[i] = 9;
      for (int i = 256; i < 280; ++i) l[i] = 7;
      for (int i = 280; i < 288; ++i) l[i] = 8;
      for (int i = 0; i < 30; ++i) d[i] = 5;
      build(lit, l, 288);
      build(dist, d, 30);
      built = true;
    }
    codes(lit, dist, out);
  }

  void dynamic(std::vector<uint8_t>& out) {
    static const uint8_t order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    int nlen = int(bits(5)) + 257, ndist = int(bits(5)) + 1, ncode = int(bits(4)) + 4;
    if (nlen > 286 || ndist > 30) fail("bad dynamic block counts");
    uint8_t lengths[320] = {};
    for (int i = 0; i < ncode; ++i) lengths[order[i]] = uint8_t(bits(3));
    Huffman cl;
    build(cl, lengths, 19);
    int i = 0;
    std::memset(lengths, 0, sizeof lengths);
    while (i < nlen + ndist) {
      int sym = decode(cl);
      if (sym < 16) {
        lengths[i++] = uint8_t(sym);
        continue;
      }
      int rep;
      uint8_t val = 0;
      if (sym == 16) {
        if (i == 0) fail("repeat with no previous length");
        val = lengths[i - 1];
        rep = 3 + int(bits(2));
      } else if (sym == 17) {
        rep = 3 + int(bits(3));
      } else {
        rep = 11 + int(bits(7));
      }
      if (i + rep > nlen + ndist) fail("too many code lengths");
      while (rep--) lengths[i++] = val;
    }
    if (lengths[256] == 0) fail("no end-of-block code");
    Huffman lit, dist;
    build(lit, lengths, nlen);
    build(dist, lengths + nlen, ndist);
    codes(lit, dist, out);
  }

  void stored(std::vector<uint8_t>& out) {
    bitbuf_ >>= bitcnt_ % 8;
    bitcnt_ -= bitcnt_ % 8;
    uint32_t len = bits(16), nlen = bits(16);
    if ((len ^ 0xffff) != nlen) fail("stored block length check failed");
    for (uint32_t i = 0; i < len; ++i) out.push_back(uint8_t(bits(8)));
  }

  // One raw DEFLATE stream; returns the first byte after it.
  const uint8_t* inflate(std::vector<uint8_t>& out) {
    member_start_ = out.size();
    int last;
    do {
      last = int(bits(1));
      int type = int(bits(2));
      if (type == 0) stored(out);
      else if (type == 1) fixed(out);
      else if (type == 2) dynamic(out);
      else fail("invalid block type");
    } while (!last);
    if (overrun_) fail("truncated compressed data");
    // Give back whole unread bytes still in the bit buffer.
    return p_ - bitcnt_ / 8;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& what_;
  uint64_t bitbuf_ = 0;
  int bitcnt_ = 0;
  int overrun_ = 0;
  size_t member_start_ = 0;
};
}  // namespace

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& what) {
  std::vector<uint8_t> out;
  const uint8_t* p = in.data();
  const uint8_t* end = p + in.size();
  if (in.size() >= 4) {
    uint32_t isize;
    std::memcpy(&isize, end - 4, 4);
    out.reserve(isize);
  }
  auto corrupt = [&](const std::string& why) { throw Error(Errc::kCorrupt, what + ": " + why); };
  do {
    if (end - p < 18 || p[0] != 0x1f || p[1] != 0x8b) corrupt("not a gzip file or truncated");
    if (p[2] != 8) corrupt("unknown gzip compression method");
    uint8_t flg = p[3];
    p += 10;
    if (flg & 4) {
      if (end - p < 2) corrupt("truncated gzip header");
      size_t xlen = p[0] | (p[1] << 8);
      if (size_t(end - p) < 2 + xlen) corrupt("truncated gzip header");
      p += 2 + xlen;
    }
    for (int bit : {8, 16})
      if (flg & bit) {
        while (p < end && *p) ++p;
        if (p == end) corrupt("truncated gzip header");
        ++p;
      }
    if (flg & 2) p += 2;
    if (p >= end) corrupt("truncated gzip header");
    size_t start = out.size();
    Inflater inf(p, end, what);
    p = inf.inflate(out);
    if (end - p < 8) corrupt("truncated gzip trailer");
    uint32_t crc, isize;
    std::memcpy(&crc, p, 4);
    std::memcpy(&isize, p + 4, 4);
    p += 8;
    if (crc32(out.data() + start, out.size() - start) != crc) corrupt("CRC mismatch");
    if (uint32_t(out.size() - start) != isize) corrupt("length mismatch");
  } while (end - p >= 2 && p[0] == 0x1f && p[1] == 0x8b);
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
