// One conformance suite for every driver: the contract written in include/tessera/driver.hpp.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "driver_fixtures.hpp"

namespace tessera::testing {
namespace {

class DriverConformance : public ::testing::TestWithParam<DriverFactory> {
 protected:
  void SetUp() override {
    auto made = GetParam().make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    driver_ = std::move(made).value();
    granule_ = driver_->granularity();
    start_ = driver_->census();
  }

  void TearDown() override {
    if (driver_) {
      EXPECT_EQ(driver_->census(), start_) << "the test left something behind";
    }
  }

  // Maps and, where the platform needs it, enables access: what the allocator does for every mapping.
  void map_accessible(Address at, ChunkId page, Bytes size) {
    TESSERA_OK(driver_->map(at, page));
    TESSERA_OK(driver_->set_access(at, size));
  }

  std::vector<unsigned char> pattern(Bytes size, unsigned seed) const {
    std::vector<unsigned char> bytes(size);
    for (Bytes i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
    return bytes;
  }

  std::unique_ptr<Driver> driver_;
  Bytes granule_ = 0;
  DriverCensus start_;
};

TEST_P(DriverConformance, GranularityIsAPowerOfTwoAndCapacityHoldsAPage) {
  EXPECT_TRUE(is_power_of_two(granule_));
  EXPECT_GE(granule_, 4 * KiB);
  EXPECT_GE(driver_->capacity(), granule_);
  EXPECT_FALSE(driver_->name().empty());
}

TEST_P(DriverConformance, ReserveHonoursGranuleAndAlignment) {
  const Address base = TESSERA_OK(driver_->reserve(4 * granule_));
  EXPECT_TRUE(is_aligned(base, granule_));
  EXPECT_NE(base, 0u);
  const Address wide = TESSERA_OK(driver_->reserve(2 * granule_, 8 * granule_));
  EXPECT_TRUE(is_aligned(wide, 8 * granule_));
  EXPECT_TRUE(wide + 2 * granule_ <= base || base + 4 * granule_ <= wide) << "reservations overlap";

  const DriverCensus held = driver_->census();
  EXPECT_EQ(held.reservations, start_.reservations + 2);
  EXPECT_EQ(held.reserved_bytes, start_.reserved_bytes + 6 * granule_);

  TESSERA_OK(driver_->release_reservation(base));
  TESSERA_OK(driver_->release_reservation(wide));
  auto again = driver_->release_reservation(base);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::not_found);
}

TEST_P(DriverConformance, ReserveRejectsBadSizesAndAlignments) {
  for (Bytes size : {Bytes{0}, granule_ + 1, granule_ / 2}) {
    auto reserved = driver_->reserve(size);
    ASSERT_FALSE(reserved.ok()) << size;
    EXPECT_EQ(reserved.error().code, Errc::invalid_argument);
    EXPECT_NE(reserved.error().message.find(std::to_string(size)), std::string::npos) << reserved.error().message;
  }
  for (Bytes alignment : {granule_ / 2, 3 * granule_}) {
    auto reserved = driver_->reserve(granule_, alignment);
    ASSERT_FALSE(reserved.ok()) << alignment;
    EXPECT_EQ(reserved.error().code, Errc::invalid_argument);
  }
}

TEST_P(DriverConformance, CreateMapSetAccessUnmapReleaseCycle) {
  const Address base = TESSERA_OK(driver_->reserve(2 * granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(2 * granule_));
  EXPECT_EQ(driver_->census().pages, start_.pages + 1);
  EXPECT_EQ(driver_->census().page_bytes, start_.page_bytes + 2 * granule_);

  map_accessible(base, page, 2 * granule_);
  EXPECT_EQ(driver_->census().mappings, start_.mappings + 1);
  EXPECT_EQ(driver_->census().mapped_bytes, start_.mapped_bytes + 2 * granule_);

  if (driver_->capabilities().data_access) {
    const auto bytes = pattern(4096, 1);
    TESSERA_OK(driver_->write(base + 2 * granule_ - 4096, bytes.data(), bytes.size()));
    std::vector<unsigned char> back(bytes.size());
    TESSERA_OK(driver_->read(base + 2 * granule_ - 4096, back.data(), back.size()));
    EXPECT_EQ(back, bytes);
  }

  TESSERA_OK(driver_->unmap(base));
  EXPECT_EQ(driver_->census().mappings, start_.mappings);
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(base));
}

TEST_P(DriverConformance, CreateRejectsSizesOffTheGranule) {
  for (Bytes size : {Bytes{0}, granule_ + 512}) {
    auto page = driver_->create_chunk(size);
    ASSERT_FALSE(page.ok());
    EXPECT_EQ(page.error().code, Errc::invalid_argument);
  }
  EXPECT_EQ(driver_->census(), start_);
}

TEST_P(DriverConformance, MapsAtAnOffsetInsideAReservationOnly) {
  const Address base = TESSERA_OK(driver_->reserve(8 * granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(2 * granule_));

  map_accessible(base + 3 * granule_, page, 2 * granule_);

  const ChunkId other = TESSERA_OK(driver_->create_chunk(2 * granule_));
  auto past_end = driver_->map(base + 7 * granule_, other);
  ASSERT_FALSE(past_end.ok());
  EXPECT_EQ(past_end.error().code, Errc::invalid_argument);

  auto unaligned = driver_->map(base + granule_ / 2, other);
  ASSERT_FALSE(unaligned.ok());
  EXPECT_EQ(unaligned.error().code, Errc::invalid_argument);

  auto overlapping = driver_->map(base + 2 * granule_, other);  // its second granule lies on the first map
  ASSERT_FALSE(overlapping.ok());
  EXPECT_EQ(overlapping.error().code, Errc::already_mapped);

  auto outside = driver_->map(base + 64 * granule_, other);
  ASSERT_FALSE(outside.ok());

  // Right beside the first mapping is fine.
  map_accessible(base + 5 * granule_, other, 2 * granule_);
  EXPECT_EQ(driver_->census().mappings, start_.mappings + 2);

  TESSERA_OK(driver_->unmap(base + 3 * granule_));
  TESSERA_OK(driver_->unmap(base + 5 * granule_));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_chunk(other));
  TESSERA_OK(driver_->release_reservation(base));
}

TEST_P(DriverConformance, SamePageAtTwoAddressesWhereTheCapabilitySaysSo) {
  const Address first = TESSERA_OK(driver_->reserve(granule_));
  const Address second = TESSERA_OK(driver_->reserve(granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(granule_));
  map_accessible(first, page, granule_);

  auto twice = driver_->map(second, page);
  if (!driver_->capabilities().page_multi_mapping) {
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.error().code, Errc::already_mapped);
  } else {
    ASSERT_TRUE(twice.ok()) << describe(twice.error());
    TESSERA_OK(driver_->set_access(second, granule_));
    if (driver_->capabilities().data_access) {
      const auto bytes = pattern(8192, 2);
      TESSERA_OK(driver_->write(first, bytes.data(), bytes.size()));
      std::vector<unsigned char> back(bytes.size());
      TESSERA_OK(driver_->read(second, back.data(), back.size()));
      EXPECT_EQ(back, bytes) << "both addresses must show the same page";
    }
    TESSERA_OK(driver_->unmap(second));
  }
  TESSERA_OK(driver_->unmap(first));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(first));
  TESSERA_OK(driver_->release_reservation(second));
}

TEST_P(DriverConformance, RunningOutOfCapacityIsTypedAndRecoverable) {
  const Bytes chunk = std::max(granule_, align_up(driver_->capacity() / 8, granule_));
  std::vector<ChunkId> pages;
  Result<ChunkId> last = make_error(Errc::platform, "not tried");
  for (Bytes tries = 0; tries < driver_->capacity() / chunk + 2; ++tries) {
    last = driver_->create_chunk(chunk);
    if (!last) break;
    pages.push_back(*last);
  }
  ASSERT_FALSE(last.ok()) << "capacity " << driver_->capacity() << " never ran out";
  EXPECT_EQ(last.error().code, Errc::out_of_memory) << describe(last.error());
  EXPECT_FALSE(last.error().message.empty());
  EXPECT_EQ(driver_->census().pages, start_.pages + pages.size()) << "a failed create must hold nothing";

  ASSERT_FALSE(pages.empty());
  TESSERA_OK(driver_->release_chunk(pages.back()));
  pages.back() = TESSERA_OK(driver_->create_chunk(chunk));  // usable again once room is made
  for (ChunkId page : pages) TESSERA_OK(driver_->release_chunk(page));
}

TEST_P(DriverConformance, UnmappingWhatWasNeverMappedIsADefinedError) {
  const Address base = TESSERA_OK(driver_->reserve(4 * granule_));
  auto never = driver_->unmap(base);
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.error().code, Errc::not_mapped);

