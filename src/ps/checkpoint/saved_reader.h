// Reading a saved shard: a checkpoint (shard_checkpoint.cc) or a state
// transfer (shard_transfer.cc), both braid checkpoint files. Private to
// src/ps. Every error names the file and the entry: kCorrupt for one that
// is missing or malformed, kInvalidArgument for one that differs from this
// job.
#pragma once

#include <string>
#include <utility>

#include "braid/checkpoint.h"
#include "braid/error.h"

namespace braid::ps {

// A read-only tensor over `data` for saving (the file only reads it).
inline Tensor saved_view(const void* data, Shape shape, DType dt = DType::kF32) {
  return Tensor::view(const_cast<void*>(data), std::move(shape), dt);
}

struct SavedReader {
  const Checkpoint& ck;
  const std::string& path;
  const char* kind;  // "checkpoint" or "state transfer"

  std::string named(const std::string& why) const {
    return std::string("parameter-server ") + kind + " " + path + ": " + why;
  }
  [[noreturn]] void corrupt(const std::string& why) const {
    throw Error(Errc::kCorrupt, named(why));
  }
  [[noreturn]] void mismatch(const std::string& why) const {
    throw Error(Errc::kInvalidArgument, named(why));
  }
  const std::string& meta(const std::string& k) const {
    auto it = ck.meta.find(k);
    if (it == ck.meta.end()) corrupt("meta '" + k + "' is missing");
    return it->second;
  }
  int64_t number(const std::string& k) const {
    const std::string& v = meta(k);
    size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v.size()) corrupt("meta '" + k + "' = '" + v + "' is not a number");
    return n;
  }
  void expect(const std::string& k, int64_t want, const std::string& what) const {
    const int64_t got = number(k);
    if (got != want)
      mismatch(what + ": the " + kind + " has " + std::to_string(got) + ", this job " +
               std::to_string(want));
  }
  // The tensor `name` with `numel` elements of `dt` (absent when numel is 0).
  const void* tensor(const std::string& name, int64_t numel, DType dt = DType::kF32) const {
    if (numel == 0) return nullptr;
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) corrupt("tensor '" + name + "' is missing");
    if (it->second.dtype() != dt || it->second.numel() != numel)
      mismatch("tensor '" + name + "' has " + std::to_string(it->second.numel()) +
               " elements of another shape or type than the " + std::to_string(numel) +
               " this job keeps");
    return it->second.raw();
  }
};

}  // namespace braid::ps
