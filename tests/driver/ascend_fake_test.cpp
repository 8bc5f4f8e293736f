// The ascend driver over the stand-in libascendcl (tests/driver/fake_ascend): what the conformance suite does
// not reach. The device's reference count, aclInit's repeat, the driver's own alignment of reservations (ACL
// takes none), events that stay pending, the runtime's out of memory and its messages; and the stand-in's own
// rules, so that a suite passing over it has met ACL's contract, not CUDA's. The per-thread context:
// fake_platform_threads_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "driver/dynamic_library.hpp"
#include "driver_fixtures.hpp"
#include "fake_platforms.hpp"

#ifdef TESSERA_FAKE_ASCEND_LIBRARY

namespace tessera::testing {
namespace {

using detail::DynamicLibrary;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ACL's codes (acl_base.h, error_codes/rt_error_codes.h), to check the stand-in answers with them.
constexpr int acl_error_invalid_param = 100000;
constexpr int acl_error_rt_param_invalid = 107000;
constexpr int acl_error_rt_no_device = 207004;
constexpr int acl_error_rt_memory_allocation = 207001;

// aclrtPhysicalMemProp as acl_rt.h lays it out.
struct PhysicalMemProp {
  int handleType;
  int allocationType;
  int memAttr;
  std::uint32_t location_id;
  int location_type;
  std::uint64_t reserve;
};
constexpr int hbm_mem_huge = 4;    // ACL_HBM_MEM_HUGE
constexpr int hbm_mem_normal = 5;  // ACL_HBM_MEM_NORMAL


std::vector<unsigned char> pattern(std::size_t size, unsigned seed) {
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(i * 13 + seed * 5 + (i >> 11));
  return bytes;
}

TEST_F(FakeAscend, EveryCallReachesTheDriverAndTheDeviceIsResetAfter) {
  {
    auto made = make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    Driver& driver = **made;
    EXPECT_EQ(driver.name(), "ascend");
    EXPECT_FALSE(driver.capabilities().needs_set_access);
    EXPECT_FALSE(driver.capabilities().page_multi_mapping);
    EXPECT_FALSE(driver.capabilities().partial_map);
    EXPECT_TRUE(driver.capabilities().data_access);
    EXPECT_EQ(driver.granularity(), 2 * MiB);
    EXPECT_EQ(driver.capacity(), 256 * MiB);
    EXPECT_EQ(references(), 1) << "make_ascend_driver sets the device once";

    // The stand-in returns addresses that are 2 MiB past a 4 MiB boundary: the 8 MiB alignment is the driver's.
    const Address base = TESSERA_OK(driver.reserve(8 * MiB, 8 * MiB));
    EXPECT_TRUE(is_aligned(base, 8 * MiB));
    const ChunkId page = TESSERA_OK(driver.create_chunk(4 * MiB));
    TESSERA_OK(driver.map(base, page));
    const auto written = pattern(4 * MiB, 1);
    TESSERA_OK(driver.write(base, written.data(), written.size()));

    // Unmapped and mapped again elsewhere, the page still holds its bytes.
    TESSERA_OK(driver.unmap(base));
    TESSERA_OK(driver.map(base + 4 * MiB, page));
    std::vector<unsigned char> back(written.size());
    TESSERA_OK(driver.read(base + 4 * MiB, back.data(), back.size()));
    EXPECT_EQ(back, written);

    const EventId event = TESSERA_OK(driver.create_event());
    TESSERA_OK(driver.record_event(event, default_stream));
    EXPECT_TRUE(TESSERA_OK(driver.query_event(event)));
    TESSERA_OK(driver.synchronize_stream(default_stream));
    TESSERA_OK(driver.synchronize_device());
    TESSERA_OK(driver.destroy_event(event));

    TESSERA_OK(driver.unmap(base + 4 * MiB));
    TESSERA_OK(driver.release_chunk(page));
    TESSERA_OK(driver.release_reservation(base));
    EXPECT_EQ(driver.census(), DriverCensus{});
    EXPECT_EQ(live("fake_ascend_live_handles"), 0u);
    EXPECT_EQ(live("fake_ascend_live_reservations"), 0u) << "the reservation was released by its true base";
    EXPECT_EQ(live("fake_ascend_live_events"), 0u);
  }
  EXPECT_EQ(references(), 0) << "the driver must reset the device it set";
}

TEST_F(FakeAscend, ASecondDriverFindsACLInitializedAndBothWork) {
  auto first = make();
  ASSERT_TRUE(first.ok()) << describe(first.error());
  auto second = make();  // aclInit answers ACL_ERROR_REPEAT_INITIALIZE now
  ASSERT_TRUE(second.ok()) << describe(second.error());
  EXPECT_EQ(references(), 2);
  const ChunkId page = TESSERA_OK((*second)->create_chunk(2 * MiB));
  TESSERA_OK((*second)->release_chunk(page));
  first->reset();
  EXPECT_EQ(references(), 1);
  const Address base = TESSERA_OK((*second)->reserve(2 * MiB));
  TESSERA_OK((*second)->release_reservation(base));
}

TEST_F(FakeAscend, NoDeviceIsSaidPlainlyWithTheRuntimesMessage) {
  control<void(int)>("fake_ascend_set_init_result")(acl_error_rt_no_device);
  auto made = make();
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::unavailable);
  EXPECT_EQ(made.error().platform_code, acl_error_rt_no_device);
  EXPECT_TRUE(contains(made.error().message, "aclInit failed with aclError 207004")) << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "the test made aclInit fail")) << "aclGetRecentErrMsg's text: "
                                                                            << made.error().message;
  EXPECT_TRUE(contains(made.error().message, "no Ascend device")) << made.error().message;
}

