#include "support/multiproc.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "braid/comm.h"
#include "braid/env.h"

namespace braid::testing {

std::shared_ptr<Communicator> make_comm(int rank, int size, std::shared_ptr<Store> store,
                                        int timeout_s, const std::string& transport) {
  CommOptions o;
  o.timeout = std::chrono::seconds(timeout_s);
  o.transport = transport;
  return Communicator::create(rank, size, std::move(store), o);
}

namespace {

// Collects gtest failures inside a child so they can be reported.
class ChildListener : public ::testing::EmptyTestEventListener {
 public:
  explicit ChildListener(int fd) : fd_(fd) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    failed = true;
    std::string s = std::string(r.file_name() ? r.file_name() : "?") + ":" +
                    std::to_string(r.line_number()) + ": " + r.summary() + "\n";
    (void)!::write(fd_, s.data(), s.size());
  }
  bool failed = false;

 private:
  int fd_;
};

}  // namespace

namespace {

// Directories made by temp_dir, removed when the process that made them
// exits normally. Forked ranks leave with _exit, and a child that does call
// exit() skips the parent's entries (the pid check).
struct TempDirs {
  std::mutex mu;
  std::vector<std::pair<pid_t, std::string>> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (auto& [pid, dir] : dirs)
      if (pid == ::getpid()) std::filesystem::remove_all(dir, ec);
  }
};

TempDirs& temp_dirs() {
  static TempDirs t;
  return t;
}

}  // namespace

std::string temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/braid_test_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  if (!::mkdtemp(buf.data())) {
    ADD_FAILURE() << "mkdtemp " << tmpl << ": " << std::strerror(errno);
    return "/tmp";
  }
  auto& t = temp_dirs();
  std::lock_guard<std::mutex> l(t.mu);
  t.dirs.emplace_back(::getpid(), buf.data());
  return buf.data();
}

std::vector<RankResult> run_ranks(int n,
                                  const std::function<void(int, int, std::shared_ptr<Store>)>& body,
                                  std::chrono::seconds timeout, const std::vector<std::string>& env) {
  std::string dir = temp_dir("store");
  std::vector<pid_t> pids(n);
  std::vector<int> pipes(n);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (::pipe(p) != 0) std::abort();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      ::setpgid(0, 0);
      for (auto& kv : env) {
        auto eq = kv.find('=');
        ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
      }
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      auto* l = new ChildListener(p[1]);
      listeners.Append(l);
      int code = 0;
      try {
        body(r, n, make_file_store(dir));
      } catch (const std::exception& e) {
        std::string s = std::string("rank ") + std::to_string(r) + " threw: " + e.what() + "\n";
        (void)!::write(p[1], s.data(), s.size());
        code = 3;
      }
      if (l->failed && code == 0) code = 4;
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    ::close(p[1]);
    pids[r] = pid;
    pipes[r] = p[0];
  }
  std::vector<RankResult> out(n);
  uint64_t deadline = now_ns() + uint64_t(timeout.count()) * 1000000000ull;
  std::vector<bool> done(n, false);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      pid_t w = ::waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        done[r] = true;
        --left;
        out[r].rank = r;
        if (WIFEXITED(st)) out[r].exit_code = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) out[r].signal = WTERMSIG(st);
      }
    }
    if (left == 0) break;
    if (now_ns() > deadline) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          out[r].rank = r;
          out[r].signal = SIGKILL;
          out[r].output += "rank " + std::to_string(r) + " did not finish within " +
                           std::to_string(timeout.count()) + " s (killed)\n";
          done[r] = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    ssize_t k;
    while ((k = ::read(pipes[r], buf, sizeof buf)) > 0) out[r].output.append(buf, size_t(k));
    ::close(pipes[r]);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

void expect_all_pass(int n, const std::function<void(int, int, std::shared_ptr<Store>)>& body,
                     std::chrono::seconds timeout, const std::vector<std::string>& env) {
  auto res = run_ranks(n, body, timeout, env);
  for (auto& r : res) {
    EXPECT_TRUE(r.exit_code == 0 && r.signal == 0)
        << "rank " << r.rank << " of " << n << " failed (exit " << r.exit_code << ", signal "
        << r.signal << "):\n"
        << r.output;
  }
}

}  // namespace braid::testing
