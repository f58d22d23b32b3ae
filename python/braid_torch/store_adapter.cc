#include "store_adapter.h"

#include <string>
#include <utility>

#include "braid/error.h"

namespace braid_torch {
namespace {

// c10d reports a timeout as a c10::Error or std::runtime_error whose text
// says so ("Timeout", "timed out"); there is no separate type to catch.
bool says_timeout(const std::string& what) {
  return what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
}

class C10dStore final : public braid::Store {
 public:
  C10dStore(c10::intrusive_ptr<c10d::Store> s, std::chrono::milliseconds timeout)
      : s_(std::move(s)) {
    set_timeout(timeout);
  }

  void set(const std::string& key, const braid::Bytes& value) override {
    guard("set", key, [&] { s_->set(key, value); });
  }
  braid::Bytes get(const std::string& key) override {
    braid::Bytes out;
    guard("get", key, [&] {
      s_->wait({key}, timeout());
      out = s_->get(key);
    });
    return out;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    guard("add", key, [&] { v = s_->add(key, delta); });
    return v;
  }
  braid::Bytes compare_set(const std::string& key, const braid::Bytes& expected,
                           const braid::Bytes& desired) override {
    braid::Bytes v;
    guard("compare_set", key, [&] { v = s_->compareSet(key, expected, desired); });
    return v;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    std::string names;
    for (auto& k : keys) names += (names.empty() ? "" : ", ") + k;
    guard("wait", names, [&] { s_->wait(keys, t); });
  }
  bool remove(const std::string& key) override {
    bool had = false;
    guard("remove", key, [&] { had = s_->deleteKey(key); });
    return had;
  }
  bool check(const std::string& key) override {
    bool has = false;
    guard("check", key, [&] { has = s_->check({key}); });
    return has;
  }

 private:
  template <class F>
  void guard(const char* call, const std::string& key, F&& f) {
    try {
      f();
    } catch (const braid::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw braid::Error(says_timeout(what) ? braid::Errc::kTimeout : braid::Errc::kIo,
                         std::string("braid_torch: c10d store ") + call + "(" + key +
                             ") failed: " + what.substr(0, what.find('\n')));
    }
  }

  c10::intrusive_ptr<c10d::Store> s_;
};

}  // namespace

std::shared_ptr<braid::Store> adapt_store(c10::intrusive_ptr<c10d::Store> store,
                                          std::chrono::milliseconds timeout) {
  if (!store) throw braid::Error(braid::Errc::kInvalidArgument, "braid_torch: no c10d store given");
  return std::make_shared<C10dStore>(std::move(store), timeout);
}

}  // namespace braid_torch
