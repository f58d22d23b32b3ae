// Frame I/O for the parameter server (layout and rules in wire.h).
#include "ps/io/wire.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "braid/env.h"
#include "comm/store/auth.h"

namespace braid::ps::wire {

const char* op_name(uint16_t op) {
  switch (op & ~uint16_t(kReply)) {
    case kHello: return "hello";
    case kPush: return "push";
    case kPull: return "pull";
    case kClock: return "clock";
    case kReport: return "report";
    case kStats: return "stats";
    case kHotPush: return "hot refresh";
    case kHotPull: return "hot pull";
    case kHotSet: return "hot set";
    case kBye: return "bye";
    case kBatch: return "batch";
    case kJoin: return "join";
    default: return "unknown op";
  }
}

int64_t deadline_after(std::chrono::milliseconds t) {
  return int64_t(now_ns()) + int64_t(t.count()) * 1000000;
}

void send_frame(int fd, const Header& h, const void* payload, int64_t deadline_ns,
                const char* what) {
  if (h.payload == 0) {
    comm::write_full(fd, &h, sizeof h, deadline_ns, what);
    return;
  }
  send_frame_parts(fd, h, {{payload, size_t(h.payload)}}, deadline_ns, what);
}

void send_frame_parts(int fd, const Header& h,
                      const std::vector<std::pair<const void*, size_t>>& parts,
                      int64_t deadline_ns, const char* what) {
  size_t total = 0;
  for (auto& p : parts) total += p.second;
  if (total != h.payload)
    throw Error(Errc::kInternal, std::string(what) + ": frame payload " +
                                     std::to_string(h.payload) + " != parts " +
                                     std::to_string(total));
  std::vector<iovec> iov;
  iov.reserve(parts.size() + 1);
  iov.push_back({const_cast<Header*>(&h), sizeof h});
  for (auto& p : parts)
    if (p.second) iov.push_back({const_cast<void*>(p.first), p.second});
  write_gather(fd, iov, deadline_ns, what);
}

void write_gather(int fd, std::vector<iovec>& iov, int64_t deadline_ns, const char* what) {
  size_t at = 0;
  while (at < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + at;
    m.msg_iovlen = std::min<size_t>(iov.size() - at, IOV_MAX);
    ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      // Blocked (a full socket buffer) or failed: write_full sends this
      // part waiting up to the deadline, or throws naming the failure (a
      // closed peer is kPeerDied); then gathering goes on.
      comm::write_full(fd, iov[at].iov_base, iov[at].iov_len, deadline_ns, what);
      ++at;
      continue;
    }
    size_t n = size_t(w);
    while (at < iov.size() && n >= iov[at].iov_len) n -= iov[at++].iov_len;
    if (n) {
      iov[at].iov_base = static_cast<uint8_t*>(iov[at].iov_base) + n;
      iov[at].iov_len -= n;
    }
  }
}

void check_magic(const Header& h, const char* what) {
  if (h.magic != kMagic)
    throw Error(Errc::kProtocol, std::string(what) + ": not a parameter-server frame (magic " +
                                     std::to_string(h.magic) + ")");
}

Header recv_header(int fd, int64_t deadline_ns, const char* what) {
  Header h;
  comm::read_full(fd, &h, sizeof h, deadline_ns, what);
  check_magic(h, what);
  return h;
}

void recv_payload(int fd, void* buf, size_t n, int64_t deadline_ns, const char* what) {
  if (n) comm::read_full(fd, buf, n, deadline_ns, what);
}

Header error_reply(const Header& req, const Error& e, std::string* message) {
  Header r = req;
  r.magic = kMagic;
  r.op = uint16_t(req.op | kReply);
  r.status = uint32_t(e.code()) + 1;
  *message = std::string(e.what()).substr(0, kMaxMessage);
  r.payload = message->size();
  return r;
}

