// Megatron-style tensor parallelism, one header per concept; this one
// includes them all:
//   tp_mappings.h  the named communication operators (forward and backward
//                  of one operation over the tp group)
//   tp_shard.h     how a parameter is split; shards to and from the full
//                  tensor; the partial-gradient sum of sequence parallelism
//   tp_layers.h    column- and row-parallel linears, the parallel MLP and
//                  attention, the vocab-parallel embedding and cross-entropy,
//                  the transformer block
// A whole model over a tp group is a ModelSpec's ShardedModel
// (model_spec.h, sharded_model.h); parallelize.h lays it over a mesh.
#pragma once

#include "braid/tp_layers.h"
#include "braid/tp_mappings.h"
#include "braid/tp_shard.h"
