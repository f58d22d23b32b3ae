// An in-process Store: a map under a mutex, for the threads of one process
// (a job of one rank, or one that names no store).
#pragma once

#include <memory>

#include "braid/store.h"

namespace braid::comm {

std::shared_ptr<Store> make_memory_store();

}  // namespace braid::comm
