// plan_embeddings: table-, row- and column-wise placement of a DLRM's
// tables over ranks and the "auto" choice between them
// (include/braid/embedding_plan.h).
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "braid/embedding_plan.h"
#include "braid/error.h"

namespace braid::parallel {

namespace {

int64_t shard_bytes(const TableShard& s, bool row_state) {
  return s.rows() * s.cols() * 4 + (row_state ? s.rows() * 4 : 0);
}

TablePlan whole(int64_t rows, int64_t dim, int rank) {
  return {TableSharding::kTable, {{rank, 0, rows, 0, dim}}};
}

TablePlan split_rows(int64_t f, int64_t rows, int64_t dim, int world) {
  BRAID_CHECK_ARG(rows >= world, "--shard row: table " + std::to_string(f) + " has " +
                                     std::to_string(rows) + " rows, fewer than the " +
                                     std::to_string(world) + " ranks to split them over");
  TablePlan p{TableSharding::kRow, {}};
  for (int r = 0; r < world; ++r)
    p.shards.push_back({r, r * rows / world, (r + 1) * rows / world, 0, dim});
  return p;
}

TablePlan split_columns(int64_t f, int64_t rows, int64_t dim, int world) {
  BRAID_CHECK_ARG(dim % world == 0,
                  "--shard column: table " + std::to_string(f) + "'s embedding width --dim " +
                      std::to_string(dim) + " does not divide into " + std::to_string(world) +
                      " equal column blocks (one per rank); pick a --dim divisible by " +
                      std::to_string(world) + " or --shard row|table|auto");
  TablePlan p{TableSharding::kColumn, {}};
  for (int r = 0; r < world; ++r)
    p.shards.push_back({r, 0, rows, r * dim / world, (r + 1) * dim / world});
  return p;
}

std::string mib(int64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / 1048576.0);
  return s;
}

}  // namespace

const char* sharding_name(TableSharding s) {
  switch (s) {
    case TableSharding::kTable: return "table-wise";
    case TableSharding::kRow: return "row-wise";
    case TableSharding::kColumn: return "column-wise";
  }
  return "?";
}

int64_t EmbeddingPlan::rank_bytes(int r) const {
  int64_t b = 0;
  for (const TablePlan& t : tables)
    for (const TableShard& s : t.shards)
      if (s.rank == r) b += shard_bytes(s, row_state);
  return b;
}

int64_t EmbeddingPlan::total_bytes() const {
  int64_t b = 0;
  for (int r = 0; r < world; ++r) b += rank_bytes(r);
  return b;
}

std::string EmbeddingPlan::describe() const {
  std::string out;
  for (size_t f = 0; f < tables.size(); ++f) {
    const TablePlan& t = tables[f];
    const TableShard& s0 = t.shards.front();
    const int64_t rows = t.kind == TableSharding::kRow ? t.shards.back().row_end : s0.rows();
    const int64_t dim = t.kind == TableSharding::kColumn ? t.shards.back().col_end : s0.cols();
    out += "  table " + std::to_string(f) + " [" + std::to_string(rows) + " x " +
           std::to_string(dim) + ", " + mib(rows * dim * 4) + "]: " + sharding_name(t.kind);
    out += t.kind == TableSharding::kTable
               ? " on rank " + std::to_string(s0.rank)
               : " over ranks 0-" + std::to_string(world - 1);
    out += "\n";
  }
  for (int r = 0; r < world; ++r)
    out += "  rank " + std::to_string(r) + ": " + mib(rank_bytes(r)) + " of tables" +
           (row_state ? " and row state" : "") + "\n";
  return out;
}

EmbeddingPlan plan_embeddings(const nn::DlrmConfig& cfg, int world,
                              const EmbeddingPlanOptions& o) {
  BRAID_CHECK_ARG(world >= 1, "plan_embeddings: world must be at least 1");
  const std::string& mode = o.shard;
  BRAID_CHECK_ARG(mode == "table" || mode == "row" || mode == "column" || mode == "auto",
                  "--shard '" + mode + "': expected table, row, column or auto");
  BRAID_CHECK_ARG(o.memory_limit_bytes >= 0, "--table-memory-limit must not be negative");
  const int64_t F = cfg.features(), dim = cfg.dim;
  EmbeddingPlan plan;
  plan.world = world;
  plan.row_state = o.row_state;
  plan.tables.resize(size_t(F));
  auto bytes_of = [&](int64_t f) {
    const int64_t rows = cfg.rows[size_t(f)];
    return rows * dim * 4 + (o.row_state ? rows * 4 : 0);
  };
  int64_t total = 0;
  for (int64_t f = 0; f < F; ++f) total += bytes_of(f);

  // Largest first (ties: lower feature), onto the least-loaded rank.
  std::vector<int64_t> order(static_cast<size_t>(F));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return bytes_of(a) > bytes_of(b); });
  std::vector<int64_t> load(size_t(world), 0);
  const double target = double(total) / world * 1.05;
  std::vector<int64_t> split;  // auto: tables left to split over every rank
  for (int64_t f : order) {
    const int64_t rows = cfg.rows[size_t(f)];
    if (mode == "row") {
      plan.tables[size_t(f)] = split_rows(f, rows, dim, world);
      continue;
    }
    if (mode == "column") {
      plan.tables[size_t(f)] = split_columns(f, rows, dim, world);
      continue;
    }
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    const int64_t after = load[size_t(r)] + bytes_of(f);
    const bool fits = (o.memory_limit_bytes == 0 || after <= o.memory_limit_bytes) &&
                      double(after) <= target;
    if (mode == "table" || fits || world == 1) {
      plan.tables[size_t(f)] = whole(rows, dim, r);
      load[size_t(r)] = after;
    } else {
      split.push_back(f);
    }
  }
  for (int64_t f : split) {
    const int64_t rows = cfg.rows[size_t(f)];
    plan.tables[size_t(f)] = dim % world == 0 ? split_columns(f, rows, dim, world)
                                              : split_rows(f, rows, dim, world);
  }
  if (o.memory_limit_bytes > 0)
    for (int r = 0; r < world; ++r)
      BRAID_CHECK_ARG(plan.rank_bytes(r) <= o.memory_limit_bytes,
                      "--shard " + mode + " puts " + mib(plan.rank_bytes(r)) +
                          " of tables on rank " + std::to_string(r) + ", over the limit of " +
                          mib(o.memory_limit_bytes) + " per rank (--table-memory-limit); all " +
                          std::to_string(F) + " tables take " + mib(total) + ", at least " +
                          mib((total + world - 1) / world) + " per rank over " +
                          std::to_string(world) + " ranks");
  return plan;
}

}  // namespace braid::parallel
