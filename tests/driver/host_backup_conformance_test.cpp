// The host-backup half of the driver contract (include/tessera/driver.hpp), on every driver that has the
// capability host_backup: host buffers, and copies between them and device memory, as pause-with-backup
// uses them.
#include <cstring>
#include <vector>

#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

class HostBackupConformance : public ::testing::TestWithParam<DriverFactory> {
 protected:
  void SetUp() override {
    auto made = GetParam().make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    driver_ = std::move(made).value();
    if (!driver_->capabilities().host_backup) GTEST_SKIP() << driver_->name() << " has no host buffers";
    granule_ = driver_->granularity();
    start_ = driver_->census();
    data_ = driver_->capabilities().data_access;
  }

  void TearDown() override {
    if (driver_ && driver_->capabilities().host_backup) {
      EXPECT_EQ(driver_->census(), start_) << "the test left something behind";
    }
  }

  // A reservation of `granules` granules with one page mapped, accessible, over its first `mapped` ones.
  struct Device {
    Address base = 0;
    ChunkId page{};
  };
  Device map_device(Bytes granules, Bytes mapped) {
    Device device;
    device.base = TESSERA_OK(driver_->reserve(granules * granule_));
    device.page = TESSERA_OK(driver_->create_chunk(mapped * granule_));
    TESSERA_OK(driver_->map(device.base, device.page));
    TESSERA_OK(driver_->set_access(device.base, mapped * granule_));
    return device;
  }
  void unmap_device(const Device& device) {
    TESSERA_OK(driver_->unmap(device.base));
    TESSERA_OK(driver_->release_chunk(device.page));
    TESSERA_OK(driver_->release_reservation(device.base));
  }

  static std::vector<unsigned char> pattern(Bytes size, unsigned seed) {
    std::vector<unsigned char> bytes(size);
    for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
    return bytes;
  }
  std::vector<unsigned char> read_back(Address at, Bytes size) {
    std::vector<unsigned char> bytes(size);
    TESSERA_OK(driver_->read(at, bytes.data(), size));
    return bytes;
  }
  static std::vector<unsigned char> contents(const HostBuffer& buffer) {
    const auto* bytes = static_cast<const unsigned char*>(buffer.data);
    return {bytes, bytes + buffer.size};
  }

  std::unique_ptr<Driver> driver_;
  Bytes granule_ = 0;
  DriverCensus start_;
  bool data_ = false;
};

TEST_P(HostBackupConformance, ARoundTripThroughAHostBufferKeepsEveryByte) {
  const Bytes size = 2 * granule_;
  const Device device = map_device(2, 2);
  const auto original = pattern(size, 1);
  if (data_) TESSERA_OK(driver_->write(device.base, original.data(), size));

  const HostBuffer buffer = TESSERA_OK(driver_->allocate_host(size));
  EXPECT_NE(buffer.id, 0u);
  EXPECT_EQ(buffer.size, size);
  EXPECT_EQ(buffer.data != nullptr, data_) << "data is there exactly where the driver reaches real memory";
  EXPECT_EQ(driver_->census().host_buffers, start_.host_buffers + 1);
  EXPECT_EQ(driver_->census().host_bytes, start_.host_bytes + size);

  TESSERA_OK(driver_->copy_to_host(buffer, device.base, size));
  if (data_) {
    EXPECT_TRUE(contents(buffer) == original) << "the backup differs from the device";
    const auto scribble = pattern(size, 2);
    TESSERA_OK(driver_->write(device.base, scribble.data(), size));
    ASSERT_FALSE(read_back(device.base, size) == original);
  }
  TESSERA_OK(driver_->copy_to_device(device.base, buffer, size));
  if (data_) {
    EXPECT_TRUE(read_back(device.base, size) == original) << "the restore differs from the backup";
  }

  TESSERA_OK(driver_->free_host(buffer));
  EXPECT_EQ(driver_->census().host_buffers, start_.host_buffers);
  EXPECT_EQ(driver_->census().host_bytes, start_.host_bytes);
  unmap_device(device);
}

