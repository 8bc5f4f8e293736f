// torch.cuda.MemPool's allocation functions (tessera_c.h, "torch.cuda.MemPool"): PyTorch's MemPool takes a
// pluggable allocator, whose functions it calls by name with (size, device, stream) — no room for a tag. So
// each slot is a function of its own, bound to a tag when tessera_mem_pool_slot hands it out, that
// allocates under that tag. PyTorch's caching allocator asks for whole segments and splits them itself: a
// slot function runs once a segment, where the tag's push costs nothing that matters.
#include <fmt/format.h>

#include <array>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "tessera/tags.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {
namespace {

struct Slot {
  std::string tag;  // "" is the default tag
  OnPause on_pause = OnPause::discard;
};

std::mutex slots_mutex;
std::array<std::optional<Slot>, TESSERA_MEM_POOL_SLOTS> slots;

// The slot's tag, read under the lock (slots are only ever added: a bound slot keeps its tag).
std::optional<Slot> slot_at(int index) {
  std::lock_guard lock(slots_mutex);
  return slots[static_cast<std::size_t>(index)];
}

template <int Index>
void* allocate_in_slot(size_t size, int device, void* stream) {
  const std::optional<Slot> slot = slot_at(Index);
  if (!slot) {
    begin_call();
    set_last_error(Errc::invalid_argument,
                   fmt::format("tessera_mem_pool_alloc_{}({} bytes, device {}): the slot was never bound to a tag "
                               "(tessera_mem_pool_slot)",
                               Index, size, device));
    throw std::runtime_error(tessera_last_error());
  }
  if (auto pushed = push_tag(slot->tag, slot->on_pause); !pushed) {
    begin_call();
    set_last_error(pushed.error().code, fmt::format("tessera_mem_pool_alloc_{}: {}", Index, pushed.error().message));
    throw std::runtime_error(tessera_last_error());
  }
  struct Pop {
    ~Pop() { pop_tag(); }
  } pop;
  return tessera_torch_alloc(size, device, stream);
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using namespace tessera::capi;

extern "C" {

int tessera_mem_pool_slot(const char* tag, int enable_cpu_backup) {
  return guarded("tessera_mem_pool_slot", -1, [&] {
    const std::string name = tag == nullptr ? std::string() : std::string(tag);
    if (!name.empty()) {
      if (auto checked = check_tag_name(name); !checked) {
        set_last_error(checked.error().code, fmt::format("tessera_mem_pool_slot: {}", checked.error().message));
        return -1;
      }
    }
    const OnPause on_pause = enable_cpu_backup != 0 ? OnPause::back_up : OnPause::discard;
    std::lock_guard lock(slots_mutex);
    for (std::size_t index = 0; index < slots.size(); ++index) {
      if (slots[index] && slots[index]->tag == name && slots[index]->on_pause == on_pause) {
        return static_cast<int>(index);
      }
    }
    for (std::size_t index = 0; index < slots.size(); ++index) {
      if (!slots[index]) {
        slots[index] = Slot{name, on_pause};
        return static_cast<int>(index);
      }
    }
    set_last_error(Errc::invalid_argument,
                   fmt::format("tessera_mem_pool_slot({}): all {} slots hold other tags; a process may have {} "
                               "Tessera MemPools of distinct tags",
                               quoted_tag_name(name), slots.size(), slots.size()));
    return -1;
  });
}

void* tessera_mem_pool_alloc_0(size_t size, int device, void* stream) { return allocate_in_slot<0>(size, device, stream); }
void* tessera_mem_pool_alloc_1(size_t size, int device, void* stream) { return allocate_in_slot<1>(size, device, stream); }
void* tessera_mem_pool_alloc_2(size_t size, int device, void* stream) { return allocate_in_slot<2>(size, device, stream); }
void* tessera_mem_pool_alloc_3(size_t size, int device, void* stream) { return allocate_in_slot<3>(size, device, stream); }
void* tessera_mem_pool_alloc_4(size_t size, int device, void* stream) { return allocate_in_slot<4>(size, device, stream); }
void* tessera_mem_pool_alloc_5(size_t size, int device, void* stream) { return allocate_in_slot<5>(size, device, stream); }
void* tessera_mem_pool_alloc_6(size_t size, int device, void* stream) { return allocate_in_slot<6>(size, device, stream); }
void* tessera_mem_pool_alloc_7(size_t size, int device, void* stream) { return allocate_in_slot<7>(size, device, stream); }

}  // extern "C"
