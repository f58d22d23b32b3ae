// Where parameter-server checkpoints lie and which one a job resumes from
// (include/braid/ps_checkpoint.h).
#include <cstdio>
#include <filesystem>
#include <set>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/ps_checkpoint.h"

namespace braid::ps {

namespace fs = std::filesystem;

std::string step_dir_path(const std::string& dir, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%08lld", (long long)step);
  return dir + "/" + name;
}

std::string shard_file(const std::string& step_dir, int shard) {
  return step_dir + "/shard-" + std::to_string(shard) + ".ckpt";
}

namespace {

// The shard numbers of a step directory's shard-<s>.ckpt files.
std::set<int> shards_in(const fs::path& dir) {
  std::set<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    int s = -1, used = 0;
    if (std::sscanf(n.c_str(), "shard-%d.ckpt%n", &s, &used) == 1 && size_t(used) == n.size() &&
        s >= 0)
      out.insert(s);
  }
  return out;
}

// Every shard 0..servers-1 and no other.
bool complete(const std::set<int>& shards, int servers) {
  return int(shards.size()) == servers && *shards.begin() == 0 && *shards.rbegin() == servers - 1;
}

}  // namespace

ResumePoint find_resume_point(const std::string& path, int servers) {
  auto bad = [&](const std::string& why) -> ResumePoint {
    throw Error(Errc::kInvalidArgument, "parameter-server checkpoint " + path + ": " + why);
  };
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return bad("not a directory");
  fs::path step_dir;
  if (fs::exists(fs::path(path) / "shard-0.ckpt", ec)) {
    step_dir = path;
  } else {
    // The newest step directory with every shard of this job's servers.
    long long best = -1;
    std::string seen;  // for the error: what the newest step directory holds
    for (const auto& e : fs::directory_iterator(path, ec)) {
      long long n = -1;
      int used = 0;
      const std::string name = e.path().filename().string();
      if (!e.is_directory() || std::sscanf(name.c_str(), "step-%lld%n", &n, &used) != 1 ||
          size_t(used) != name.size() || n < best)
        continue;
      const std::set<int> shards = shards_in(e.path());
      if (complete(shards, servers)) {
        best = n;
        step_dir = e.path();
      } else if (seen.empty() || n > best) {
        seen = "; " + name + " holds " + std::to_string(shards.size()) + " shard files";
      }
    }
    if (best < 0)
      return bad("holds no step-<N>/ directory with the shard files of " +
                 std::to_string(servers) + " servers" + seen +
                 " (a different server count is not supported)");
  }
  const std::set<int> shards = shards_in(step_dir);
  if (!complete(shards, servers))
    return bad("holds " + std::to_string(shards.size()) +
               " shard files, not shard-0..shard-" + std::to_string(servers - 1) +
               ".ckpt of this job's " + std::to_string(servers) +
               " servers (a different server count is not supported)");
  ResumePoint rp;
  rp.step_dir = step_dir.string();
  const std::string first = shard_file(rp.step_dir, 0);
  rp.meta = load_checkpoint(first).meta;
  auto it = rp.meta.find("ps/step");
  try {
    if (it == rp.meta.end()) throw std::invalid_argument("missing");
    rp.step = std::stoll(it->second);
  } catch (const std::exception&) {
    throw Error(Errc::kCorrupt, "parameter-server checkpoint " + first +
                                    ": meta 'ps/step' is missing or not a number");
  }
  return rp;
}

}  // namespace braid::ps
