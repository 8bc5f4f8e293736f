// The catalogue of bad inputs, one test each: the error is typed and names what is wrong, and the
// allocator (or nothing, for a reader) is exactly as it was. The C ABI's cases (freeing with the wrong
// device, an unknown TESSERA_DRIVER through the library) are in tests/capi; docs/reliability.md lists
// them all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/trace.hpp"
#include "support/must.hpp"
#include "trace/gzip_file.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;

using test_support::must;

bool mentions(const Error& error, std::string_view text) { return error.message.find(text) != std::string::npos; }

// Everything observable about an allocator and its driver, to compare before and after a refused request.
struct Observed {
  AllocatorStats stats;
  DriverCensus census;
  std::size_t segments;
  std::size_t blocks;
  std::uint64_t driver_calls;

  bool operator==(const Observed& other) const {
    return stats.allocated_bytes == other.stats.allocated_bytes && stats.reserved_bytes == other.stats.reserved_bytes &&
           stats.requested_bytes == other.stats.requested_bytes && census == other.census &&
           segments == other.segments && blocks == other.blocks && driver_calls == other.driver_calls;
  }
};

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = std::make_unique<CountingDriver>(must(make_host_driver({.capacity = 32 * MiB, .granularity = granule})));
    allocator_ = must(make_tessera_allocator(*driver_));
    // Some state to keep: a live block, a cached one.
    live_ = must(allocator_->allocate(3 * MiB, default_stream));
    ASSERT_TRUE(allocator_->deallocate(must(allocator_->allocate(5 * MiB, default_stream))));
  }

  Observed observe() const {
    const AllocatorSnapshot snapshot = allocator_->snapshot();
    std::size_t blocks = 0;
    for (const SnapshotSegment& segment : snapshot.segments) blocks += segment.blocks.size();
    return {allocator_->stats(), driver_->census(), snapshot.segments.size(), blocks, driver_->tally().total_calls()};
  }

  // The refused request changed nothing, and the allocator still works.
  void expect_unchanged(const Observed& before) {
    Observed after = observe();
    after.driver_calls = before.driver_calls;  // a refusal may ask the driver nothing, but need not
    EXPECT_TRUE(after == before) << "the allocator's state changed";
    EXPECT_EQ(allocator_->check(), std::nullopt);
    const Address again = must(allocator_->allocate(1 * MiB, default_stream));
    EXPECT_TRUE(allocator_->deallocate(again));
  }

  std::unique_ptr<CountingDriver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
  Address live_ = 0;
};

TEST_F(BadInput, SizeZero) {
  const Observed before = observe();
  auto refused = allocator_->allocate(0, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::invalid_argument);
  EXPECT_TRUE(mentions(refused.error(), "0 bytes")) << refused.error().message;
  expect_unchanged(before);
}

TEST_F(BadInput, ASizeLargerThanTheCapacity) {
  const Observed before = observe();
  auto refused = allocator_->allocate(33 * MiB, default_stream);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  EXPECT_TRUE(mentions(refused.error(), std::to_string(33 * MiB))) << "names the requested size: " << refused.error().message;
  EXPECT_EQ(allocator_->stats().num_ooms, before.stats.num_ooms + 1);
  expect_unchanged(before);
}

TEST_F(BadInput, ASizeNearTwoToTheSixtyFour) {
  for (Bytes size : {std::numeric_limits<Bytes>::max(), std::numeric_limits<Bytes>::max() - 511,
                     std::numeric_limits<Bytes>::max() / 2 + 1}) {
    const Observed before = observe();
    auto refused = allocator_->allocate(size, default_stream);
    ASSERT_FALSE(refused.ok()) << size;
    EXPECT_EQ(refused.error().code, Errc::out_of_memory) << describe(refused.error());
    EXPECT_TRUE(mentions(refused.error(), std::to_string(size))) << refused.error().message;
    expect_unchanged(before);
  }
}

TEST_F(BadInput, ADoubleFree) {
  const Address block = must(allocator_->allocate(100 * KiB, default_stream));
  ASSERT_TRUE(allocator_->deallocate(block));
  const Observed before = observe();
  auto refused = allocator_->deallocate(block);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::not_found);
  EXPECT_TRUE(mentions(refused.error(), "double free")) << refused.error().message;
  expect_unchanged(before);
}

TEST_F(BadInput, FreeingAnUnknownPointer) {
  const Observed before = observe();
  for (Address unknown : {Address{0}, Address{0x1234}, live_ + 512, Address{std::numeric_limits<Address>::max()}}) {
    auto refused = allocator_->deallocate(unknown);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, Errc::not_found);
    EXPECT_TRUE(mentions(refused.error(), "not a live block")) << refused.error().message;
  }
  auto recorded = allocator_->record_stream(live_ + 512, StreamId{3});
  ASSERT_FALSE(recorded.ok());
  EXPECT_EQ(recorded.error().code, Errc::not_found);
  expect_unchanged(before);
}

// One allocator per device: a block of device 0 freed to device 1's allocator is an unknown pointer there,
// and device 0's allocator still owns it.
TEST_F(BadInput, FreeingWithTheWrongDevice) {
  auto other_driver = must(make_host_driver({.capacity = 32 * MiB, .granularity = granule}));
  auto other_device = must(make_tessera_allocator(*other_driver));
  const Observed before = observe();
  auto refused = other_device->deallocate(live_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::not_found);
  expect_unchanged(before);
  EXPECT_TRUE(allocator_->deallocate(live_));
}

