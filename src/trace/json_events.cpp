#include "trace/json_events.hpp"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace tessera::trace_detail {

namespace {

using nlohmann::json;

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1, column 2: ".
std::string_view reason(std::string_view what) {
  const std::size_t colon = what.find(": ");
  return colon == std::string_view::npos ? what : what.substr(colon + 2);
}

// The 1-based offset of the bracket that opens level max_json_depth + 1. A SAX handler is not told where it
// is; the parser stopped at that bracket, and all before it was valid JSON, so a scan that skips strings
// finds it again.
std::size_t too_deep_at(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth) return i + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return text.size();
}

// Follows the nesting; builds only the elements of the events array that are objects, one at a time.
class EventsHandler final : public nlohmann::json_sax<json> {
 public:
  explicit EventsHandler(const JsonEventSink& sink) : sink_(sink) {
    for (const std::string_view field : sink.fields) {
      const std::size_t slash = field.find('/');
      fields_.push_back(slash == std::string_view::npos ? Field{field, {}}
                                                        : Field{field.substr(0, slash), field.substr(slash + 1)});
    }
  }

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override {
    return value(building_.empty() || skipping_ > 0 || skip_next_ ? json() : json(std::move(v)));
  }
  bool binary(binary_t& v) override { return value(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& name) override {
    if (skipping_ > 0) return true;
    if (!building_.empty()) {
      if (!wanted(name)) {
        skip_next_ = true;
        return true;
      }
      element_ = &(*building_.back())[name];
    } else if (depth_ == 1 && root_ == json::value_t::object) {
      events_key_ = name == "traceEvents";
      if (events_key_) {  // a repeated key replaces the array before it
        has_events_ = false;
        restart();
      }
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& error) override {
    error_position_ = position;
    error_token_ = token;
    error_id_ = error.id;
    error_what_ = error.what();
    return false;
  }

  Result<void> result(std::string_view text, std::string_view source, std::string_view position_source) const {
    if (too_deep_) {
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: byte {}: nesting deeper than {} levels, the most a JSON trace may have",
                                    position_source, too_deep_at(text), max_json_depth));
    }
    if (error_id_) {
      if (*error_id_ == 406) {  // number overflow: a number beyond a double's range
        const std::string event = !events_ || depth_ < events_depth_ ? std::string()
                                  : depth_ == events_depth_           ? fmt::format("traceEvents[{}]: ", next_index_)
                                                                      : fmt::format("traceEvents[{}]: ", index_);
        return make_error(Errc::invalid_argument, fmt::format("{}: byte {}: {}the number {} is out of range",
                                                              position_source, error_position_, event, error_token_));
      }
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: byte {}: not JSON: {}", position_source, error_position_, reason(error_what_)));
    }
    if (root_ != json::value_t::object && root_ != json::value_t::array) {
      return make_error(Errc::invalid_argument,
                        fmt::format("{}: the top-level value is neither a traceEvents array nor an object holding one",
                                    source));
    }
    if (!has_events_) {
      return make_error(Errc::invalid_argument, fmt::format("{}: the top-level object has no traceEvents array", source));
    }
    if (event_error_) return *event_error_;
    return {};
  }

 private:
  void restart() {
    next_index_ = 0;
    event_error_.reset();
    if (sink_.restart) sink_.restart();
  }

  // Whether the value of `name`, a key of the object being built, is one of the sink's fields; the key of
  // the event's own object is kept for the fields below it. Sizes are compared first: most keys are not
  // fields, and this runs for every key of every event.
  bool wanted(std::string_view name) {
    if (fields_.empty() || building_.size() > 2) return true;
    if (building_.size() == 1) {
      bool found = false;
      outer_whole_ = false;
      for (const Field& field : fields_) {
        if (field.outer == name) {
          found = true;
          outer_whole_ = outer_whole_ || field.inner.empty();
        }
      }
      if (found) outer_key_.assign(name);
      return found;
    }
    if (outer_whole_) return true;
    for (const Field& field : fields_) {
      if (field.inner == name && field.outer == outer_key_) return true;
    }
    return false;
  }

