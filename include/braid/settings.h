// Every BRAID_* environment variable braid reads, declared once.
//
// The table in src/core/settings.cc is the only place a setting is named
// with its default and meaning; env_str / env_int / env_flag (env.h) refuse
// a BRAID_* name that is not in it (Error kInternal: a bug in braid), so a
// new setting cannot be read without being declared. `braid env` prints the
// table with the effective values, and a test keeps the README's table of
// user settings equal to the user entries here.
#pragma once

#include <string>
#include <vector>

namespace braid {

struct Setting {
  enum class Kind {
    kUser,      // a user sets it; listed in the README
    kLauncher,  // braid run sets it for the ranks it starts
    kTest,      // fault injection and fakes for tests and benchmarks
  };
  const char* name;
  Kind kind;
  const char* fallback;  // what applies when unset, in words
  const char* meaning;
  const char* read_by;   // the source file that reads it
};

// In name order.
const std::vector<Setting>& all_settings();
// The declaration of `name`, or null.
const Setting* find_setting(const std::string& name);
const char* setting_kind_name(Setting::Kind k);

}  // namespace braid
