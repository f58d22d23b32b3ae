// Shared by the checker's two parts (checker.cc, checker_play.cc).
#pragma once

#include <string>

#include "braid/schedule_check.h"

namespace braid::parallel::pp_detail {

// Throws Error(kInvalidArgument) "schedule 'NAME' rejected: rank R[, action
// I (TEXT)]: why" (action < 0: the rank's list as a whole).
[[noreturn]] void reject(const Schedule& s, int rank, int action, const std::string& why);
// The text of one transfer, as action_text prints it.
std::string transfer_text(const Schedule& s, const Transfer& t);
// Part one: each list on its own, and the pairing of sends with receives.
void check_lists(const Schedule& s);

}  // namespace braid::parallel::pp_detail
