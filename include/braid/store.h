// Store: the rendezvous key-value store ranks use to find each other.
//
// TcpStore is hosted by the launcher (`braid run`) or by rank 0; every
// connection proves knowledge of the job secret (HMAC-SHA256 over a
// server nonce) before any request is read, and every length on the wire is
// checked before memory is allocated. FileStore keeps keys as files in a
// directory shared by the ranks (tests, and jobs on one host).
//
// All calls are thread-safe. Blocking calls throw Error(kTimeout) naming the
// keys still missing when the deadline passes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace braid {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits until key exists (up to the store's timeout), then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (created as 0) and
  // returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // If key's value equals `expected` (or key is absent and expected is
  // empty), sets it to `desired`. Returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Waits until all keys exist, or throws Error(kTimeout) after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Returns true if key existed.
  virtual bool remove(const std::string& key) = 0;
  virtual bool check(const std::string& key) = 0;  // exists, without waiting

  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Convenience: strings.
  void set_str(const std::string& key, const std::string& v) { set(key, Bytes(v.begin(), v.end())); }
  std::string get_str(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
};

// A Store view that prefixes every key (used by sub-communicators).
std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix);

// A store server on a TCP port. Runs its own thread; the destructor stops it.
class TcpStoreServer {
 public:
  // port 0 picks a free port. `secret` is the job secret clients must prove.
  TcpStoreServer(const std::string& bind_host, int port, const std::string& secret);
  ~TcpStoreServer();
  int port() const;
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Connects to a TcpStoreServer, retrying until `timeout` (the server may
// start later than the client). Throws Error(kAuth) if the secret is wrong.
std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port,
                                         const std::string& secret,
                                         std::chrono::milliseconds timeout);

// A store in a directory (created if missing). With members > 0 (the number
// of processes that each open one store on it), the directory and its keys
// are removed when the last of them destroys its store — PyTorch's
// FileStore(path, world_size) behaves the same way; a process that dies
// without destroying its store leaves the directory behind.
std::shared_ptr<Store> make_file_store(const std::string& dir, int members = 0);

// A fresh random job secret (hex), from the OS random source.
std::string make_job_secret();

}  // namespace braid
