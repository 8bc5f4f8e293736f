// What every baseline model owes the replay, checked on each: the DeviceAllocator contract, consistency
// with the driver's census through random work, out of memory and driver faults, a data oracle on the host
// driver's real memory; and the factory and configuration reader.
#include <limits>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "baselines/baseline_fixtures.hpp"

namespace tessera::testing {
namespace {

class EveryModel : public ::testing::TestWithParam<std::string_view> {
 protected:
  std::unique_ptr<DeviceAllocator> make(Driver& driver, BaselineOptions options = {}) {
    return make_model(GetParam(), driver, options);
  }
};

std::string model_name(const ::testing::TestParamInfo<std::string_view>& info) { return std::string(info.param); }

INSTANTIATE_TEST_SUITE_P(Baselines, EveryModel, ::testing::Values("pytorch", "expandable", "gmlake"), model_name);

// A request size from a mix shaped like training traces: mostly small, some medium, a few large.
Bytes random_size(std::mt19937_64& rng, Bytes large_max) {
  const auto pick = rng() % 100;
  if (pick < 55) return 1 + rng() % (1 * MiB);
  if (pick < 90) return 1 * MiB + rng() % (24 * MiB);
  return 24 * MiB + rng() % (large_max - 24 * MiB);
}

void expect_empty(const Driver& driver) {
  const DriverCensus census = driver.census();
  EXPECT_EQ(census.pages, 0u);
  EXPECT_EQ(census.reservations, 0u);
  EXPECT_EQ(census.mappings, 0u);
}

TEST_P(EveryModel, ZeroBytesIsAnInvalidRequest) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  auto zero = allocator->allocate(0, default_stream);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, Errc::invalid_argument);
  EXPECT_EQ(allocator->name(), GetParam());
}

TEST_P(EveryModel, UnknownAddressesAreNotFoundAndChangeNothing) {
  auto driver = sim_driver();
  auto allocator = make(*driver);
  const Address a = alloc(*allocator, 3 * MiB);
  const AllocatorStats before = allocator->stats();
  const DriverCensus census = driver->census();
  for (Address wrong : {Address{12345}, a + 512}) {
    auto freed = allocator->deallocate(wrong);
    ASSERT_FALSE(freed.ok());
    EXPECT_EQ(freed.error().code, Errc::not_found);
    auto recorded = allocator->record_stream(wrong, StreamId{5});
    ASSERT_FALSE(recorded.ok());
    EXPECT_EQ(recorded.error().code, Errc::not_found);
  }
  EXPECT_EQ(allocator->stats().reserved_bytes, before.reserved_bytes);
  EXPECT_EQ(allocator->stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(driver->census(), census);
  release(*allocator, a);
  auto twice = allocator->deallocate(a);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code, Errc::not_found);
}

TEST_P(EveryModel, ReservedBytesAreTheDriversPagesAndEmptyCacheGivesThemBack) {
  auto driver = sim_driver(64 * GiB);
  auto allocator = make(*driver);
  std::mt19937_64 rng(7);
  std::vector<Address> live;
  for (int op = 0; op < 3000; ++op) {
    if (live.empty() || rng() % 100 < 50) {
      const StreamId stream{rng() % 3};
      live.push_back(alloc(*allocator, random_size(rng, 96 * MiB), stream));
    } else {
      const std::size_t at = rng() % live.size();
      release(*allocator, live[at]);
      live[at] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(allocator->stats().reserved_bytes, driver->census().page_bytes) << "after op " << op;
    if (op % 1000 == 999) TESSERA_OK(allocator->empty_cache());
  }
  for (Address block : live) release(*allocator, block);
  TESSERA_OK(allocator->empty_cache());
  const AllocatorStats stats = allocator->stats();
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.requested_bytes, 0u);
  EXPECT_GT(stats.peak_reserved_bytes, 0u);
  EXPECT_GE(stats.peak_reserved_bytes, stats.peak_allocated_bytes);
  expect_empty(*driver);
}

