// export_chunk and import_chunk on every driver: refused with Errc::unsupported where the capability is off;
// where it is on, a chunk imported by a second driver (in this process, as another process would) maps the
// same bytes both ways and outlives the exporter's release; descriptors that name nothing importable are
// refused with a message naming them. tests/core/block_sharing_test.cpp runs two real processes.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

class SharingConformance : public ::testing::TestWithParam<DriverFactory> {
 protected:
  void SetUp() override {
    exporter_ = TESSERA_OK(GetParam().make());
    importer_ = TESSERA_OK(GetParam().make());
    granule_ = exporter_->granularity();
  }

  void TearDown() override {
    EXPECT_EQ(exporter_->census(), DriverCensus{}) << "the exporter kept something";
    EXPECT_EQ(importer_->census(), DriverCensus{}) << "the importer kept something";
  }

  void map_accessible(Driver& driver, Address at, ChunkId chunk, Bytes size) {
    TESSERA_OK(driver.map(at, chunk));
    TESSERA_OK(driver.set_access(at, size));
  }

  std::unique_ptr<Driver> exporter_;
  std::unique_ptr<Driver> importer_;
  Bytes granule_ = 0;
};

TEST_P(SharingConformance, DriversWithoutTheCapabilityRefuseAndChangeNothing) {
  if (exporter_->capabilities().shareable_chunks) GTEST_SKIP() << GetParam().name << " shares chunks";
  const ChunkId chunk = TESSERA_OK(exporter_->create_chunk(granule_));
  auto exported = exporter_->export_chunk(chunk);
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.error().code, Errc::unsupported);
  EXPECT_NE(exported.error().message.find("shareable_chunks"), std::string::npos) << exported.error().message;
  auto imported = importer_->import_chunk(0, 0, granule_);
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code, Errc::unsupported);
  EXPECT_EQ(importer_->census(), DriverCensus{});
  TESSERA_OK(exporter_->release_chunk(chunk));
}

TEST_P(SharingConformance, AnImportedChunkMapsTheSameBytesBothWaysAndOutlivesTheExportersRelease) {
  if (!exporter_->capabilities().shareable_chunks) GTEST_SKIP() << GetParam().name << " does not share chunks";
  const Bytes size = 2 * granule_;
  const Address here = TESSERA_OK(exporter_->reserve(size));
  const Address there = TESSERA_OK(importer_->reserve(size));
  const ChunkId chunk = TESSERA_OK(exporter_->create_chunk(size));
  map_accessible(*exporter_, here, chunk, size);
  std::vector<unsigned char> written(size);
  for (Bytes i = 0; i < size; ++i) written[i] = static_cast<unsigned char>(i * 7 + 3);
  TESSERA_OK(exporter_->write(here, written.data(), size));

  const ExportedChunk exported = TESSERA_OK(exporter_->export_chunk(chunk));
  ASSERT_GE(exported.descriptor, 0);
  EXPECT_EQ(exported.size, size);
  const ChunkId imported = TESSERA_OK(importer_->import_chunk(exported.descriptor, exported.offset, exported.size));
  close(exported.descriptor);  // the importer keeps what it needs
  EXPECT_EQ(importer_->census().pages, 1u);
  // At the importer's own address, all of it.
  map_accessible(*importer_, there, imported, size);
  std::vector<unsigned char> seen(size);
  TESSERA_OK(importer_->read(there, seen.data(), size));
  EXPECT_TRUE(seen == written) << "the importer does not see the exporter's bytes";

  const unsigned char reply[] = {0xAB, 0xCD};
  TESSERA_OK(importer_->write(there + granule_, reply, sizeof reply));
  unsigned char back[2] = {};
  TESSERA_OK(exporter_->read(here + granule_, back, sizeof back));
  EXPECT_EQ(std::memcmp(back, reply, sizeof reply), 0) << "the exporter does not see the importer's bytes";

  // The exporter lets go of everything: the importer's mapping still holds the bytes.
  TESSERA_OK(exporter_->unmap(here));
  TESSERA_OK(exporter_->release_chunk(chunk));
  TESSERA_OK(exporter_->release_reservation(here));
  unsigned char still[2] = {};
  TESSERA_OK(importer_->read(there + granule_, still, sizeof still));
  EXPECT_EQ(std::memcmp(still, reply, sizeof reply), 0) << "the exporter's release took the importer's memory";
  TESSERA_OK(importer_->read(there, seen.data(), granule_));
  EXPECT_EQ(std::memcmp(seen.data(), written.data(), granule_), 0);

  TESSERA_OK(importer_->unmap(there));
  TESSERA_OK(importer_->release_chunk(imported));
  TESSERA_OK(importer_->release_reservation(there));
}