  const ChunkId page = TESSERA_OK(driver_->create_chunk(2 * granule_));
  map_accessible(base, page, 2 * granule_);
  auto middle = driver_->unmap(base + granule_);  // mappings go whole, never in part
  ASSERT_FALSE(middle.ok());
  EXPECT_EQ(middle.error().code, Errc::not_mapped);

  auto access = driver_->set_access(base, 4 * granule_);  // half of it is not mapped
  ASSERT_FALSE(access.ok());
  EXPECT_EQ(access.error().code, Errc::not_mapped);

  TESSERA_OK(driver_->unmap(base));
  auto twice = driver_->unmap(base);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code, Errc::not_mapped);
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(base));
}

TEST_P(DriverConformance, ReleasingWhatIsStillMappedIsRefusedAndChangesNothing) {
  const Address base = TESSERA_OK(driver_->reserve(2 * granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(granule_));
  map_accessible(base + granule_, page, granule_);

  auto reservation = driver_->release_reservation(base);
  ASSERT_FALSE(reservation.ok());
  EXPECT_EQ(reservation.error().code, Errc::still_mapped);
  auto released_page = driver_->release_chunk(page);
  ASSERT_FALSE(released_page.ok());
  EXPECT_EQ(released_page.error().code, Errc::still_mapped);

  if (driver_->capabilities().data_access) {  // the mapping survived both refusals
    const auto bytes = pattern(256, 3);
    TESSERA_OK(driver_->write(base + granule_, bytes.data(), bytes.size()));
    std::vector<unsigned char> back(bytes.size());
    TESSERA_OK(driver_->read(base + granule_, back.data(), back.size()));
    EXPECT_EQ(back, bytes);
  }
  TESSERA_OK(driver_->unmap(base + granule_));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(base));
  auto unknown = driver_->release_chunk(page);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::not_found);
}

