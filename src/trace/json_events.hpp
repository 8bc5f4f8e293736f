// The events of a Chrome trace JSON (the traceEvents array of the top-level object, or a bare top-level
// array), read one at a time with nlohmann's SAX parser: each element that is an object is built alone,
// handed to the caller and dropped. Time is linear in the input and memory is one event's; the DOM callback
// parser rescanned the kept elements after each one (quadratic: 400 000 events took a minute).
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"

namespace tessera::trace_detail {

// The most levels of nesting a JSON trace may have, anywhere in it. Kineto's deepest (an event's args
// holding a list of shapes) is 5; each level costs a parser memory, so without a bound a small gzip file of
// '[' takes gigabytes.
inline constexpr std::size_t max_json_depth = 256;

struct JsonEventSink {
  // The fields of an event to build, "key" or "key/inner" for a key of the object that is key's value
  // (whatever lies below a field kept is kept whole); the others are skipped as they are parsed. Empty: all.
  std::vector<std::string_view> fields;
  // A traceEvents array begins: a repeated key replaces the events of the one before, as a JSON object keeps
  // its last value of a key.
  std::function<void()> restart;
  // The element at `index` of the array, an object. An error stops the reading of events (the rest of the
  // input is still parsed, so that invalid JSON is reported first, as a whole-document parser would).
  std::function<std::optional<Error>(std::size_t index, const nlohmann::json& event)> event;
};

// Reads the events of `text` into `sink`. Errors name `source`; those at a byte name `position_source` (the
// source, "(inflated)" after it when offsets are in inflated data), with 1-based byte offsets that count a
// leading byte order mark, which is skipped.
Result<void> read_json_events(std::string_view text, std::string_view source, std::string_view position_source,
                              const JsonEventSink& sink);

}  // namespace tessera::trace_detail
