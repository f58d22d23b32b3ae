// The text of operation names and message signatures in error messages.
#include "comm/transport/msg_sig.h"

#include <sstream>

namespace braid::comm {

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::kBroadcast: return "broadcast";
    case CollOp::kReduce: return "reduce";
    case CollOp::kAllReduce: return "all_reduce";
    case CollOp::kAllGather: return "all_gather";
    case CollOp::kReduceScatter: return "reduce_scatter";
    case CollOp::kGather: return "gather";
    case CollOp::kScatter: return "scatter";
    case CollOp::kAllToAll: return "all_to_all";
    case CollOp::kAllToAllV: return "all_to_all_v";
    case CollOp::kBarrier: return "barrier";
    case CollOp::kSend: return "send";
    case CollOp::kRecv: return "recv";
    case CollOp::kSplit: return "split";
    case CollOp::kProbe: return "probe";
  }
  return "unknown_op";
}

bool sig_matches(const MsgSig& a, const MsgSig& b) {
  return a.seq == b.seq && a.count == b.count && a.bytes == b.bytes && a.root == b.root &&
         a.op == b.op && a.dtype == b.dtype && a.rop == b.rop;
}

std::string describe_sig(const MsgSig& s, bool with_bytes) {
  // Values come off the wire: print out-of-range enums as numbers.
  std::ostringstream os;
  if (uint8_t(s.op) <= uint8_t(CollOp::kProbe)) os << coll_op_name(s.op);
  else os << "op#" << int(s.op);
  os << " seq " << s.seq << " count " << s.count << ' ';
  if (uint8_t(s.dtype) < kNumDTypes) os << dtype_name(s.dtype);
  else os << "dtype#" << int(s.dtype);
  if (s.op == CollOp::kSend || s.op == CollOp::kRecv || s.op == CollOp::kProbe) {
    // point to point: the root field carries the tag; no reduction
    os << " tag " << s.root;
    if (with_bytes) os << " (" << s.bytes << " bytes)";
    return os.str();
  }
  os << ' ';
  if (uint8_t(s.rop) < kNumReduceOps) os << reduce_op_name(s.rop);
  else os << "rop#" << int(s.rop);
  os << " root " << s.root;
  if (with_bytes) os << " (" << s.bytes << " bytes)";
  return os.str();
}

}  // namespace braid::comm