TEST_P(DriverConformance, EventsCompleteAfterTheWorkBeforeThem) {
  const StreamId stream = default_stream;
  const EventId event = TESSERA_OK(driver_->create_event());
  TESSERA_OK(driver_->record_event(event, stream));
  TESSERA_OK(driver_->synchronize_event(event));
  EXPECT_TRUE(TESSERA_OK(driver_->query_event(event)));
  TESSERA_OK(driver_->synchronize_stream(stream));
  TESSERA_OK(driver_->synchronize_device());

  if (StreamControl* control = driver_->stream_control()) {
    const StreamId busy{7};
    control->hold(busy);
    TESSERA_OK(driver_->record_event(event, busy));
    EXPECT_FALSE(TESSERA_OK(driver_->query_event(event))) << "work on a held stream is still pending";
    control->complete(busy);
    EXPECT_TRUE(TESSERA_OK(driver_->query_event(event)));

    control->hold(busy);
    TESSERA_OK(driver_->record_event(event, busy));
    TESSERA_OK(driver_->synchronize_event(event));  // waiting finishes the work
    EXPECT_TRUE(TESSERA_OK(driver_->query_event(event)));
    control->complete(busy);
  }
  TESSERA_OK(driver_->destroy_event(event));
  auto gone = driver_->query_event(event);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Errc::not_found);
}

