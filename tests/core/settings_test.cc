// Every BRAID_* setting is declared once (src/core/settings.cc): the code
// reads no other, the sources name no other, and the README's table lists
// exactly the user settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/settings.h"

using namespace braid;

namespace {

std::string source_dir() {
  // ctest sets BRAID_SOURCE_DIR; run by hand, this file's own path tells.
  auto d = env_str("BRAID_SOURCE_DIR");
  return d ? *d : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Settings, ReadingAnUndeclaredSettingIsABug) {
  try {
    env_str("BRAID_NOT_A_SETTING");
    ADD_FAILURE() << "an undeclared BRAID_ variable was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInternal);
    EXPECT_NE(std::string(e.what()).find("BRAID_NOT_A_SETTING"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(env_str("HOME"));  // other variables are not braid's to declare
  EXPECT_NE(find_setting("BRAID_TIMEOUT"), nullptr);
}

TEST(Settings, EveryNameInTheSourcesIsDeclared) {
  // A string literal starting with a BRAID_ name: what env_* reads, and what
  // the launcher and messages set or name.
  const std::regex lit("\"(BRAID_[A-Z0-9_]+)");
  std::set<std::string> seen;
  for (const char* dir : {"src", "tools", "tests", "include"})
    for (auto& e : std::filesystem::recursive_directory_iterator(source_dir() + "/" + dir)) {
      const auto ext = e.path().extension();
      if (ext != ".cc" && ext != ".h") continue;
      const std::string text = read_file(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), lit), end; it != end; ++it)
        seen.insert((*it)[1]);
    }
  EXPECT_GT(seen.size(), 20u);
  for (const std::string& n : seen) {
    if (n == "BRAID_NOT_A_SETTING") continue;  // this file's own probe
    EXPECT_NE(find_setting(n), nullptr) << n << " is used but not declared in src/core/settings.cc";
  }
}

TEST(Settings, EachReaderNamedIsAFileThatUsesTheName) {
  // `braid env` and the README point users at read_by; a file that moved or
  // stopped reading the variable would send them to the wrong place.
  for (const Setting& s : all_settings()) {
    const std::filesystem::path p = source_dir() + "/" + s.read_by;
    ASSERT_TRUE(std::filesystem::exists(p)) << s.name << ": read_by " << s.read_by << " does not exist";
    std::string text;
    if (std::filesystem::is_directory(p)) {
      for (auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) text += read_file(e.path());
    } else {
      text = read_file(p);
    }
    EXPECT_NE(text.find(std::string("\"") + s.name), std::string::npos)
        << s.name << ": read_by " << s.read_by << " does not name it";
  }
}

TEST(Settings, TheReadmeTableListsTheUserSettings) {
  const std::string readme = read_file(source_dir() + "/README.md");
  const size_t a = readme.find("## Environment");
  ASSERT_NE(a, std::string::npos);
  const size_t b = readme.find("\n## ", a + 1);
  const std::string section = readme.substr(a, b == std::string::npos ? b : b - a);
  std::set<std::string> in_readme;
  const std::regex row("\n\\| `(BRAID_[A-Z0-9_]+)`");
  for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it)
    in_readme.insert((*it)[1]);
  std::set<std::string> declared;
  for (const Setting& s : all_settings())
    if (s.kind == Setting::Kind::kUser) declared.insert(s.name);
  for (const auto& n : declared)
    EXPECT_TRUE(in_readme.count(n)) << n << " is a user setting missing from the README's table";
  for (const auto& n : in_readme)
    EXPECT_TRUE(declared.count(n)) << n << " is in the README's table but not a declared user setting";
}
