#include "launch/node_link.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"

namespace braid::launch {
namespace {

// The watcher's wait is short so that it can notice stopping_; the server
// parks it, so this costs one request per interval, not a busy poll.
constexpr auto kWatchInterval = std::chrono::milliseconds(500);
// Once the job has failed, node 0 waits this long (or the job's timeout, if
// shorter) for a node whose beat has stopped: every live node beats until
// it posts its exit, so a silent node's launcher is gone (SIGKILLed with
// its host's processes, say), and waiting out the whole timeout would only
// delay the report. A job still running well keeps the full timeout: a
// node may be starved, not gone.
constexpr double kGoneAfterFailureS = 5.0;

std::pair<int, std::string> parse_failure(const std::string& v, int* node) {
  size_t a = v.find('|'), b = a == std::string::npos ? a : v.find('|', a + 1);
  if (b == std::string::npos) return {1, v};
  try {
    *node = std::stoi(v.substr(a + 1, b - a - 1));
    return {std::stoi(v.substr(0, a)), v.substr(b + 1)};
  } catch (const std::exception&) {
    return {1, v};
  }
}

}  // namespace

NodeLink::NodeLink(std::shared_ptr<Store> store, std::string store_addr, int nnodes,
                   int node_rank, int nproc, std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      store_addr_(std::move(store_addr)),
      nnodes_(nnodes),
      node_rank_(node_rank),
      nproc_(nproc),
      timeout_(timeout) {}

NodeLink::~NodeLink() {
  stopping_.store(true);
  if (watcher_.joinable()) watcher_.join();
}

void NodeLink::rendezvous() {
  std::string me = hostname() + " pid " + std::to_string(::getpid());
  Bytes mine(me.begin(), me.end());
  Bytes now = store_->compare_set(key("node/" + std::to_string(node_rank_)), {}, mine);
  if (now != mine)
    throw Error(Errc::kInvalidArgument,
                "node rank " + std::to_string(node_rank_) + " is already taken by " +
                    std::string(now.begin(), now.end()) + " (each node needs its own --node-rank)");
  store_->set_str(key("nproc/" + std::to_string(node_rank_)), std::to_string(nproc_));
  std::vector<std::string> keys;
  for (int i = 0; i < nnodes_; ++i) keys.push_back(key("nproc/" + std::to_string(i)));
  try {
    store_->wait(keys, timeout_);
  } catch (const Error& e) {
    if (e.code() != Errc::kTimeout) throw;
    std::string missing;
    for (int i = 0; i < nnodes_; ++i)
      if (!store_->check(keys[size_t(i)])) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    throw Error(Errc::kTimeout, "node(s) " + missing + " did not join the job at " + store_addr_ +
                                    " within " + std::to_string(timeout_.count() / 1000) + " s");
  }
  for (int i = 0; i < nnodes_; ++i)
    claims_.push_back(store_->get_str(key("node/" + std::to_string(i))));
  for (int i = 0; i < nnodes_; ++i) {
    std::string v = store_->get_str(keys[size_t(i)]);
    if (v != std::to_string(nproc_))
      throw Error(Errc::kInvalidArgument, "node " + std::to_string(i) + " runs " + v +
                                              " ranks but node " + std::to_string(node_rank_) +
                                              " runs " + std::to_string(nproc_) +
                                              " (-n must match on every node)");
  }
}

std::string NodeLink::describe(int node) const {
  std::string d = "node " + std::to_string(node);
  if (size_t(node) < claims_.size()) d += " (" + claims_[size_t(node)] + ")";
  return d;
}

void NodeLink::report_failure(int status, const std::string& description, bool rank_failed) {
  if (store_lost_.load()) return;
  std::string v = std::to_string(status) + "|" + std::to_string(node_rank_) + "|" + description;
  try {
    const Bytes mine(v.begin(), v.end());
    if (store_->compare_set(key("failed"), {}, mine) == mine)
      store_->set_str(key("failed_kind"), rank_failed ? "rank" : "launcher");
  } catch (const Error& e) {
    BRAID_LOG(kWarn, "could not tell the other nodes about the failure: " << e.what());
  }
}

void NodeLink::watch(std::function<void(int, std::string)> on_failure) {
  watcher_ = std::thread([this, on_failure = std::move(on_failure)] {
    const std::string beat = key("beat/" + std::to_string(node_rank_));
    // When the store last answered. A request it does not answer ends at its
    // own deadline (the job's timeout for the beat, 10 s past the interval
    // for the wait), so this notices a store that went silent.
    double answered = now_s();
    const double patience = double(timeout_.count()) / 1000.0;
    auto lost = [&](const std::string& why) {
      store_lost_.store(true);
      if (!stopping_.load())
        on_failure(1, "lost the job's store at " + store_addr_ + " on " + describe(0) + ": " + why);
    };
    while (!stopping_.load()) {
      try {
        if (node_rank_ != 0) store_->add(beat, 1);
        answered = now_s();
        store_->wait({key("failed")}, kWatchInterval);
      } catch (const Error& e) {
        if (e.code() == Errc::kTimeout) {
          // The server's own "timed out" answer comes within the interval.
          if (now_s() - answered < double(kWatchInterval.count()) / 1000.0 + 2.0) {
            answered = now_s();
            continue;
          }
          if (now_s() - answered < patience) continue;
          lost("no answer for " + std::to_string(int(now_s() - answered)) + " s");
          return;
        }
        lost(e.what());
        return;
      }
      try {
        int node = -1;
        auto [status, what] = parse_failure(store_->get_str(key("failed")), &node);
        if (node != node_rank_) on_failure(status, what);
      } catch (const Error& e) {
        lost(e.what());
        return;
      }
      break;
    }
    // The job has failed. Beat on while this node stops its ranks, until
    // finish(): node 0 takes a node that stops beating for one that is gone.
    while (!stopping_.load() && node_rank_ != 0) {
      try {
        store_->add(beat, 1);
      } catch (const Error&) {
        return;  // the store is gone: finish() finds out for itself
      }
      for (int i = 0; i < 5 && !stopping_.load(); ++i)
        std::this_thread::sleep_for(kWatchInterval / 5);
    }
  });
}

int NodeLink::finish(int status, const std::function<bool()>& stop, std::string* what) {
  stopping_.store(true);
  if (watcher_.joinable()) watcher_.join();
  if (store_lost_.load()) return 0;
  try {
    // The job's first failure, read while the store is sure to be up (node
    // 0 keeps it until this node's exit is in). Its kind follows it within
    // moments (report_failure).
    if (store_->check(key("failed"))) {
      store_->wait({key("failed_kind")}, std::chrono::seconds(5));
      restart_wanted_ = store_->get_str(key("failed_kind")) == "rank";
    }
    store_->set_str(key("exit/" + std::to_string(node_rank_)), std::to_string(status));
  } catch (const Error& e) {
    if (node_rank_ == 0) throw;
    BRAID_LOG(kWarn, "could not tell " << describe(0) << " this node's status: " << e.what());
    return 0;
  }
  if (node_rank_ != 0) return 0;
  const double patience = double(timeout_.count()) / 1000.0;
  double last_note = now_s();
  int other = 0;
  for (int i = 1; i < nnodes_; ++i) {
    std::string k = key("exit/" + std::to_string(i));
    const std::string beat = key("beat/" + std::to_string(i));
    std::string last_beat = store_->check(beat) ? store_->get_str(beat) : "";
    double heard = now_s(), waited = 0;
    bool gone = false;
    for (;;) {
      try {
        store_->wait({k}, std::chrono::milliseconds(500));
        break;
      } catch (const Error& e) {
        if (e.code() != Errc::kTimeout) throw;
      }
      if (stop()) return 0;
      std::string b = store_->check(beat) ? store_->get_str(beat) : "";
      const double wait_for =
          store_->check(key("failed")) ? std::min(patience, kGoneAfterFailureS) : patience;
      if (b != last_beat) {
        last_beat = b;
        heard = now_s();
      } else if (now_s() - heard >= wait_for) {
        gone = true;
        waited = now_s() - heard;
        break;
      }
      if (now_s() - last_note > 60) {
        BRAID_LOG(kWarn, "node 0 keeps the job's store up until node " << i << " finishes");
        last_note = now_s();
      }
    }
    int s = 1;
    std::string w;
    if (gone) {
      w = describe(i) + " has not been heard from for " + std::to_string(int(waited)) +
          " s: its launcher or the link to it is lost; not waiting for it";
      BRAID_LOG(kWarn, w);
    } else {
      try {
        s = std::stoi(store_->get_str(k));
      } catch (const std::exception&) {
      }
      w = describe(i) + " finished with status " + std::to_string(s);
    }
    if (s != 0 && other == 0) {
      other = s;
      if (what) *what = w;
    }
  }
  return other;
}

void mark_attempt(Store& store, int attempt) {
  store.set_str("braid/launch/attempt", std::to_string(attempt));
}

std::shared_ptr<Store> connect_attempt(const std::string& host, int port, const std::string& secret,
                                       int attempt, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string want = std::to_string(attempt);
  std::string seen = "none";
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    try {
      auto store = connect_tcp_store(host, port, secret, left);
      store->wait({"braid/launch/attempt"}, std::min(left, std::chrono::milliseconds(2000)));
      seen = store->get_str("braid/launch/attempt");
      if (seen == want) return store;
    } catch (const Error& e) {
      // A store closing under us, or not yet made: try again; a wrong
      // secret will not mend.
      if (e.code() == Errc::kAuth) throw;
      seen = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw Error(Errc::kTimeout, "the job's store at " + host + ":" + std::to_string(port) +
                                  " did not start attempt " + want + " within " +
                                  std::to_string(timeout.count() / 1000) + " s (last: " +
                                  seen + ")");
}

}  // namespace braid::launch
