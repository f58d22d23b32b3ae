// The self wire: a rank's messages to itself, a send meeting the receive
// posted for it (in order, signatures compared like on any wire).
#pragma once

#include <memory>

#include "comm/transport/wire.h"

namespace braid::comm {

std::unique_ptr<Wire> make_self_wire(const WireContext& ctx);

}  // namespace braid::comm