TEST_F(BadInput, AMemoryFractionOutOfRange) {
  const Observed before = observe();
  for (double fraction : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto refused = allocator_->set_memory_fraction(fraction);
    ASSERT_FALSE(refused.ok()) << fraction;
    EXPECT_EQ(refused.error().code, Errc::invalid_argument);
    EXPECT_TRUE(mentions(refused.error(), "fraction")) << refused.error().message;
  }
  expect_unchanged(before);
}

TEST(BadConfiguration, EachErrorNamesTheKey) {
  const struct {
    std::string_view text;
    std::string_view named;
  } cases[] = {
      {"no_such_key:1", "no_such_key"},
      {"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
      {"garbage_collection_threshold:abc", "garbage_collection_threshold"},
      {"roundup_power2_divisions:3", "roundup_power2_divisions"},
      {"reclaim:sometimes", "reclaim"},
      {"page_max_mb:-1", "page_max_mb"},
      {"small_max_kb", "small_max_kb"},
      {"reclaim:first,reclaim:never", "reclaim"},
  };
  for (const auto& bad : cases) {
    auto parsed = parse_allocator_config(bad.text);
    ASSERT_FALSE(parsed.ok()) << bad.text;
    EXPECT_EQ(parsed.error().code, Errc::invalid_argument) << bad.text;
    EXPECT_TRUE(mentions(parsed.error(), bad.named)) << bad.text << " -> " << parsed.error().message;
  }
}

TEST(BadConfiguration, TheEnvironmentVariableIsNamed) {
  ASSERT_EQ(setenv("TESSERA_ALLOC_CONF", "bogus_key:1", 1), 0);
  auto parsed = allocator_config_from_environment();
  unsetenv("TESSERA_ALLOC_CONF");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(mentions(parsed.error(), "bogus_key")) << parsed.error().message;
  EXPECT_TRUE(mentions(parsed.error(), "TESSERA_ALLOC_CONF")) << parsed.error().message;
}

TEST(BadDriverName, AnUnknownDriverListsTheKnownOnes) {
  auto made = make_driver("tpu");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, Errc::invalid_argument);
  EXPECT_TRUE(mentions(made.error(), "tpu")) << made.error().message;
  for (std::string_view known : driver_names()) EXPECT_TRUE(mentions(made.error(), known)) << made.error().message;
}

// Truncated and corrupt traces, one per reader: an error that names the source and where.
TEST(BadTrace, TruncatedAndCorruptInputsNameTheSourceAndPlace) {
  const struct {
    std::string_view bytes;
    TraceFormat format;
    std::string_view where;
  } cases[] = {
      {"tessera-trace 1\na 0 12x\n", TraceFormat::text, "run.trace:2"},         // a bad size
      {"tessera-trace 1\na 0 100\nf 7\n", TraceFormat::text, "run.trace:3"},   // frees an unknown block
      {"id,lower,upper,size\n1,0,3,100\n2,5,x,100\n", TraceFormat::lifetimes_csv, "run.trace:3"},
      {"1 0x10 100 0\n1 0x20 1x0 0\n", TraceFormat::stalloc, "run.trace:2"},          // a bad size
      {"\x80\x04\x95", TraceFormat::pytorch_snapshot, "run.trace: byte"},             // a truncated pickle
  };
  for (const auto& bad : cases) {
    auto parsed = parse_trace(bad.bytes, "run.trace", {.format = bad.format, .pytorch = {}});
    ASSERT_FALSE(parsed.ok()) << to_string(bad.format);
    EXPECT_EQ(parsed.error().code, Errc::invalid_argument);
    EXPECT_TRUE(mentions(parsed.error(), bad.where)) << to_string(bad.format) << ": " << parsed.error().message;
  }
}

TEST(BadTrace, AMissingOrEmptyFileIsNamed) {
  const auto missing = std::filesystem::path(::testing::TempDir()) / "no_such_trace.trace";
  auto read = read_trace(missing);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(mentions(read.error(), "no_such_trace.trace")) << read.error().message;
  const auto empty = std::filesystem::path(::testing::TempDir()) / "empty.trace";
  std::ofstream(empty).close();
  read = read_trace(empty);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(mentions(read.error(), "empty.trace")) << read.error().message;
  std::filesystem::remove(empty);
}

// A JSON nesting bomb: 10^7 '[' inflate from 10 KB of gzip to 10 MB. Each level cost the DOM parser ~75
// bytes (this one 750 MB; one that inflates to the 1 GiB bound ~80 GB); the reader stops at 256 levels.
TEST(BadTrace, AJsonNestingBombIsRefusedAtTheNestingLimit) {
  const std::string bomb = trace_detail::gzip(std::string(10'000'000, '['));
  EXPECT_LT(bomb.size(), 20'000u);
  Result<Trace> read = parse_trace(bomb, "bomb.json.gz");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, Errc::invalid_argument);
  EXPECT_EQ(read.error().message,
            "bomb.json.gz (inflated): byte 257: nesting deeper than 256 levels, the most a JSON trace may have");
}

}  // namespace
}  // namespace tessera
