// The TCP transport's communicator that the tcp_frame target checks hellos
// and headers against, and that record_seeds records a real pair's
// traffic in (the seeds must match it): two ranks, one connection per
// pair, rank 0 receiving.
#pragma once

#include <string>

#include "comm/transport/msg_sig.h"

namespace braid::fuzz {

const std::string kTcpToken = "fuzz-job/world";
constexpr int kTcpWorld = 2;
constexpr int kTcpStreams = 1;

// The message rank 0's receive expects.
inline comm::MsgSig tcp_sig() {
  comm::MsgSig s;
  s.seq = 7;
  s.count = 1024;
  s.bytes = 4096;
  s.op = comm::CollOp::kAllReduce;
  s.dtype = DType::kF32;
  return s;
}

}  // namespace braid::fuzz
