// Which driver, which configuration, and the per-device allocators (registry.hpp).
#include "capi/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "capi/last_error.hpp"
#include "support/fork_guard.hpp"
#include "support/sizes.hpp"
#include "tessera/drivers.hpp"

namespace tessera::capi {
namespace device_table {

std::array<std::atomic<Device*>, max_devices> devices{};
bool forked = false;

}  // namespace device_table

using device_table::devices;
using device_table::forked;

namespace {

struct Settings {
  std::optional<std::string> driver;      // from tessera_configure
  std::optional<std::string> alloc_conf;  // from tessera_configure
};

std::mutex creation_mutex;                             // guards everything below but the device table's reads
Settings settings;
std::string chosen_driver;  // fixed when the first allocator is created
std::size_t history_entries = 0;
TesseraAllocator::StackCapture history_stacks;

// fork(): the registry's and the error message's locks are taken before the fork guard's (a handler
// registered after the guard's runs its prepare first), because devices join the guard under the registry's
// lock.
void install_fork_handlers() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    detail::install_fork_handlers();
    pthread_atfork(
        [] {
          creation_mutex.lock();
          lock_last_error();
        },
        [] {
          unlock_last_error();
          creation_mutex.unlock();
        },
        [] {
          forked = true;
          unlock_last_error();
          creation_mutex.unlock();
        });
  });
}

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool known_driver(std::string_view name) {
  const auto names = driver_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Error unknown_driver(std::string_view source, std::string_view name) {
  return make_error(Errc::invalid_argument, fmt::format("{}: unknown driver '{}': expected one of {}", source, name,
                                                        fmt::join(driver_names(), ", ")));
}

// The driver's name and where the choice came from.
Result<std::string> resolve_driver(Platform platform) {
  if (!chosen_driver.empty()) return chosen_driver;
  if (settings.driver) return *settings.driver;
  if (auto forced = environment("TESSERA_DRIVER")) {
    if (!known_driver(*forced)) return unknown_driver("TESSERA_DRIVER", *forced);
    return *forced;
  }
  return std::string(platform == Platform::cuda ? "cuda" : "ascend");
}

Result<AllocatorConfig> resolve_config() {
  if (settings.alloc_conf) {
    auto parsed = parse_allocator_config(*settings.alloc_conf);
    if (!parsed) return make_error(Errc::invalid_argument, "tessera_configure: " + parsed.error().message);
    return parsed;
  }
  return allocator_config_from_environment();
}

// x86-64 gives a process 2^47 bytes of user address space (CUDA's unified addresses share it; the sim driver
// is held to the same). The allocator reserves virtual_factor x the capacity for each pool, small and large, of
// every stream (its region span): one stream's two reservations may take half of that space, leaving the rest
// to the process's own mappings and to other streams. Above that, every allocation would fail as out of memory.
constexpr Bytes user_address_space = Bytes{1} << 47;
constexpr Bytes pools_per_stream = 2;

Bytes largest_capacity(Bytes granule, unsigned virtual_factor) {
  return user_address_space / 2 / (pools_per_stream * virtual_factor) / granule * granule;
}

// "8GiB", "512MiB", "1073741824": TESSERA_CAPACITY for the host and sim drivers, checked against the driver's
// granule and the address space the allocator will reserve for it.
Result<std::optional<Bytes>> capacity_from_environment(std::string_view driver, Bytes granule,
                                                       unsigned virtual_factor) {
  auto text = environment("TESSERA_CAPACITY");
  if (!text) return std::optional<Bytes>{};
  auto refuse = [&](std::string_view why) {
    return make_error(Errc::invalid_argument, fmt::format("TESSERA_CAPACITY: bad value '{}': {}", *text, why));
  };
  const support::ParsedSize parsed = support::parse_size(*text);
  if (parsed.problem == support::ParsedSize::Problem::not_a_size || (parsed && parsed.bytes == 0)) {
    return refuse(fmt::format("expected a positive size: {}", support::size_syntax));
  }
  const Bytes limit = largest_capacity(granule, virtual_factor);
  if (!parsed || parsed.bytes > limit) {
    return refuse(fmt::format("too large for the address space: the allocator reserves virtual_factor ({}) x the "
                              "capacity for each of the {} pools (small, large) of every stream, and one stream's "
                              "reservations may take half of a process's {} (2^47 bytes, x86-64); at most {} with "
                              "virtual_factor {} (TESSERA_ALLOC_CONF; a smaller one allows more)",
                              virtual_factor, pools_per_stream, support::format_size(user_address_space),
                              support::format_size(limit), virtual_factor));
  }
  const Bytes capacity = parsed.bytes;
  if (capacity < granule) {
    return refuse(fmt::format("below one granule: the {} driver maps memory in granules of {}, and the capacity is "
                              "a whole number of them, such as {}",
                              driver, support::format_size(granule), support::format_size(granule)));
  }
  if (capacity % granule != 0) {
    const Bytes below = capacity / granule * granule;
    return refuse(fmt::format("not a whole number of granules: the {} driver maps memory in granules of {}; such "
                              "as {} or {}",
                              driver, support::format_size(granule), support::format_size(below),
                              support::format_size(below + granule)));
  }
  return std::optional<Bytes>{capacity};
}

// TESSERA_CAPACITY sizes the host and sim drivers only (a real device has its own size), checked against
// their granule; the library variables choose the platform library of cuda and ascend.
Result<std::unique_ptr<Driver>> make_device_driver(const std::string& name, int index, const AllocatorConfig& config) {
  DriverOptions options{.device = index};
  // TESSERA_SHAREABLE=1: chunks another process can import (tessera_export), on the host and cuda drivers.
  options.shareable_chunks = environment("TESSERA_SHAREABLE") == std::optional<std::string>("1");
  if (name == "cuda") {
    if (auto library = environment("TESSERA_CUDA_LIBRARY")) options.library = *library;
  } else if (name == "ascend") {
    if (auto library = environment("TESSERA_ASCEND_LIBRARY")) options.library = *library;
  } else if (name == "host" || name == "sim") {
    const Bytes granule = name == "host" ? HostDriverOptions{}.granularity : SimDriverOptions{}.granularity;
    auto capacity = capacity_from_environment(name, granule, config.virtual_factor);
    if (!capacity) return std::move(capacity).error();
    options.capacity = *capacity;
  }
  return make_driver(name, options);
}

Result<Device*> create_device(int index, Platform platform) {
  auto name = resolve_driver(platform);
  if (!name) return std::move(name).error();
  auto config = resolve_config();
  if (!config) return std::move(config).error();
  auto device = std::make_unique<Device>();
  device->index = index;
  device->driver_name = *name;
  auto driver = make_device_driver(*name, index, *config);
  if (!driver) {
    Error error = std::move(driver).error();
    error.message = fmt::format("cannot start the {} driver for device {}: {}", *name, index, error.message);
    return error;
  }
  device->driver = std::move(*driver);
  auto allocator = make_tessera_allocator(*device->driver, *config);
  if (!allocator) return std::move(allocator).error();
  device->allocator = std::move(*allocator);
  if (history_entries > 0) device->allocator->record_history(history_entries);
  if (history_stacks) device->allocator->set_history_stacks(history_stacks);
  chosen_driver = *name;
  Device* created = device.release();  // never destroyed: see registry.hpp
  devices[static_cast<std::size_t>(index)].store(created, std::memory_order_release);
  return created;
}

}  // namespace

