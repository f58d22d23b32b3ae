// braid env as a user runs it: one entry per user setting of the table
// (src/core/settings.cc), in its order, each with the value in effect and
// where it came from (the environment, else the default) and its meaning;
// --all adds the settings the launcher and the tests set; --json gives the
// same as one object per setting. Every run starts from an environment
// without any BRAID_* variable, then sets the ones a case needs.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "braid/settings.h"
#include "support/tool.h"

namespace {

using braid::Setting;
using braid::testing::braid_bin;
using braid::testing::CommandResult;
using braid::testing::run_command;

// `braid env <args>` with every declared setting unset, then `assign`
// ("NAME=value ...") set.
CommandResult braid_env(const std::string& assign, const std::string& args) {
  std::string cmd = "env";
  for (const Setting& s : braid::all_settings()) cmd += std::string(" -u ") + s.name;
  return run_command(cmd + " " + assign + " " + braid_bin() + " env " + args);
}

struct Entry {
  std::string name, source, value, meaning;
};

// The text form: per setting "NAME  SOURCE  VALUE", then the meaning
// indented on the next line.
std::vector<Entry> parse_text(const std::string& out) {
  std::vector<Entry> v;
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    if (line.rfind("BRAID_", 0) == 0) {
      Entry e;
      std::istringstream ls(line);
      ls >> e.name >> e.source;
      std::getline(ls, e.value);
      const size_t at = e.value.find_first_not_of(' ');
      e.value = at == std::string::npos ? "" : e.value.substr(at);
      v.push_back(e);
    } else {
      EXPECT_FALSE(v.empty()) << "a meaning before any setting: " << line;
      EXPECT_EQ(line.find_first_not_of(' '), 25u) << "not an indented meaning: " << line;
      if (!v.empty() && line.size() > 25) v.back().meaning = line.substr(25);
    }
  }
  return v;
}

// The settings `braid env` (with --all when `all`) must list, in order.
std::vector<const Setting*> expected(bool all) {
  std::vector<const Setting*> v;
  for (const Setting& s : braid::all_settings())
    if (all || s.kind == Setting::Kind::kUser) v.push_back(&s);
  return v;
}

// `got` lists exactly `want`, in order, each from the environment with its
// value when `set` has it, else from the default with the table's fallback.
void expect_entries(const std::vector<Entry>& got, const std::vector<const Setting*>& want,
                    const std::map<std::string, std::string>& set, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const Setting& s = *want[i];
    const Entry& e = got[i];
    EXPECT_EQ(e.name, s.name) << what << " entry " << i;
    EXPECT_EQ(e.meaning, s.meaning) << what << " " << s.name;
    auto it = set.find(s.name);
    if (it != set.end()) {
      EXPECT_EQ(e.source, "environment") << what << " " << s.name;
      EXPECT_EQ(e.value, it->second) << what << " " << s.name;
    } else {
      EXPECT_EQ(e.source, "default") << what << " " << s.name;
      EXPECT_EQ(e.value, s.fallback) << what << " " << s.name;
    }
  }
}

TEST(EnvTool, ListsTheUserSettingsWithTheirValuesAndSources) {
  const std::map<std::string, std::string> set = {{"BRAID_TIMEOUT", "42"},
                                                  {"BRAID_ALGO", "all_reduce:ring"}};
  // BRAID_RANK is the launcher's: set, but not listed without --all.
  CommandResult r =
      braid_env("BRAID_TIMEOUT=42 BRAID_ALGO=all_reduce:ring BRAID_RANK=3", "");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto want = expected(false);
  EXPECT_GE(want.size(), 20u);
  expect_entries(parse_text(r.out), want, set, "braid env");
  EXPECT_EQ(r.out.find("BRAID_RANK"), std::string::npos) << r.out;
}

TEST(EnvTool, AllAddsTheLauncherAndTestSettings) {
  CommandResult r = braid_env("BRAID_TIMEOUT=7 BRAID_RANK=3", "--all");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto want = expected(true);
  EXPECT_GT(want.size(), expected(false).size());
  expect_entries(parse_text(r.out), want, {{"BRAID_TIMEOUT", "7"}, {"BRAID_RANK", "3"}},
                 "braid env --all");
}

TEST(EnvTool, JsonGivesTheSameEntries) {
  for (const bool all : {false, true}) {
    CommandResult r = braid_env("BRAID_LOG_LEVEL=error BRAID_WORLD_SIZE=5",
                                all ? "--json --all" : "--json");
    ASSERT_EQ(r.status, 0) << r.out;
    std::vector<Entry> got;
    std::istringstream is(r.out);
    std::string line;
    std::map<std::string, std::string> kinds, readers;
    while (std::getline(is, line)) {
      const auto j = nlohmann::json::parse(line);
      got.push_back({j.at("name"), j.at("source"), j.at("value"), j.at("meaning")});
      kinds[j.at("name")] = j.at("kind");
      readers[j.at("name")] = j.at("read_by");
    }
    std::map<std::string, std::string> set = {{"BRAID_LOG_LEVEL", "error"}};
    if (all) set["BRAID_WORLD_SIZE"] = "5";
    const auto want = expected(all);
    expect_entries(got, want, set, all ? "--json --all" : "--json");
    for (const Setting* s : want) {
      EXPECT_EQ(kinds[s->name], braid::setting_kind_name(s->kind)) << s->name;
      EXPECT_EQ(readers[s->name], s->read_by) << s->name;
    }
  }
}

TEST(EnvTool, AnUnknownFlagIsRefused) {
  CommandResult r = braid_env("", "--everything");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--everything"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("BRAID_TIMEOUT"), std::string::npos) << r.out;
}

}  // namespace
