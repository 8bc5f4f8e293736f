// Tags: which part of a job an allocation belongs to ("weights", "kv_cache"), so that the part can be
// paused — its pages given back, its addresses kept — and resumed as a whole (TesseraAllocator::pause).
//
// A thread allocates under the innermost tag it has open (a stack per thread), else under "default". Tags
// are process-wide names: every allocator of the process sees the same ones. Opening a tag is a slow call
// (it interns the name under a lock); allocating reads one thread-local number.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

using TagId = std::uint32_t;
inline constexpr TagId default_tag = 0;
inline constexpr std::string_view default_tag_name = "default";

// The tag's number, made on first use. The empty name is the default tag.
TagId intern_tag(std::string_view name);
// The number of a tag used before; none for a name never interned.
std::optional<TagId> find_tag(std::string_view name);
std::string tag_name(TagId tag);

// The calling thread's tag stack.
void push_tag(std::string_view name);
// False when no tag is open (nothing happens).
bool pop_tag() noexcept;
namespace detail {
// Read at every allocation: the initial-exec model makes it one load from the thread pointer, also inside
// libtessera_c.so (four bytes of the static TLS that glibc keeps spare for libraries loaded later).
extern thread_local TagId innermost_tag __attribute__((tls_model("initial-exec")));
}  // namespace detail

// The innermost open tag of the calling thread, else default_tag.
inline TagId current_tag() noexcept { return detail::innermost_tag; }

// Allocations made by this thread while it lives carry `name`.
class TagScope {
 public:
  explicit TagScope(std::string_view name) { push_tag(name); }
  ~TagScope() { pop_tag(); }
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;
};

}  // namespace tessera
