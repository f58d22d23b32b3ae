// braid::Store over the c10d::Store that torch.distributed hands a process
// group (a PrefixStore over the TCPStore, FileStore or HashStore of
// init_process_group's init_method). braid's communicator rendezvous runs
// entirely through it, so whatever launched PyTorch (env://, tcp://,
// file://, torchrun) launches braid too.
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "braid/store.h"

namespace braid_torch {

// Every call forwards to `store`; c10d's failures (a timeout, a closed
// store) come back as braid::Error naming the call and key: kTimeout when
// a wait or get ran out of time, kIo otherwise.
std::shared_ptr<braid::Store> adapt_store(c10::intrusive_ptr<c10d::Store> store,
                                          std::chrono::milliseconds timeout);

}  // namespace braid_torch
