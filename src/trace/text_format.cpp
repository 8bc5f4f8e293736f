// Tessera's own text format, for hand-written and generated traces (grammar in docs/trace-format.md):
//
//   tessera-trace 1
//   name <text>  device <text>  s <stream>  tag <name>  p <id> <size> [stream]     declarations, before any event
//   a <id> <size> [stream [time_us]] [tag=<name>]   f <id> [time_us]   i <n> [time_us]
//   pause <tag> backup|discard [time_us]   resume <tag> [time_us]
//   pool <first> <second> graph|plain                                          a declaration, as tag
//   record_stream <id> <stream> [time_us]
//   begin_pool <first> <second> <stream> [time_us]   end_pool <first> <second> [time_us]
//   release_pool <first> <second> [time_us]
//   end
//
// One record a line, '#' lines are comments. The closing "end" is required so that a file cut at a line
// boundary is an error rather than a shorter trace.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <unordered_map>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"
#include "trace/readers.hpp"
#include "trace/text_lines.hpp"
#include "trace/trace_builder.hpp"

namespace tessera {

namespace {

constexpr std::string_view magic = "tessera-trace";
constexpr int version = 1;
// An alloc's tag goes last, named, so that the positional stream and time stay as they were and an untagged
// trace is written exactly as before tags existed.
constexpr std::string_view tag_prefix = "tag=";

// Names and devices are free text up to the end of the line; a newline in one would end it early.
std::string one_line(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return line;
}

}  // namespace

std::string format_text_trace(const Trace& trace) {
  fmt::memory_buffer out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{} {}\n", magic, version);
  fmt::format_to(it, "# {} initial blocks, {} events, {} blocks\n", trace.initial_blocks.size(), trace.events.size(),
                 trace.block_count);
  if (!trace.name.empty()) fmt::format_to(it, "name {}\n", one_line(trace.name));
  if (!trace.device.empty()) fmt::format_to(it, "device {}\n", one_line(trace.device));
  // Declaring the streams keeps the stream table's order when the file is read back.
  auto stream_value = [&trace](std::uint32_t index) {
    return index < trace.streams.size() ? static_cast<std::uintptr_t>(trace.streams[index]) : std::uintptr_t{0};
  };
  for (const StreamId stream : trace.streams) fmt::format_to(it, "s {}\n", static_cast<std::uintptr_t>(stream));
  // Declared in table order, so that the indices are the same when read back. validate() keeps names to one
  // word; tag_name() is only a guard for a trace that skipped it.
  auto tag_name = [&trace](TraceTag tag) -> std::string_view {
    return tag < trace.tags.size() ? std::string_view(trace.tags[tag]) : default_tag_name;
  };
  for (std::size_t t = 1; t < trace.tags.size(); ++t) fmt::format_to(it, "tag {}\n", trace.tags[t]);
  for (const TracePool& pool : trace.pools) {
    fmt::format_to(it, "pool {} {} {}\n", pool.id.first, pool.id.second, pool.kind == PoolKind::graph ? "graph" : "plain");
  }
  auto pool_id = [&trace](std::uint64_t pool) {
    return pool < trace.pools.size() ? trace.pools[pool].id : PoolId{};
  };
  for (const InitialBlock& block : trace.initial_blocks) {
    fmt::format_to(it, "p {} {} {}\n", block.id, block.size, stream_value(block.stream));
  }
  for (const TraceEvent& event : trace.events) {
    const bool timed = event.time_us != no_time;
    switch (event.kind) {
      case TraceEventKind::alloc: {
        const bool tagged = event.tag != trace_default_tag;
        if (timed) {
          fmt::format_to(it, "a {} {} {} {}", event.block, event.size, stream_value(event.stream), event.time_us);
        } else if (stream_value(event.stream) != 0) {
          fmt::format_to(it, "a {} {} {}", event.block, event.size, stream_value(event.stream));
        } else {
          fmt::format_to(it, "a {} {}", event.block, event.size);
        }
        if (tagged) fmt::format_to(it, " {}{}", tag_prefix, tag_name(event.tag));
        fmt::format_to(it, "\n");
        break;
      }
      case TraceEventKind::free:
        if (timed) {
          fmt::format_to(it, "f {} {}\n", event.block, event.time_us);
        } else {
          fmt::format_to(it, "f {}\n", event.block);
        }
        break;
      case TraceEventKind::iteration:
        if (timed) {
          fmt::format_to(it, "i {} {}\n", event.size, event.time_us);
        } else {
          fmt::format_to(it, "i {}\n", event.size);
        }
        break;
      case TraceEventKind::pause:
        fmt::format_to(it, "pause {} {}", tag_name(event.tag), event.backup ? "backup" : "discard");
        if (timed) fmt::format_to(it, " {}", event.time_us);
        fmt::format_to(it, "\n");
        break;
      case TraceEventKind::resume:
        fmt::format_to(it, "resume {}", tag_name(event.tag));
        if (timed) fmt::format_to(it, " {}", event.time_us);
        fmt::format_to(it, "\n");
        break;
      case TraceEventKind::record_stream:
        fmt::format_to(it, "record_stream {} {}", event.block, stream_value(event.stream));
        if (timed) fmt::format_to(it, " {}", event.time_us);
        fmt::format_to(it, "\n");
        break;
      case TraceEventKind::begin_pool:
      case TraceEventKind::end_pool:
      case TraceEventKind::release_pool: {
        const PoolId id = pool_id(event.size);
        fmt::format_to(it, "{} {} {}", to_string(event.kind), id.first, id.second);
        if (event.kind == TraceEventKind::begin_pool) fmt::format_to(it, " {}", stream_value(event.stream));
        if (timed) fmt::format_to(it, " {}", event.time_us);
        fmt::format_to(it, "\n");
        break;
      }
    }
  }
  fmt::format_to(it, "end\n");
  return fmt::to_string(out);
}

Result<void> write_text_trace(const Trace& trace, const std::filesystem::path& path) {
  const std::string text = format_text_trace(trace);
  if (path.extension() == ".gz") return trace_detail::write_file_bytes(path, trace_detail::gzip(text));
  return trace_detail::write_file_bytes(path, text);
}

namespace trace_detail {

Result<Trace> parse_text_inflated(std::string_view text, std::string_view source) {
  std::size_t number = 0;
  auto fail = [source, &number](std::string_view what) {
    return make_error(Errc::invalid_argument, fmt::format("{}:{}: {}", source, number, what));
  };
  TraceBuilder builder;
  std::string name;
  std::string device;
  bool named = false;
  // The tag table as declared, and which tags are paused, so that a misplaced pause or alloc is an error
  // with its line rather than validate()'s event index.
  std::vector<std::string> tags{std::string(default_tag_name)};
  std::unordered_map<std::string, TraceTag> tag_index{{std::string(default_tag_name), trace_default_tag}};
  std::vector<bool> paused{false};
  std::vector<TracePool> pools;
  std::map<PoolId, std::uint32_t> pool_index;  // not a scan per line: a hostile file may declare millions
  PoolOrder pool_order;
  bool header = false;
  bool ended = false;
  LineScanner lines(text);
  std::string_view raw;
  while (lines.next(raw)) {
    number = lines.line_number();
    const std::string_view line = trim(raw);
    if (!header) {
      std::array<std::string_view, 2> fields;
      const std::size_t count = split_fields(line, fields.data(), fields.size());
      if (count == 0 || fields[0] != magic) {
        return fail(fmt::format("the first line must be '{} {}'", magic, version));
      }
      std::uint64_t file_version = 0;
      if (count != 2 || !parse_unsigned(fields[1], file_version)) return fail("the header's version is not a number");
      if (file_version != version) {
        return fail(fmt::format("version {} of the text format; this reader knows version {}", file_version, version));
      }
      header = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    if (ended) return fail("a record after 'end'");

    std::array<std::string_view, 6> fields;
    std::size_t count = split_fields(line, fields.data(), fields.size());
    const std::string_view kind = fields[0];
    const bool declaration =
        kind == "name" || kind == "device" || kind == "s" || kind == "p" || kind == "tag" || kind == "pool";
    if (declaration && builder.event_count() > 0) return fail(fmt::format("'{}' after the first event", kind));
    if (kind == "name" || kind == "device") {
      // As the writer writes it: a line break inside becomes a space, and an empty name is no name (the
      // file's stem then names the trace), so that what is read is written back the same.
      std::string value = one_line(trim(line.substr(kind.size())));
      value = std::string(trim(value));
      if (kind == "name") named = !value.empty();
      (kind == "name" ? name : device) = std::move(value);
      continue;
    }
    if (kind == "end") {
      if (count != 1) return fail("'end' takes no fields");
      ended = true;
      continue;
    }

    // The fields after the kind: required ones, then optional ones.
    auto expect = [&](std::size_t required, std::size_t optional) -> std::optional<Error> {
      if (count - 1 < required || count - 1 > required + optional) {
        if (optional == 0) return fail(fmt::format("'{}' takes {} fields, not {}", kind, required, count - 1));
        return fail(fmt::format("'{}' takes {} to {} fields, not {}", kind, required, required + optional, count - 1));
      }
      return {};
    };
    auto unsigned_field = [&](std::size_t index, std::string_view what, std::uint64_t& value) -> std::optional<Error> {
      if (!parse_unsigned(fields[index], value, /*allow_hex=*/true)) {
        return fail(fmt::format("{} '{}' is not a non-negative integer", what, fields[index]));
      }
      return {};
    };
    auto stream_field = [&](std::size_t index, std::uint32_t& stream) -> std::optional<Error> {
      std::uint64_t value = 0;
      if (index < count) {
        if (auto error = unsigned_field(index, "stream", value)) return error;
      }
      stream = builder.stream(StreamId{static_cast<std::uintptr_t>(value)});
      return {};
    };
    auto time_field = [&](std::size_t index, std::int64_t& time) -> std::optional<Error> {
      time = no_time;
      if (index < count && (!parse_signed(fields[index], time) || time == no_time)) {
        return fail(fmt::format("time '{}' is not an integer", fields[index]));
      }
      return {};
    };

    auto known_tag = [&](std::string_view tag_name, TraceTag& found_tag) -> std::optional<Error> {
      const auto found = tag_index.find(std::string(tag_name));
      if (found == tag_index.end()) {
        return fail(
            fmt::format("unknown tag '{}' (declare it with 'tag {}' before the first event)", tag_name, tag_name));
      }
      found_tag = found->second;
      return {};
    };

    // A pool named by its two numbers, declared before the first event.
    auto known_pool = [&](std::size_t index, std::uint32_t& found_pool) -> std::optional<Error> {
      PoolId wanted;
      if (auto error = unsigned_field(index, "pool id", wanted.first)) return error;
      if (auto error = unsigned_field(index + 1, "pool id", wanted.second)) return error;
      const auto found = pool_index.find(wanted);
      if (found == pool_index.end()) {
        return fail(fmt::format("unknown pool ({}, {}) (declare it with 'pool {} {} graph|plain' before the first event)",
                                wanted.first, wanted.second, wanted.first, wanted.second));
      }
      found_pool = found->second;
      return {};
    };

    std::uint64_t id = 0;
    std::uint64_t size = 0;
    std::uint32_t stream = 0;
    std::int64_t time = no_time;
    TraceTag tag = trace_default_tag;
    if (kind == "tag") {
      if (auto error = expect(1, 0)) return std::move(*error);
      const std::string declared(fields[1]);
      if (!is_trace_tag_name(declared)) return fail("a tag name is one word of printable characters");
      if (tag_index.contains(declared)) {
        return fail(declared == default_tag_name
                        ? fmt::format("'{}' is the tag of untagged blocks; it is not declared", declared)
                        : fmt::format("tag '{}' is declared twice", declared));
      }
      tag_index.emplace(declared, static_cast<TraceTag>(tags.size()));
      tags.push_back(declared);
      paused.push_back(false);
    } else if (kind == "pause" || kind == "resume") {
      const bool pause = kind == "pause";
      if (auto error = expect(pause ? 2 : 1, 1)) return std::move(*error);
      if (auto error = known_tag(fields[1], tag)) return std::move(*error);
      bool backup = false;
      if (pause) {
        if (fields[2] != "backup" && fields[2] != "discard") {
          return fail(fmt::format("'pause' takes 'backup' or 'discard', not '{}'", fields[2]));
        }
        backup = fields[2] == "backup";
      }
      if (auto error = time_field(pause ? 3 : 2, time)) return std::move(*error);
      if (paused[tag] == pause) {
        return fail(fmt::format("{} of tag '{}', which is {}", kind, fields[1], pause ? "paused already" : "not paused"));
      }
      paused[tag] = pause;
      if (pause) {
        builder.pause(tag, backup, time);
      } else {
        builder.resume(tag, time);
      }
    } else if (kind == "pool") {
      if (auto error = expect(3, 0)) return std::move(*error);
      TracePool declared;
      if (auto error = unsigned_field(1, "pool id", declared.id.first)) return std::move(*error);
      if (auto error = unsigned_field(2, "pool id", declared.id.second)) return std::move(*error);
      if (fields[3] != "graph" && fields[3] != "plain") {
        return fail(fmt::format("'pool' takes 'graph' or 'plain', not '{}'", fields[3]));
      }
      declared.kind = fields[3] == "graph" ? PoolKind::graph : PoolKind::plain;
      if (declared.id == PoolId{}) return fail("pool (0, 0) names no pool");
      if (pools.size() >= std::numeric_limits<std::uint32_t>::max()) return fail("too many pools");
      if (!pool_index.emplace(declared.id, static_cast<std::uint32_t>(pools.size())).second) {
        return fail(fmt::format("pool ({}, {}) is declared twice", declared.id.first, declared.id.second));
      }
      pools.push_back(declared);
    } else if (kind == "begin_pool" || kind == "end_pool" || kind == "release_pool") {
      const bool begin = kind == "begin_pool";
      if (auto error = expect(begin ? 3 : 2, 1)) return std::move(*error);
      std::uint32_t pool = 0;
      if (auto error = known_pool(1, pool)) return std::move(*error);
      if (begin) {
        if (auto error = stream_field(3, stream)) return std::move(*error);
      }
      if (auto error = time_field(begin ? 4 : 3, time)) return std::move(*error);
      const TraceEvent event = begin                  ? TraceEvent::begin_pool(pool, stream, time)
                               : kind == "end_pool" ? TraceEvent::end_pool(pool, time)
                                                    : TraceEvent::release_pool(pool, time);
      if (auto wrong = pool_order.apply(event.kind, pool, pools)) return fail(fmt::format("'{}' {}", kind, *wrong));
      builder.pool_event(event);
    } else if (kind == "record_stream") {
      if (auto error = expect(2, 1)) return std::move(*error);
      if (auto error = unsigned_field(1, "id", id)) return std::move(*error);
      if (auto error = stream_field(2, stream)) return std::move(*error);
      if (auto error = time_field(3, time)) return std::move(*error);
      if (builder.record_stream(id, stream, time) != TraceBuilder::Status::ok) {
        return fail(fmt::format("record_stream on block {}, which is not live", id));
      }
    } else if (kind == "s") {
      if (auto error = expect(1, 0)) return std::move(*error);
      if (auto error = stream_field(1, stream)) return std::move(*error);
    } else if (kind == "p") {
      if (auto error = expect(2, 1)) return std::move(*error);
      if (auto error = unsigned_field(1, "id", id)) return std::move(*error);
      if (auto error = unsigned_field(2, "size", size)) return std::move(*error);
      if (auto error = stream_field(3, stream)) return std::move(*error);
      const TraceBuilder::Status status = builder.declare_initial(id, size, stream);
      if (status == TraceBuilder::Status::already_live) return fail(fmt::format("block {} is declared twice", id));
      if (status == TraceBuilder::Status::zero_size) {
        return fail(fmt::format("block {} of 0 bytes: {}", id, TraceBuilder::zero_size_reason));
      }
      if (status != TraceBuilder::Status::ok) return fail("too many blocks");
    } else if (kind == "a") {
      // A last field "tag=<name>" is the tag; the fields before it are positional as ever.
      if (count >= 2 && count <= fields.size() && fields[count - 1].starts_with(tag_prefix)) {
        if (auto error = known_tag(fields[count - 1].substr(tag_prefix.size()), tag)) return std::move(*error);
        if (paused[tag]) return fail(fmt::format("an alloc under tag '{}', which is paused", tags[tag]));
        --count;
      }
      if (auto error = expect(2, 2)) return std::move(*error);
      if (auto error = unsigned_field(1, "id", id)) return std::move(*error);
      if (auto error = unsigned_field(2, "size", size)) return std::move(*error);
      if (auto error = stream_field(3, stream)) return std::move(*error);
      if (auto error = time_field(4, time)) return std::move(*error);
      const TraceBuilder::Status status = builder.alloc(id, size, stream, time, tag);
      if (status == TraceBuilder::Status::already_live) return fail(fmt::format("block {} is allocated while live", id));
      if (status == TraceBuilder::Status::zero_size) {
        return fail(fmt::format("block {} of 0 bytes: {}", id, TraceBuilder::zero_size_reason));
      }
      if (status != TraceBuilder::Status::ok) return fail("too many blocks");
    } else if (kind == "f") {
      if (auto error = expect(1, 1)) return std::move(*error);
      if (auto error = unsigned_field(1, "id", id)) return std::move(*error);
      if (auto error = time_field(2, time)) return std::move(*error);
      if (builder.free(id, time) != TraceBuilder::Status::ok) {
        return fail(fmt::format("block {} is freed but not live (declare blocks live before the trace with 'p')", id));
      }
    } else if (kind == "i") {
      if (auto error = expect(1, 1)) return std::move(*error);
      if (auto error = unsigned_field(1, "iteration", size)) return std::move(*error);
      if (auto error = time_field(2, time)) return std::move(*error);
      builder.iteration(size, time);
    } else {
      return fail(
          fmt::format("unknown record '{}' (expected a, f, i, p, s, pause, resume, tag, pool, record_stream, begin_pool, "
                      "end_pool, release_pool, name, device or end)",
                      kind));
    }
  }
  if (!header) {
    number = 1;
    return fail(fmt::format("the file is empty: the first line must be '{} {}'", magic, version));
  }
  if (!ended) {
    number = lines.line_number();
    return fail("the file ends without 'end': it looks cut short");
  }
  Trace trace = builder.finish(named ? name : trace_name_from_source(source), device);
  trace.tags = std::move(tags);
  trace.pools = std::move(pools);
  return trace;
}

}  // namespace trace_detail

Result<Trace> parse_text_trace(std::string_view bytes, std::string_view source) {
  return trace_detail::with_inflated(
      bytes, source, [source](std::string_view text, bool) { return trace_detail::parse_text_inflated(text, source); },
      trace_detail::trace_start_check(TraceFormat::text, source));
}

Result<Trace> read_text_trace(const std::filesystem::path& path) {
  Result<std::string> bytes =
      trace_detail::read_file_bytes(path, trace_detail::trace_start_check(TraceFormat::text, path.string()));
  if (!bytes) return std::move(bytes).error();
  return parse_text_trace(*bytes, path.string());
}

}  // namespace tessera
