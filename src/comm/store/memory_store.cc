// The in-process store: waits are a condition variable on the map.
#include "comm/store/memory_store.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "braid/error.h"

namespace braid::comm {
namespace {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> l(mu_);
    data_[key] = value;
    cv_.notify_all();
  }
  Bytes get(const std::string& key) override {
    wait({key}, timeout_);
    std::lock_guard<std::mutex> l(mu_);
    return data_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> l(mu_);
    int64_t cur = 0;
    auto it = data_.find(key);
    if (it != data_.end()) {
      try {
        cur = std::stoll(std::string(it->second.begin(), it->second.end()));
      } catch (const std::exception&) {
        throw Error(Errc::kInvalidArgument, "add: the value of key '" + key + "' is not an integer");
      }
    }
    cur += delta;
    std::string s = std::to_string(cur);
    data_[key] = Bytes(s.begin(), s.end());
    cv_.notify_all();
    return cur;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    bool swap = it == data_.end() ? expected.empty() : it->second == expected;
    if (!swap) return it == data_.end() ? Bytes{} : it->second;
    data_[key] = desired;
    cv_.notify_all();
    return desired;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    auto all = [&] {
      for (auto& k : keys)
        if (!data_.count(k)) return false;
      return true;
    };
    if (cv_.wait_for(l, timeout, all)) return;
    std::string missing;
    for (auto& k : keys)
      if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
    throw Error(Errc::kTimeout, "in-process store: timed out after " +
                                    std::to_string(timeout.count()) +
                                    " ms waiting for keys: " + missing);
  }
  bool remove(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    return data_.erase(key) > 0;
  }
  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    return data_.count(key) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace braid::comm
