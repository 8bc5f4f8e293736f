// The allocators behind the C ABI: one per device, created on first use, never destroyed (PyTorch frees
// tensors during static destruction, after any destructor of ours would have run), and the choice of
// driver and configuration they are created with.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/allocator.hpp"
#include "tessera/driver.hpp"
#include "tessera/result.hpp"

namespace tessera::capi {

// The platform an entry point is for: the driver used when neither tessera_configure nor TESSERA_DRIVER
// chooses one.
enum class Platform : std::uint8_t { cuda, ascend };

inline constexpr int max_devices = 64;

struct Device {
  int index = 0;
  pid_t creator = getpid();  // a fork()'s child may use the device only where the driver survives fork
  std::string driver_name;
  std::unique_ptr<Driver> driver;
  std::unique_ptr<TesseraAllocator> allocator;  // uses driver
  std::atomic<std::uint64_t> bad_frees{0};
};

// The device's allocator, created on first use with the process's driver and configuration. Lock-free once
// it exists.
Result<Device*> device_for(int index, Platform platform);
// The device's allocator if it exists (null for an index out of range too).
Device* existing_device(int index) noexcept;

namespace device_table {
extern std::array<std::atomic<Device*>, max_devices> devices;  // written under the registry's lock, read without it
extern bool forked;  // set in a child of fork(), before it has a second thread
}  // namespace device_table

// The entry points' fast path: the device's allocator when it exists and this process is not a fork's child
// (where unusable_after_fork decides); null otherwise, and the caller takes the slow path. One atomic load.
inline Device* usable_device(int index) noexcept {
  if (static_cast<unsigned>(index) >= static_cast<unsigned>(max_devices) || device_table::forked) return nullptr;
  return device_table::devices[static_cast<std::size_t>(index)].load(std::memory_order_acquire);
}
// Every device whose allocator exists, in index order.
std::vector<Device*> existing_devices();
Error device_out_of_range(int index);
// Set in a child of fork() for a device whose driver cannot be used there (CUDA, Ascend): the reason.
std::optional<Error> unusable_after_fork(const Device& device);

// tessera_configure: null arguments keep the environment's choice. Checks everything now.
Result<void> configure(const char* driver, const char* alloc_conf);
// The driver the allocators use ("" before the first exists).
std::string driver_in_use();
// Applies to every allocator, present and future.
void set_history(std::size_t max_entries);
// The stack capture of every allocator's history, present and future (empty: none).
void set_history_stacks(TesseraAllocator::StackCapture capture);

}  // namespace tessera::capi
