// parallel::EmbeddingPlan — where each embedding table of a DLRM lives when
// its tables are sharded over the ranks of a data-parallel job (the hybrid
// of braid/sharded_embeddings.h), as TorchRec's planner decides it.
//
// A table is split one of three ways (TableSharding):
//   table-wise   the whole table on one rank;
//   row-wise     rows split into `world` contiguous blocks, block r on rank
//                r (rows [r·rows/world, (r+1)·rows/world)); each owner pools
//                its rows of every bag, the batch owner adds the partial sums;
//   column-wise  the embedding width split into `world` equal blocks,
//                block r on rank r; each owner pools its columns, the batch
//                owner places them side by side.
// Every rank owns at most one shard of a table; shards list in rank order.
//
// plan_embeddings(cfg, world, options) with options.shard:
//   "table"   every table table-wise, largest first onto the rank holding
//             the fewest bytes so far (ties: the lowest rank);
//   "row", "column"  every table so;
//   "auto"    per table, largest first: table-wise onto the least-loaded
//             rank when that keeps the rank within the balance target
//             (total / world · 1.05, and the memory limit if one is set),
//             else split over every rank — column-wise when the width
//             divides by world (each sample's pooled vector then crosses
//             the network once, as table-wise), else row-wise (world
//             partial sums cross per sample). The cost estimate behind that
//             order: a table's bytes (memory) and, per step, batch · bag ·
//             dim lookups, the same for every table of one DLRM (equal
//             bags), so balancing bytes balances lookups too; among splits,
//             bytes moved per step: table- and column-wise B·dim·4 for the
//             pooled vectors (+ ids), row-wise world·B·dim·4.
// Bytes of a shard: its rows × columns × 4, plus 4 per row with a row-wise
// optimizer state (adagrad; a column-wise table keeps every row's state on
// each column shard, so its state is counted once per rank).
//
// Errors (Error(kInvalidArgument), before any rank trains): an unknown
// shard mode; column-wise when dim does not divide by world (naming both);
// row-wise when a table has fewer rows than ranks; a plan whose largest
// rank exceeds options.memory_limit_bytes (naming the rank, its bytes, the
// limit, and the total that an even split would need).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "braid/dlrm.h"

namespace braid::parallel {

enum class TableSharding { kTable, kRow, kColumn };
const char* sharding_name(TableSharding s);

struct TableShard {
  int rank = 0;
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  int64_t rows() const { return row_end - row_begin; }
  int64_t cols() const { return col_end - col_begin; }
};

struct TablePlan {
  TableSharding kind = TableSharding::kTable;
  std::vector<TableShard> shards;  // in rank order
};

struct EmbeddingPlanOptions {
  std::string shard = "auto";        // table | row | column | auto
  bool row_state = false;            // a row-wise optimizer state (4 bytes a row)
  int64_t memory_limit_bytes = 0;    // per rank, tables and their state; 0: none
};

struct EmbeddingPlan {
  int world = 1;
  bool row_state = false;
  std::vector<TablePlan> tables;  // one per feature
  // Bytes of tables (and row state) rank r holds / all ranks together.
  int64_t rank_bytes(int r) const;
  int64_t total_bytes() const;
  // One line per table ("table 3 [2000000 x 64, 488.3 MiB]: row-wise over
  // ranks 0-1") and one per rank with its bytes.
  std::string describe() const;
};

EmbeddingPlan plan_embeddings(const nn::DlrmConfig& cfg, int world,
                              const EmbeddingPlanOptions& options);

}  // namespace braid::parallel