  // Where a new value goes inside the element being built.
  json* place(json&& v) {
    json& parent = *building_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *element_ = std::move(v);
    return element_;
  }

  // A value at depth 1 of the top-level object ends what its key began.
  void take_root_value(bool is_array) {
    if (depth_ == 1 && root_ == json::value_t::object && events_key_) {
      events_key_ = false;
      has_events_ = is_array;
      if (is_array) {
        events_ = true;
        events_depth_ = 2;
      }
    }
  }

  bool value(json&& v) {
    if (skipping_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    if (!building_.empty()) {
      place(std::move(v));
    } else if (depth_ == 0) {
      root_ = v.type();
    } else if (events_ && depth_ == events_depth_) {
      ++next_index_;  // an element that is no object: no event, but it has a place
    } else {
      take_root_value(false);
    }
    return true;
  }

  bool open(json::value_t type) {
    if (depth_ == max_json_depth) {
      too_deep_ = true;
      return false;
    }
    if (skipping_ > 0 || skip_next_) {  // a field not wanted, and all inside it
      skip_next_ = false;
      ++skipping_;
      ++depth_;
      return true;
    }
    if (!building_.empty()) {
      json* opened = place(json(type));
      ++depth_;
      building_.push_back(opened);
      return true;
    }
    if (depth_ == 0) {
      root_ = type;
      if (type == json::value_t::array) {
        has_events_ = true;
        events_ = true;
        events_depth_ = 1;
        restart();
      }
    } else if (events_ && depth_ == events_depth_) {
      index_ = next_index_++;
      if (type == json::value_t::object && !event_error_) {
        event_ = json(json::value_t::object);
        building_.push_back(&event_);
      }
    } else {
      take_root_value(type == json::value_t::array);
    }
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (skipping_ > 0) {
      --skipping_;
      return true;
    }
    if (!building_.empty()) {
      building_.pop_back();
      if (building_.empty()) {
        event_error_ = sink_.event(index_, event_);
        event_ = json();
      }
    } else if (events_ && depth_ + 1 == events_depth_) {
      events_ = false;  // the events array ended
    }
    return true;
  }

  struct Field {
    std::string_view outer;  // the event's key
    std::string_view inner;  // the key inside its object; empty: all of it
  };

  const JsonEventSink& sink_;
  std::vector<Field> fields_;
  std::size_t depth_ = 0;               // containers open
  json::value_t root_ = json::value_t::discarded;
  bool events_key_ = false;             // the last key of the top-level object is traceEvents
  bool has_events_ = false;             // the events array was read (the last traceEvents is one)
  bool events_ = false;                 // inside the events array
  std::size_t events_depth_ = 0;        // the depth inside it
  std::size_t next_index_ = 0;          // of the next element
  std::size_t index_ = 0;               // of the element being read
  json event_;                          // the element being built
  std::vector<json*> building_;         // its open containers, innermost last
  json* element_ = nullptr;             // where the value of the last key goes
  std::string outer_key_;               // the event's key whose object is being built
  bool outer_whole_ = false;            // that key is a field itself: all of its value is kept
  bool skip_next_ = false;              // the next value is a field not wanted
  std::size_t skipping_ = 0;            // containers open inside a field not wanted
  std::optional<Error> event_error_;    // the first event the sink refused
  bool too_deep_ = false;
  std::optional<int> error_id_;
  std::size_t error_position_ = 0;
  std::string error_token_;
  std::string error_what_;
};

}  // namespace

Result<void> read_json_events(std::string_view text, std::string_view source, std::string_view position_source,
                              const JsonEventSink& sink) {
  EventsHandler handler(sink);
  // False when the handler stopped it; the handler knows why.
  [[maybe_unused]] const bool parsed = json::sax_parse(text.begin(), text.end(), &handler);
  return handler.result(text, source, position_source);
}

}  // namespace tessera::trace_detail
