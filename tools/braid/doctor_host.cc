// braid doctor, the host: cores and affinity, /dev/shm against what the
// job's segments need, cross-process reads (process_vm_readv), the
// open-file limit, and the address TCP would publish.
#include <netdb.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "braid/env.h"
#include "braid/host.h"
#include "doctor.h"
#include "sizes.h"

namespace braid::tool::doctor {

namespace {

// "0-3,6" for the CPUs this process may run on.
std::string cpu_list() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (e > c) out.append("-").append(std::to_string(e));
    c = e;
  }
  return out;
}

// Whether one child of this process can read another's memory with
// process_vm_readv, as sibling ranks of a job do: 0, or the errno.
long long g_probe_word = 0x62726169642d766dLL;
int sibling_read_errno() {
  int gate[2];
  if (::pipe(gate) != 0) return errno;
  const pid_t target = ::fork();
  if (target < 0) return errno;
  if (target == 0) {  // waits until the reader is done (the pipe closes)
    ::close(gate[1]);
    char c;
    while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(gate[0]);
  const pid_t reader = ::fork();
  if (reader == 0) {
    long long got = 0;
    iovec local{&got, sizeof got}, remote{&g_probe_word, sizeof got};
    // Same address in the target: both are copies of this process.
    const ssize_t n = ::process_vm_readv(target, &local, 1, &remote, 1, 0);
    ::_exit(n == ssize_t(sizeof got) && got == g_probe_word ? 0 : n < 0 ? (errno & 0x7f) : 0x7f);
  }
  int st = 0, result = reader < 0 ? errno : 0;
  if (reader > 0) {
    while (::waitpid(reader, &st, 0) < 0 && errno == EINTR) {
    }
    result = WIFEXITED(st) ? WEXITSTATUS(st) : EFAULT;
  }
  ::close(gate[1]);
  while (::waitpid(target, &st, 0) < 0 && errno == EINTR) {
  }
  return result;
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

Check check_cores(const Options& o) {
  Check c{"cores"};
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int usable = usable_cores();
  c.data = {{"online", online}, {"usable", usable}, {"affinity", cpu_list()},
            {"ranks", o.ranks}, {"threads_per_rank", cores_per_rank(o.ranks)}};
  c.summary = std::to_string(online) + " online; this process may use " + std::to_string(usable) +
              " (CPUs " + cpu_list() + "); a job of " + std::to_string(o.ranks) + " ranks gets " +
              std::to_string(cores_per_rank(o.ranks)) + " compute thread" +
              (cores_per_rank(o.ranks) > 1 ? "s" : "") + " per rank";
  if (usable < online)
    add_finding(c, Verdict::kNote,
                "the affinity mask (taskset, a container's cpuset) leaves " +
                    std::to_string(online - usable) + " core(s) out; jobs started here inherit it");
  if (o.ranks > usable)
    add_finding(c, Verdict::kWarn,
                std::to_string(o.ranks) + " ranks on " + std::to_string(usable) +
                    " cores: ranks take turns on the cores and wait on each other",
                "start at most " + std::to_string(usable) + " ranks per host (-n)");
  return c;
}

Check check_shm(const Options& o) {
  Check c{"shm"};
  const comm::ShmBudget need = comm::shm_budget(o.ranks);
  size_t size = 0, free = 0;
  std::string where = "/dev/shm";
  if (o.shm_size) {
    size = free = *o.shm_size;
    where += " (as --shm-size)";
  } else {
    struct statvfs s;
    if (::statvfs("/dev/shm", &s) != 0) {
      add_finding(c, Verdict::kFail, std::string("/dev/shm: ") + std::strerror(errno),
                  "mount a tmpfs on /dev/shm (mount -t tmpfs -o size=1G tmpfs /dev/shm)");
      return c;
    }
    size = size_t(s.f_blocks) * s.f_frsize;
    free = size_t(s.f_bavail) * s.f_frsize;
  }
  c.data = {{"path", "/dev/shm"}, {"size_bytes", size}, {"free_bytes", free},
            {"injected", bool(o.shm_size)}, {"ranks", o.ranks},
            {"segment_bytes", need.segment_bytes}, {"p2p_segment_bytes", need.p2p_segment_bytes},
            {"chain_bytes", need.chain_bytes},
            {"need_bytes", need.total_bytes}};
  c.summary = where + ": " + format_size(double(size)) + ", " + format_size(double(free)) +
              " free; a job of " + std::to_string(o.ranks) + " ranks needs " +
              format_size(double(need.total_bytes)) + " (" + std::to_string(o.ranks) + " × " +
              format_size(double(need.segment_bytes + need.p2p_segment_bytes)) +
              " of rings, collective and point-to-point, + " +
              format_size(double(need.chain_bytes)) + " for the chain all-reduce)";
  const std::string fix =
      "give /dev/shm at least " + format_size(double(2 * need.total_bytes)) +
      " (docker run --shm-size=1g; mount -o remount,size=1G /dev/shm), or lower "
      "BRAID_SHM_SLOT_BYTES / BRAID_SHM_SLOTS";
  if (free < need.total_bytes)
    add_finding(c, Verdict::kFail, "/dev/shm is too small: the shared-memory transport cannot make its segments", fix);
  else if (free < 2 * need.total_bytes)
    add_finding(c, Verdict::kWarn,
                "little room beyond the transport: data parallel's shared gradient buckets "
                "(4 bytes per parameter per rank) may not fit",
                fix);
  return c;
}

Check check_ptrace(const Options&) {
  Check c{"ptrace"};
  const std::string scope = read_first_line("/proc/sys/kernel/yama/ptrace_scope");
  const int err = sibling_read_errno();
  const bool wanted = env_int("BRAID_SHM_CMA_BYTES", 0) > 0;
  c.data = {{"yama_ptrace_scope", scope.empty() ? nlohmann::json(nullptr) : nlohmann::json(scope)},
            {"process_vm_readv", err == 0}, {"errno", err}, {"single_copy_requested", wanted}};
  c.summary = std::string("process_vm_readv between sibling processes: ") +
              (err == 0 ? "allowed" : std::string("refused (") + std::strerror(err) + ")") +
              "; yama ptrace_scope " + (scope.empty() ? "absent" : scope) +
              "; single-copy shared memory (BRAID_SHM_CMA_BYTES) " + (wanted ? "on" : "off");
  if (err != 0 && wanted)
    add_finding(c, Verdict::kWarn,
                "BRAID_SHM_CMA_BYTES is set, but ranks cannot read each other: messages go "
                "through the slot rings",
                "sysctl kernel.yama.ptrace_scope=0 (or unset BRAID_SHM_CMA_BYTES)");
  else if (err != 0)
    add_finding(c, Verdict::kNote, "BRAID_SHM_CMA_BYTES would have no effect here");
  return c;
}

Check check_open_files(const Options& o) {
  Check c{"open_files"};
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  // A rank: its TCP connections (BRAID_TCP_STREAMS per peer), the store's,
  // shm segments while they are mapped, and the process's own; braid run
  // adds two pipes per rank. Generous, so a pass means room.
  const int64_t streams = std::clamp<int64_t>(env_int("BRAID_TCP_STREAMS", 1), 1, 16);
  const uint64_t need = 64 + 4 * uint64_t(o.ranks) * uint64_t(streams);
  const auto show = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(uint64_t(v));
  };
  c.data = {{"soft", r.rlim_cur == RLIM_INFINITY ? -1 : int64_t(r.rlim_cur)},
            {"hard", r.rlim_max == RLIM_INFINITY ? -1 : int64_t(r.rlim_max)},
            {"need", need}};
  c.summary = "open-file limit " + show(r.rlim_cur) + " (hard " + show(r.rlim_max) +
              "); a rank of " + std::to_string(o.ranks) + " needs about " + std::to_string(need);
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need)
    add_finding(c, Verdict::kFail, "too few file descriptors: connections would fail",
                r.rlim_max == RLIM_INFINITY || r.rlim_max >= need
                    ? "ulimit -n " + show(r.rlim_max == RLIM_INFINITY ? 65536 : r.rlim_max)
                    : "raise the hard limit (limits.conf nofile, docker --ulimit nofile=65536)");
  return c;
}

