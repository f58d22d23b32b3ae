// Checkpoints: named tensors with full shapes plus string metadata, in one
// file written atomically (temp file, fsync, rename) and guarded by CRC-32.
//
// Format (all integers little-endian):
//   "BRAIDCK1"                 8-byte magic
//   u64 header_bytes           length of the JSON header
//   header                     JSON: {"version":1, "meta":{k: v, ...},
//                               "tensors":[{"name", "dtype", "shape",
//                               "offset", "nbytes"}, ...], "payload_bytes"}
//   payload                    tensor bytes; offsets relative to its start,
//                               each 64-byte aligned
//   u32 crc32                  CRC-32 (zlib's polynomial) of everything above
//   "BRAIDEND"                 8-byte trailer magic
//
// Conventions used by braid: "model/<param name>" for parameters,
// "optim/<param name>/<slot>" for optimizer state, meta "step", "seed",
// "optim/kind", "optim/steps". Because tensors are stored by name at their
// full shape, a sharded (ZeRO) optimizer can gather or slice state by name
// and reload at another world size; a shard may also be stored under its
// own name with meta "shard/<name>" = "start,count,full_numel".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/tensor.h"

namespace braid {
namespace nn {
struct Parameter;
}

struct Checkpoint {
  std::map<std::string, std::string> meta;
  std::map<std::string, Tensor> tensors;  // may hold views while saving
};

// Writes `ck` to `path` atomically: a crash leaves either the old file or
// the new one. Throws Error(kIo) naming the path on failure.
void save_checkpoint(const std::string& path, const Checkpoint& ck);

// Reads and verifies a checkpoint. Throws Error(kCorrupt) naming the path
// and the problem for a truncated file, bad magic, bad CRC, a malformed
// header or tensor entries that point outside the payload; Error(kIo) when
// the file cannot be read. Never returns partial data.
Checkpoint load_checkpoint(const std::string& path);
// The same checks on a checkpoint's bytes already in memory; `path` names
// them in errors. load_checkpoint reads the file and calls this.
Checkpoint parse_checkpoint(const std::vector<char>& bytes, const std::string& path);

// "model/<name>" views of the parameters (valid while params live).
void add_parameters(Checkpoint& ck, const std::vector<nn::Parameter*>& params);
// Copies "model/<name>" into each parameter; throws kCorrupt naming the
// tensor when one is missing or its shape differs.
void load_parameters(const Checkpoint& ck, const std::vector<nn::Parameter*>& params);

// Where a training run resumes: the checkpoint's meta "step", after
// checking that its meta "seed" equals `seed` (a run resumed with another
// seed would replay a different data order). Error(kCorrupt) naming `path`
// when either is missing, Error(kInvalidArgument) when the seeds differ.
int64_t resume_step(const Checkpoint& ck, uint64_t seed, const std::string& path);

// CRC-32 (IEEE 802.3, as zlib's crc32), chainable: crc32(b, crc32(a)).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace braid
