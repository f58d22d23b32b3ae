// The algorithm registry (src/comm/algo/registry.h): its names are the ones
// BRAID_ALGO, set_algorithm and the README accept, its costs are what the
// selector prices, and every algorithm, forced, computes the right result
// in real processes — or, where it cannot run, fails with an error naming
// it instead of running another.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>

#include "braid/comm.h"
#include "braid/env.h"
#include "braid/error.h"
#include "comm/algo/registry.h"
#include "comm/algo/select.h"
#include "support/multiproc.h"

using namespace braid;
using namespace braid::comm;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string source_dir() {
  auto d = env_str("BRAID_SOURCE_DIR");
  return d ? *d : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

TEST(Registry, EveryCollectiveListsItsAlgorithmsInTieBreakOrder) {
  for (const algo::Collective& coll : algo::collectives()) {
    const CollOp op = coll.op;
    EXPECT_EQ(parse_coll_op(coll.name), op);
    const auto& list = algo::algorithms(op);
    ASSERT_FALSE(list.empty()) << coll.name;
    std::vector<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      EXPECT_EQ(list[i]->op, op);
      if (i > 0) {
        EXPECT_LT(list[i - 1]->id, list[i]->id) << coll_op_name(op);
      }
      EXPECT_EQ(algo::find(op, list[i]->name), list[i]);
      EXPECT_FALSE(list[i]->summary.empty()) << list[i]->name;
      names.push_back(list[i]->name);
    }
    EXPECT_EQ(comm::algorithms(coll.name), names);
  }
  EXPECT_EQ(algo::find(CollOp::kAllReduce, "bogus"), nullptr);
  try {
    comm::algorithms("all_reduse");
    ADD_FAILURE() << "an unknown collective was listed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), "all_reduse")) << e.what();
  }
}

TEST(Registry, TheReadmeTableListsEveryAlgorithm) {
  std::ifstream f(source_dir() + "/README.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string readme = ss.str();
  const size_t a = readme.find("### Collective algorithms");
  ASSERT_NE(a, std::string::npos) << "README.md has no algorithm table";
  const size_t b = readme.find("\n#", a + 1);
  const std::string section = readme.substr(a, b == std::string::npos ? b : b - a);
  std::map<std::string, std::string> rows;
  const std::regex row("\n\\| `([a-z_]+)` \\| ([a-z_, ]+) \\|");
  for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it)
    rows[(*it)[1]] = (*it)[2];
  for (const algo::Collective& coll : algo::collectives()) {
    const CollOp op = coll.op;
    const std::string name = coll.name;
    ASSERT_TRUE(rows.count(name)) << name << " is missing from the README's algorithm table";
    EXPECT_EQ(rows[name], algo::names(op)) << "README's row for " << name;
    rows.erase(name);
  }
  for (const auto& [name, algos] : rows)
    ADD_FAILURE() << "README's algorithm table lists '" << name << "', not a collective";
}

TEST(Registry, UnknownBraidAlgoNamesAreErrorsListingTheValidOnes) {
  struct Case {
    const char* value;
    CollOp op;
    const char* bad;
  };
  for (const Case& k : {Case{"broadcast:ring", CollOp::kBroadcast, "ring"},
                        Case{"all_reduce:tree", CollOp::kAllReduce, "tree"},
                        Case{"reduce:ring,all_gather:rd", CollOp::kAllGather, "rd"}}) {
    ::setenv("BRAID_ALGO", k.value, 1);
    Selector s(4, false, CostParams{}, 1, 4, true, 4);
    try {
      s.load_env_overrides();
      ADD_FAILURE() << k.value << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_TRUE(contains(msg, "BRAID_ALGO")) << msg;
      EXPECT_TRUE(contains(msg, std::string("'") + k.bad + "'")) << msg;
      EXPECT_TRUE(contains(msg, coll_op_name(k.op))) << msg;
      EXPECT_TRUE(contains(msg, algo::names(k.op) + ", auto")) << msg;
    }
  }
  ::unsetenv("BRAID_ALGO");
}

TEST(Registry, ACommunicatorRefusesAnUnknownBraidAlgoName) {
  braid::testing::expect_all_pass(
      1,
      [](int rank, int size, std::shared_ptr<Store> store) {
        try {
          braid::testing::make_comm(rank, size, store);
          ADD_FAILURE() << "BRAID_ALGO=reduce:hd was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Errc::kInvalidArgument);
          EXPECT_TRUE(contains(e.what(), "tree, ring, direct, auto")) << e.what();
        }
      },
      std::chrono::seconds(60), {"BRAID_ALGO=reduce:hd"});
}

