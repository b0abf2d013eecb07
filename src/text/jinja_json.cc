// JSON text -> Jinja values (see jinja_json.h).
#include "text/jinja_json.h"

#include <nlohmann/json.hpp>

#include "qkv/error.h"

namespace qkv::text::jinja {

namespace {

using Json = nlohmann::ordered_json;

Value from_json(const Json& j, int depth, int max_depth) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value(None{});
    case Json::value_t::boolean:
      return Value(j.get<bool>());
    case Json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      QKV_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "template variables: the integer ", u,
                " is beyond 64 bits");
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value(j.get<double>());
    case Json::value_t::string:
      return Value(j.get<std::string>());
    case Json::value_t::array: {
      QKV_CHECK(depth < max_depth, "template variables nest deeper than ", max_depth, " levels");
      Array items;
      items.reserve(j.size());
      for (const Json& item : j) items.push_back(from_json(item, depth + 1, max_depth));
      return Value(std::move(items));
    }
    case Json::value_t::object: {
      QKV_CHECK(depth < max_depth, "template variables nest deeper than ", max_depth, " levels");
      Object entries;
      entries.reserve(j.size());
      for (const auto& [key, value] : j.items())
        entries.emplace_back(key, from_json(value, depth + 1, max_depth));
      return Value(std::move(entries));
    }
    default:
      QKV_CHECK(false, "template variables: unsupported JSON value");
  }
}

}  // namespace

Value parse_json_value(std::string_view json, int max_depth) {
  Json j;
  // Deeper input is refused while it is parsed (nlohmann's destructor recurses).
  const Json::parser_callback_t limit_depth = [max_depth](int depth, Json::parse_event_t, Json&) {
    QKV_CHECK(depth <= max_depth, "template variables nest deeper than ", max_depth, " levels");
    return true;
  };
  try {
    j = Json::parse(json, limit_depth);
  } catch (const Json::exception& e) {
    QKV_CHECK(false, "template variables are not valid JSON: ", e.what());
  }
  return from_json(j, 0, max_depth);
}

}  // namespace qkv::text::jinja