void throw_reply(const Header& h, const std::string& message, const std::string& where) {
  Errc c = h.status >= 1 && h.status <= uint32_t(Errc::kInternal) + 1 ? Errc(h.status - 1)
                                                                       : Errc::kProtocol;
  throw Error(c, where + ": " + message);
}

namespace {
constexpr size_t kStatsInts = 18, kStatsDoubles = 3;
}

namespace {

// The stats frame's counters in wire order, after rank and report_workers
// (ints of their own), then its doubles: one list for both directions.
constexpr int64_t ServerStats::*kCounters[] = {
    &ServerStats::pushes_accepted, &ServerStats::pushes_late,      &ServerStats::pushes_dropped,
    &ServerStats::pushes_folded,   &ServerStats::rounds_closed,    &ServerStats::updates_applied,
    &ServerStats::requests,        &ServerStats::bytes_in,         &ServerStats::bytes_out,
    &ServerStats::rejected,        &ServerStats::max_read_lead,    &ServerStats::writes_duplicate,
    &ServerStats::epoch,           &ServerStats::pulls_owner,      &ServerStats::pulls_replica,
    &ServerStats::hot_rows};
constexpr double ServerStats::*kReportSums[] = {&ServerStats::report_loss, &ServerStats::report_rows,
                                                &ServerStats::report_correct};
static_assert(std::size(kCounters) + 2 == kStatsInts && std::size(kReportSums) == kStatsDoubles);

}  // namespace

void encode_stats(const ServerStats& s, std::vector<uint8_t>& out) {
  int64_t ints[kStatsInts] = {s.rank, s.report_workers};
  for (size_t i = 0; i < std::size(kCounters); ++i) ints[2 + i] = s.*kCounters[i];
  double dbl[kStatsDoubles];
  for (size_t i = 0; i < std::size(kReportSums); ++i) dbl[i] = s.*kReportSums[i];
  const uint64_t n = s.clocks.size();
  out.resize(8 + sizeof ints + sizeof dbl + n * 16);
  uint8_t* p = out.data();
  std::memcpy(p, &n, 8);
  std::memcpy(p + 8, ints, sizeof ints);
  std::memcpy(p + 8 + sizeof ints, dbl, sizeof dbl);
  if (n == 0) return;  // (an empty vector's data() may be null: no memcpy from it)
  std::memcpy(p + 8 + sizeof ints + sizeof dbl, s.clocks.data(), n * 8);
  std::vector<int64_t> contributed = s.contributed;
  contributed.resize(n, 0);
  std::memcpy(p + 8 + sizeof ints + sizeof dbl + n * 8, contributed.data(), n * 8);
}

ServerStats decode_stats(const std::vector<uint8_t>& in) {
  constexpr size_t fixed = 8 + kStatsInts * 8 + kStatsDoubles * 8;
  uint64_t n = 0;
  if (in.size() >= 8) std::memcpy(&n, in.data(), 8);
  if (in.size() < fixed || n > (kMaxStats - fixed) / 16 || in.size() != fixed + n * 16)
    throw Error(Errc::kProtocol, "parameter-server stats reply of " +
                                     std::to_string(in.size()) + " bytes is malformed");
  int64_t ints[kStatsInts];
  double dbl[kStatsDoubles];
  std::memcpy(ints, in.data() + 8, sizeof ints);
  std::memcpy(dbl, in.data() + 8 + sizeof ints, sizeof dbl);
  ServerStats s;
  s.rank = int(ints[0]);
  s.report_workers = int(ints[1]);
  for (size_t i = 0; i < std::size(kCounters); ++i) s.*kCounters[i] = ints[2 + i];
  for (size_t i = 0; i < std::size(kReportSums); ++i) s.*kReportSums[i] = dbl[i];
  s.clocks.resize(n);
  if (n == 0) return s;  // (no memcpy into an empty vector's null data())
  std::memcpy(s.clocks.data(), in.data() + fixed, n * 8);
  s.contributed.resize(n);
  std::memcpy(s.contributed.data(), in.data() + fixed + n * 8, n * 8);
  return s;
}

}  // namespace braid::ps::wire
