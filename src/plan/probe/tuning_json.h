// The tuning file's text as a JSON object to merge a probe's entry into:
// empty, not JSON or not an object gives an empty one (the file is
// rewritten whole, as comm::merge_probe does).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace braid::plan {

inline nlohmann::json tuning_json(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const nlohmann::json::exception&) {
    return nlohmann::json::object();
  }
}

}  // namespace braid::plan
