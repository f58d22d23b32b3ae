// Bootstrap from the environment of braid run, torchrun, mpirun or srun.
//
// Why rank 0 hosts the store for the foreign launchers: none of them runs a
// store braid can speak to (torchrun's c10d store has its own protocol), and
// rank 0 is the one process every launcher places predictably (MASTER_ADDR,
// the first host of a Slurm step).
#include "comm/setup/bootstrap.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"

namespace braid::comm {
namespace {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    std::lock_guard<std::mutex> l(mu_);
    data_[key] = value;
    cv_.notify_all();
  }
  Bytes get(const std::string& key) override {
    wait({key}, timeout_);
    std::lock_guard<std::mutex> l(mu_);
    return data_.at(key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> l(mu_);
    int64_t cur = 0;
    auto it = data_.find(key);
    if (it != data_.end()) {
      try {
        cur = std::stoll(std::string(it->second.begin(), it->second.end()));
      } catch (const std::exception&) {
        throw Error(Errc::kInvalidArgument, "add: the value of key '" + key + "' is not an integer");
      }
    }
    cur += delta;
    std::string s = std::to_string(cur);
    data_[key] = Bytes(s.begin(), s.end());
    cv_.notify_all();
    return cur;
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    bool swap = it == data_.end() ? expected.empty() : it->second == expected;
    if (!swap) return it == data_.end() ? Bytes{} : it->second;
    data_[key] = desired;
    cv_.notify_all();
    return desired;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    auto all = [&] {
      for (auto& k : keys)
        if (!data_.count(k)) return false;
      return true;
    };
    if (cv_.wait_for(l, timeout, all)) return;
    std::string missing;
    for (auto& k : keys)
      if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
    throw Error(Errc::kTimeout, "in-process store: timed out after " +
                                    std::to_string(timeout.count()) +
                                    " ms waiting for keys: " + missing);
  }
  bool remove(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    return data_.erase(key) > 0;
  }
  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    return data_.count(key) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

[[noreturn]] void bad(const std::string& what) { throw Error(Errc::kInvalidArgument, what); }

bool has(const char* name) { return env_str(name).has_value(); }

// An integer variable that must be present.
int need_int(const char* name) {
  if (!has(name)) bad(std::string("environment variable ") + name + " is not set");
  int64_t v = env_int(name, 0);
  if (v < 0 || v > (int64_t(1) << 30))
    bad(std::string("environment variable ") + name + "=" + std::to_string(v) + " is out of range");
  return int(v);
}

int opt_int(const char* name, int fallback) {
  if (!has(name)) return fallback;
  return need_int(name);
}

std::string sha256_hex(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr))
    throw Error(Errc::kInternal, "SHA-256 failed");
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(d[md[i] >> 4]);
    out.push_back(d[md[i] & 15]);
  }
  return out;
}

// BRAID_SECRET, or a secret every rank derives alike from `shared` (rank 0
// says so, once for the job).
std::string secret_for(const std::string& source, const std::string& shared, int rank) {
  if (auto s = env_str("BRAID_SECRET")) return *s;
  if (rank == 0) BRAID_LOG(kWarn, "BRAID_SECRET is not set; the " << source
                        << " job uses a secret derived from its job id and address, which "
                           "other users of these hosts can compute. Export the same random "
                           "BRAID_SECRET to every rank to protect the job.");
  return sha256_hex("braid-derived-secret|" + source + "|" + shared);
}

struct Layout {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node_rank = 0;
};

void validate(const Layout& L, const char* rank_var, const char* size_var,
              const char* local_rank_var, const char* local_size_var) {
  if (L.size < 1) bad(std::string(size_var) + "=" + std::to_string(L.size) + ": must be at least 1");
  if (L.rank >= L.size)
    bad(std::string(rank_var) + "=" + std::to_string(L.rank) + " is not below " + size_var + "=" +
        std::to_string(L.size));
  if (L.local_size < 1 || L.local_size > L.size)
    bad(std::string(local_size_var) + "=" + std::to_string(L.local_size) + " must be in [1, " +
        size_var + "=" + std::to_string(L.size) + "]");
  if (L.local_rank >= L.local_size)
    bad(std::string(local_rank_var) + "=" + std::to_string(L.local_rank) + " is not below " +
        local_size_var + "=" + std::to_string(L.local_size));
}