// Communicators the selector is made for: sizes, links, hierarchy, cores.
struct Shape {
  int n;
  bool any_tcp;
  int hosts, max_local;
  bool all_shm;
  int cores;
};
const Shape kShapes[] = {
    {2, false, 1, 2, true, 2},  {3, false, 1, 3, true, 2},  {4, false, 1, 4, true, 8},
    {8, false, 1, 8, true, 2},  {5, true, 1, 5, false, 8},  {8, true, 2, 4, false, 2},
    {6, true, 3, 2, false, 16}, {1, false, 1, 1, true, 2},
};
const size_t kSizes[] = {0, 8, 4096, 64 << 10, 256 << 10, 1 << 20, 16 << 20};

TEST(Registry, TheSelectorPricesEachAlgorithmWithItsRegistryCost) {
  std::vector<CollOp> ops = {CollOp::kSend};
  for (const algo::Collective& coll : algo::collectives()) ops.push_back(coll.op);
  for (const Shape& sh : kShapes) {
    Selector s(sh.n, sh.any_tcp, CostParams{}, sh.hosts, sh.max_local, sh.all_shm, sh.cores);
    for (CollOp op : ops)
      for (size_t bytes : kSizes) {
        const std::string at = std::string(coll_op_name(op)) + " n " + std::to_string(sh.n) +
                               " hosts " + std::to_string(sh.hosts) + " bytes " +
                               std::to_string(bytes);
        const algo::Algorithm* cheapest = nullptr;
        double best = kInf;
        for (const algo::Algorithm* a : algo::algorithms(op)) {
          const double price = s.predict(op, a->name, bytes);
          EXPECT_EQ(price, s.predict(*a, bytes)) << a->name << " " << at;
          if (s.why_not(*a) != nullptr) {
            EXPECT_EQ(price, kInf) << a->name << " does not apply but is priced: " << at;
            continue;
          }
          const double want = sh.n == 1 ? 0.0 : a->cost(s.inputs(bytes));
          EXPECT_EQ(price, want) << a->name << " " << at;
          if (cheapest == nullptr || price < best) {
            cheapest = a;
            best = price;
          }
        }
        ASSERT_NE(cheapest, nullptr) << at;
        // f32 with no override: the cheapest that applies, ties to the first.
        EXPECT_EQ(&s.select(op, bytes, DType::kF32), cheapest) << at;
      }
  }
}

TEST(Registry, AForcedAlgorithmThatCannotRunIsAnErrorNamingIt) {
  Selector tcp(4, /*any_tcp=*/true, CostParams{}, 1, 4, false, 4);
  tcp.set_override("all_reduce", "chain");
  tcp.set_override("all_gather", "shared");
  struct Case {
    CollOp op;
    const char* algo;
    const char* need;
  };
  for (const Case& k : {Case{CollOp::kAllReduce, "chain", "shared memory"},
                        Case{CollOp::kAllGather, "shared", "alloc_shared"}}) {
    try {
      tcp.select(k.op, 1 << 20, DType::kF32);
      ADD_FAILURE() << k.algo << " ran where it cannot";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), Errc::kInvalidArgument);
      EXPECT_TRUE(contains(msg, std::string("'") + k.algo + "'")) << msg;
      EXPECT_TRUE(contains(msg, coll_op_name(k.op))) << msg;
      EXPECT_TRUE(contains(msg, k.need)) << msg;
    }
  }
  // On a buffer in alloc_shared memory "shared" runs, forced or not.
  EXPECT_EQ(tcp.select(CollOp::kAllGather, 1 << 20, DType::kF32, true).name, "shared");
  Selector one_host(4, false, CostParams{}, 1, 4, true, 4);
  EXPECT_EQ(one_host.select(CollOp::kAllReduce, 1 << 20, DType::kF32, true).name, "shared");
  one_host.set_override("all_reduce", "hier");
  try {
    one_host.select(CollOp::kAllReduce, 1 << 20, DType::kF32);
    ADD_FAILURE() << "hier ran on one host";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'hier'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "host hierarchy")) << e.what();
  }
}

}  // namespace
