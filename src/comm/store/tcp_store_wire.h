// Wire format of the TCP store (private to the server's files,
// tcp_store_server.h, and tcp_store_client.cc).
//
// After the job-secret handshake (store/auth.h) the client sends request
// frames and the server answers with response frames. Requests carry an id
// so one connection can have several outstanding (a blocking get on one
// thread must not stop a set on another); the server answers non-blocking
// requests at once and parks get/wait until their keys exist or their
// deadline passes, so responses may come back out of order.
//
//   frame    = u32 body_len, body            (little-endian integers)
//   request  = u64 id, u8 op, fields...
//   response = u64 id, u8 status, payload...
//   str      = u32 len, len bytes
//
//   op          request fields                     OK payload
//   kSet        str key, str value                 -
//   kGet        str key, i64 timeout_ms            the value (rest of body)
//   kAdd        str key, i64 delta                 i64 new value
//   kCompareSet str key, str expected, str desired the value now stored (rest)
//   kWait       u32 n, n × str key, i64 timeout_ms -
//   kRemove     str key                            u8 existed
//   kCheck      str key                            u8 exists
//
// status kTimedOut carries the missing keys as text; kFailed a message.
// Every length is checked against the limits below before anything is
// allocated for it; a frame that breaks them drops the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace braid::comm::store_wire {

constexpr size_t kMaxKey = 4096;
constexpr size_t kMaxValue = size_t(64) << 20;
constexpr size_t kMaxWaitKeys = 65536;
// The largest legal request: compare_set with two maximal values.
constexpr size_t kMaxRequestBody = 2 * kMaxValue + kMaxKey + 64;
// Responses carry at most one value (or a bounded message).
constexpr size_t kMaxResponseBody = kMaxValue + 64;
constexpr size_t kMaxMessage = 16384;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kRemove, kCheck };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2 };

inline void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put_bytes(std::vector<uint8_t>& b, const void* p, size_t n) {
  put_u32(b, uint32_t(n));
  const uint8_t* q = static_cast<const uint8_t*>(p);
  b.insert(b.end(), q, q + n);
}
inline void put_str(std::vector<uint8_t>& b, const std::string& s) { put_bytes(b, s.data(), s.size()); }

inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Bounds-checked reader over one frame body. Every accessor returns false
// (and leaves `ok` false) instead of reading past the end.
struct Reader {
  const uint8_t* p;
  size_t left;
  bool ok = true;

  bool u8(uint8_t* v) {
    if (!ok || left < 1) return ok = false;
    *v = *p++;
    --left;
    return true;
  }
  bool u32(uint32_t* v) {
    if (!ok || left < 4) return ok = false;
    *v = get_u32(p);
    p += 4;
    left -= 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (!ok || left < 8) return ok = false;
    *v = get_u64(p);
    p += 8;
    left -= 8;
    return true;
  }
  bool i64(int64_t* v) {
    uint64_t u;
    if (!u64(&u)) return false;
    *v = int64_t(u);
    return true;
  }
  // A length-prefixed field no longer than `limit`.
  bool bytes(std::vector<uint8_t>* out, size_t limit) {
    uint32_t n;
    if (!u32(&n)) return false;
    if (n > limit || n > left) return ok = false;
    out->assign(p, p + n);
    p += n;
    left -= n;
    return true;
  }
  bool str(std::string* out, size_t limit) {
    uint32_t n;
    if (!u32(&n)) return false;
    if (n > limit || n > left) return ok = false;
    out->assign(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return true;
  }
  // The rest of the body.
  void rest(std::vector<uint8_t>* out) {
    out->assign(p, p + left);
    p += left;
    left = 0;
  }
};

// Every frame carries at least an id and a status/op byte.
constexpr size_t kMinBody = 9;

// Where the frame at the front of `avail` received bytes stands: its body
// length in *len when whole (kWhole) or still arriving (kPartial), or kBad
// when its length word is out of [kMinBody, max_body] -- decided from the
// 4-byte length word alone, before anything is buffered for the body.
// Both ends cut frames with it (server: max_body kMaxRequestBody; client:
// kMaxResponseBody).
enum class Cut { kPartial, kWhole, kBad };
inline Cut cut_frame(const uint8_t* p, size_t avail, size_t max_body, uint32_t* len) {
  *len = 0;
  if (avail < 4) return Cut::kPartial;
  *len = get_u32(p);
  if (*len < kMinBody || *len > max_body) return Cut::kBad;
  return avail - 4 < *len ? Cut::kPartial : Cut::kWhole;
}

// A response body split into its parts (body holds at least kMinBody bytes).
struct Response {
  uint64_t id = 0;
  uint8_t status = 0;
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
};
inline Response parse_response(const uint8_t* body, size_t len) {
  return Response{get_u64(body), body[8], body + kMinBody, len - kMinBody};
}

// Starts a frame: reserves the length word, to be filled by finish().
inline std::vector<uint8_t> begin_frame() { return std::vector<uint8_t>(4, 0); }
inline void finish_frame(std::vector<uint8_t>& f) {
  uint32_t n = uint32_t(f.size() - 4);
  for (int i = 0; i < 4; ++i) f[size_t(i)] = uint8_t(n >> (8 * i));
}

}  // namespace braid::comm::store_wire