// Connects to host:port; rank 0 (when `host_it`) first starts the server
// there, listening on every interface.
void attach_tcp(JobEnv& env, const std::string& host, int port, bool host_it,
                std::chrono::milliseconds timeout) {
  if (host_it) env.server = std::make_shared<TcpStoreServer>("0.0.0.0", port, env.secret);
  env.store = connect_tcp_store(host, port, env.secret, timeout);
}

// MASTER_ADDR:MASTER_PORT+offset, when set.
std::optional<std::pair<std::string, int>> store_from_master_vars(int port_offset) {
  auto addr = env_str("MASTER_ADDR");
  auto port_s = env_str("MASTER_PORT");
  if (!addr && !port_s) return std::nullopt;
  if (!addr) bad("MASTER_PORT is set but MASTER_ADDR is not");
  if (!port_s) bad("MASTER_ADDR is set but MASTER_PORT is not");
  int64_t port = env_int("MASTER_PORT", 0);
  if (port < 1 || port + port_offset > 65535)
    bad("MASTER_PORT=" + *port_s + " is not a usable port" +
        (port_offset ? " (braid's store uses MASTER_PORT+" + std::to_string(port_offset) + ")"
                     : std::string()));
  return std::make_pair(*addr, int(port) + port_offset);
}

std::optional<std::pair<std::string, int>> store_from_braid_var() {
  auto s = env_str("BRAID_STORE");
  if (!s) return std::nullopt;
  return parse_host_port(*s, "BRAID_STORE");
}

// Entries of SLURM_TASKS_PER_NODE ("2(x3),1") expanded per node.
int slurm_tasks_on_node(const std::string& spec, int node) {
  int idx = 0;
  size_t i = 0;
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    int count = 0, reps = 1;
    size_t paren = item.find('(');
    try {
      count = std::stoi(item.substr(0, paren));
      if (paren != std::string::npos) reps = std::stoi(item.substr(paren + 2));
    } catch (const std::exception&) {
      bad("SLURM_TASKS_PER_NODE='" + spec + "' is not understood");
    }
    if (node < idx + reps) return count;
    idx += reps;
    i = end + 1;
  }
  bad("SLURM_TASKS_PER_NODE='" + spec + "' has no entry for node " + std::to_string(node));
}

JobEnv from_braid(std::chrono::milliseconds timeout) {
  JobEnv env;
  env.source = "braid";
  Layout L;
  L.rank = need_int("BRAID_RANK");
  L.size = need_int("BRAID_WORLD_SIZE");
  L.local_rank = opt_int("BRAID_LOCAL_RANK", L.rank);
  L.local_size = opt_int("BRAID_LOCAL_WORLD_SIZE", L.size);
  L.node_rank = opt_int("BRAID_NODE_RANK", 0);
  validate(L, "BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "BRAID_LOCAL_WORLD_SIZE");
  env.rank = L.rank, env.size = L.size, env.local_rank = L.local_rank;
  env.local_size = L.local_size, env.node_rank = L.node_rank;
  auto addr = store_from_braid_var();
  if (!addr) {
    if (L.size > 1) bad("BRAID_STORE is not set (braid run sets it; expected host:port)");
    env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
    env.store = make_memory_store();
    env.store->set_timeout(timeout);
    return env;
  }
  auto secret = env_str("BRAID_SECRET");
  if (!secret) bad("BRAID_SECRET is not set (braid run sets it together with BRAID_STORE)");
  env.secret = *secret;
  attach_tcp(env, addr->first, addr->second, L.rank == 0 && env_flag("BRAID_HOST_STORE"), timeout);
  return env;
}

JobEnv from_torchrun(std::chrono::milliseconds timeout) {
  JobEnv env;
  env.source = "torchrun";
  Layout L;
  L.rank = need_int("RANK");
  L.size = need_int("WORLD_SIZE");
  L.local_rank = opt_int("LOCAL_RANK", 0);
  L.local_size = opt_int("LOCAL_WORLD_SIZE", has("LOCAL_RANK") ? L.size : 1);
  validate(L, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  L.node_rank = opt_int("GROUP_RANK", L.rank / L.local_size);
  env.rank = L.rank, env.size = L.size, env.local_rank = L.local_rank;
  env.local_size = L.local_size, env.node_rank = L.node_rank;
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(1);
  if (!addr) {
    if (L.size > 1) bad("RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT (or BRAID_STORE) are not");
    env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
    env.store = make_memory_store();
    env.store->set_timeout(timeout);
    return env;
  }
  env.secret = secret_for("torchrun", env_str("TORCHELASTIC_RUN_ID").value_or("") + "|" +
                                          addr->first + ":" + std::to_string(addr->second), L.rank);
  attach_tcp(env, addr->first, addr->second, L.rank == 0, timeout);
  return env;
}

std::string ompi_job_id() {
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE",
                        "OMPI_MCA_orte_hnp_uri", "PMIX_ID"})
    if (auto s = env_str(v)) return *s;
  return "";
}

