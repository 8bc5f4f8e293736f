// Tags and pausing (tessera_c.h, "Pausing memory by tag"): the thread's tag stack and the pause and
// resume of one tag, or of every tag, of one device's allocator.
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

int pause_or_resume(std::string_view function, Operation operation, int device, const char* tag, bool backup) {
  return guarded(function, -1, [&] {
    const std::string shown = tag == nullptr ? "every tag" : fmt::format("tag '{}'", tag);
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
    // Every tag: each is tried, and the first failure is the one reported.
    int status = 0;
    for (const std::string& name : allocator.tags()) {
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

void tessera_push_tag(const char* tag) {
  tessera::capi::guarded_void("tessera_push_tag", [&] { tessera::push_tag(tag == nullptr ? "" : tag); });
}
void tessera_pop_tag(void) { (void)tessera::pop_tag(); }
int tessera_pause(int device, const char* tag, int backup) {
  return tessera::capi::pause_or_resume("tessera_pause", tessera::capi::Operation::pause, device, tag, backup != 0);
}
int tessera_resume(int device, const char* tag) {
  return tessera::capi::pause_or_resume("tessera_resume", tessera::capi::Operation::resume, device, tag, false);
}

}  // extern "C"