TEST_F(FakeAscend, ZeroDevicesAndAMissingOrdinalAreUnavailable) {
  control<void(int)>("fake_ascend_set_device_count")(0);
  auto none = make();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(none.error().message, "no Ascend device is present")) << none.error().message;

  control<void(int)>("fake_ascend_set_device_count")(2);
  auto third = make(3);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, Errc::unavailable);
  EXPECT_TRUE(contains(third.error().message, "there is no Ascend device 3; this machine has 2"))
      << third.error().message;
  EXPECT_EQ(references(), 0);
}

TEST_F(FakeAscend, OutOfMemoryFromTheRuntimeIsTypedAndNamesTheCall) {
  control<void(std::size_t)>("fake_ascend_set_physical_limit")(4 * MiB);  // less than the reported capacity
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  const ChunkId first = TESSERA_OK(driver.create_chunk(4 * MiB));
  auto second = driver.create_chunk(2 * MiB);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, Errc::out_of_memory);
  EXPECT_EQ(second.error().platform_code, acl_error_rt_memory_allocation);
  EXPECT_TRUE(contains(second.error().message, "aclrtMallocPhysical(2097152 bytes on device 0)"))
      << second.error().message;
  EXPECT_TRUE(contains(second.error().message, "out of device memory")) << second.error().message;
  EXPECT_EQ(driver.census().pages, 1u) << "a failed call changes nothing";
  TESSERA_OK(driver.release_chunk(first));
}

// aclrtQueryEventStatus answers NOT_READY until the work before the event is done; the driver must read the
// enum the right way round (aclrtEventRecordedStatus: NOT_READY 0, COMPLETE 1).
TEST_F(FakeAscend, EventsStayPendingUntilTheirEventStreamOrDeviceIsSynchronized) {
  control<void(int)>("fake_ascend_set_events_pending")(1);
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  const StreamId stream{0x5000};
  std::vector<EventId> events;
  for (int i = 0; i < 3; ++i) {
    events.push_back(TESSERA_OK(driver.create_event()));
    TESSERA_OK(driver.record_event(events.back(), stream));
    EXPECT_FALSE(TESSERA_OK(driver.query_event(events.back()))) << "event " << i;
  }
  TESSERA_OK(driver.synchronize_event(events[0]));
  EXPECT_TRUE(TESSERA_OK(driver.query_event(events[0])));
  EXPECT_FALSE(TESSERA_OK(driver.query_event(events[1])));
  TESSERA_OK(driver.synchronize_stream(default_stream));
  EXPECT_FALSE(TESSERA_OK(driver.query_event(events[1]))) << "another stream's sync leaves it pending";
  TESSERA_OK(driver.synchronize_stream(stream));
  EXPECT_TRUE(TESSERA_OK(driver.query_event(events[1])));
  TESSERA_OK(driver.record_event(events[2], default_stream));
  EXPECT_FALSE(TESSERA_OK(driver.query_event(events[2])));
  TESSERA_OK(driver.synchronize_device());
  EXPECT_TRUE(TESSERA_OK(driver.query_event(events[2])));
  for (EventId event : events) TESSERA_OK(driver.destroy_event(event));
}

