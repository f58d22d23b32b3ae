// parallel::Mesh — the world's ranks arranged as a dp × pp × tp grid, with
// one communicator per axis.
//
// Layout: tensor parallel innermost, data parallel outermost:
//   world rank = (d · pp + p) · tp + t
// so a tensor-parallel group is `tp` consecutive ranks (the group that
// talks most sits on one host when ranks are packed by host), and a
// data-parallel group strides by pp · tp.
//
// Cost: the constructor is collective over the world communicator: three
// `split`s, each a store rendezvous plus its connections. Every rank must
// construct its Mesh at the same point in its sequence of collectives.
#pragma once

#include <memory>
#include <string>

#include "braid/comm.h"

namespace braid::parallel {

struct MeshCoord {
  int dp = 0, pp = 0, tp = 0;
};

class Mesh {
 public:
  // Throws Error(kInvalidArgument) when a size is < 1 or dp · pp · tp is not
  // the world's size (the message names the sizes and their product).
  Mesh(std::shared_ptr<Communicator> world, int dp, int tp, int pp = 1);

  int dp_size() const { return dp_; }
  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }
  // This rank's place on each axis (its rank in each axis' communicator).
  const MeshCoord& coord() const { return coord_; }
  // The world rank at a place on the grid.
  int rank_of(const MeshCoord& c) const { return rank_at(c, tp_, pp_); }

  // The layout rule, for any grid of tp × pp (× dp) with no ranks needed:
  // tp innermost (a tp group stays inside a host), then pp, then dp. The
  // world rank at `c`, and the place of world rank `r`.
  static int rank_at(const MeshCoord& c, int tp, int pp) { return (c.dp * pp + c.pp) * tp + c.tp; }
  static MeshCoord coord_at(int r, int tp, int pp) { return {r / (tp * pp), (r / tp) % pp, r % tp}; }

  const std::shared_ptr<Communicator>& world() const { return world_; }
  // The ranks that differ from this one only in their dp (tp, pp) coordinate,
  // ordered by that coordinate.
  const std::shared_ptr<Communicator>& dp() const { return dp_comm_; }
  const std::shared_ptr<Communicator>& tp() const { return tp_comm_; }
  const std::shared_ptr<Communicator>& pp() const { return pp_comm_; }

  // The layout as text: the sizes, then every group of each axis as its
  // world ranks, e.g. "tp groups: [0 1] [2 3]". The same on every rank; a
  // job prints it once (from rank 0).
  std::string describe() const;

 private:
  std::shared_ptr<Communicator> world_, dp_comm_, tp_comm_, pp_comm_;
  int dp_, tp_, pp_;
  MeshCoord coord_;
};

}  // namespace braid::parallel