Check check_network(const Options&) {
  Check c{"network"};
  const comm::TcpEndpoint ep = comm::tcp_local_endpoint(false);
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = ::getaddrinfo(name, nullptr, &hints, &res);
  std::set<std::string> addrs;
  for (addrinfo* a = rc == 0 ? res : nullptr; a; a = a->ai_next) {
    char buf[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0)
      addrs.insert(buf);
  }
  if (res) ::freeaddrinfo(res);
  std::string joined;
  for (auto& a : addrs) joined += (joined.empty() ? "" : ", ") + a;
  c.data = {{"interface", ep.iface}, {"address", ep.address}, {"chosen_by", ep.why},
            {"hostname", name}, {"resolves", rc == 0},
            {"hostname_addresses", std::vector<std::string>(addrs.begin(), addrs.end())}};
  if (auto h = env_str("BRAID_HOSTNAME")) c.data["braid_hostname"] = *h;
  c.summary = "TCP to other hosts: " + ep.address +
              (ep.iface.empty() ? "" : " on " + ep.iface) + " (" + ep.why + "); host name '" + name +
              "' " + (rc == 0 ? "resolves to " + joined : std::string("does not resolve: ") + ::gai_strerror(rc));
  if (rc != 0)
    add_finding(c, Verdict::kWarn, "other hosts cannot find this one by name (MASTER_ADDR, Slurm)",
                "add '" + std::string(name) + "' to /etc/hosts or DNS, or give peers an address");
  const bool loopback_only =
      !addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [](const std::string& a) {
        return a.rfind("127.", 0) == 0 || a == "::1";
      });
  if (loopback_only && ep.address.rfind("127.", 0) != 0)
    add_finding(c, Verdict::kNote,
                "the host name resolves to loopback only: give other hosts " + ep.address +
                    ", not '" + name + "'");
  if (ep.address.rfind("127.", 0) == 0 && !env_str("BRAID_TCP_ADDR"))
    add_finding(c, Verdict::kNote, "no interface besides loopback: a job cannot span hosts from here");
  return c;
}

}  // namespace braid::tool::doctor
