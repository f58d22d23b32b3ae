// ps::Worker: one authenticated connection per server and an I/O thread
// that runs the worker's requests in the order they were made. A request is
// cut into frames, one per key range per server (dense keys by the layout's
// slices, sparse rows grouped by their server); all frames go out to every
// server before any reply is read, so the servers work on them together.
// Replies are checked (op, request id, length) before they are read into
// the caller's buffers. After a failed request the connection's framing is
// unknown, so the worker refuses further requests with the first error.
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/store/auth.h"
#include "ps/io/socket.h"
#include "ps/worker/worker_impl.h"

namespace braid::ps {

struct Handle::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr err;
};

void Handle::wait() {
  BRAID_CHECK_ARG(s_ != nullptr, "wait() on an empty parameter-server handle");
  std::unique_lock<std::mutex> lk(s_->mu);
  s_->cv.wait(lk, [&] { return s_->done; });
  if (s_->err) std::rethrow_exception(s_->err);
}

bool Handle::test() {
  BRAID_CHECK_ARG(s_ != nullptr, "test() on an empty parameter-server handle");
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->done;
}

void Worker::Impl::io_loop() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    cv.wait(lk, [&] { return stopping || (!queue.empty() && !busy); });
    if (queue.empty()) return;
    auto work = std::move(queue.front());
    queue.pop_front();
    busy = true;
    lk.unlock();
    work();
    lk.lock();
    busy = false;
    cv.notify_all();
  }
}

void Worker::Impl::run_request(const std::function<void()>& work) {
  try {
    if (!broken.empty())
      throw Error(Errc::kPeerDied, "parameter-server worker " + std::to_string(opt.rank) +
                                       " is unusable after an earlier error: " + broken);
    work();
  } catch (const Error& e) {
    if (broken.empty()) broken = e.what();
    throw;
  }
}

// A blocking call runs on the caller's thread when no request is queued or
// running, which saves two thread hand-offs per call; otherwise it takes its
// turn on the I/O thread, so requests still run in the order made. `busy`
// keeps the two threads from running requests at once.
void Worker::Impl::run_sync(std::vector<Frame>& frames) {
  {
    std::unique_lock<std::mutex> lk(mu);
    if (busy || !queue.empty()) {
      lk.unlock();
      submit([this, &frames] { exchange(frames); }).wait();
      return;
    }
    busy = true;
  }
  // The I/O thread waits for queued work that is not blocked by `busy`:
  // with nothing queued, waking it would only put it back to sleep (two
  // futex calls and a context switch per request).
  auto idle = [this] {
    std::lock_guard<std::mutex> lk(mu);
    busy = false;
    if (!queue.empty()) cv.notify_all();
  };
  try {
    run_request([&] { exchange(frames); });
  } catch (...) {
    idle();
    throw;
  }
  idle();
}

