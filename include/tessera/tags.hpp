// Tags: which part of a job an allocation belongs to ("weights", "kv_cache"), so that the part can be
// paused — its pages given back, its addresses kept — and resumed as a whole (TesseraAllocator::pause).
//
// A thread allocates under the innermost tag it has open (a stack per thread), else under "default". Tags
// are process-wide names: every allocator of the process sees the same ones. Opening a tag is a slow call
// (it interns the name under a lock); allocating reads one thread-local word.
//
// An open tag also says what a pause does with each block allocated under it (OnPause): the block keeps
// that choice for its life, whatever is opened later — as torch_memory_saver keeps enable_cpu_backup in each
// allocation's metadata. A pause backs up the blocks allocated with OnPause::back_up, and every block of the
// tag when its caller asks for a backup.
//
// A tag name is at most max_tag_name_bytes of valid UTF-8 without NUL or other control characters: it goes
// into statistics (JSON), snapshots and logs, so a name that would make them unreadable never enters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/result.hpp"

namespace tessera {

using TagId = std::uint32_t;
inline constexpr TagId default_tag = 0;
inline constexpr std::string_view default_tag_name = "default";
inline constexpr std::size_t max_tag_name_bytes = 255;

// What a pause does with the contents of a block allocated under an open tag.
enum class OnPause : bool { discard, back_up };

// Why `name` cannot be a tag (not UTF-8, a NUL or control byte, too long), with the byte that breaks it;
// ok for a name that can. The empty name is the default tag's.
Result<void> check_tag_name(std::string_view name);
// `name` as a message may show it: printable ASCII as it is, every other byte as \xHH.
std::string quoted_tag_name(std::string_view name);

// The tag's number, made on first use; check_tag_name's error for a name that cannot be a tag. The empty
// name is the default tag.
Result<TagId> intern_tag(std::string_view name);
// The number of a tag used before; none for a name never interned.
std::optional<TagId> find_tag(std::string_view name);
std::string tag_name(TagId tag);

// The calling thread's tag stack. A refused name opens nothing.
Result<void> push_tag(std::string_view name, OnPause on_pause = OnPause::discard);
// False when no tag is open (nothing happens).
bool pop_tag() noexcept;
namespace detail {
// The innermost open tag and its OnPause in one word (the top bit: back_up), read at every allocation: the
// initial-exec model makes it one load from the thread pointer, also inside libtessera_c.so (four bytes of
// the static TLS that glibc keeps spare for libraries loaded later).
inline constexpr std::uint32_t back_up_bit = 1U << 31;
extern thread_local std::uint32_t innermost_tag __attribute__((tls_model("initial-exec")));
}  // namespace detail

// The innermost open tag of the calling thread, else default_tag.
inline TagId current_tag() noexcept { return detail::innermost_tag & ~detail::back_up_bit; }
// What a pause does with a block the calling thread allocates now.
inline OnPause current_on_pause() noexcept {
  return (detail::innermost_tag & detail::back_up_bit) != 0 ? OnPause::back_up : OnPause::discard;
}

// Allocations made by this thread while it lives carry `name`. A name push_tag refuses throws
// std::invalid_argument with push_tag's message (C++ callers; the C ABI returns the error instead).
class TagScope {
 public:
  explicit TagScope(std::string_view name, OnPause on_pause = OnPause::discard);
  ~TagScope() { pop_tag(); }
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;
};

}  // namespace tessera
