// tessera_set_history_stacks: the stacks of the allocations the history records, from a capture the caller
// installs (the Python package's walks the interpreter's frames). The capture runs on the allocating thread
// before the allocator's lock (TesseraAllocator::set_history_stacks), so that it may wait for an interpreter
// whose other threads allocate meanwhile; whatever it does wrong costs the allocation its stack, never the
// allocation.
#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

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

// Each distinct text parsed once, and the same object handed out for it, so that the history files it once: a
// training loop allocates from the same places again and again. Threads capture at once, outside the
// allocator's lock: the cache has a lock of its own. Cleared when it grows past `most` texts.
class StackCache {
 public:
  std::shared_ptr<const Stack> of(std::string_view text) {
    std::lock_guard lock(mutex_);
    if (const auto found = stacks_.find(text); found != stacks_.end()) return found->second;
    if (stacks_.size() >= most) stacks_.clear();
    auto stack = std::make_shared<const Stack>(parse_frames(text));
    stacks_.emplace(std::string(text), stack);
    return stack;
  }

 private:
  static constexpr std::size_t most = 1 << 16;
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
  };
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Stack>, TextHash, std::equal_to<>> stacks_;
};

StackCache& stack_cache() {
  static auto* cache = new StackCache;  // never destroyed: allocations may come during static destruction
  return *cache;
}

std::shared_ptr<const Stack> capture_with(tessera_stack_capture_fn capture, tessera_stack_ready_fn ready) noexcept {
  // A capture that allocates through Tessera itself records no stack for that allocation.
  thread_local bool capturing = false;
  if (capturing) return nullptr;
  try {
    if (ready != nullptr && ready() == nullptr) return nullptr;
    thread_local std::string buffer;
    buffer.resize(stack_buffer_bytes);
    capturing = true;
    const int written = capture(buffer.data(), buffer.size());
    capturing = false;
    if (written <= 0) return nullptr;
    return stack_cache().of(
        std::string_view(buffer.data(), std::min<std::size_t>(static_cast<std::size_t>(written), buffer.size())));
  } catch (...) {
    capturing = false;
    return nullptr;
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