JobEnv from_mpirun(std::chrono::milliseconds timeout) {
  JobEnv env;
  env.source = "mpirun";
  Layout L;
  L.rank = need_int("OMPI_COMM_WORLD_RANK");
  L.size = need_int("OMPI_COMM_WORLD_SIZE");
  L.local_rank = opt_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  L.local_size = opt_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  validate(L, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           "OMPI_COMM_WORLD_LOCAL_SIZE");
  L.node_rank = L.rank / L.local_size;  // assumes by-slot (block) placement
  env.rank = L.rank, env.size = L.size, env.local_rank = L.local_rank;
  env.local_size = L.local_size, env.node_rank = L.node_rank;
  std::string job = ompi_job_id();
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(0);
  if (addr) {
    env.secret = secret_for("mpirun", job + "|" + addr->first + ":" + std::to_string(addr->second),
                            L.rank);
    attach_tcp(env, addr->first, addr->second, L.rank == 0, timeout);
    return env;
  }
  if (L.size == 1) {
    env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
    env.store = make_memory_store();
    env.store->set_timeout(timeout);
    return env;
  }
  if (L.local_size != L.size)
    bad("mpirun job spans several hosts: set BRAID_STORE=host:port (rank 0 hosts the store "
        "there) or MASTER_ADDR and MASTER_PORT");
  if (job.empty())
    bad("mpirun job without a job id (OMPI_MCA_ess_base_jobid / PMIX_NAMESPACE): set "
        "BRAID_STORE=host:port");
  // Every rank of one host shares the local daemon as parent; with the job
  // id this names the job's directory, so a later job never sees stale keys.
  std::string tag = sha256_hex(job + "|" + std::to_string(::getppid())).substr(0, 24);
  std::string dir = "/tmp/braid_store_" + std::to_string(::getuid()) + "_" + tag;
  env.secret = secret_for("mpirun", job + "|" + dir, L.rank);
  // The last rank of this host to let go of its store removes the directory.
  env.store = make_file_store(dir, L.local_size);
  env.store->set_timeout(timeout);
  return env;
}