Handle Worker::Impl::submit(std::function<void()> work) {
  auto st = std::make_shared<Handle::State>();
  {
    std::lock_guard<std::mutex> lk(mu);
    queue.push_back([this, st, work = std::move(work)] {
      std::exception_ptr err;
      try {
        run_request(work);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> g(st->mu);
      st->done = true;
      st->err = err;
      st->cv.notify_all();
    });
  }
  cv.notify_all();
  return Handle(st);
}

Worker::Worker(const Layout& layout, const WorkerOptions& opt, std::shared_ptr<Store> store)
    : impl_(std::make_unique<Impl>(layout, opt, store)) {  // Impl checks the store
  Impl& m = *impl_;
  const int64_t deadline = wire::deadline_after(opt.timeout);
  try {
    int server = -1;
    for (int s = 0; s < layout.servers(); ++s) {
      m.route(s, wire::kPush, &server, deadline);
      m.route(s, wire::kPull, &server, deadline);
    }
  } catch (...) {
    for (auto& [k, fd] : m.conns) ::close(fd);
    throw;
  }
  m.io = std::thread([&m] { m.io_loop(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->io.joinable()) impl_->io.join();
  for (auto& [k, fd] : impl_->conns) ::close(fd);
}

WorkerStats Worker::worker_stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  WorkerStats s = impl_->counters;
  s.epoch = impl_->view.epoch();
  return s;
}

int Worker::rank() const { return impl_->opt.rank; }

Handle Worker::push_async(std::vector<KeyData> grads, int64_t clock, bool advance) {
  auto frames = std::make_shared<std::vector<Frame>>(impl_->push_frames(grads, clock, advance));
  return impl_->submit([this, frames] { impl_->exchange(*frames); });
}

Handle Worker::pull_async(std::vector<KeyData> out, int64_t clock, int64_t* assigned) {
  auto a = std::make_shared<int64_t>(INT64_MAX);
  auto frames = std::make_shared<std::vector<Frame>>(impl_->pull_frames(out, clock, a.get()));
  return impl_->submit([this, frames, a, assigned, clock] {
    impl_->exchange(*frames);
    if (assigned) *assigned = *a == INT64_MAX ? clock : *a;
  });
}

void Worker::push(const std::vector<KeyData>& grads, int64_t clock, bool advance) {
  std::vector<Frame> frames = impl_->push_frames(grads, clock, advance);
  impl_->run_sync(frames);
}

int64_t Worker::pull(const std::vector<KeyData>& out, int64_t clock) {
  int64_t a = INT64_MAX;
  std::vector<Frame> frames = impl_->pull_frames(out, clock, &a);
  impl_->run_sync(frames);
  return a == INT64_MAX ? clock : a;
}

int64_t Worker::push_pull(const std::vector<KeyData>& grads, const std::vector<KeyData>& out,
                          int64_t clock) {
  // Both requests' frames go out before either's replies are read.
  auto a = std::make_shared<int64_t>(INT64_MAX);
  auto frames = std::make_shared<std::vector<Frame>>(impl_->push_frames(grads, clock, true));
  for (Frame& f : impl_->pull_frames(out, clock + 1, a.get())) frames->push_back(std::move(f));
  impl_->run_sync(*frames);
  return *a == INT64_MAX ? clock + 1 : *a;
}

Frame Worker::Impl::report_frame(int64_t clock, const double sums[3]) {
  Frame f;
  f.h = header(wire::kReport, 0);
  f.h.clock = clock;
  f.own.assign(reinterpret_cast<const uint8_t*>(sums),
               reinterpret_cast<const uint8_t*>(sums) + 3 * sizeof(double));
  f.h.payload = 3 * sizeof(double);
  return f;
}

Frame Worker::Impl::stats_frame(int s, int64_t round, uint16_t flags, std::vector<uint8_t>* into) {
  BRAID_CHECK_ARG(s >= 0 && s < layout.servers(),
                  "stats of server " + std::to_string(s) + " outside 0.." +
                      std::to_string(layout.servers() - 1));
  Frame f;
  f.server = s;
  f.h = header(wire::kStats, s);
  f.h.clock = round;
  if (flags != wire::kWaitRound || round >= 0) f.h.flags |= flags;
  f.reply_into = into;
  return f;
}

void Worker::report(int64_t clock, double loss_sum, double rows, double correct) {
  const double v[3] = {loss_sum, rows, correct};
  auto frames = std::make_shared<std::vector<Frame>>();
  frames->push_back(impl_->report_frame(clock, v));
  impl_->run_sync(*frames);
}

int64_t Worker::step(const StepRequest& r, std::vector<ServerStats>* stats) {
  Impl& m = *impl_;
  const int S = m.layout.servers();
  auto a = std::make_shared<int64_t>(INT64_MAX);
  auto frames = std::make_shared<std::vector<Frame>>();
  auto payloads = std::make_shared<std::vector<std::vector<uint8_t>>>(size_t(S));
  if (r.push_round) {
    frames->push_back(m.report_frame(r.clock, r.sums));
    for (Frame& f : m.push_frames(r.grads, r.clock, true)) frames->push_back(std::move(f));
  }
  for (Frame& f : m.pull_frames(r.pull, r.pull_clock, a.get())) frames->push_back(std::move(f));
  if (r.stats)
    for (int s = 0; s < S; ++s)
      frames->push_back(m.stats_frame(s, r.stats_round,
                                      r.stats_wait && s == 0 ? wire::kWaitRound : 0,
                                      &(*payloads)[size_t(s)]));
  m.run_sync(*frames);
  if (r.stats && stats) {
    stats->clear();
    for (int s = 0; s < S; ++s) stats->push_back(wire::decode_stats((*payloads)[size_t(s)]));
  }
  return *a == INT64_MAX ? r.pull_clock : *a;
}

ServerStats Worker::stats(int s, int64_t round, bool wait_round) {
  return impl_->stats(s, round, wait_round ? wire::kWaitRound : 0);
}

ServerStats Worker::final_stats(int s) { return impl_->stats(s, -1, wire::kWaitOthers); }

ServerStats Worker::Impl::stats(int s, int64_t round, uint16_t flags) {
  auto payload = std::make_shared<std::vector<uint8_t>>();
  auto frames = std::make_shared<std::vector<Frame>>();
  frames->push_back(stats_frame(s, round, flags, payload.get()));
  run_sync(*frames);
  return wire::decode_stats(*payload);
}

int64_t Worker::refresh_hot() {
  const int S = impl_->layout.servers();
  auto frames = std::make_shared<std::vector<Frame>>(size_t(S));
  auto payloads = std::make_shared<std::vector<std::vector<uint8_t>>>(size_t(S));
  for (int s = 0; s < S; ++s) {
    Frame& f = (*frames)[size_t(s)];
    f.server = s;
    f.h = impl_->header(wire::kHotSet, s);
    f.reply_into = &(*payloads)[size_t(s)];
  }
  impl_->run_sync(*frames);
  std::set<std::pair<KeyId, int64_t>> hot;
  for (int s = 0; s < S; ++s) {
    const std::vector<uint8_t>& p = (*payloads)[size_t(s)];
    if (p.size() % 16 != 0)
      throw Error(Errc::kProtocol, impl_->who(s, wire::kHotSet) + ": reply of " +
                                       std::to_string(p.size()) + " bytes");
    for (size_t at = 0; at < p.size(); at += 16) {
      int64_t ids[2];
      std::memcpy(ids, p.data() + at, 16);
      const bool ok = ids[0] >= 0 && uint64_t(ids[0]) < impl_->layout.size() &&
                      impl_->layout.key(KeyId(ids[0])).sparse && ids[1] >= 0 &&
                      ids[1] < impl_->layout.key(KeyId(ids[0])).rows &&
                      impl_->layout.row_server(ids[1]) == s;
      if (!ok)
        throw Error(Errc::kProtocol, impl_->who(s, wire::kHotSet) + ": names row " +
                                         std::to_string(ids[1]) + " of key id " +
                                         std::to_string(ids[0]) + ", not this server's");
      if (S > 1) hot.insert({KeyId(ids[0]), ids[1]});
    }
  }
  impl_->hot = std::move(hot);
  return int64_t(impl_->hot.size());
}

std::vector<std::pair<KeyId, int64_t>> Worker::hot_rows() const {
  return {impl_->hot.begin(), impl_->hot.end()};
}

void Worker::finish() {
  auto frames = std::make_shared<std::vector<Frame>>();
  for (int s = 0; s < impl_->layout.servers(); ++s) {
    Frame f;
    f.server = s;
    f.h = impl_->header(wire::kBye, s);
    frames->push_back(std::move(f));
  }
  impl_->run_sync(*frames);
}

}  // namespace braid::ps