// No stream captures a graph here, so every driver answers false: those whose streams cannot capture (host,
// sim, ascend) always, cuda from cuStreamIsCapturing. The default stream only: on a GPU another number is no
// stream at all.
TEST_P(DriverConformance, AStreamNotCapturingAGraphIsSaidSo) {
  EXPECT_FALSE(TESSERA_OK(driver_->stream_is_capturing(default_stream)));
}

TEST_P(DriverConformance, BytesWrittenBeforeUnmapAreThereAfterRemappingElsewhere) {
  if (!driver_->capabilities().data_access) GTEST_SKIP() << GetParam().name << " has no memory";
  const Address first = TESSERA_OK(driver_->reserve(4 * granule_));
  const Address second = TESSERA_OK(driver_->reserve(4 * granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(granule_));
  map_accessible(first + granule_, page, granule_);
  const auto bytes = pattern(granule_, 4);
  TESSERA_OK(driver_->write(first + granule_, bytes.data(), bytes.size()));
  TESSERA_OK(driver_->unmap(first + granule_));

  auto gone = driver_->read(first + granule_, std::vector<unsigned char>(16).data(), 16);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Errc::not_mapped);

  TESSERA_OK(driver_->map(second + 3 * granule_, page));
  if (driver_->capabilities().needs_set_access) {
    std::vector<unsigned char> early(16);
    auto before_access = driver_->read(second + 3 * granule_, early.data(), early.size());
    ASSERT_FALSE(before_access.ok()) << "needs_set_access: no access before set_access";
    EXPECT_EQ(before_access.error().code, Errc::not_mapped);
  }
  TESSERA_OK(driver_->set_access(second + 3 * granule_, granule_));
  std::vector<unsigned char> back(bytes.size());
  TESSERA_OK(driver_->read(second + 3 * granule_, back.data(), back.size()));
  EXPECT_TRUE(back == bytes) << "remapping changed the page's bytes";

  TESSERA_OK(driver_->unmap(second + 3 * granule_));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(first));
  TESSERA_OK(driver_->release_reservation(second));
}

// map_part: one physical page cut into parts, each mapped and unmapped on its own, in any order and at
// any address; the page goes back only when no part is mapped. Drivers without the capability refuse.
TEST_P(DriverConformance, PartsOfOnePageMapOnTheirOwnWhereTheCapabilitySaysSo) {
  const Address at = TESSERA_OK(driver_->reserve(8 * granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(4 * granule_));
  if (!driver_->capabilities().partial_map) {
    auto refused = driver_->map_part(at, page, granule_, granule_);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, Errc::unsupported);
    EXPECT_EQ(driver_->census().mappings, start_.mappings);
    TESSERA_OK(driver_->release_chunk(page));
    TESSERA_OK(driver_->release_reservation(at));
    return;
  }
  // Parts 2..3 of the page at slot 0, part 0 at slot 5, part 1 at slot 7: scattered, out of order.
  TESSERA_OK(driver_->map_part(at, page, 2 * granule_, 2 * granule_));
  TESSERA_OK(driver_->map_part(at + 5 * granule_, page, 0, granule_));
  TESSERA_OK(driver_->map_part(at + 7 * granule_, page, granule_, granule_));
  EXPECT_EQ(driver_->census().mappings, start_.mappings + 3);
  EXPECT_EQ(driver_->census().mapped_bytes, start_.mapped_bytes + 4 * granule_);
  TESSERA_OK(driver_->set_access(at, 2 * granule_));
  TESSERA_OK(driver_->set_access(at + 5 * granule_, granule_));
  TESSERA_OK(driver_->set_access(at + 7 * granule_, granule_));

  // Bad parts: off the granule, past the page's end, empty. Each refused, nothing changed.
  const Address spare = TESSERA_OK(driver_->reserve(4 * granule_));
  for (const auto& [offset, size] : std::vector<std::pair<Bytes, Bytes>>{
           {granule_ / 2, granule_}, {0, granule_ / 2}, {3 * granule_, 2 * granule_}, {8 * granule_, granule_}, {0, 0}}) {
    auto refused = driver_->map_part(spare, page, offset, size);
    ASSERT_FALSE(refused.ok()) << offset << " + " << size;
    EXPECT_EQ(refused.error().code, Errc::invalid_argument) << describe(refused.error());
  }
  EXPECT_EQ(driver_->census().mappings, start_.mappings + 3);

  if (driver_->capabilities().data_access) {
    // Bytes written through one part are the page's: unmapped and mapped again elsewhere, they are there.
    const auto bytes = pattern(granule_, 9);
    TESSERA_OK(driver_->write(at + 7 * granule_, bytes.data(), bytes.size()));
    TESSERA_OK(driver_->unmap(at + 7 * granule_));
    TESSERA_OK(driver_->map_part(spare + granule_, page, granule_, granule_));
    TESSERA_OK(driver_->set_access(spare + granule_, granule_));
    std::vector<unsigned char> back(bytes.size());
    TESSERA_OK(driver_->read(spare + granule_, back.data(), back.size()));
    EXPECT_TRUE(back == bytes) << "a part mapped again shows other bytes";
    TESSERA_OK(driver_->unmap(spare + granule_));
  } else {
    TESSERA_OK(driver_->unmap(at + 7 * granule_));
  }
  auto still_mapped = driver_->release_chunk(page);
  ASSERT_FALSE(still_mapped.ok());
  EXPECT_EQ(still_mapped.error().code, Errc::still_mapped);
  TESSERA_OK(driver_->unmap(at));
  TESSERA_OK(driver_->unmap(at + 5 * granule_));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(at));
  TESSERA_OK(driver_->release_reservation(spare));
}

