// How every message names a parameter server: "parameter server <id>".
#pragma once

#include <string>

namespace braid::ps {

inline std::string server_name(int id) { return "parameter server " + std::to_string(id); }

}  // namespace braid::ps
