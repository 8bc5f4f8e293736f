// Tags and pausing (tessera_c.h, "Pausing memory by tag"): the thread's tag stack, the pause and resume of
// one tag, or of every tag but the default, of one device's allocator, and the list of its tags.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
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
      set_last_error(pushed.error().code, fmt::format("{}: {}", function, pushed.error().message));
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
        set_last_error(checked.error().code, fmt::format("{}: {}", function, checked.error().message));
        return -1;
      }
      // The default tag holds every allocation made outside a tag — the framework's own tensors among them:
      // pausing it would take memory from under code that never asked for it.
      if (*tag == '\0' || tag == default_tag_name) {
        set_last_error(Errc::invalid_argument,
                       fmt::format("{}(tag '{}'{}): the default tag holds every allocation made outside a tag and "
                                   "cannot be paused or resumed through the C ABI; allocate what should pause "
                                   "under a tag of its own (tessera_push_tag)",
                                   function, default_tag_name, *tag == '\0' ? ", the empty name" : ""));
        return -1;
      }
    }
    if (device < 0 || device >= max_devices) {
      set_last_error(Errc::invalid_argument,
                     fmt::format("{}({}): {}", function, shown, device_out_of_range(device).message));
      return -1;
    }
    Device* found = existing_device(device);
    if (found == nullptr) {
      // Nothing was ever allocated there, so no tag either.
      set_last_error(Errc::not_found, fmt::format("{}({}): device {} has no allocator: nothing was allocated there",
                                                  function, shown, device));
      return -1;
    }
    TesseraAllocator& allocator = *found->allocator;
    auto apply = [&](std::string_view name) {
      return operation == Operation::pause ? allocator.pause(name, backup) : allocator.resume(name);
    };
    if (tag != nullptr) {
      if (auto done = apply(tag); !done) {
        set_last_error(done.error().code, fmt::format("{}(device {}): {}", function, device, describe(done.error())));
        return -1;
      }
      return 0;
    }
    // Every tag but the default: each is tried, and the first failure is the one reported.
    int status = 0;
    for (const std::string& name : allocator.tags()) {
      if (name == default_tag_name) continue;
      if (auto done = apply(name); !done && status == 0) {
        set_last_error(done.error().code, fmt::format("{}(device {}): {}", function, device, describe(done.error())));
        status = -1;
      }
    }
    return status;
  });
}

// One snapshot of the allocator's tags: the list and the states come from the same scan.
std::string tags_json(const Device* device) {
  nlohmann::json tags = nlohmann::json::array();
  if (device != nullptr) {
    for (const TagStats& tag : device->allocator->tessera_stats().tags) {
      tags.push_back({{"name", tag.tag},
                      {"paused", tag.paused},
                      {"allocated_bytes", tag.allocated_bytes},
                      {"reserved_bytes", tag.reserved_bytes},
                      {"paused_bytes", tag.paused_bytes},
                      {"backup_bytes", tag.backup_bytes}});
    }
  }
  // As memory_stats_json: a byte that is not UTF-8 (tag names are checked where they enter) becomes U+FFFD
  // rather than making the list unreadable.
  return tags.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
void tessera_pop_tag(void) {
  using namespace tessera::capi;
  begin_call();
  if (!tessera::pop_tag()) {
    set_last_error(TESSERA_ERROR_NOT_FOUND, "tessera_pop_tag: no tag is open on this thread; nothing was closed");
  }
}
int tessera_pause(int device, const char* tag, int backup) {
  return tessera::capi::pause_or_resume("tessera_pause", tessera::capi::Operation::pause, device, tag, backup != 0);
}
int tessera_resume(int device, const char* tag) {
  return tessera::capi::pause_or_resume("tessera_resume", tessera::capi::Operation::resume, device, tag, false);
}

const char* tessera_tags_json(int device) {
  using namespace tessera::capi;
  thread_local std::string json;
  return guarded("tessera_tags_json", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (device < 0 || device >= max_devices) {
      set_last_error(tessera::Errc::invalid_argument,
                     fmt::format("tessera_tags_json: {}", device_out_of_range(device).message));
      return nullptr;
    }
    json = tags_json(existing_device(device));
    return json.c_str();
  });
}

}  // extern "C"
