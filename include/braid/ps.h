// Parameter server: servers own key ranges and the optimizer state of those
// ranges; workers push gradients and pull parameters.
//
// Keys. A Layout lists the job's keys, the same on every process:
//  - dense tensors, registered by name and size, each cut into S contiguous
//    slices, slice s on server s (slice s of n elements is
//    [n·s/S, n·(s+1)/S)); a key smaller than S leaves some servers empty;
//  - sparse tables of fixed-width rows (embeddings), a row's server chosen
//    by a mixing hash of its row id, so Zipf-hot rows spread over servers.
// Keys are numbered in registration order (KeyId); a push or pull names
// keys by id.
//
// Consistency (one option for the whole job): BSP (a round closes when
// every worker clocked it; its mean is one optimizer step), SSP (BSP, but a
// pull waits only while the slowest worker is more than s rounds behind),
// ASP (every push applied on arrival), k-of-n (a round closes after K of
// the W workers). Chain replication (R servers per shard, fail-over with no
// acknowledged update lost or applied twice), replacement servers that
// join a chain, and hot-key read replicas: docs/PS.md, with the wire
// protocol.
//
// The contract, one header per concept:
//   ps_keys.h    Layout (keys and their placement), Consistency, UpdateRule
//   ps_server.h  Server, its options, counters and joins
//   ps_worker.h  Worker, Handle, its options and counters
//   ps_trainer.h WorkerTrainer (a worker's training loop), ModelKeys
//
// Errors: braid::Error. kInvalidArgument for bad calls (unknown key, wrong
// length), kTimeout when a wait passes its deadline, kPeerDied when a server
// closed the connection, kAuth for a failed proof, kProtocol for a malformed
// frame; messages name the worker, the server and the operation.
#pragma once

#include "braid/ps_keys.h"
#include "braid/ps_server.h"
#include "braid/ps_trainer.h"
#include "braid/ps_worker.h"