TEST_P(EveryModel, DestructionGivesEverythingBackEvenWithLiveBlocksAndPendingEvents) {
  auto driver = sim_driver();
  StreamControl* control = driver->stream_control();
  {
    auto allocator = make(*driver);
    control->hold(StreamId{2});
    const Address a = alloc(*allocator, 40 * MiB, StreamId{1});
    TESSERA_OK(allocator->record_stream(a, StreamId{2}));
    release(*allocator, a);
    alloc(*allocator, 1 * KiB);
    alloc(*allocator, 700 * MiB, StreamId{1});
  }
  control->complete(StreamId{2});
  expect_empty(*driver);
  EXPECT_EQ(driver->census().events, 0u);
}

TEST_P(EveryModel, CrossStreamReuseWaitsForTheEvent) {
  auto driver = sim_driver();
  StreamControl* control = driver->stream_control();
  auto allocator = make(*driver);
  const StreamId one{1};
  control->hold(StreamId{2});
  const Address a = alloc(*allocator, 20 * MiB, one);
  TESSERA_OK(allocator->record_stream(a, StreamId{2}));
  release(*allocator, a);
  const Address b = alloc(*allocator, 20 * MiB, one);
  EXPECT_NE(b, a) << "stream 2 may still be using A";
  control->complete(StreamId{2});
  release(*allocator, b);
  const Address c = alloc(*allocator, 20 * MiB, one);
  const Address d = alloc(*allocator, 20 * MiB, one);
  EXPECT_TRUE((c == a && d == b) || (c == b && d == a)) << "both blocks are reusable again";
}

