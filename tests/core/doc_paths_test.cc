// Every path the docs and comments name exists: README.md, docs/, and the
// comments and strings of include/, src/, tools/, tests/, bench/, scripts/,
// python/ and cmake/. A file that moves without its mentions fails here.
// (bench/results/ is left out: its files are dated records of the past.)
//
// What counts as a path: a token that starts with one of the tree's top
// folders (src/..., docs/...; it may be a folder), or with a layer of src/
// or include/braid/ (comm/algo/ring.cc, braid/comm.h) and then ends in a
// file extension. {a,b} is expanded; a token with '*' needs only its folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "braid/env.h"

namespace fs = std::filesystem;

namespace {

fs::path source_dir() {
  auto d = braid::env_str("BRAID_SOURCE_DIR");
  return d ? fs::path(*d) : fs::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::set<std::string> kTop = {"src", "include", "tests", "bench", "docs",
                                    "scripts", "tools", "python", "cmake"};
const std::set<std::string> kLayer = {"core", "comm",     "launch", "tensor", "nn",
                                      "parallel", "ps", "plan",   "braid"};

// "a/{b,c}.h" -> "a/b.h", "a/c.h" (one level of braces, as the docs use).
std::vector<std::string> expand(const std::string& t) {
  const auto open = t.find('{');
  const auto close = t.find('}', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) return {t};
  std::vector<std::string> out;
  std::stringstream alts(t.substr(open + 1, close - open - 1));
  for (std::string a; std::getline(alts, a, ',');) {
    for (auto& e : expand(t.substr(0, open) + a + t.substr(close + 1))) out.push_back(e);
  }
  return out;
}

bool has_extension(const std::string& p) {
  static const std::regex ext(R"(\.(h|cc|md|sh|py|cmake|txt|json|in)$)");
  return std::regex_search(p, ext);
}

// The places a mention may point at; empty when the token is not a path.
std::vector<fs::path> candidates(const fs::path& root, const std::string& p) {
  const std::string first = p.substr(0, p.find('/'));
  if (kTop.count(first)) return {root / p};
  if (!kLayer.count(first) || !has_extension(p)) return {};
  return {root / "src" / p, root / "include" / p, root / "include/braid" / p, root / "tools" / p,
          root / "tests" / p};
}

// Whether the file a mention names exists; nothing when the mention is not
// a path. A pattern ('*') needs only its folder.
std::optional<bool> named_file_exists(const fs::path& root, std::string p) {
  const auto star = p.find('*');
  if (star != std::string::npos) {
    p = p.substr(0, p.rfind('/', star));
    if (p.find('/') == std::string::npos && !kTop.count(p)) return std::nullopt;
  }
  const auto c = candidates(root, p);
  if (c.empty()) return std::nullopt;
  for (const auto& f : c)
    if (fs::exists(f)) return true;
  return false;
}

// A path starts after a character that cannot be part of one (nor of a
// shell variable: $src/tests is not src/tests), and ends on one that can
// end a name (not a sentence's full stop).
const std::regex& mention() {
  static const std::regex m(R"((?:^|[^A-Za-z0-9_./$-])([a-z]+/[A-Za-z0-9_./{},*-]*[A-Za-z0-9_}*]))");
  return m;
}

bool scanned(const fs::path& rel) {
  const std::string s = rel.generic_string();
  if (s.rfind("bench/results/", 0) == 0) return false;
  if (s == "tests/core/doc_paths_test.cc") return false;  // names missing files on purpose
  static const std::regex kinds(R"((\.(md|h|cc|py|sh|cmake|txt|in)|^Makefile|^\.ci/run)$)");
  return std::regex_search(s, kinds);
}

}  // namespace

TEST(DocPaths, EveryNamedFileExists) {
  const fs::path root = source_dir();
  ASSERT_TRUE(fs::exists(root / "README.md")) << root;
  std::vector<fs::path> files = {root / "README.md", root / "CMakeLists.txt", root / "Makefile",
                                 root / ".ci/run"};
  for (const char* d : {"docs", "include", "src", "tools", "tests", "bench", "scripts", "python",
                        "cmake"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / d)) {
      if (e.is_regular_file() && scanned(fs::relative(e.path(), root))) files.push_back(e.path());
    }
  }
  std::vector<std::string> missing;
  size_t checked = 0;
  for (const auto& f : files) {
    std::stringstream text(read_file(f));
    int line_no = 0;
    for (std::string line; std::getline(text, line);) {
      ++line_no;
      for (std::sregex_iterator m(line.begin(), line.end(), mention()), end; m != end; ++m) {
        for (const auto& p : expand((*m)[1].str())) {
          const std::optional<bool> exists = named_file_exists(root, p);
          if (!exists) continue;
          ++checked;
          if (!*exists) {
            missing.push_back(fs::relative(f, root).generic_string() + ":" + std::to_string(line_no) +
                              " names " + p);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100u) << "the scan found almost no mentions: is the pattern broken?";
  std::string list;
  for (const auto& m : missing) list += "\n  " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " mentions of files that do not exist:" << list;
}

// The rule itself: the mentions the scan must catch, and the text it must
// leave alone.
TEST(DocPaths, WhatCountsAsAPath) {
  const fs::path root = source_dir();
  EXPECT_EQ(named_file_exists(root, "src/comm/algo/registry.h"), true);
  EXPECT_EQ(named_file_exists(root, "comm/algo/registry.h"), true);
  EXPECT_EQ(named_file_exists(root, "braid/comm.h"), true);
  EXPECT_EQ(named_file_exists(root, "src/comm/algo/no_such_file.cc"), false);
  EXPECT_EQ(named_file_exists(root, "comm/no_such_file.h"), false);
  EXPECT_EQ(named_file_exists(root, "docs/NO_SUCH.md"), false);
  EXPECT_EQ(named_file_exists(root, "bench/no_such_dir/*.sh"), false);
  EXPECT_EQ(named_file_exists(root, "ps/replacements"), std::nullopt);  // a store key, not a file
  // A sentence's full stop and a shell variable are not part of a path.
  std::smatch m;
  const std::string sentence = "see docs/PERFORMANCE.md. Then $src/tests/x.cc";
  ASSERT_TRUE(std::regex_search(sentence, m, mention()));
  EXPECT_EQ(m[1].str(), "docs/PERFORMANCE.md");
  const std::string rest = m.suffix();
  EXPECT_FALSE(std::regex_search(rest, m, mention())) << m[1].str();
  EXPECT_EQ(expand("include/braid/{comm,store}.h"),
            (std::vector<std::string>{"include/braid/comm.h", "include/braid/store.h"}));
}