TEST_P(SharingConformance, DescriptorsThatNameNothingImportableAreRefused) {
  if (!importer_->capabilities().shareable_chunks) GTEST_SKIP() << GetParam().name << " does not share chunks";
  auto negative = importer_->import_chunk(-1, 0, granule_);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error().code, Errc::invalid_argument);
  EXPECT_NE(negative.error().message.find("-1"), std::string::npos) << negative.error().message;

  const int not_memory = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(not_memory, 0);
  auto wrong = importer_->import_chunk(not_memory, 0, granule_);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, Errc::invalid_argument) << describe(wrong.error());
  EXPECT_NE(wrong.error().message.find(std::to_string(not_memory)), std::string::npos) << wrong.error().message;
  close(not_memory);

  auto off_granule = importer_->import_chunk(0, 0, granule_ + 1);
  ASSERT_FALSE(off_granule.ok());
  EXPECT_EQ(off_granule.error().code, Errc::invalid_argument);
  EXPECT_EQ(importer_->census(), DriverCensus{}) << "a refused import kept something";
}

TEST_P(SharingConformance, ExportingAChunkThisDriverDoesNotHoldIsNotFound) {
  if (!exporter_->capabilities().shareable_chunks) GTEST_SKIP() << GetParam().name << " does not share chunks";
  auto missing = exporter_->export_chunk(ChunkId{12345});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::not_found);
}

#ifdef TESSERA_FAKE_CUDA_NO_CAPTURE_LIBRARY
// A libcuda without cuMemExportToShareableHandle and cuMemImportFromShareableHandle: sharing asked for, the
// driver still serves memory and refuses exports, saying which capability it lacks.
TEST(CudaSharing, ALibraryWithoutTheShareableHandleCallsServesMemoryButSharesNothing) {
  auto driver = TESSERA_OK(make_cuda_driver(
      {.device = 0, .library = TESSERA_FAKE_CUDA_NO_CAPTURE_LIBRARY, .shareable_chunks = true}));
  EXPECT_FALSE(driver->capabilities().shareable_chunks);
  const ChunkId chunk = TESSERA_OK(driver->create_chunk(driver->granularity()));
  auto exported = driver->export_chunk(chunk);
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.error().code, Errc::unsupported);
  TESSERA_OK(driver->release_chunk(chunk));
}
#endif

#ifdef TESSERA_FAKE_CUDA_LIBRARY
// Sharing is asked for (chunks then request a POSIX file descriptor handle, which CUDA needs to export them);
// a driver not asked refuses exports before calling CUDA.
TEST(CudaSharing, OnlyADriverAskedForSharingExportsItsChunks) {
  auto plain = TESSERA_OK(make_cuda_driver({.device = 0, .library = TESSERA_FAKE_CUDA_LIBRARY}));
  EXPECT_FALSE(plain->capabilities().shareable_chunks);
  const ChunkId plain_chunk = TESSERA_OK(plain->create_chunk(plain->granularity()));
  auto refused = plain->export_chunk(plain_chunk);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::unsupported);
  TESSERA_OK(plain->release_chunk(plain_chunk));
  auto driver = TESSERA_OK(make_cuda_driver({.device = 0, .library = TESSERA_FAKE_CUDA_LIBRARY, .shareable_chunks = true}));
  ASSERT_TRUE(driver->capabilities().shareable_chunks);
  const ChunkId chunk = TESSERA_OK(driver->create_chunk(driver->granularity()));
  const ExportedChunk exported = TESSERA_OK(driver->export_chunk(chunk));
  EXPECT_GE(exported.descriptor, 0);
  close(exported.descriptor);
  TESSERA_OK(driver->release_chunk(chunk));
}
#endif

INSTANTIATE_TEST_SUITE_P(Drivers, SharingConformance, ::testing::ValuesIn(available_drivers()),
                         [](const ::testing::TestParamInfo<DriverFactory>& param) { return param.param.name; });

}  // namespace
}  // namespace tessera::testing
