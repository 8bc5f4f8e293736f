// What only the host driver promises: real protection, the kernel's mapping limit, merged mappings.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

std::size_t process_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
}

TEST(HostDriver, RejectsBadOptionsByName) {
  auto granule = make_host_driver({.granularity = 3 * MiB});
  ASSERT_FALSE(granule.ok());
  EXPECT_EQ(granule.error().code, Errc::invalid_argument);
  EXPECT_NE(granule.error().message.find("granularity"), std::string::npos);

  auto capacity = make_host_driver({.capacity = 3 * MiB, .granularity = 2 * MiB});
  ASSERT_FALSE(capacity.ok());
  EXPECT_NE(capacity.error().message.find("capacity"), std::string::npos);

  // The memfd is twice the capacity: 2^63 would wrap to a 0-byte memfd.
  auto wraps = make_host_driver({.capacity = Bytes{1} << 63, .granularity = 2 * MiB});
  ASSERT_FALSE(wraps.ok());
  EXPECT_EQ(wraps.error().code, Errc::invalid_argument);
  EXPECT_NE(wraps.error().message.find("more than a memfd can back"), std::string::npos) << wraps.error().message;
}

TEST(HostDriver, AddressesAreHostPointersThatReachThePage) {
  auto driver = TESSERA_OK(make_host_driver({.capacity = 8 * MiB}));
  ASSERT_TRUE(driver->capabilities().host_pointers);
  const Address base = TESSERA_OK(driver->reserve(2 * MiB));
  const ChunkId page = TESSERA_OK(driver->create_chunk(2 * MiB));
  TESSERA_OK(driver->map(base, page));
  auto* bytes = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(base));
  bytes[0] = 0x5a;
  bytes[2 * MiB - 1] = 0xa5;
  unsigned char back[1] = {};
  TESSERA_OK(driver->read(base + 2 * MiB - 1, back, 1));
  EXPECT_EQ(back[0], 0xa5);
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