TEST_P(HostBackupConformance, APartialCopyAtAnOffsetMovesThoseBytesOnly) {
  const Device device = map_device(2, 2);
  const auto original = pattern(2 * granule_, 3);
  if (data_) TESSERA_OK(driver_->write(device.base, original.data(), original.size()));
  const HostBuffer buffer = TESSERA_OK(driver_->allocate_host(granule_));
  // Across the granule boundary: a block need not start or end on a granule.
  const Bytes offset = granule_ - 4096;
  const Bytes size = 3 * 4096;
  TESSERA_OK(driver_->copy_to_host(buffer, device.base + offset, size));
  if (data_) {
    EXPECT_EQ(std::memcmp(buffer.data, original.data() + offset, size), 0);
    const std::vector<unsigned char> zeros(2 * granule_, 0);
    TESSERA_OK(driver_->write(device.base, zeros.data(), zeros.size()));
  }
  TESSERA_OK(driver_->copy_to_device(device.base + offset, buffer, size));
  if (data_) {
    const auto back = read_back(device.base, 2 * granule_);
    for (Bytes i = 0; i < back.size(); ++i) {
      const bool inside = i >= offset && i < offset + size;
      ASSERT_EQ(back[i], inside ? original[i] : 0) << "byte " << i;
    }
  }
  TESSERA_OK(driver_->free_host(buffer));
  unmap_device(device);
}

TEST_P(HostBackupConformance, TheCensusCountsEveryBufferAndItsBytes) {
  const std::vector<Bytes> sizes = {1, 4096 + 3, granule_};  // host buffers need not be granule multiples
  std::vector<HostBuffer> buffers;
  Bytes total = 0;
  for (Bytes size : sizes) {
    buffers.push_back(TESSERA_OK(driver_->allocate_host(size)));
    total += size;
    EXPECT_EQ(driver_->census().host_buffers, start_.host_buffers + buffers.size());
    EXPECT_EQ(driver_->census().host_bytes, start_.host_bytes + total);
  }
  EXPECT_NE(buffers[0].id, buffers[1].id);
  EXPECT_NE(buffers[1].id, buffers[2].id);
  EXPECT_NE(buffers[0].id, buffers[2].id);
  TESSERA_OK(driver_->free_host(buffers[1]));  // out of order
  EXPECT_EQ(driver_->census().host_bytes, start_.host_bytes + sizes[0] + sizes[2]);
  TESSERA_OK(driver_->free_host(buffers[0]));
  TESSERA_OK(driver_->free_host(buffers[2]));
  EXPECT_EQ(driver_->census().host_buffers, start_.host_buffers);
  EXPECT_EQ(driver_->census().host_bytes, start_.host_bytes);
}

TEST_P(HostBackupConformance, BadSizesAndUnknownBuffersAreRefusedAndChangeNothing) {
  const Device device = map_device(1, 1);
  const auto original = pattern(granule_, 4);
  if (data_) TESSERA_OK(driver_->write(device.base, original.data(), granule_));
  const HostBuffer buffer = TESSERA_OK(driver_->allocate_host(4096));
  const auto backup = pattern(4096, 5);
  if (data_) std::memcpy(buffer.data, backup.data(), backup.size());
  const DriverCensus held = driver_->census();

  auto expect_refused = [&](Result<void> result, Errc code, const char* what) {
    ASSERT_FALSE(result.ok()) << what;
    EXPECT_EQ(result.error().code, code) << what << ": " << describe(result.error());
    EXPECT_EQ(driver_->census(), held) << what << " changed the driver";
    if (data_) {
      EXPECT_TRUE(contents(buffer) == backup) << what << " changed the host buffer";
      EXPECT_TRUE(read_back(device.base, granule_) == original) << what << " changed the device";
    }
  };

  auto empty = driver_->allocate_host(0);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, Errc::invalid_argument);
  EXPECT_EQ(driver_->census(), held);

  expect_refused(driver_->copy_to_host(buffer, device.base, 0), Errc::invalid_argument, "copy_to_host of 0");
  expect_refused(driver_->copy_to_device(device.base, buffer, 0), Errc::invalid_argument, "copy_to_device of 0");
  expect_refused(driver_->copy_to_host(buffer, device.base, 4097), Errc::invalid_argument,
                 "copy_to_host past the buffer");
  expect_refused(driver_->copy_to_device(device.base, buffer, 4097), Errc::invalid_argument,
                 "copy_to_device past the buffer");

  const HostBuffer unknown{.id = buffer.id + 1000, .data = buffer.data, .size = buffer.size};
  expect_refused(driver_->copy_to_host(unknown, device.base, 16), Errc::not_found, "copy_to_host, unknown buffer");
  expect_refused(driver_->copy_to_device(device.base, unknown, 16), Errc::not_found,
                 "copy_to_device, unknown buffer");
  expect_refused(driver_->free_host(unknown), Errc::not_found, "free_host, unknown buffer");
  expect_refused(driver_->free_host(HostBuffer{}), Errc::not_found, "free_host of no buffer");

  // A freed buffer is unknown from then on.
  const HostBuffer freed = TESSERA_OK(driver_->allocate_host(64));
  TESSERA_OK(driver_->free_host(freed));
  expect_refused(driver_->free_host(freed), Errc::not_found, "free_host twice");
  expect_refused(driver_->copy_to_host(freed, device.base, 16), Errc::not_found, "copy_to_host, freed buffer");

  TESSERA_OK(driver_->free_host(buffer));
  unmap_device(device);
}