#ifdef TESSERA_FAKE_ASCEND_OLD_EVENTS_LIBRARY
// Older CANN has only aclrtQueryEvent, whose aclrtEventStatus reads COMPLETE 0, NOT_READY 1: the driver falls
// back to it and reads it its own way round.
TEST(FakeAscendOlderCann, EventsAreQueriedWithTheDeprecatedCall) {
  auto opened = DynamicLibrary::open(TESSERA_FAKE_ASCEND_OLD_EVENTS_LIBRARY);
  ASSERT_TRUE(opened.ok()) << describe(opened.error());
  ASSERT_FALSE(opened->address("aclrtQueryEventStatus").ok());
  reinterpret_cast<void (*)(int)>(*opened->address("fake_ascend_set_events_pending"))(1);
  {
    auto made = make_ascend_driver({.device = 0, .library = TESSERA_FAKE_ASCEND_OLD_EVENTS_LIBRARY});
    ASSERT_TRUE(made.ok()) << describe(made.error());
    Driver& driver = **made;
    const EventId event = TESSERA_OK(driver.create_event());
    TESSERA_OK(driver.record_event(event, default_stream));
    EXPECT_FALSE(TESSERA_OK(driver.query_event(event)));
    TESSERA_OK(driver.synchronize_event(event));
    EXPECT_TRUE(TESSERA_OK(driver.query_event(event)));
    TESSERA_OK(driver.destroy_event(event));
  }
  reinterpret_cast<void (*)()>(*opened->address("fake_ascend_reset"))();
}
#endif

// The stand-in holds the driver to ACL's rules, not CUDA's: without these, the suites passing over it would
// prove less.
TEST_F(FakeAscend, TheStandInRefusesWhatACLRefuses) {
  EXPECT_FALSE(fake_->address("aclrtMemSetAccess").ok()) << "ACL has no set-access call";
  auto made = make();  // aclInit, aclrtSetDevice: this thread has the context
  ASSERT_TRUE(made.ok()) << describe(made.error());

  using Reserve = int(void**, std::size_t, std::size_t, void*, std::uint64_t);
  using Malloc = int(void**, std::size_t, const PhysicalMemProp*, std::uint64_t);
  using Map = int(void*, std::size_t, std::size_t, void*, std::uint64_t);
  auto* reserve = control<Reserve>("aclrtReserveMemAddress");
  auto* release = control<int(void*)>("aclrtReleaseMemAddress");
  auto* malloc_physical = control<Malloc>("aclrtMallocPhysical");
  auto* free_physical = control<int(void*)>("aclrtFreePhysical");
  auto* map = control<Map>("aclrtMapMem");
  auto* unmap = control<int(void*)>("aclrtUnmapMem");

  void* huge = nullptr;
  EXPECT_EQ(reserve(&huge, 8 * MiB, 2 * MiB, nullptr, 1), acl_error_invalid_param) << "alignment is reserved";
  int somewhere = 0;
  EXPECT_EQ(reserve(&huge, 8 * MiB, 0, &somewhere, 1), acl_error_invalid_param) << "expectPtr is reserved";
  ASSERT_EQ(reserve(&huge, 8 * MiB, 0, nullptr, 1), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(huge) % (4 * MiB), 2 * MiB);
  void* normal = nullptr;
  ASSERT_EQ(reserve(&normal, 4 * MiB, 0, nullptr, 0), 0);

  const PhysicalMemProp prop{0, 0, hbm_mem_huge, 0, 1, 0};
  void* handle = nullptr;
  EXPECT_EQ(malloc_physical(&handle, 4 * MiB, &prop, 1), acl_error_invalid_param) << "flags is reserved";
  PhysicalMemProp cuda_like = prop;
  cuda_like.handleType = 1;
  EXPECT_EQ(malloc_physical(&handle, 4 * MiB, &cuda_like, 0), acl_error_invalid_param);
  ASSERT_EQ(malloc_physical(&handle, 4 * MiB, &prop, 0), 0);

  auto* at = static_cast<char*>(huge);
  EXPECT_EQ(map(at, 2 * MiB, 0, handle, 0), acl_error_rt_param_invalid) << "part of a handle";
  EXPECT_EQ(map(at, 2 * MiB, 2 * MiB, handle, 0), acl_error_rt_param_invalid) << "an offset into a handle";
  EXPECT_EQ(map(normal, 4 * MiB, 0, handle, 0), acl_error_rt_param_invalid) << "huge pages, normal reservation";
  EXPECT_EQ(map(at + 6 * MiB, 4 * MiB, 0, handle, 0), acl_error_rt_param_invalid) << "past the reservation";
  ASSERT_EQ(map(at, 4 * MiB, 0, handle, 0), 0);
  EXPECT_EQ(map(at + 4 * MiB, 4 * MiB, 0, handle, 0), acl_error_rt_param_invalid) << "one handle, one mapping";
  EXPECT_EQ(release(huge), acl_error_rt_param_invalid) << "a reservation still mapped";
  EXPECT_EQ(free_physical(handle), acl_error_rt_param_invalid) << "a handle still mapped";
  EXPECT_EQ(unmap(at + 2 * MiB), acl_error_rt_param_invalid) << "no mapping starts there";
  EXPECT_EQ(unmap(at), 0);
  EXPECT_EQ(free_physical(handle), 0);
  EXPECT_EQ(release(huge), 0);
  EXPECT_EQ(release(normal), 0);

  const PhysicalMemProp small_pages{0, 0, hbm_mem_normal, 0, 1, 0};
  auto* granularity = control<int(PhysicalMemProp*, int, std::size_t*)>("aclrtMemGetAllocationGranularity");
  std::size_t granule = 0;
  PhysicalMemProp asked = small_pages;
  EXPECT_EQ(granularity(&asked, 0, &granule), 0);
  EXPECT_EQ(granule, 2 * MiB);
}

