// The planner's cluster files (braid/plan_cluster.h) through parse_cluster,
// which load_cluster calls on a file's text, and back through the JSON the
// planner writes (cluster_json) when the file was accepted.
#include <string>

#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "fuzz_target.h"

BRAID_FUZZ_TARGET(cluster) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const braid::plan::Cluster c = braid::plan::parse_cluster(text, "fuzz.json");
    // What the planner writes back for an accepted file must read back.
    braid::plan::parse_cluster(braid::plan::cluster_json(c), "fuzz.json (written back)");
  } catch (const braid::Error&) {
  }
}
