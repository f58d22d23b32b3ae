// expect_refused: `call` must throw braid::Error(kInvalidArgument) whose
// message contains `needle`; anything accepted or another error fails the
// test, naming what was expected.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "braid/error.h"

namespace braid::testing {

template <class Call>
void expect_refused(Call&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected an error naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace braid::testing
