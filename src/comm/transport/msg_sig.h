// MsgSig: the identity of one message (the collective call it belongs to,
// its sequence number and length), which every message carries in its
// header so that a receiver can compare it with what it expects; and the
// text that error messages show for it.
#pragma once

#include <cstdint>
#include <string>

#include "braid/dtype.h"

namespace braid::comm {

enum class CollOp : uint8_t {
  kBroadcast, kReduce, kAllReduce, kAllGather, kReduceScatter, kGather, kScatter,
  kAllToAll, kAllToAllV, kBarrier, kSend, kRecv, kSplit, kProbe,
};
const char* coll_op_name(CollOp op);

// Identity of one message, carried in its header. All fields but `bytes`
// and `step` describe the collective call; two ranks in the same collective
// produce equal values for those fields.
struct MsgSig {
  uint64_t seq = 0;      // collective sequence number on this communicator
  uint64_t count = 0;    // the collective's count argument (elements)
  uint64_t bytes = 0;    // this message's payload length
  int32_t root = -1;     // root, or tag for send/recv
  uint32_t step = 0;     // algorithm step (diagnostics only; not compared)
  CollOp op = CollOp::kBarrier;
  DType dtype = DType::kU8;
  ReduceOp rop = ReduceOp::kSum;
  uint8_t pad = 0;
};
static_assert(sizeof(MsgSig) == 40, "MsgSig is a wire format");

// True if the two signatures describe the same message (ignores `step`).
bool sig_matches(const MsgSig& a, const MsgSig& b);
// "all_reduce seq 12 count 1000 f32 sum root -1 (4000 bytes)"; without
// the message's byte length when with_bytes is false (it depends on the
// algorithm's split of the call, not on the caller's arguments).
std::string describe_sig(const MsgSig& s, bool with_bytes = true);

}  // namespace braid::comm