// Host buffers: aclrtMallocHost's rules as the CANN reference states them, the runtime's out of memory
// typed, and buffers the caller leaked freed with the driver.
TEST_F(FakeAscend, HostBuffersKeepACLsRulesAndGoWithTheDriver) {
  {
    auto made = make();
    ASSERT_TRUE(made.ok()) << describe(made.error());
    Driver& driver = **made;
    auto* malloc_host = control<int(void**, std::size_t)>("aclrtMallocHost");
    auto* free_host = control<int(void*)>("aclrtFreeHost");
    auto* copy = control<int(void*, std::size_t, const void*, std::size_t, int)>("aclrtMemcpy");
    void* raw = nullptr;
    EXPECT_EQ(malloc_host(&raw, 0), acl_error_invalid_param) << "size must not be 0";
    int stack = 0;
    EXPECT_EQ(free_host(&stack), acl_error_invalid_param) << "only aclrtMallocHost's memory";

    const Address base = TESSERA_OK(driver.reserve(2 * MiB));
    const ChunkId page = TESSERA_OK(driver.create_chunk(2 * MiB));
    TESSERA_OK(driver.map(base, page));
    const HostBuffer buffer = TESSERA_OK(driver.allocate_host(4096));
    EXPECT_EQ(live("fake_ascend_live_host_buffers"), 1u) << "the buffer came from aclrtMallocHost";
    auto* device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(base));
    EXPECT_EQ(copy(buffer.data, 16, device, 32, 2), acl_error_invalid_param) << "count above destMax";
    EXPECT_EQ(copy(buffer.data, 8192, device, 8192, 2), acl_error_invalid_param) << "past the end of the buffer";
    TESSERA_OK(driver.copy_to_host(buffer, base, 4096));

    control<void(std::size_t)>("fake_ascend_set_host_limit")(8192);
    auto over = driver.allocate_host(8192);
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.error().code, Errc::out_of_memory);
    EXPECT_EQ(over.error().platform_code, acl_error_rt_memory_allocation);
    EXPECT_TRUE(contains(over.error().message, "aclrtMallocHost(8192 bytes)")) << over.error().message;
    EXPECT_EQ(driver.census().host_buffers, 1u) << "a failed call changes nothing";

    TESSERA_OK(driver.unmap(base));
    TESSERA_OK(driver.release_chunk(page));
    TESSERA_OK(driver.release_reservation(base));
    // The buffer is left to the driver's destructor.
  }
  EXPECT_EQ(live("fake_ascend_live_host_buffers"), 0u) << "the destructor freed the leaked buffer";
}

}  // namespace
}  // namespace tessera::testing

#endif  // TESSERA_FAKE_ASCEND_LIBRARY