TEST_P(EveryModel, OutOfMemoryIsAnAnswerAndTheModelStaysConsistent) {
  auto driver = sim_driver(64 * MiB);
  auto allocator = make(*driver);
  std::mt19937_64 rng(11);
  std::vector<Address> live;
  int refused = 0;
  for (int op = 0; op < 2000; ++op) {
    if (live.empty() || rng() % 100 < 60) {
      auto block = allocator->allocate(random_size(rng, 48 * MiB), StreamId{rng() % 2});
      if (block) {
        live.push_back(*block);
      } else {
        ASSERT_EQ(block.error().code, Errc::out_of_memory) << describe(block.error());
        ++refused;
      }
    } else {
      const std::size_t at = rng() % live.size();
      release(*allocator, live[at]);
      live[at] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(allocator->stats().reserved_bytes, driver->census().page_bytes) << "after op " << op;
    ASSERT_LE(driver->census().page_bytes, 64 * MiB);
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(allocator->stats().num_ooms, static_cast<std::uint64_t>(refused));
  for (Address block : live) release(*allocator, block);
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
}

TEST_P(EveryModel, AnyHugeRequestIsOutOfMemoryWithoutHostMemoryInProportion) {
  // Sizes whose rounding to 512 B, a power-of-two division, 2 MiB or a segment reaches or passes 2^64, and
  // 2^63 - 1, the largest of a trace's int64 sizes: out of memory at once on a device of any capacity, with
  // no list of 2^42 pages made on the way (std::bad_alloc) and the model still usable after.
  constexpr Bytes most = std::numeric_limits<Bytes>::max();
  const Bytes huge[] = {(Bytes{1} << 63) - 1, Bytes{1} << 63, (Bytes{1} << 63) + 1, most - 511, most - 2 * MiB, most};
  for (const Bytes capacity : {80 * GiB, Bytes{1} << 44}) {
    for (const std::size_t divisions : {std::size_t{0}, std::size_t{4}}) {
      if (divisions != 0 && GetParam() == "gmlake") continue;  // GMLake rounds to whole chunks only
      auto driver = sim_driver(capacity);
      BaselineOptions options;
      options.roundup_power2_divisions = divisions;
      auto allocator = make(*driver, options);
      const Address kept = alloc(*allocator, 3 * MiB);
      const AllocatorStats before = allocator->stats();
      std::uint64_t refused = 0;
      for (const Bytes size : huge) {
        Result<Address> block = make_error(Errc::platform, "not run");
        ASSERT_NO_THROW(block = allocator->allocate(size, default_stream)) << size;
        ASSERT_FALSE(block.ok()) << size << " bytes were handed out";
        EXPECT_EQ(block.error().code, Errc::out_of_memory) << size << ": " << describe(block.error());
        EXPECT_NE(block.error().message.find(std::to_string(size)), std::string::npos) << block.error().message;
        ++refused;
      }
      EXPECT_EQ(allocator->stats().num_ooms, before.num_ooms + refused);
      EXPECT_EQ(allocator->stats().allocated_bytes, before.allocated_bytes);
      EXPECT_EQ(allocator->stats().reserved_bytes, driver->census().page_bytes);
      const Address more = alloc(*allocator, 5 * MiB);
      release(*allocator, more);
      release(*allocator, kept);
      TESSERA_OK(allocator->empty_cache());
      expect_empty(*driver);
    }
  }
}

TEST_P(EveryModel, DriverFaultsNeverLeakOrCorruptTheBookkeeping) {
  auto faults = std::make_unique<FaultInjectingDriver>(sim_driver(512 * MiB));
  FaultInjectingDriver* inject = faults.get();
  std::unique_ptr<Driver> driver = std::move(faults);
  auto allocator = make(*driver);
  std::mt19937_64 rng(3);
  const DriverCall kinds[] = {
      DriverCall::reserve,     DriverCall::create_chunk,       DriverCall::map,          DriverCall::set_access,
      DriverCall::unmap,       DriverCall::release_chunk,      DriverCall::record_event, DriverCall::synchronize_device,
      DriverCall::query_event, DriverCall::synchronize_stream};
  std::vector<Address> live;
  for (int op = 0; op < 1500; ++op) {
    if (op % 7 == 0) {
      const DriverCall kind = kinds[rng() % std::size(kinds)];
      inject->fail(kind, 1 + rng() % 3, FaultInjectingDriver::Repeat::once,
                   rng() % 2 ? Errc::out_of_memory : Errc::platform);
    }
    if (op % 5 == 0 && !live.empty()) TESSERA_OK(allocator->record_stream(live[rng() % live.size()], StreamId{9}));
    if (live.empty() || rng() % 100 < 55) {
      auto block = allocator->allocate(random_size(rng, 64 * MiB), StreamId{rng() % 2});
      if (block) live.push_back(*block);
    } else {
      const std::size_t at = rng() % live.size();
      if (allocator->deallocate(live[at])) {
        live[at] = live.back();
        live.pop_back();
      }
    }
    if (op % 100 == 99) (void)allocator->empty_cache();
    ASSERT_EQ(allocator->stats().reserved_bytes, driver->census().page_bytes) << "after op " << op;
  }
  inject->clear_all();
  for (Address block : live) release(*allocator, block);
  TESSERA_OK(allocator->empty_cache());
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
  allocator.reset();
  EXPECT_EQ(driver->census().events, 0u);
}

// Data oracle: every live block holds what was written into it until it is freed, on real memory.
TEST_P(EveryModel, DataWrittenIntoLiveBlocksSurvivesOnTheHostDriver) {
  auto driver = host_driver(640 * MiB);
  BaselineOptions options;
  options.gmlake.fragment_limit = 32 * MiB;  // stitch often, with sizes the host handles quickly
  auto allocator = make(*driver, options);
  std::mt19937_64 rng(2024);

  struct Live {
    Bytes size;
    std::uint64_t tag;
  };
  std::map<Address, Live> live;
  auto probes = [](Address at, Bytes size) {
    std::vector<Address> points{at, at + size - 8};
    for (Bytes offset = 2 * MiB - 8; offset + 8 < size; offset += 2 * MiB) points.push_back(at + offset);
    return points;
  };
  auto word = [](std::uint64_t tag, Address at) { return tag * 0x9E3779B97F4A7C15ull ^ at; };
  bool stitched = false;

  for (int op = 0; op < 800; ++op) {
    if (live.empty() || rng() % 100 < 55) {
      const Bytes size = 8 + random_size(rng, 72 * MiB);
      auto block = allocator->allocate(size, StreamId{rng() % 2});
      if (!block) {
        ASSERT_EQ(block.error().code, Errc::out_of_memory) << describe(block.error());
        continue;
      }
      const Address at = *block;
      auto next = live.lower_bound(at);
      ASSERT_TRUE(next == live.end() || at + size <= next->first) << "blocks overlap";
      ASSERT_TRUE(next == live.begin() || std::prev(next)->first + std::prev(next)->second.size <= at)
          << "blocks overlap";
      const std::uint64_t tag = rng();
      for (Address point : probes(at, size)) {
        const std::uint64_t value = word(tag, point);
        TESSERA_OK(driver->write(point, &value, sizeof value));
      }
      live.emplace(at, Live{size, tag});
      const DriverCensus census = driver->census();
      stitched = stitched || census.mappings > census.pages;
    } else {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      for (Address point : probes(it->first, it->second.size)) {
        std::uint64_t value = 0;
        TESSERA_OK(driver->read(point, &value, sizeof value));
        ASSERT_EQ(value, word(it->second.tag, point)) << "block at " << it->first << " lost its data";
      }
      release(*allocator, it->first);
      live.erase(it);
    }
    if (op % 200 == 199) TESSERA_OK(allocator->empty_cache());
  }
  if (GetParam() == "gmlake") {
    EXPECT_TRUE(stitched) << "the oracle should have seen stitched blocks";
  }
  for (const auto& [at, block] : live) release(*allocator, at);
  TESSERA_OK(allocator->empty_cache());
  expect_empty(*driver);
}

TEST(BaselineFactory, KnowsThreeModelsAndNamesThemInErrors) {
  auto driver = sim_driver();
  EXPECT_EQ(baseline_names(), (std::vector<std::string_view>{"pytorch", "expandable", "gmlake", "memory-saver"}));
  auto unknown = make_baseline("tlsf", *driver);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::invalid_argument);
  EXPECT_NE(unknown.error().message.find("pytorch, expandable, gmlake"), std::string::npos);
  EXPECT_TRUE(make_pytorch_caching(*driver).ok());
  EXPECT_TRUE(make_expandable_segments(*driver).ok());
  EXPECT_TRUE(make_gmlake(*driver).ok());
}

TEST(BaselineFactory, RefusesOptionsPyTorchWouldRefuse) {
  auto driver = sim_driver();
  auto refused = [&](std::string_view model, const BaselineOptions& options, std::string_view knob) {
    auto made = make_baseline(model, *driver, options);
    ASSERT_FALSE(made.ok()) << knob;
    EXPECT_EQ(made.error().code, Errc::invalid_argument);
    EXPECT_NE(made.error().message.find(knob), std::string::npos) << made.error().message;
  };
  refused("pytorch", {.max_split_size = 20 * MiB}, "max_split_size");
  refused("pytorch", {.garbage_collection_threshold = 1.0}, "garbage_collection_threshold");
  refused("pytorch", {.roundup_power2_divisions = 3}, "roundup_power2_divisions");
  refused("expandable", {.memory_fraction = 1.5}, "memory_fraction");
  refused("gmlake", {.roundup_power2_divisions = 4}, "roundup_power2_divisions");
  EXPECT_TRUE(make_baseline("pytorch", *driver, {.max_split_size = 21 * MiB}).ok());

  auto coarse = make_sim_driver({.capacity = 1 * GiB, .granularity = 4 * MiB});
  auto made = make_baseline("pytorch", *coarse->driver);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("granularity"), std::string::npos);
}