Error device_out_of_range(int index) {
  return make_error(Errc::invalid_argument,
                    fmt::format("device {} is out of range: Tessera serves devices 0 to {}", index, max_devices - 1));
}

std::optional<Error> unusable_after_fork(const Device& device) {
  if (!forked || device.driver->capabilities().survives_fork || device.creator == getpid()) return std::nullopt;
  return make_error(Errc::unavailable,
                    fmt::format("device {} ({} driver) was opened by process {}, and this process ({}) is a fork() "
                                "of it: a device context does not survive fork(); start worker processes with the "
                                "'spawn' method",
                                device.index, device.driver_name, device.creator, getpid()));
}

Result<Device*> device_for(int index, Platform platform) {
  auto usable = [](Device* device) -> Result<Device*> {
    if (auto refused = unusable_after_fork(*device)) return std::move(*refused);
    return device;
  };
  if (Device* found = existing_device(index)) return usable(found);
  if (index < 0 || index >= max_devices) return device_out_of_range(index);
  install_fork_handlers();
  std::lock_guard lock(creation_mutex);
  if (Device* found = existing_device(index)) return usable(found);
  return create_device(index, platform);
}

Device* existing_device(int index) noexcept {
  if (index < 0 || index >= max_devices) return nullptr;
  return devices[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
}

std::vector<Device*> existing_devices() {
  std::vector<Device*> found;
  for (const auto& slot : devices) {
    if (Device* device = slot.load(std::memory_order_acquire)) found.push_back(device);
  }
  return found;
}

Result<void> configure(const char* driver, const char* alloc_conf) {
  std::lock_guard lock(creation_mutex);
  Settings wanted = settings;
  const auto forced = environment("TESSERA_DRIVER");
  if (driver != nullptr) {
    if (!known_driver(driver)) return unknown_driver("tessera_configure", driver);
    if (forced && *forced != driver) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera_configure: the {} driver was asked for, but TESSERA_DRIVER={} forces "
                                    "another; unset TESSERA_DRIVER or ask for {}",
                                    driver, *forced, *forced));
    }
    wanted.driver = driver;
  } else if (forced && !known_driver(*forced)) {
    return unknown_driver("TESSERA_DRIVER", *forced);
  }
  std::optional<AllocatorConfig> config;
  if (alloc_conf != nullptr) {
    auto parsed = parse_allocator_config(alloc_conf);
    if (!parsed) return make_error(Errc::invalid_argument, "tessera_configure: " + parsed.error().message);
    config = *parsed;
    wanted.alloc_conf = alloc_conf;
  } else if (auto from_environment = allocator_config_from_environment(); !from_environment) {
    return std::move(from_environment).error();
  }
  if (!chosen_driver.empty()) {
    // Allocators exist: only a request that changes nothing is accepted.
    const Device* first = existing_devices().front();
    if (driver != nullptr && chosen_driver != driver) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera_configure: too late to choose the {} driver: the allocator of device "
                                    "{} exists already, on the {} driver",
                                    driver, first->index, chosen_driver));
    }
    if (config && !(*config == first->allocator->config())) {
      return make_error(Errc::invalid_argument,
                        fmt::format("tessera_configure: too late to change the configuration: the allocator of "
                                    "device {} exists already",
                                    first->index));
    }
  }
  settings = std::move(wanted);
  return {};
}

std::string driver_in_use() {
  std::lock_guard lock(creation_mutex);
  return chosen_driver;
}

void set_history(std::size_t max_entries) {
  std::lock_guard lock(creation_mutex);
  history_entries = max_entries;
  for (Device* device : existing_devices()) device->allocator->record_history(max_entries);
}

void set_history_stacks(TesseraAllocator::StackCapture capture) {
  std::lock_guard lock(creation_mutex);
  history_stacks = std::move(capture);
  for (Device* device : existing_devices()) device->allocator->set_history_stacks(history_stacks);
}

}  // namespace tessera::capi
