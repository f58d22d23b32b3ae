// braid env: every BRAID_* setting (include/braid/settings.h) with the
// value in effect here and where it came from.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "braid/settings.h"
#include "subcommands.h"

namespace braid::tool {

int env_main(int argc, char** argv) {
  CLI::App app{"braid env: the BRAID_* settings in effect here, with their source"};
  bool all = false, json = false;
  app.add_flag("--all", all, "also the settings the launcher and the tests set");
  app.add_flag("--json", json, "one JSON object per setting");
  CLI11_PARSE(app, argc, argv);
  for (const Setting& s : all_settings()) {
    if (!all && s.kind != Setting::Kind::kUser) continue;
    const char* v = std::getenv(s.name);
    const bool set = v != nullptr && *v != '\0';
    if (json) {
      nlohmann::json j{{"name", s.name},         {"kind", setting_kind_name(s.kind)},
                       {"source", set ? "environment" : "default"},
                       {"value", set ? v : s.fallback}, {"meaning", s.meaning},
                       {"read_by", s.read_by}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%-24s %-12s %s\n%-24s %s\n", s.name, set ? "environment" : "default",
                  set ? v : s.fallback, "", s.meaning);
    }
  }
  return 0;
}

}  // namespace braid::tool