// What the allocator's sliver sharing relies on: one granule of a page that is mapped whole at one address,
// mapped again on its own at another; both addresses show the same bytes, and the second mapping goes
// without disturbing the first.
TEST_P(DriverConformance, AGranuleOfAMappedPageMapsAgainElsewhereWhereTheCapabilitiesSaySo) {
  const DriverCapabilities& can = driver_->capabilities();
  if (!can.partial_map || !can.page_multi_mapping) GTEST_SKIP() << "this driver does not share granules";
  const Address whole = TESSERA_OK(driver_->reserve(2 * granule_));
  const Address again = TESSERA_OK(driver_->reserve(granule_));
  const ChunkId page = TESSERA_OK(driver_->create_chunk(2 * granule_));
  map_accessible(whole, page, 2 * granule_);
  TESSERA_OK(driver_->map_part(again, page, granule_, granule_));
  TESSERA_OK(driver_->set_access(again, granule_));
  EXPECT_EQ(driver_->census().mappings, start_.mappings + 2);
  if (can.data_access) {
    const auto bytes = pattern(granule_ / 2, 5);
    // The second half of the granule through the second address; read back through the first.
    TESSERA_OK(driver_->write(again + granule_ / 2, bytes.data(), bytes.size()));
    std::vector<unsigned char> back(bytes.size());
    TESSERA_OK(driver_->read(whole + granule_ + granule_ / 2, back.data(), back.size()));
    EXPECT_TRUE(back == bytes) << "the two addresses must show the same granule";
  }
  TESSERA_OK(driver_->unmap(again));
  if (can.data_access) {
    const auto bytes = pattern(granule_, 6);
    TESSERA_OK(driver_->write(whole + granule_, bytes.data(), bytes.size()));
    std::vector<unsigned char> back(bytes.size());
    TESSERA_OK(driver_->read(whole + granule_, back.data(), back.size()));
    EXPECT_TRUE(back == bytes) << "the first mapping must stay usable after the second goes";
  }
  TESSERA_OK(driver_->unmap(whole));
  TESSERA_OK(driver_->release_chunk(page));
  TESSERA_OK(driver_->release_reservation(whole));
  TESSERA_OK(driver_->release_reservation(again));
}

INSTANTIATE_TEST_SUITE_P(Drivers, DriverConformance, ::testing::ValuesIn(available_drivers()),
                         [](const ::testing::TestParamInfo<DriverFactory>& param) { return param.param.name; });

}  // namespace
}  // namespace tessera::testing