TEST(PyTorchAllocConf, ReadsTheKnobsPyTorchReads) {
  auto parsed = TESSERA_OK(parse_pytorch_alloc_conf(
      "max_split_size_mb:128, garbage_collection_threshold:0.6,roundup_power2_divisions:4,expandable_segments:True"));
  EXPECT_EQ(parsed.options.max_split_size, 128 * MiB);
  EXPECT_DOUBLE_EQ(parsed.options.garbage_collection_threshold, 0.6);
  EXPECT_EQ(parsed.options.roundup_power2_divisions, 4u);
  EXPECT_TRUE(parsed.expandable);

  auto empty = TESSERA_OK(parse_pytorch_alloc_conf(""));
  EXPECT_EQ(empty.options.max_split_size, unlimited_split_size);
  EXPECT_FALSE(empty.expandable);

  for (std::string_view bad :
       {"max_split_size_mb:20", "foo:1", "roundup_power2_divisions:[256:1,512:2]", "garbage_collection_threshold:abc",
        "expandable_segments:yes", "max_split_size_mb", "backend:cudaMallocAsync"}) {
    auto failed = parse_pytorch_alloc_conf(bad);
    ASSERT_FALSE(failed.ok()) << bad;
    EXPECT_EQ(failed.error().code, Errc::invalid_argument);
    const std::string_view key = bad.substr(0, bad.find(':'));
    EXPECT_NE(failed.error().message.find(key), std::string::npos) << failed.error().message;
  }
}

}  // namespace
}  // namespace tessera::testing
