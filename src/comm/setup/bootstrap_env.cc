// The environment readers, secret and store helpers that every launcher's
// bootstrap shares (bootstrap_env.h), and parse_host_port.
#include "comm/setup/bootstrap_env.h"

#include <openssl/evp.h>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/log.h"
#include "comm/store/memory_store.h"

namespace braid::comm {
namespace boot {

[[noreturn]] void bad(const std::string& what) { throw Error(Errc::kInvalidArgument, what); }

bool has(const char* name) { return env_str(name).has_value(); }

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

std::string secret_for(const std::string& source, const std::string& shared, int rank) {
  if (auto s = env_str("BRAID_SECRET")) return *s;
  if (rank == 0) BRAID_LOG(kWarn, "BRAID_SECRET is not set; the " << source
                        << " job uses a secret derived from its job id and address, which "
                           "other users of these hosts can compute. Export the same random "
                           "BRAID_SECRET to every rank to protect the job.");
  return sha256_hex("braid-derived-secret|" + source + "|" + shared);
}

Layout need_rank_size(const LayoutVars& v) {
  Layout L;
  L.rank = need_int(v.rank);
  L.size = need_int(v.size);
  return L;
}

void validate(const Layout& L, const LayoutVars& v) {
  if (L.size < 1) bad(std::string(v.size) + "=" + std::to_string(L.size) + ": must be at least 1");
  if (L.rank >= L.size)
    bad(std::string(v.rank) + "=" + std::to_string(L.rank) + " is not below " + v.size + "=" +
        std::to_string(L.size));
  if (L.local_size < 1 || L.local_size > L.size)
    bad(std::string(v.local_size) + "=" + std::to_string(L.local_size) + " must be in [1, " +
        v.size + "=" + std::to_string(L.size) + "]");
  if (L.local_rank >= L.local_size)
    bad(std::string(v.local_rank) + "=" + std::to_string(L.local_rank) + " is not below " +
        v.local_size + "=" + std::to_string(L.local_size));
}

// Connects to host:port; rank 0 (when `host_it`) first starts the server
// there, listening on every interface.
void attach_tcp(JobEnv& env, const std::string& host, int port, bool host_it,
                std::chrono::milliseconds timeout) {
  if (host_it) env.server = std::make_shared<TcpStoreServer>("0.0.0.0", port, env.secret);
  env.store = connect_tcp_store(host, port, env.secret, timeout);
}

void attach_foreign(JobEnv& env, const std::string& job_id, const std::pair<std::string, int>& addr,
                    std::chrono::milliseconds timeout) {
  env.secret = secret_for(env.source, job_id + "|" + addr.first + ":" + std::to_string(addr.second),
                          env.rank);
  attach_tcp(env, addr.first, addr.second, env.rank == 0, timeout);
}

JobEnv with_layout(const char* source, const Layout& L) {
  JobEnv env;
  env.source = source;
  env.rank = L.rank, env.size = L.size, env.local_rank = L.local_rank;
  env.local_size = L.local_size, env.node_rank = L.node_rank;
  return env;
}

JobEnv use_memory_store(JobEnv env, std::chrono::milliseconds timeout) {
  env.secret = env_str("BRAID_SECRET").value_or(make_job_secret());
  env.store = make_memory_store();
  env.store->set_timeout(timeout);
  return env;
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

}  // namespace boot

std::pair<std::string, int> parse_host_port(const std::string& s, const std::string& what) {
  std::string host, port_s;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      boot::bad(what + "='" + s + "' is not [host]:port");
    host = s.substr(1, close - 1);
    port_s = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0) boot::bad(what + "='" + s + "' is not host:port");
    host = s.substr(0, colon);
    port_s = s.substr(colon + 1);
  }
  int port = 0;
  try {
    size_t pos = 0;
    port = std::stoi(port_s, &pos);
    if (pos != port_s.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    boot::bad(what + "='" + s + "': port '" + port_s + "' is not a number");
  }
  if (port < 1 || port > 65535) boot::bad(what + "='" + s + "': port out of range");
  if (host.empty()) boot::bad(what + "='" + s + "': empty host");
  return {host, port};
}

}  // namespace braid::comm
