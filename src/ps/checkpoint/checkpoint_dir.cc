// Where parameter-server checkpoints lie and which one a job resumes from
// (include/braid/ps_checkpoint.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <vector>

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

// Every shard 0..n-1 and no other: n, or 0.
int contiguous(const std::set<int>& shards) {
  const int n = int(shards.size());
  return n > 0 && *shards.begin() == 0 && *shards.rbegin() == n - 1 ? n : 0;
}

// A step directory's shard count (checked against shard 0's "ps/servers"),
// its step and shard 0's meta; or, when it is incomplete, why in `why`.
bool read_step_dir(const fs::path& dir, ResumePoint& rp, std::string& why) {
  const std::set<int> shards = shards_in(dir);
  const int n = contiguous(shards);
  if (n == 0) {
    why = "holds " + std::to_string(shards.size()) + " shard files, not shard-0..shard-" +
          std::to_string(shards.empty() ? 0 : *shards.rbegin()) + ".ckpt";
    return false;
  }
  rp.step_dir = dir.string();
  const std::string first = shard_file(rp.step_dir, 0);
  rp.meta = load_checkpoint(first).meta;
  auto number = [&](const char* key) -> int64_t {
    auto it = rp.meta.find(key);
    try {
      if (it == rp.meta.end()) throw std::invalid_argument("missing");
      return std::stoll(it->second);
    } catch (const std::exception&) {
      throw Error(Errc::kCorrupt, "parameter-server checkpoint " + first + ": meta '" + key +
                                      "' is missing or not a number");
    }
  };
  rp.step = number("ps/step");
  rp.servers = int(number("ps/servers"));
  if (rp.servers != n) {
    why = "holds " + std::to_string(n) + " shard files, not shard-0..shard-" +
          std::to_string(rp.servers - 1) + ".ckpt of the " + std::to_string(rp.servers) +
          " servers that saved it";
    return false;
  }
  return true;
}

}  // namespace

int shard_files(const std::string& step_dir) {
  const int n = contiguous(shards_in(step_dir));
  if (n == 0)
    throw Error(Errc::kInvalidArgument, "parameter-server checkpoint " + step_dir +
                                            ": its shard files are not shard-0..shard-(S-1).ckpt");
  return n;
}

ResumePoint find_resume_point(const std::string& path) {
  auto bad = [&](const std::string& why) -> ResumePoint {
    throw Error(Errc::kInvalidArgument, "parameter-server checkpoint " + path + ": " + why);
  };
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return bad("not a directory");
  ResumePoint rp;
  std::string why;
  if (fs::exists(fs::path(path) / "shard-0.ckpt", ec)) {
    if (!read_step_dir(path, rp, why)) return bad(why);
    return rp;
  }
  // The newest step directory that is complete.
  std::vector<std::pair<long long, fs::path>> steps;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    long long n = -1;
    int used = 0;
    const std::string name = e.path().filename().string();
    if (e.is_directory() && std::sscanf(name.c_str(), "step-%lld%n", &n, &used) == 1 &&
        size_t(used) == name.size())
      steps.emplace_back(n, e.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  std::string seen;  // for the error: what the newest step directory holds
  for (const auto& [n, dir] : steps) {
    if (read_step_dir(dir, rp, why)) return rp;
    if (seen.empty()) seen = "; " + dir.filename().string() + " " + why;
  }
  return bad("holds no step-<N>/ directory with a complete set of shard files" + seen);
}

}  // namespace braid::ps
