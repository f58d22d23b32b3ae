#include "comm/store/tcp_store_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "braid/env.h"

namespace braid::comm {

using namespace store_wire;

namespace {

constexpr size_t kMaxWaitersPerConn = 4096;  // parked get/wait per client

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace

bool StoreState::has_all(const std::vector<std::string>& keys) const {
  for (auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

std::string StoreState::missing_of(const std::vector<std::string>& keys) const {
  std::string m;
  for (auto& k : keys)
    if (!data_.count(k)) {
      if (m.size() > kMaxMessage - 256) {
        m += ", ...";
        break;
      }
      m += (m.empty() ? "" : ", ") + k;
    }
  return m;
}

std::string StoreState::handle(uint64_t conn, const uint8_t* body, size_t len) {
  Reader rd{body, len};
  uint64_t req = 0;
  uint8_t op = 0;
  rd.u64(&req);
  rd.u8(&op);
  std::string key;
  auto malformed = [](const char* what) { return std::string("malformed ") + what + " request"; };
  switch (op) {
    case kSet: {
      Bytes value;
      if (!rd.str(&key, kMaxKey) || !rd.bytes(&value, kMaxValue) || rd.left) return malformed("set");
      data_[key] = std::move(value);
      reply_(conn, req, kOk, {});
      notify(key);
      return "";
    }
    case kGet: {
      int64_t timeout_ms = 0;
      if (!rd.str(&key, kMaxKey) || !rd.i64(&timeout_ms) || rd.left) return malformed("get");
      auto it = data_.find(key);
      if (it != data_.end()) {
        reply_(conn, req, kOk, it->second);
        return "";
      }
      return park(conn, req, true, {key}, timeout_ms);
    }
    case kAdd: {
      int64_t delta = 0;
      if (!rd.str(&key, kMaxKey) || !rd.i64(&delta) || rd.left) return malformed("add");
      int64_t cur = 0;
      auto it = data_.find(key);
      if (it != data_.end()) {
        std::string s(it->second.begin(), it->second.end());
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || errno || *end) {
          reply_(conn, req, kFailed, text("add: the value of key '" + key + "' is not an integer"));
          return "";
        }
        cur = v;
      }
      cur = int64_t(uint64_t(cur) + uint64_t(delta));  // wraps instead of UB
      std::string s = std::to_string(cur);
      data_[key] = Bytes(s.begin(), s.end());
      Bytes p;
      put_u64(p, uint64_t(cur));
      reply_(conn, req, kOk, p);
      notify(key);
      return "";
    }
    case kCompareSet: {
      Bytes expected, desired;
      if (!rd.str(&key, kMaxKey) || !rd.bytes(&expected, kMaxValue) ||
          !rd.bytes(&desired, kMaxValue) || rd.left)
        return malformed("compare_set");
      auto it = data_.find(key);
      bool swap = it == data_.end() ? expected.empty() : it->second == expected;
      if (!swap) {
        reply_(conn, req, kOk, it == data_.end() ? Bytes{} : it->second);
        return "";
      }
      data_[key] = desired;
      reply_(conn, req, kOk, desired);
      notify(key);
      return "";
    }
    case kWait: {
      uint32_t n = 0;
      if (!rd.u32(&n) || n > kMaxWaitKeys) return malformed("wait");
      std::vector<std::string> keys;
      keys.reserve(std::min<size_t>(n, rd.left / 4));
      for (uint32_t i = 0; i < n; ++i) {
        if (!rd.str(&key, kMaxKey)) return malformed("wait");
        keys.push_back(std::move(key));
      }
      int64_t timeout_ms = 0;
      if (!rd.i64(&timeout_ms) || rd.left) return malformed("wait");
      if (has_all(keys)) {
        reply_(conn, req, kOk, {});
        return "";
      }
      return park(conn, req, false, std::move(keys), timeout_ms);
    }
    case kRemove: {
      if (!rd.str(&key, kMaxKey) || rd.left) return malformed("remove");
      bool existed = data_.erase(key) > 0;
      reply_(conn, req, kOk, {uint8_t(existed)});
      return "";
    }
    case kCheck: {
      if (!rd.str(&key, kMaxKey) || rd.left) return malformed("check");
      reply_(conn, req, kOk, {uint8_t(data_.count(key) > 0)});
      return "";
    }
    default:
      return "unknown request type " + std::to_string(op);
  }
}

std::string StoreState::park(uint64_t conn, uint64_t req, bool is_get,
                             std::vector<std::string> keys, int64_t timeout_ms) {
  auto& mine = conn_waiters_[conn];
  if (mine.size() >= kMaxWaitersPerConn)
    return "more than " + std::to_string(kMaxWaitersPerConn) + " blocked requests";
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, int64_t(366) * 24 * 3600 * 1000);
  uint64_t wid = next_waiter_++;
  Waiter& w = waiters_[wid];
  w.conn = conn;
  w.req = req;
  w.is_get = is_get;
  w.keys = std::move(keys);
  w.timeout_ms = timeout_ms;
  w.deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
  for (auto& k : w.keys) key_waiters_[k].insert(wid);
  deadlines_.insert({w.deadline, wid});
  mine.insert(wid);
  return "";
}

void StoreState::forget_waiter(uint64_t wid) {
  auto it = waiters_.find(wid);
  if (it == waiters_.end()) return;
  Waiter& w = it->second;
  for (auto& k : w.keys) {
    auto kit = key_waiters_.find(k);
    if (kit == key_waiters_.end()) continue;
    kit->second.erase(wid);
    if (kit->second.empty()) key_waiters_.erase(kit);
  }
  deadlines_.erase({w.deadline, wid});
  auto cit = conn_waiters_.find(w.conn);
  if (cit != conn_waiters_.end()) {
    cit->second.erase(wid);
    if (cit->second.empty()) conn_waiters_.erase(cit);
  }
  waiters_.erase(it);
}

void StoreState::forget_conn(uint64_t conn) {
  auto cit = conn_waiters_.find(conn);
  if (cit == conn_waiters_.end()) return;
  std::set<uint64_t> ids = cit->second;
  for (uint64_t w : ids) forget_waiter(w);
}

// A key was written: answer every waiter whose keys are now all present.
void StoreState::notify(const std::string& key) {
  auto kit = key_waiters_.find(key);
  if (kit == key_waiters_.end()) return;
  std::vector<uint64_t> ids(kit->second.begin(), kit->second.end());
  for (uint64_t wid : ids) {
    auto it = waiters_.find(wid);  // an earlier reply may have dropped its connection
    if (it == waiters_.end() || !has_all(it->second.keys)) continue;
    Waiter w = it->second;
    forget_waiter(wid);
    reply_(w.conn, w.req, kOk, w.is_get ? data_.at(w.keys[0]) : Bytes{});
  }
}

void StoreState::expire() {
  uint64_t now = now_ns();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    uint64_t wid = deadlines_.begin()->second;
    Waiter w = waiters_.at(wid);
    forget_waiter(wid);
    reply_(w.conn, w.req, kTimedOut,
           text("timed out after " + std::to_string(w.timeout_ms) +
                " ms waiting for keys: " + missing_of(w.keys)));
  }
}

int StoreState::next_timeout_ms() const {
  if (deadlines_.empty()) return 1000;
  uint64_t now = now_ns(), d = deadlines_.begin()->first;
  if (d <= now) return 0;
  return int(std::min<uint64_t>((d - now + 999999) / 1000000, 1000));
}

}  // namespace braid::comm
