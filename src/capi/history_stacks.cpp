// tessera_set_history_stacks: the stacks of the allocations the history records, from a capture the caller
// installs (the Python package's walks the interpreter's frames). The capture runs on the allocating thread
// before the allocator's lock (TesseraAllocator::set_history_stacks), so that it may wait for an interpreter
// whose other threads allocate meanwhile; whatever it does wrong costs the allocation its stack, never the
// allocation.
#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>

#include "capi/guard.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {

namespace {

// Room for the frames of one allocation: some hundred frames of long paths.
constexpr std::size_t stack_buffer_bytes = 64 * 1024;

// "filename\tline\tname\n" lines, innermost first; a line that does not parse is skipped. The name and the
// line are the last two fields, so that a tab in a file name does no harm.
Stack parse_frames(std::string_view text) {
  Stack stack;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    const std::size_t name_tab = line.rfind('\t');
    if (name_tab == std::string_view::npos || name_tab == 0) continue;
    const std::size_t line_tab = line.rfind('\t', name_tab - 1);
    if (line_tab == std::string_view::npos) continue;
    std::uint32_t number = 0;
    const std::string_view digits = line.substr(line_tab + 1, name_tab - line_tab - 1);
    const auto [parsed, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
    if (error != std::errc() || parsed != digits.data() + digits.size()) continue;
    stack.push_back({std::string(line.substr(0, line_tab)), number, std::string(line.substr(name_tab + 1))});
  }
  return stack;
}

Stack capture_with(tessera_stack_capture_fn capture, tessera_stack_ready_fn ready) noexcept {
  // A capture that allocates through Tessera itself records no stack for that allocation.
  thread_local bool capturing = false;
  if (capturing) return {};
  try {
    if (ready != nullptr && ready() == nullptr) return {};
    thread_local std::string buffer;
    buffer.resize(stack_buffer_bytes);
    capturing = true;
    const int written = capture(buffer.data(), buffer.size());
    capturing = false;
    if (written <= 0) return {};
    return parse_frames(std::string_view(buffer.data(), std::min<std::size_t>(static_cast<std::size_t>(written),
                                                                               buffer.size())));
  } catch (...) {
    capturing = false;
    return {};
  }
}

}  // namespace

}  // namespace tessera::capi

extern "C" {

int tessera_set_history_stacks(tessera_stack_capture_fn capture, tessera_stack_ready_fn ready) {
  using namespace tessera::capi;
  return guarded("tessera_set_history_stacks", -1, [&] {
    if (capture == nullptr) {
      set_history_stacks({});
    } else {
      set_history_stacks([capture, ready] { return capture_with(capture, ready); });
    }
    return 0;
  });
}

}  // extern "C"
