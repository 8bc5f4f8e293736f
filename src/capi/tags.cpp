// Tags and pausing (tessera_c.h, "Pausing memory by tag"): the thread's tag stack and the pause and
// resume of one tag, or of every tag but the default, of one device's allocator.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tags.hpp"
#include "tessera/tessera_c.h"

namespace tessera::capi {
namespace {

enum class Operation : bool { pause, resume };

int push(std::string_view function, const char* tag, OnPause on_pause) {
  return guarded(function, -1, [&] {
    if (auto pushed = push_tag(tag == nullptr ? "" : tag, on_pause); !pushed) {
      set_last_error(fmt::format("{}: {}", function, pushed.error().message));
      return -1;
    }
    return 0;
  });
}

int pause_or_resume(std::string_view function, Operation operation, int device, const char* tag, bool backup) {
  return guarded(function, -1, [&] {
    const std::string shown = tag == nullptr ? "every tag" : "tag " + quoted_tag_name(tag);
    if (tag != nullptr) {
      if (auto checked = check_tag_name(tag); !checked) {
        set_last_error(fmt::format("{}: {}", function, checked.error().message));
        return -1;
      }
      // The default tag holds every allocation made outside a tag — the framework's own tensors among them:
      // pausing it would take memory from under code that never asked for it.
      if (*tag == '\0' || tag == default_tag_name) {
        set_last_error(fmt::format("{}(tag '{}'{}): the default tag holds every allocation made outside a tag and "
                                   "cannot be paused or resumed through the C ABI; allocate what should pause "
                                   "under a tag of its own (tessera_push_tag)",
                                   function, default_tag_name, *tag == '\0' ? ", the empty name" : ""));
        return -1;
      }
    }
    if (device < 0 || device >= max_devices) {
      set_last_error(fmt::format("{}({}): {}", function, shown, device_out_of_range(device).message));
      return -1;
    }
    Device* found = existing_device(device);
    if (found == nullptr) {
      set_last_error(fmt::format("{}({}): device {} has no allocator: nothing was allocated there", function, shown,
                                 device));
      return -1;
    }
    TesseraAllocator& allocator = *found->allocator;
    auto apply = [&](std::string_view name) {
      return operation == Operation::pause ? allocator.pause(name, backup) : allocator.resume(name);
    };
    if (tag != nullptr) {
      if (auto done = apply(tag); !done) {
        set_last_error(fmt::format("{}(device {}): {}", function, device, describe(done.error())));
        return -1;
      }
      return 0;
    }
    // Every tag but the default: each is tried, and the first failure is the one reported.
    int status = 0;
    for (const std::string& name : allocator.tags()) {
      if (name == default_tag_name) continue;
      if (auto done = apply(name); !done && status == 0) {
        set_last_error(fmt::format("{}(device {}): {}", function, device, describe(done.error())));
        status = -1;
      }
    }
    return status;
  });
}

}  // namespace
}  // namespace tessera::capi

extern "C" {

int tessera_push_tag(const char* tag) {
  return tessera::capi::push("tessera_push_tag", tag, tessera::OnPause::discard);
}
int tessera_push_tag_with_backup(const char* tag, int enable_cpu_backup) {
  return tessera::capi::push("tessera_push_tag_with_backup", tag,
                             enable_cpu_backup != 0 ? tessera::OnPause::back_up : tessera::OnPause::discard);
}
void tessera_pop_tag(void) { (void)tessera::pop_tag(); }
int tessera_pause(int device, const char* tag, int backup) {
  return tessera::capi::pause_or_resume("tessera_pause", tessera::capi::Operation::pause, device, tag, backup != 0);
}
int tessera_resume(int device, const char* tag) {
  return tessera::capi::pause_or_resume("tessera_resume", tessera::capi::Operation::resume, device, tag, false);
}

}  // extern "C"
