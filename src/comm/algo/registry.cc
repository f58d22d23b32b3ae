#include "comm/algo/registry.h"

#include <algorithm>
#include <array>

#include "braid/comm.h"
#include "braid/error.h"
#include "comm/algo/select.h"
#include "comm/transport/msg_sig.h"

namespace braid::comm::algo {
namespace {

constexpr size_t kOps = size_t(CollOp::kProbe) + 1;

struct Registry {
  Table entries;
  std::array<std::vector<const Algorithm*>, kOps> by_op;

  Registry() {
    for (auto add : {add_tree, add_ring, add_halving_doubling, add_direct, add_hierarchical,
                     add_chain, add_chain_reduce, add_shared, add_barrier})
      add(entries);
    // No more entries from here on: the pointers below stay valid.
    for (const Algorithm& a : entries) by_op[size_t(a.op)].push_back(&a);
    for (auto& list : by_op) {
      std::stable_sort(list.begin(), list.end(),
                       [](const Algorithm* x, const Algorithm* y) { return x->id < y->id; });
      for (size_t i = 1; i < list.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (list[i]->id == list[j]->id || list[i]->name == list[j]->name)
            throw Error(Errc::kInternal, std::string("algorithm registry: ") +
                                             coll_op_name(list[i]->op) + " has '" +
                                             list[i]->name + "' twice");
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

}  // namespace

const std::vector<const Algorithm*>& algorithms(CollOp op) {
  static const std::vector<const Algorithm*> none;
  return size_t(op) < kOps ? registry().by_op[size_t(op)] : none;
}

const Algorithm* find(CollOp op, std::string_view name) {
  for (const Algorithm* a : algorithms(op))
    if (a->name == name) return a;
  return nullptr;
}

const Algorithm& get(CollOp op, AlgoId id) {
  for (const Algorithm* a : algorithms(op))
    if (a->id == id) return *a;
  throw Error(Errc::kInternal, std::string("algorithm registry: no algorithm #") +
                                   std::to_string(int(id)) + " for " + coll_op_name(op));
}

std::string names(CollOp op) {
  std::string list;
  for (const Algorithm* a : algorithms(op)) list += (list.empty() ? "" : ", ") + a->name;
  return list;
}

const std::vector<Collective>& collectives() {
  // Named by coll_op_name, so BRAID_ALGO, error messages and the flight
  // recorder spell a collective the same way.
  static const std::vector<Collective> ops = [] {
    std::vector<Collective> v;
    for (CollOp op : {CollOp::kAllReduce, CollOp::kBroadcast, CollOp::kReduce,
                      CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kGather,
                      CollOp::kScatter, CollOp::kAllToAll, CollOp::kAllToAllV,
                      CollOp::kBarrier})
      v.push_back({op, coll_op_name(op)});
    return v;
  }();
  return ops;
}

}  // namespace braid::comm::algo

namespace braid::comm {

std::vector<std::string> algorithms(const std::string& collective) {
  std::vector<std::string> out;
  for (const algo::Algorithm* a : algo::algorithms(parse_coll_op(collective)))
    out.push_back(a->name);
  return out;
}

std::vector<std::string> collectives() {
  std::vector<std::string> out;
  for (const algo::Collective& c : algo::collectives()) out.push_back(c.name);
  return out;
}

}  // namespace braid::comm