TEST(HostDriverDeathTest, CudaLikeMappingIsInaccessibleUntilSetAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto driver = TESSERA_OK(make_host_driver({.capacity = 8 * MiB, .require_set_access = true}));
  const Address base = TESSERA_OK(driver->reserve(2 * MiB));
  const ChunkId page = TESSERA_OK(driver->create_chunk(2 * MiB));
  TESSERA_OK(driver->map(base, page));
  auto* bytes = reinterpret_cast<volatile unsigned char*>(static_cast<std::uintptr_t>(base));
  EXPECT_DEATH(bytes[0] = 1, "");
  TESSERA_OK(driver->set_access(base, 2 * MiB));
  bytes[0] = 1;
  EXPECT_EQ(bytes[0], 1);
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

TEST(HostDriver, PagesCreatedTogetherMergeIntoOneKernelMappingWhenMappedSideBySide) {
  constexpr Bytes granule = 64 * KiB;
  constexpr int count = 32;
  auto driver = TESSERA_OK(make_host_driver({.capacity = 4 * MiB, .granularity = granule}));
  const Address base = TESSERA_OK(driver->reserve(count * granule));
  std::vector<ChunkId> pages;
  for (int i = 0; i < count; ++i) pages.push_back(TESSERA_OK(driver->create_chunk(granule)));
  const std::size_t before = process_mappings();
  for (int i = 0; i < count; ++i) TESSERA_OK(driver->map(base + i * granule, pages[i]));
  // Adjacent memfd offsets at adjacent addresses: one kernel mapping replaces the reservation's one.
  EXPECT_LE(process_mappings(), before + 1);
  for (int i = 0; i < count; ++i) TESSERA_OK(driver->unmap(base + i * granule));
  for (ChunkId page : pages) TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

TEST(HostDriver, TheKernelMappingLimitIsANamedErrorAndTheDriverStaysUsable) {
  constexpr Bytes granule = 64 * KiB;
  constexpr int slots = 64;
  const std::size_t limit = process_mappings() + 40;
  auto driver = TESSERA_OK(make_host_driver({.capacity = 8 * MiB, .granularity = granule, .max_map_count = limit}));
  const Address base = TESSERA_OK(driver->reserve(2 * slots * granule));
  std::vector<ChunkId> pages;
  for (int i = 0; i < slots; ++i) pages.push_back(TESSERA_OK(driver->create_chunk(granule)));

  // Every other slot, in reverse page order: nothing can merge, so each mapping costs kernel entries.
  int mapped = 0;
  Result<void> last;
  for (int i = 0; i < slots; ++i) {
    last = driver->map(base + 2 * i * granule, pages[slots - 1 - i]);
    if (!last) break;
    ++mapped;
  }
  ASSERT_FALSE(last.ok()) << "the limit was never reached";
  EXPECT_EQ(last.error().code, Errc::map_limit);
  EXPECT_NE(last.error().message.find("vm.max_map_count"), std::string::npos) << last.error().message;
  EXPECT_EQ(driver->census().mappings, static_cast<std::size_t>(mapped));

  // Unmapping makes room again. Eight unmaps for two maps: the process itself (a sanitizer's allocator,
  // say) may add mappings of its own in between.
  ASSERT_GE(mapped, 8);
  for (int i = 0; i < 8; ++i) TESSERA_OK(driver->unmap(base + 2 * i * granule));
  TESSERA_OK(driver->map(base, pages[slots - 1]));
  TESSERA_OK(driver->map(base + 2 * granule, pages[slots - 2]));
  TESSERA_OK(driver->unmap(base));
  TESSERA_OK(driver->unmap(base + 2 * granule));
  for (int i = 8; i < mapped; ++i) TESSERA_OK(driver->unmap(base + 2 * i * granule));
  for (ChunkId page : pages) TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
  EXPECT_EQ(driver->census(), DriverCensus{});
}

// Counting reads all of /proc/self/maps (31 ms a map with 60,000 entries): near the limit a count must buy
// room for many maps, and the error must still come at the real limit.
TEST(HostDriver, NearTheMappingLimitTheDriverCountsAFewTimesNotAtEveryMap) {
  constexpr Bytes granule = 64 * KiB;
  constexpr std::size_t room = 3000;
  std::size_t counts = 0;
  const std::size_t limit = process_mappings() + room;
  auto driver = TESSERA_OK(make_host_driver({.capacity = 2 * room * granule,
                                             .granularity = granule,
                                             .max_map_count = limit,
                                             .count_mappings = [&] {
                                               ++counts;
                                               return process_mappings();
                                             }}));
  const std::size_t slots = room;  // more maps than the room allows: each one below costs two entries
  const Address base = TESSERA_OK(driver->reserve(2 * slots * granule));
  std::vector<ChunkId> pages;
  for (std::size_t i = 0; i < slots; ++i) pages.push_back(TESSERA_OK(driver->create_chunk(granule)));
  std::size_t mapped = 0;
  Result<void> last;
  for (std::size_t i = 0; i < slots; ++i) {
    last = driver->map(base + 2 * i * granule, pages[slots - 1 - i]);  // nothing merges
    if (!last) break;
    ++mapped;
  }
  ASSERT_FALSE(last.ok()) << "the limit was never reached";
  EXPECT_EQ(last.error().code, Errc::map_limit) << last.error().message;
  const std::size_t at_error = process_mappings();
  EXPECT_GT(at_error + 2 + 16, limit) << "refused long before the limit: " << at_error << " of " << limit;
  EXPECT_LE(at_error, limit);
  EXPECT_LE(counts, 24u) << "the driver read /proc/self/maps " << counts << " times for " << mapped << " maps";
  for (std::size_t i = 0; i < mapped; ++i) TESSERA_OK(driver->unmap(base + 2 * i * granule));
  for (ChunkId page : pages) TESSERA_OK(driver->release_chunk(page));
  TESSERA_OK(driver->release_reservation(base));
}

// Blocks the kernel holds for every host driver's memfd in this process.
long long memfd_blocks() {
  long long blocks = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (error || target.string().find("memfd:tessera-host-device") == std::string::npos) continue;
    struct stat status {};
    if (stat(entry.path().c_str(), &status) == 0) blocks += status.st_blocks;
  }
  return blocks;
}

TEST(HostDriver, ReleasingAPageGivesItsMemoryBackToTheKernel) {
  constexpr Bytes granule = 256 * KiB;
  auto driver = TESSERA_OK(make_host_driver({.capacity = 4 * granule, .granularity = granule}));
  const long long empty = memfd_blocks();
  const Address base = TESSERA_OK(driver->reserve(granule));
  const ChunkId page = TESSERA_OK(driver->create_chunk(granule));
  TESSERA_OK(driver->map(base, page));
  const std::vector<unsigned char> ones(granule, 0xff);
  TESSERA_OK(driver->write(base, ones.data(), ones.size()));
  EXPECT_GE(memfd_blocks(), empty + static_cast<long long>(granule / 512)) << "touched bytes are held";
  TESSERA_OK(driver->unmap(base));
  EXPECT_GE(memfd_blocks(), empty + static_cast<long long>(granule / 512)) << "unmapping keeps the page";
  TESSERA_OK(driver->release_chunk(page));
  EXPECT_EQ(memfd_blocks(), empty) << "the released page's hole was not punched";
  TESSERA_OK(driver->release_reservation(base));
}

}  // namespace
}  // namespace tessera::testing
