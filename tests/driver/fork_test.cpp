// fork() and the drivers: a child of the host driver's process gets its own copy of the device memory, as
// fork() gives it of every other page; a child of a device driver's process is refused with a named error.
#include <unistd.h>

#include <cstring>
#include <string>

#include "driver_fixtures.hpp"
#include "support/child_process.hpp"

namespace tessera::testing {
namespace {

using test_support::describe;
using test_support::run_in_child;
using test_support::start_child;
using test_support::wait_for_child;

constexpr Bytes page_size = 2 * MiB;

unsigned char* bytes_at(Address address) {
  return reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(address));
}

bool all_bytes(Address address, Bytes size, unsigned char value) {
  const unsigned char* bytes = bytes_at(address);
  for (Bytes i = 0; i < size; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// Whether the process may read the byte at `address`: write(2) into a pipe copies it, and fails with EFAULT
// instead of faulting where the byte is not readable.
bool readable(Address address) {
  int ends[2];
  if (pipe(ends) != 0) return false;
  const bool ok = write(ends[1], bytes_at(address), 1) == 1;
  close(ends[0]);
  close(ends[1]);
  return ok;
}

TEST(HostDriverFork, TheChildHasItsOwnCopyOfTheMemory) {
  auto driver = TESSERA_OK(make_host_driver({.capacity = 16 * MiB}));
  const Address base = TESSERA_OK(driver->reserve(4 * page_size));
  const ChunkId page = TESSERA_OK(driver->create_chunk(page_size));
  TESSERA_OK(driver->map(base, page));
  std::memset(bytes_at(base), 0x11, page_size);

  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = start_child([&] {
    char token = 0;
    if (read(go[0], &token, 1) != 1) return 10;
    // The parent wrote 0x44 after the fork: the child sees the memory as it was when fork() was called.
    if (!all_bytes(base, page_size, 0x11)) return 11;
    std::memset(bytes_at(base), 0x22, page_size);
    // Pages of its own, and the inherited page given back, touch only the child's memory.
    auto fresh = driver->create_chunk(page_size);
    if (!fresh || !driver->map(base + page_size, *fresh)) return 12;
    std::memset(bytes_at(base + page_size), 0x33, page_size);
    if (!driver->unmap(base) || !driver->release_chunk(page)) return 13;
    auto reused = driver->create_chunk(page_size);
    if (!reused || !driver->map(base + 2 * page_size, *reused)) return 14;
    std::memset(bytes_at(base + 2 * page_size), 0x55, page_size);
    return 0;
  });
  ASSERT_GT(child, 0);
  std::memset(bytes_at(base), 0x44, page_size);
  ASSERT_EQ(write(go[1], "x", 1), 1);
  const auto end = wait_for_child(child);
  close(go[0]);
  close(go[1]);
  EXPECT_EQ(end.exit_code, 0) << describe(end);
  EXPECT_TRUE(all_bytes(base, page_size, 0x44)) << "the child's writes reached the parent's page";

  // The parent's own next pages hold what the parent writes, whatever the child did with its copy.
  const ChunkId next = TESSERA_OK(driver->create_chunk(page_size));
  TESSERA_OK(driver->map(base + page_size, next));
  std::memset(bytes_at(base + page_size), 0x66, page_size);
  EXPECT_TRUE(all_bytes(base, page_size, 0x44));
  EXPECT_TRUE(all_bytes(base + page_size, page_size, 0x66));
  TESSERA_OK(driver->unmap(base + page_size));
  TESSERA_OK(driver->release_chunk(next));
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

TEST(HostDriverFork, TheChildKeepsEveryMappingsAccess) {
  auto driver = TESSERA_OK(make_host_driver({.capacity = 16 * MiB, .require_set_access = true}));
  const Address base = TESSERA_OK(driver->reserve(2 * page_size));
  const ChunkId open_page = TESSERA_OK(driver->create_chunk(page_size));
  const ChunkId closed_page = TESSERA_OK(driver->create_chunk(page_size));
  TESSERA_OK(driver->map(base, open_page));
  TESSERA_OK(driver->set_access(base, page_size));
  TESSERA_OK(driver->map(base + page_size, closed_page));
  std::memset(bytes_at(base), 0x77, page_size);

  const auto end = run_in_child([&] {
    if (!all_bytes(base, page_size, 0x77)) return 10;
    if (readable(base + page_size)) return 11;  // mapped without access: still inaccessible
    if (!driver->set_access(base + page_size, page_size)) return 12;
    return readable(base + page_size) ? 0 : 13;
  });
  EXPECT_EQ(end.exit_code, 0) << describe(end);
  EXPECT_FALSE(readable(base + page_size)) << "set_access in the child opened the parent's mapping";
  TESSERA_OK(driver->unmap(base + page_size));
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(closed_page));
  TESSERA_OK(driver->release_chunk(open_page));
  TESSERA_OK(driver->release_reservation(base));
}

#ifdef TESSERA_FAKE_CUDA_LIBRARY
TEST(DeviceDriverFork, AChildsCallIsANamedErrorAndNeverReachesTheRuntime) {
  auto driver = TESSERA_OK(make_cuda_driver({.device = 0, .library = TESSERA_FAKE_CUDA_LIBRARY}));
  const Address base = TESSERA_OK(driver->reserve(page_size));
  const auto end = run_in_child([&] {
    auto page = driver->create_chunk(page_size);
    if (page) return 10;
    if (page.error().code != Errc::unavailable) return 11;
    if (page.error().message.find("fork()") == std::string::npos) return 12;
    if (page.error().message.find("spawn") == std::string::npos) return 13;
    return driver->release_reservation(base) ? 14 : 0;
  });
  EXPECT_EQ(end.exit_code, 0) << describe(end);
  TESSERA_OK(driver->release_reservation(base));  // the parent's driver is untouched
}
#endif

}  // namespace
}  // namespace tessera::testing
