// The configuration functions of tessera_c.h: the driver and allocator settings, and what is in use.
#include <fmt/format.h>

#include <string>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_c.h"

#ifndef TESSERA_VERSION_STRING
#define TESSERA_VERSION_STRING "unknown"
#endif

using namespace tessera::capi;

extern "C" {

int tessera_configure(const char* driver, const char* alloc_conf) {
  return guarded("tessera_configure", -1, [&] {
    auto configured = configure(driver, alloc_conf);
    if (configured) return 0;
    set_last_error(configured.error().code, configured.error().message);
    return -1;
  });
}

const char* tessera_driver_name(void) {
  thread_local std::string name;
  return guarded("tessera_driver_name", static_cast<const char*>(""), [&] {
    name = driver_in_use();
    return name.c_str();
  });
}

int tessera_has_allocator(int device) {
  return guarded("tessera_has_allocator", -1, [&] {
    if (device < 0 || device >= max_devices) {
      set_last_error(tessera::Errc::invalid_argument,
                     fmt::format("tessera_has_allocator: {}", device_out_of_range(device).message));
      return -1;
    }
    return existing_device(device) != nullptr ? 1 : 0;
  });
}

const char* tessera_version(void) {
  begin_call();  // it cannot fail, but it is a call: the code says so
  return TESSERA_VERSION_STRING;
}

}  // extern "C"
