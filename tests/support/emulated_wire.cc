#include "support/emulated_wire.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <vector>

namespace braid::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// A TAP device named `name`, made in the calling thread's network namespace;
// its descriptor is non-blocking.
int open_tap(const std::string& name) {
  int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(sys_error("emulated wire: open /dev/net/tun"));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
    const std::string why = sys_error("emulated wire: TUNSETIFF " + name);
    ::close(fd);
    throw std::runtime_error(why);
  }
  return fd;
}

// Enters the network namespace at `path` (this thread only).
void enter_netns(const std::string& path) {
  int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) throw std::runtime_error(sys_error("emulated wire: open " + path));
  const int r = ::setns(ns, CLONE_NEWNET);
  const std::string why = r != 0 ? sys_error("emulated wire: setns " + path) : "";
  ::close(ns);
  if (r != 0) throw std::runtime_error(why);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

EmulatedWire::EmulatedWire(pid_t a_pid, const std::string& a_name, pid_t b_pid,
                           const std::string& b_name, WireFaults faults)
    : faults_(faults), rng_(faults.seed) {
  // The namespaces are entered by a thread of its own that ends right after:
  // setns changes only the calling thread, and the test's threads stay home.
  std::string error;
  std::thread([&] {
    try {
      open_ends(a_pid, a_name, b_pid, b_name);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }).join();
  if (error.empty()) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) error = sys_error("emulated wire: eventfd");
  }
  if (!error.empty()) {
    for (int fd : fd_)
      if (fd >= 0) ::close(fd);
    throw std::runtime_error(error);
  }
  thread_ = std::thread([this] { carry(); });
}

void EmulatedWire::open_ends(pid_t a_pid, const std::string& a_name, pid_t b_pid,
                             const std::string& b_name) {
  enter_netns("/proc/" + std::to_string(a_pid) + "/ns/net");
  fd_[0] = open_tap(a_name);
  enter_netns("/proc/" + std::to_string(b_pid) + "/ns/net");
  fd_[1] = open_tap(b_name);
}

EmulatedWire::~EmulatedWire() {
  const uint64_t one = 1;
  if (stop_fd_ >= 0) [[maybe_unused]] const ssize_t w = ::write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (int fd : fd_)
    if (fd >= 0) ::close(fd);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

void EmulatedWire::set_faults(const WireFaults& faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = faults;
  rng_ = faults.seed;
}

WireStats EmulatedWire::stats() const {
  return WireStats{frames_.load(), dropped_.load(), overflow_.load(), bytes_.load()};
}

void EmulatedWire::carry() {
  struct Frame {
    Clock::time_point due;
    std::vector<unsigned char> bytes;
  };
  std::deque<Frame> held[2];  // held[d]: frames read from fd_[d], for fd_[1 - d]
  std::vector<unsigned char> buf(65536);
  // Reads what end d sent (a bounded batch, then the other way's turn) and
  // holds each frame the loss draw keeps and the queue has room for.
  auto take = [&](int d, Clock::time_point arrived) {
    for (int k = 0; k < 256; ++k) {
      const ssize_t n = ::read(fd_[d], buf.data(), buf.size());
      if (n <= 0) return;
      frames_.fetch_add(1, std::memory_order_relaxed);
      const double draw = double(splitmix(rng_) >> 11) * 0x1.0p-53;
      if (draw < faults_.loss)
        dropped_.fetch_add(1, std::memory_order_relaxed);
      else if (held[d].size() >= faults_.queue_frames)
        overflow_.fetch_add(1, std::memory_order_relaxed);
      else
        held[d].push_back(Frame{arrived + faults_.delay, {buf.data(), buf.data() + n}});
    }
  };
  for (;;) {
    // Sleep until a frame arrives, a held one is due (at most 1 s), or the
    // wire stops.
    auto next = Clock::now() + std::chrono::seconds(1);
    for (const auto& q : held)
      if (!q.empty()) next = std::min(next, q.front().due);
    const long long left = std::max<long long>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(next - Clock::now()).count());
    const timespec wait{time_t(left / 1000000000), long(left % 1000000000)};
    pollfd p[3] = {{fd_[0], POLLIN, 0}, {fd_[1], POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::ppoll(p, 3, &wait, nullptr) < 0 && errno != EINTR) return;
    if (p[2].revents) return;
    // The frames of this wake-up arrived now, under the faults of now.
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto arrived = Clock::now();
      for (int d = 0; d < 2; ++d)
        if (p[d].revents & POLLIN) take(d, arrived);
    }
    // Deliver what is due, in order; a write into a device that is down (a
    // cut link) fails, and the frame is lost as on a real cut wire.
    const auto t = Clock::now();
    for (int d = 0; d < 2; ++d)
      while (!held[d].empty() && held[d].front().due <= t) {
        const auto& f = held[d].front().bytes;
        if (::write(fd_[1 - d], f.data(), f.size()) == ssize_t(f.size()))
          bytes_.fetch_add(f.size(), std::memory_order_relaxed);
        else
          overflow_.fetch_add(1, std::memory_order_relaxed);
        held[d].pop_front();
      }
  }
}

}  // namespace braid::testing
