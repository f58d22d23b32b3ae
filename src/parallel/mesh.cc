// The device mesh: three splits of the world, one per axis. The split key
// is the coordinate along the axis, so a group's rank equals this rank's
// coordinate on that axis.
#include "braid/mesh.h"

#include <sstream>

#include "braid/error.h"

namespace braid::parallel {

Mesh::Mesh(std::shared_ptr<Communicator> world, int dp, int tp, int pp)
    : world_(std::move(world)), dp_(dp), tp_(tp), pp_(pp) {
  BRAID_CHECK_ARG(world_ != nullptr, "mesh: no world communicator");
  BRAID_CHECK_ARG(dp >= 1 && tp >= 1 && pp >= 1,
                  "mesh: sizes must be at least 1, got dp=" + std::to_string(dp) +
                      " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp));
  const int n = world_->size();
  if (int64_t(dp) * tp * pp != n)
    throw Error(Errc::kInvalidArgument,
                "mesh: dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) +
                    " x pp=" + std::to_string(pp) + " = " +
                    std::to_string(int64_t(dp) * tp * pp) + " ranks, but the world has " +
                    std::to_string(n));
  const int r = world_->rank();
  coord_ = coord_at(r, tp, pp);
  // Colors number the groups of an axis by the other two coordinates.
  tp_comm_ = world_->split(coord_.dp * pp + coord_.pp, coord_.tp);
  pp_comm_ = world_->split(coord_.dp * tp + coord_.tp, coord_.pp);
  dp_comm_ = world_->split(coord_.pp * tp + coord_.tp, coord_.dp);
}

std::string Mesh::describe() const {
  std::ostringstream o;
  o << "mesh: dp=" << dp_ << " x pp=" << pp_ << " x tp=" << tp_ << " over "
    << dp_ * pp_ * tp_ << " ranks (world rank = (dp*" << pp_ << " + pp)*" << tp_ << " + tp)\n";
  auto groups = [&](const char* axis, int size, auto member) {
    o << axis << " groups:";
    const int count = dp_ * pp_ * tp_ / size;
    for (int g = 0; g < count; ++g) {
      o << " [";
      for (int i = 0; i < size; ++i) o << (i ? " " : "") << rank_of(member(g, i));
      o << "]";
    }
    o << "\n";
  };
  // Group g of an axis: the other two coordinates in row-major order.
  groups("tp", tp_, [&](int g, int i) { return MeshCoord{g / pp_, g % pp_, i}; });
  groups("pp", pp_, [&](int g, int i) { return MeshCoord{g / tp_, i, g % tp_}; });
  groups("dp", dp_, [&](int g, int i) { return MeshCoord{i, g / tp_, g % tp_}; });
  return o.str();
}

}  // namespace braid::parallel