JobEnv from_slurm(std::chrono::milliseconds timeout) {
  JobEnv env;
  env.source = "slurm";
  Layout L;
  L.rank = need_int("SLURM_PROCID");
  L.size = has("SLURM_NTASKS") ? need_int("SLURM_NTASKS") : need_int("SLURM_NPROCS");
  L.local_rank = opt_int("SLURM_LOCALID", 0);
  L.node_rank = opt_int("SLURM_NODEID", 0);
  if (auto tpn = env_str("SLURM_STEP_TASKS_PER_NODE"); tpn || env_str("SLURM_TASKS_PER_NODE"))
    L.local_size = slurm_tasks_on_node(tpn ? *tpn : *env_str("SLURM_TASKS_PER_NODE"), L.node_rank);
  else
    L.local_size = opt_int("SLURM_NTASKS_PER_NODE", 1);
  validate(L, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE");
  env.rank = L.rank, env.size = L.size, env.local_rank = L.local_rank;
  env.local_size = L.local_size, env.node_rank = L.node_rank;
  std::string job = env_str("SLURM_JOB_ID").value_or(env_str("SLURM_JOBID").value_or(""));
  std::string step = env_str("SLURM_STEP_ID").value_or(env_str("SLURM_STEPID").value_or(""));
  auto addr = store_from_braid_var();
  if (!addr) addr = store_from_master_vars(0);
  if (!addr && L.size > 1) {
    auto nodes = env_str("SLURM_STEP_NODELIST");
    if (!nodes) nodes = env_str("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env_str("SLURM_NODELIST");
    if (!nodes) bad("srun job without SLURM_NODELIST: set BRAID_STORE=host:port");
    int port = 0;
    if (has("BRAID_STORE_PORT")) {
      port = need_int("BRAID_STORE_PORT");
      if (port < 1 || port > 65535) bad("BRAID_STORE_PORT=" + std::to_string(port) + " is not a port");
    } else {
      int64_t id = 0;
      try {
        id = std::stoll(job);
      } catch (const std::exception&) {
        bad("SLURM_JOB_ID='" + job + "' is not a number: set BRAID_STORE_PORT or BRAID_STORE");
      }
      port = 20000 + int(id % 20000);
    }
    addr = std::make_pair(first_slurm_host(*nodes), port);
  }
  if (!addr) {
    env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
    env.store = make_memory_store();
    env.store->set_timeout(timeout);
    return env;
  }
  env.secret = secret_for("slurm", job + "." + step + "|" + addr->first + ":" +
                                       std::to_string(addr->second), L.rank);
  attach_tcp(env, addr->first, addr->second, L.rank == 0, timeout);
  return env;
}

}  // namespace

std::pair<std::string, int> parse_host_port(const std::string& s, const std::string& what) {
  std::string host, port_s;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      bad(what + "='" + s + "' is not [host]:port");
    host = s.substr(1, close - 1);
    port_s = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0) bad(what + "='" + s + "' is not host:port");
    host = s.substr(0, colon);
    port_s = s.substr(colon + 1);
  }
  int port = 0;
  try {
    size_t pos = 0;
    port = std::stoi(port_s, &pos);
    if (pos != port_s.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    bad(what + "='" + s + "': port '" + port_s + "' is not a number");
  }
  if (port < 1 || port > 65535) bad(what + "='" + s + "': port out of range");
  if (host.empty()) bad(what + "='" + s + "': empty host");
  return {host, port};
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  std::string first = nodelist.substr(0, end);
  size_t open = first.find('[');
  if (open == std::string::npos) return first;
  // "prefix[01-04,07]suffix": the first number of the first range.
  size_t close = first.find(']', open);
  if (close == std::string::npos) bad("SLURM_NODELIST='" + nodelist + "' is not understood");
  std::string inside = first.substr(open + 1, close - open - 1);
  size_t stop = inside.find_first_of(",-");
  return first.substr(0, open) + inside.substr(0, stop) + first.substr(close + 1);
}

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

JobEnv bootstrap_from_env(std::chrono::milliseconds timeout) {
  JobEnv env;
  if (has("BRAID_RANK"))
    env = from_braid(timeout);
  else if (has("RANK") && has("WORLD_SIZE"))
    env = from_torchrun(timeout);
  else if (has("OMPI_COMM_WORLD_RANK"))
    env = from_mpirun(timeout);
  else if (has("SLURM_PROCID") && (has("SLURM_NTASKS") || has("SLURM_NPROCS")))
    env = from_slurm(timeout);
  else {
    env.source = "single";
    env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
    env.store = make_memory_store();
    env.store->set_timeout(timeout);
  }
  if (env.size > 1) log_set_rank(env.rank);
  BRAID_LOG(kInfo, "bootstrap (" << env.source << "): rank " << env.rank << " of " << env.size
                                 << ", local " << env.local_rank << " of " << env.local_size
                                 << ", node " << env.node_rank
                                 << (env.server ? ", hosting the store" : ""));
  return env;
}

}  // namespace braid::comm
