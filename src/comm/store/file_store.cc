// FileStore: keys are files in a directory shared by the ranks of one host.
// Writes go to a temporary name and are renamed into place, so a reader sees
// a whole value or nothing; add and compare_set serialise on an flock.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/store.h"

namespace braid {
namespace {

std::string hex_key(const std::string& key) {
  static const char* d = "0123456789abcdef";
  std::string out;
  out.reserve(key.size() * 2);
  for (unsigned char c : key) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out.empty() ? std::string("_") : out;
}

class FileStore : public Store {
 public:
  FileStore(std::string dir, int members) : dir_(std::move(dir)), members_(members) {
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
      throw_errno("FileStore: mkdir " + dir_);
  }

  // With members > 0, each store object counts itself out, and the one that
  // brings the count to members removes the directory. Counting leavers
  // rather than open stores means a rank that opens late can never find the
  // directory gone; a rank that dies without leaving keeps it.
  ~FileStore() override {
    if (members_ <= 0) return;
    try {
      if (add(kLeftKey, 1) < members_) return;
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } catch (const std::exception&) {
      // The directory is only left behind; nothing to report from a destructor.
    }
  }

  void set(const std::string& key, const Bytes& value) override {
    std::string path = path_of(key);
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) throw_errno("FileStore: open " + tmp);
    size_t off = 0;
    while (off < value.size()) {
      ssize_t w = ::write(fd, value.data() + off, value.size() - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        throw_errno("FileStore: write " + tmp);
      }
      off += size_t(w);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno("FileStore: rename " + path);
  }

  Bytes get(const std::string& key) override {
    wait({key}, timeout_);
    Bytes v;
    if (!read_file(path_of(key), &v))
      throw Error(Errc::kIo, "FileStore: key '" + key + "' vanished while reading");
    return v;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Lock l(this);
    Bytes v;
    int64_t cur = 0;
    if (read_file(path_of(key), &v)) cur = std::stoll(std::string(v.begin(), v.end()));
    cur += delta;
    std::string s = std::to_string(cur);
    set(key, Bytes(s.begin(), s.end()));
    return cur;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Lock l(this);
    Bytes v;
    bool have = read_file(path_of(key), &v);
    if ((!have && expected.empty()) || (have && v == expected)) {
      set(key, desired);
      return desired;
    }
    return v;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    uint64_t deadline = now_ns() + uint64_t(timeout.count()) * 1000000ull;
    int sleep_us = 50;
    for (;;) {
      std::string missing;
      for (auto& k : keys)
        if (!check(k)) missing += (missing.empty() ? "" : ", ") + k;
      if (missing.empty()) return;
      if (now_ns() > deadline)
        throw Error(Errc::kTimeout, "FileStore " + dir_ + ": timed out after " +
                                        std::to_string(timeout.count()) +
                                        " ms waiting for keys: " + missing);
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, 10000);
    }
  }

  bool remove(const std::string& key) override { return ::unlink(path_of(key).c_str()) == 0; }

  bool check(const std::string& key) override {
    struct stat st;
    return ::stat(path_of(key).c_str(), &st) == 0;
  }

 private:
  struct Lock {
    explicit Lock(FileStore* s) {
      fd = ::open((s->dir_ + "/.lock").c_str(), O_RDWR | O_CREAT, 0600);
      if (fd < 0) throw_errno("FileStore: open lock");
      while (::flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) throw_errno("FileStore: flock");
    }
    ~Lock() { ::close(fd); }
    int fd;
  };

  std::string path_of(const std::string& key) const { return dir_ + "/k_" + hex_key(key); }

  static bool read_file(const std::string& path, Bytes* out) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    out->clear();
    uint8_t buf[65536];
    for (;;) {
      ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      out->insert(out->end(), buf, buf + r);
    }
    ::close(fd);
    return true;
  }

  static constexpr const char* kLeftKey = "braid/file_store/left";
  std::string dir_;
  int members_;
};

class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {
    timeout_ = base_->timeout();
  }
  void set(const std::string& k, const Bytes& v) override { base_->set(prefix_ + k, v); }
  Bytes get(const std::string& k) override { return base_->get(prefix_ + k); }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(prefix_ + k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return base_->compare_set(prefix_ + k, e, d);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    std::vector<std::string> p;
    for (auto& k : keys) p.push_back(prefix_ + k);
    base_->wait(p, t);
  }
  bool remove(const std::string& k) override { return base_->remove(prefix_ + k); }
  bool check(const std::string& k) override { return base_->check(prefix_ + k); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& dir, int members) {
  if (members < 0) throw Error(Errc::kInvalidArgument, "make_file_store: members < 0");
  return std::make_shared<FileStore>(dir, members);
}

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

}  // namespace braid