TEST_P(HostBackupConformance, ACopyOverUnmappedMemoryIsRefusedAsWriteAndReadRefuseIt) {
  const Device device = map_device(2, 1);  // the second granule reserved, not mapped
  const auto original = pattern(granule_, 6);
  if (data_) TESSERA_OK(driver_->write(device.base, original.data(), granule_));
  const HostBuffer buffer = TESSERA_OK(driver_->allocate_host(2 * 4096));
  const auto backup = pattern(2 * 4096, 7);
  if (data_) std::memcpy(buffer.data, backup.data(), backup.size());
  const DriverCensus held = driver_->census();

  const Address across = device.base + granule_ - 4096;  // half mapped, half not
  for (Address at : {across, device.base + granule_}) {
    auto to_host = driver_->copy_to_host(buffer, at, 2 * 4096);
    ASSERT_FALSE(to_host.ok());
    EXPECT_EQ(to_host.error().code, Errc::not_mapped) << describe(to_host.error());
    auto to_device = driver_->copy_to_device(at, buffer, 2 * 4096);
    ASSERT_FALSE(to_device.ok());
    EXPECT_EQ(to_device.error().code, Errc::not_mapped) << describe(to_device.error());
    if (data_) {
      auto write = driver_->write(at, backup.data(), 2 * 4096);
      ASSERT_FALSE(write.ok());
      EXPECT_EQ(write.error().code, to_device.error().code) << "copy_to_device and write differ";
      std::vector<unsigned char> sink(2 * 4096);
      auto read = driver_->read(at, sink.data(), sink.size());
      ASSERT_FALSE(read.ok());
      EXPECT_EQ(read.error().code, to_host.error().code) << "copy_to_host and read differ";
    }
  }
  EXPECT_EQ(driver_->census(), held);
  if (data_) {
    EXPECT_TRUE(contents(buffer) == backup);
    EXPECT_TRUE(read_back(device.base, granule_) == original);
  }
  TESSERA_OK(driver_->free_host(buffer));
  unmap_device(device);
}

TEST_P(HostBackupConformance, ACopyOverAMappingWithoutAccessIsRefusedWhereThePlatformNeedsAccess) {
  if (!driver_->capabilities().needs_set_access) GTEST_SKIP() << "a mapping is accessible at once here";
  const Address base = TESSERA_OK(driver_->reserve(granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(granule_));
  TESSERA_OK(driver_->map(base, page));
  const HostBuffer buffer = TESSERA_OK(driver_->allocate_host(4096));
  auto to_host = driver_->copy_to_host(buffer, base, 4096);
  ASSERT_FALSE(to_host.ok());
  EXPECT_EQ(to_host.error().code, Errc::not_mapped);
  auto to_device = driver_->copy_to_device(base, buffer, 4096);
  ASSERT_FALSE(to_device.ok());
  EXPECT_EQ(to_device.error().code, Errc::not_mapped);
  TESSERA_OK(driver_->set_access(base, granule_));
  TESSERA_OK(driver_->copy_to_host(buffer, base, 4096));  // the same copy, once access is set
  TESSERA_OK(driver_->free_host(buffer));
  TESSERA_OK(driver_->unmap(base));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(base));
}

TEST_P(HostBackupConformance, NoHostMemoryLeftIsOutOfMemoryAndChangesNothing) {
  const HostBuffer kept = TESSERA_OK(driver_->allocate_host(4096));
  const DriverCensus held = driver_->census();
  // More than any machine has (2^60 bytes): every platform answers it as exhaustion.
  auto huge = driver_->allocate_host(Bytes{1} << 60);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code, Errc::out_of_memory) << describe(huge.error());
  EXPECT_EQ(driver_->census(), held);
  const HostBuffer next = TESSERA_OK(driver_->allocate_host(4096));  // still usable
  TESSERA_OK(driver_->free_host(next));
  TESSERA_OK(driver_->free_host(kept));
}

INSTANTIATE_TEST_SUITE_P(Drivers, HostBackupConformance, ::testing::ValuesIn(available_drivers()),
                         [](const ::testing::TestParamInfo<DriverFactory>& param) { return param.param.name; });

}  // namespace
}  // namespace tessera::testing
