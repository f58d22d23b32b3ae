// PeerInfo: this rank's identity as set-up publishes it, the host's cores
// from the ranks' affinity masks, and the names of ranks in messages.
#include "comm/transport/peer_info.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "braid/env.h"
#include "braid/error.h"
#include "comm/transport/transport.h"

namespace braid::comm {
namespace {

std::string read_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string ns_id(const char* path) {
  char buf[128];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string("?");
}

}  // namespace

std::string rank_name(int rank, int world_rank) {
  std::string s = "rank " + std::to_string(rank);
  if (world_rank >= 0 && world_rank != rank) s += " (world rank " + std::to_string(world_rank) + ")";
  return s;
}

std::string describe_peer_info(const PeerInfo& p) {
  std::string s = "rank " + std::to_string(p.rank) + " (";
  if (p.world_rank >= 0 && p.world_rank != p.rank) s += "world rank " + std::to_string(p.world_rank) + ", ";
  return s + "pid " + std::to_string(p.pid) + " on host " + p.host + ")";
}

std::string affinity_hex() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string hex;
  for (int c = CPU_SETSIZE - 4; c >= 0; c -= 4) {
    int nib = 0;
    for (int b = 0; b < 4; ++b) nib |= CPU_ISSET(c + b, &set) ? 1 << b : 0;
    if (nib != 0 || !hex.empty()) hex += "0123456789abcdef"[nib];
  }
  return hex;
}

int host_cores(const std::vector<PeerInfo>& peers, const std::string& host_id) {
  std::vector<bool> any;
  for (const PeerInfo& p : peers) {
    if (p.host_id != host_id) continue;
    const size_t n = p.cpus.size();
    if (n == 0) return usable_cores();  // a mask we could not read: our own view
    if (any.size() < 4 * n) any.resize(4 * n, false);
    for (size_t i = 0; i < n; ++i) {  // the last digit holds CPUs 0-3
      const char ch = p.cpus[n - 1 - i];
      const int nib = ch <= '9' ? ch - '0' : ch - 'a' + 10;
      for (int b = 0; b < 4; ++b)
        if (nib >> b & 1) any[4 * i + size_t(b)] = true;
    }
  }
  const int count = int(std::count(any.begin(), any.end(), true));
  return count > 0 ? count : usable_cores();
}

std::string host_identity() {
  if (auto o = env_str("BRAID_HOST_ID")) return *o;
  return hostname() + "|" + read_line("/proc/sys/kernel/random/boot_id") + "|" + ns_id("/proc/self/ns/ipc") +
         "|" + ns_id("/proc/self/ns/pid");
}

std::string encode_peer_info(const PeerInfo& p) {
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(p.nonce));
  return std::to_string(p.pid) + "\n" + nonce + "\n" + p.host + "\n" + p.host_id + "\n" + p.cpus +
         "\n" + std::to_string(p.world_rank);
}

PeerInfo decode_peer_info(int rank, const std::string& v) {
  PeerInfo p;
  p.rank = rank;
  std::istringstream is(v);
  std::string pid, nonce;
  std::getline(is, pid);
  std::getline(is, nonce);
  std::getline(is, p.host);
  std::getline(is, p.host_id);
  std::getline(is, p.cpus);
  std::string world;
  std::getline(is, world);
  p.world_rank = world.empty() ? -1 : std::atoi(world.c_str());
  if (p.cpus.find_first_not_of("0123456789abcdef") != std::string::npos) p.cpus.clear();
  p.pid = std::atoi(pid.c_str());
  p.nonce = std::strtoull(nonce.c_str(), nullptr, 16);
  if (p.pid <= 0 || nonce.size() != 16 || p.host_id.empty())
    throw Error(Errc::kProtocol, "transport set-up: malformed info of rank " + std::to_string(rank));
  return p;
}

}  // namespace braid::comm
