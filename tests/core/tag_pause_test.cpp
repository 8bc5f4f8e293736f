// Pausing and resuming memory by tag, on the host driver (real memory: a memfd is the device), with the
// data oracle: every live block keeps what was written into it, through pause and resume with backup,
// stitching and garbage collection in between, and a failure injected at any driver call.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace tessera {
namespace {

constexpr Bytes granule = 64 * KiB;

using test_support::must;

const TagStats& stats_of(const TesseraStats& stats, std::string_view tag) {
  for (const TagStats& entry : stats.tags) {
    if (entry.tag == tag) return entry;
  }
  throw std::runtime_error("no statistics for tag " + std::string(tag));
}

class TagPauseTest : public ::testing::Test {
 protected:
  // host driver → fault injector → counter → allocator.
  void make(std::size_t granules, std::string_view conf = "") {
    auto faults = std::make_unique<FaultInjectingDriver>(
        must(make_host_driver({.capacity = granules * granule, .granularity = granule})));
    faults_ = faults.get();
    driver_ = std::make_unique<CountingDriver>(std::move(faults));
    allocator_ = must(make_tessera_allocator(*driver_, must(parse_allocator_config(conf))));
  }

  void TearDown() override {
    if (!allocator_) return;
    faults_->clear_all();
    EXPECT_EQ(allocator_->check(), std::nullopt);
    for (const auto& [address, seed] : live_) free(address, false);
    live_.clear();
    must(allocator_->empty_cache());
    allocator_.reset();
    EXPECT_EQ(driver_->census(), DriverCensus{}) << "left behind by the allocator";
  }

  Address allocate(Bytes size, std::string_view tag = "default", OnPause on_pause = OnPause::discard) {
    TagScope scope(tag, on_pause);
    const Address block = must(allocator_->allocate(size, default_stream));
    const auto seed = static_cast<unsigned char>(next_seed_++ * 37 + 11);
    sizes_[block] = size;
    live_[block] = seed;
    tags_[block] = std::string(tag);
    fill(block, seed);
    return block;
  }
  void free(Address block, bool forget = true) {
    must(allocator_->deallocate(block));
    if (forget) live_.erase(block);
  }
  void fill(Address at, unsigned char seed) {
    std::vector<unsigned char> bytes(sizes_.at(at));
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(seed + i * 13);
    must(driver_->write(at, bytes.data(), bytes.size()));
  }
  bool holds(Address at) {
    std::vector<unsigned char> bytes(sizes_.at(at));
    must(driver_->read(at, bytes.data(), bytes.size()));
    const unsigned char seed = live_.at(at);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != static_cast<unsigned char>(seed + i * 13)) return false;
    }
    return true;
  }
  // Every live block not under `paused` holds its bytes.
  void expect_intact(std::string_view paused = "") {
    for (const auto& [address, seed] : live_) {
      if (tags_.at(address) != paused) {
        EXPECT_TRUE(holds(address)) << "block " << std::hex << address;
      }
    }
  }
  std::vector<Address> blocks_of(std::string_view tag) const {
    std::vector<Address> blocks;
    for (const auto& [address, seed] : live_) {
      if (tags_.at(address) == tag) blocks.push_back(address);
    }
    return blocks;
  }

  // Weights (several sizes, both pools) and a KV cache, with default-tag blocks between them.
  void build_job() {
    for (Bytes size : {Bytes{3000}, 200 * KiB, 1000 * KiB + 7, 3 * granule}) allocate(size, "weights");
    allocate(5 * granule + 100);
    for (Bytes size : {Bytes{512}, 130 * KiB, 2 * granule}) allocate(size, "kv_cache");
    allocate(40 * KiB);
  }

  FaultInjectingDriver* faults_ = nullptr;
  std::unique_ptr<CountingDriver> driver_;
  std::unique_ptr<TesseraAllocator> allocator_;
  std::map<Address, unsigned char> live_;
  std::map<Address, Bytes> sizes_;
  std::map<Address, std::string> tags_;
  unsigned next_seed_ = 0;
};

TEST_F(TagPauseTest, BlocksCarryTheInnermostOpenTag) {
  make(64);
  const Address outside = allocate(1000);
  Address inner = 0;
  Address outer = 0;
  {
    TagScope weights("weights");
    {
      TagScope kv("kv_cache");
      inner = must(allocator_->allocate(1000, default_stream));
    }
    outer = must(allocator_->allocate(1000, default_stream));
  }
  const TesseraStats stats = allocator_->tessera_stats();
  EXPECT_EQ(stats_of(stats, "default").allocated_bytes, 1024u);
  EXPECT_EQ(stats_of(stats, "weights").allocated_bytes, 1024u);
  EXPECT_EQ(stats_of(stats, "kv_cache").allocated_bytes, 1024u);
  EXPECT_EQ(allocator_->tags(), (std::vector<std::string>{"default", "kv_cache", "weights"}));
  // No granule is under live blocks of two tags: each tag's blocks lie in regions of their own.
  for (const SnapshotSegment& segment : allocator_->snapshot().segments) {
    for (const SnapshotBlock& block : segment.blocks) {
      if (block.address == inner) {
        EXPECT_EQ(segment.tag, "kv_cache");
      } else if (block.address == outer) {
        EXPECT_EQ(segment.tag, "weights");
      } else if (block.address == outside) {
        EXPECT_EQ(segment.tag, "default");
      }
    }
  }
  must(allocator_->deallocate(inner));
  must(allocator_->deallocate(outer));
  EXPECT_FALSE(pop_tag()) << "every scope closed";
}

TEST_F(TagPauseTest, PauseWithBackupGivesThePagesBackAndResumeRestoresEveryByteAtTheSameAddress) {
  make(256);
  build_job();
  const TesseraStats before = allocator_->tessera_stats();
  const TagStats weights = stats_of(before, "weights");
  ASSERT_GT(weights.reserved_bytes, 0u);
  const DriverCensus census_before = driver_->census();

  must(allocator_->pause("weights", true));
  const TesseraStats paused = allocator_->tessera_stats();
  const TagStats& weights_paused = stats_of(paused, "weights");
  EXPECT_TRUE(weights_paused.paused);
  EXPECT_EQ(weights_paused.reserved_bytes, 0u);
  EXPECT_EQ(weights_paused.paused_bytes, weights.allocated_bytes);
  EXPECT_EQ(weights_paused.allocated_bytes, weights.allocated_bytes) << "paused blocks stay allocated";
  EXPECT_EQ(paused.common.allocated_bytes, before.common.allocated_bytes);
  // The device holds what the other tags map, and pooled only what is left of chunks the other tags still
  // map (a default-tag chunk grows past its block): every page of the weights went back, the memfd's blocks
  // were freed.
  const DriverCensus census = driver_->census();
  EXPECT_EQ(census.page_bytes,
            census_before.page_bytes - weights.reserved_bytes - (before.pooled_bytes - paused.pooled_bytes));
  EXPECT_EQ(census.page_bytes, paused.common.reserved_bytes);
  EXPECT_EQ(census.host_buffers, blocks_of("weights").size());
  EXPECT_GE(weights_paused.backup_bytes, 3000u + 200 * KiB + 1000 * KiB + 7 + 3 * granule);
  expect_intact("weights");

  must(allocator_->resume("weights"));
  const TesseraStats resumed = allocator_->tessera_stats();
  EXPECT_FALSE(stats_of(resumed, "weights").paused);
  EXPECT_EQ(stats_of(resumed, "weights").backup_bytes, 0u);
  EXPECT_EQ(resumed.backup_cache_bytes, weights_paused.backup_bytes) << "the buffers are kept for the next pause";
  expect_intact();  // at the addresses they had
  EXPECT_EQ(allocator_->check(), std::nullopt);
  must(allocator_->empty_cache());
  EXPECT_EQ(driver_->census().host_buffers, 0u) << "empty_cache frees the kept buffers";
  EXPECT_EQ(allocator_->tessera_stats().backup_cache_bytes, 0u);
}

// Resume takes idle pages of the other tags' memory into the pool for the tag's blocks, and the blocks map
// those: no chunk is created beside them, which would leave them pooled and held (colocated RL: the actor's
// memory, freed, is what the engine's weights come back on). An allocation under a tag still takes only
// chunks none of which is mapped (PagePool.TakeFromWholeChunkSkipsChunksPartlyMapped).
TEST_F(TagPauseTest, ResumeMapsTheIdlePagesItTookInsteadOfCreatingChunks) {
  make(256);
  allocate(8 * granule, "weights", OnPause::back_up);
  must(allocator_->pause("weights", true));
  const Address actor = allocate(32 * granule);  // the default tag's, on a chunk of its own with a surplus
  allocate(31 * granule);                         // live beside it, on the surplus
  if (const Bytes rest = allocator_->tessera_stats().pooled_bytes; rest > 0) allocate(rest);
  ASSERT_EQ(allocator_->tessera_stats().pooled_bytes, 0u) << "nothing pooled: resume must take idle pages";
  free(actor);  // idle, cached: its chunk stays partly mapped
  const DriverCensus before = driver_->census();
  const std::uint64_t created = driver_->tally().calls_of(DriverCall::create_chunk);
  const std::uint64_t unmapped = driver_->tally().calls_of(DriverCall::unmap);
  must(allocator_->resume("weights"));
  EXPECT_GT(driver_->tally().calls_of(DriverCall::unmap), unmapped) << "resume took the actor's idle pages";
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::create_chunk), created) << "a chunk created on resume";
  EXPECT_EQ(driver_->census().page_bytes, before.page_bytes) << "more memory held after the resume";
  expect_intact();
  EXPECT_EQ(allocator_->check(), std::nullopt);
}

// A tag paused every step reuses the host buffers of its last backup: no host memory allocated again.
TEST_F(TagPauseTest, ASecondPauseReusesTheBackupBuffersOfTheFirst) {
  make(256);
  build_job();
  must(allocator_->pause("weights", true));
  must(allocator_->resume("weights"));
  const std::size_t kept = driver_->census().host_buffers;
  EXPECT_EQ(kept, blocks_of("weights").size());
  for (Address block : blocks_of("weights")) fill(block, live_.at(block) = static_cast<unsigned char>(live_.at(block) + 1));
  driver_->reset();
  must(allocator_->pause("weights", true));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::allocate_host), 0u);
  EXPECT_EQ(allocator_->tessera_stats().backup_cache_bytes, 0u) << "every kept buffer back in use";
  must(allocator_->resume("weights"));
  EXPECT_EQ(driver_->tally().calls_of(DriverCall::free_host), 0u);
  EXPECT_EQ(driver_->census().host_buffers, kept);
  expect_intact();  // the second backup's contents, not the first's
  EXPECT_EQ(allocator_->check(), std::nullopt);
}

TEST_F(TagPauseTest, WithTheBackupCacheOffResumeFreesTheBuffers) {
  make(256, "backup_cache:off");
  build_job();
  must(allocator_->pause("weights", true));
  EXPECT_EQ(driver_->census().host_buffers, blocks_of("weights").size());
  must(allocator_->resume("weights"));
  EXPECT_EQ(driver_->census().host_buffers, 0u);
  EXPECT_EQ(allocator_->tessera_stats().backup_cache_bytes, 0u);
  expect_intact();
}

TEST_F(TagPauseTest, OtherTagsStitchAndCollectGarbageInThePausedTagsMemory) {
  make(48, "garbage_collection_threshold:0.9");
  for (int i = 0; i < 6; ++i) allocate(3 * granule, "weights");
  std::vector<Address> scattered;
  for (int i = 0; i < 6; ++i) {
    scattered.push_back(allocate(2 * granule));
    allocate(granule / 2);
  }
  for (Address block : scattered) free(block);  // idle pages scattered between live blocks
  must(allocator_->pause("weights", true));
  const TesseraStats paused = allocator_->tessera_stats();
  // More than the device has free even without the weights: built from the weights' pages and the
  // scattered idle ones, stitched in or shared as slivers.
  const Address big = allocate(38 * granule);
  const TesseraStats built = allocator_->tessera_stats();
  EXPECT_GT(built.stitches + built.shared_blocks, paused.stitches + paused.shared_blocks);
  expect_intact("weights");
  free(big);
  must(allocator_->resume("weights"));
  expect_intact();
}

// A block built over slivers at the limit, under the paused tag: its own pages and both slivers' granules
// go back, and come back mapped at its address, the slivers on the granules their home slots map now.
TEST_F(TagPauseTest, ABlockOverSliversIsPausedAndResumedWithItsSlivers) {
  make(7, "small_max_kb:4");  // every request above 4 KiB is large
  constexpr Bytes half = granule / 2;
  allocate(3 * half, "kv_cache");
  const Address tail_sliver = allocate(half, "kv_cache");
  allocate(granule, "kv_cache");
  const Address head_sliver = allocate(half, "kv_cache");
  allocate(3 * half, "kv_cache");
  free(head_sliver);
  free(tail_sliver);
  const Address shared = allocate(3 * granule, "kv_cache");
  ASSERT_EQ(allocator_->tessera_stats().shared_blocks, 1u) << "the scenario builds a block over slivers";
  must(allocator_->pause("kv_cache", true));
  EXPECT_EQ(driver_->census().page_bytes, 0u) << "everything the tag held went back";
  EXPECT_EQ(driver_->census().mappings, 0u);
  EXPECT_EQ(allocator_->check(), std::nullopt);
  const Address other = allocate(7 * granule);  // the whole device, meanwhile
  free(other);
  must(allocator_->resume("kv_cache"));
  EXPECT_TRUE(holds(shared));
  expect_intact();
  // The slivers are shared again: writing the whole block reaches their bytes, never a neighbour's.
  fill(shared, 77);
  live_[shared] = 77;
  expect_intact();
}

TEST_F(TagPauseTest, AllocatingUnderAPausedTagIsAnErrorNamingItAndFreeingAPausedBlockDropsItsBackup) {
  make(64);
  build_job();
  must(allocator_->pause("kv_cache", true));
  {
    TagScope kv("kv_cache");
    auto refused = allocator_->allocate(1000, default_stream);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("'kv_cache'"), std::string::npos) << refused.error().message;
    EXPECT_NE(refused.error().message.find("paused"), std::string::npos) << refused.error().message;
  }
  allocate(1000);  // other tags go on
  const std::vector<Address> kv = blocks_of("kv_cache");
  const Bytes backed_up = stats_of(allocator_->tessera_stats(), "kv_cache").backup_bytes;
  free(kv.front());
  const TesseraStats after_free = allocator_->tessera_stats();
  EXPECT_LT(stats_of(after_free, "kv_cache").backup_bytes, backed_up) << "its backup went";
  EXPECT_EQ(stats_of(after_free, "kv_cache").backup_bytes + after_free.backup_cache_bytes, backed_up)
      << "into the buffers kept for the next pause";
  EXPECT_EQ(driver_->census().host_buffers, kv.size());
  must(allocator_->resume("kv_cache"));
  expect_intact();
  EXPECT_EQ(allocator_->check(), std::nullopt);
}

TEST_F(TagPauseTest, AnUnknownTagIsAnErrorNamingItAndAPausedTagPausesOnce) {
  make(64);
  build_job();
  auto unknown = allocator_->pause("optimizer", false);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  EXPECT_NE(unknown.error().message.find("'optimizer'"), std::string::npos) << unknown.error().message;
  EXPECT_FALSE(allocator_->resume("optimizer"));

  must(allocator_->pause("weights", false));
  driver_->reset();
  const DriverCensus census = driver_->census();
  must(allocator_->pause("weights", false));
  EXPECT_EQ(driver_->tally().total_calls(), 0u) << "pausing a paused tag does nothing";
  EXPECT_EQ(driver_->census(), census);
  // Asking for a backup the first pause did not make cannot be done: the bytes are gone. Refused, naming the
  // tag and what was lost, and nothing changes.
  auto late = allocator_->pause("weights", true);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, Errc::invalid_argument);
  EXPECT_NE(late.error().message.find("'weights'"), std::string::npos) << late.error().message;
  EXPECT_NE(late.error().message.find("without a backup"), std::string::npos) << late.error().message;
  EXPECT_EQ(driver_->tally().total_calls(), 0u);
  EXPECT_EQ(driver_->census(), census);
  EXPECT_EQ(allocator_->tessera_stats().pauses, 1u);
  must(allocator_->resume("weights"));  // without a backup: the contents are unspecified, the blocks usable
  for (Address block : blocks_of("weights")) fill(block, live_.at(block));
  must(allocator_->resume("weights"));  // not paused: nothing
  EXPECT_EQ(allocator_->tessera_stats().resumes, 1u);
  expect_intact();
}

TEST_F(TagPauseTest, ResumeOutOfMemoryIsAnAnswerThatKeepsEveryBackup) {
  make(24);
  const Address first = allocate(4 * granule, "weights");
  allocate(2 * granule, "weights");
  must(allocator_->pause("weights", true));
  // The device is now full of other memory.
  std::vector<Address> filler;
  for (int i = 0; i < 11; ++i) filler.push_back(allocate(2 * granule));
  auto refused = allocator_->resume("weights");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::out_of_memory);
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find("'weights'"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(6 * granule) + " bytes"), std::string::npos) << "says what it needs: " << message;
  EXPECT_TRUE(stats_of(allocator_->tessera_stats(), "weights").paused);
  EXPECT_EQ(driver_->census().host_buffers, 2u);
  EXPECT_EQ(allocator_->check(), std::nullopt);
  free(filler[3]);
  free(filler[7]);
  free(filler[9]);
  must(allocator_->resume("weights"));
  EXPECT_TRUE(holds(first));
  expect_intact();
}

// Every driver call of a pause and of a resume, failed once at its first, middle and last occurrence:
// nothing is lost, check() holds, and trying again succeeds.
TEST_F(TagPauseTest, AFailureAtAnyDriverCallOfPauseOrResumeLosesNothing) {
  auto scenario = [&] {
    make(64, "chunk_max_mb:0");
    build_job();
    for (Address block : blocks_of("default")) free(block);
    allocate(3 * granule);  // cached memory beside the tags
  };
  scenario();
  driver_->reset();
  must(allocator_->pause("weights", true));
  const CallTally pause_calls = driver_->tally();
  driver_->reset();
  must(allocator_->resume("weights"));
  const CallTally resume_calls = driver_->tally();
  allocator_.reset();
  live_.clear();

  int faults = 0;
  for (const bool in_pause : {true, false}) {
    const CallTally& calls = in_pause ? pause_calls : resume_calls;
    for (std::size_t kind = 0; kind < driver_call_count; ++kind) {
      const auto call = static_cast<DriverCall>(kind);
      const std::uint64_t count = calls.calls_of(call);
      if (count == 0) continue;
      for (const std::uint64_t nth : {std::uint64_t{1}, (count + 1) / 2, count}) {
        SCOPED_TRACE(::testing::Message() << (in_pause ? "pause" : "resume") << ", " << to_string(call) << " #" << nth);
        scenario();
        if (!in_pause) must(allocator_->pause("weights", true));
        faults_->fail(call, nth);
        auto first_try = in_pause ? allocator_->pause("weights", true) : allocator_->resume("weights");
        faults_->clear_all();
        if (!first_try) ++faults;
        EXPECT_EQ(allocator_->check(), std::nullopt) << (first_try ? "" : first_try.error().message);
        expect_intact("weights");
        if (in_pause) must(allocator_->pause("weights", true));
        must(allocator_->resume("weights"));
        expect_intact();
        must(allocator_->empty_cache());  // a free of a backup that failed is retried here
        EXPECT_EQ(driver_->census().host_buffers, 0u);
        TearDown();
      }
    }
  }
  EXPECT_GT(faults, 10) << "the faults reached pause and resume";
}

// The backup is each block's choice, made when it is allocated: a scope opened later, inside or after, for
// the same tag changes nothing for the blocks before it (torch_memory_saver keeps the flag per allocation).
TEST_F(TagPauseTest, TheBackupChoiceIsEachBlocksMadeWhenItIsAllocated) {
  make(128);
  const Address first = allocate(300 * KiB, "n", OnPause::back_up);
  Address inner = 0;
  Address after = 0;
  {
    TagScope outer("n", OnPause::back_up);
    inner = allocate(200 * KiB, "n", OnPause::discard);  // a scope inside the outer one, without backup
    after = allocate(3 * granule + 5, "n", OnPause::back_up);
  }
  const Address plain = allocate(100 * KiB, "n");
  must(allocator_->pause("n", false));
  const TesseraStats paused = allocator_->tessera_stats();
  EXPECT_EQ(stats_of(paused, "n").backup_bytes, sizes_.at(first) + sizes_.at(after)) << "the two blocks that asked, only";
  must(allocator_->resume("n"));
  EXPECT_TRUE(holds(first));
  EXPECT_TRUE(holds(after));
  for (Address unspecified : {inner, plain}) fill(unspecified, live_.at(unspecified));
  // A pause with backup takes every block, whatever each asked.
  must(allocator_->pause("n", true));
  EXPECT_EQ(stats_of(allocator_->tessera_stats(), "n").backup_bytes,
            sizes_.at(first) + sizes_.at(inner) + sizes_.at(after) + sizes_.at(plain));
  must(allocator_->resume("n"));
  expect_intact();
}

TEST_F(TagPauseTest, ANameThatIsNotATagIsRefusedWhereItEntersAndOpensNothing) {
  make(16);
  for (std::string_view bad : {std::string_view("\xff", 1), std::string_view("a\0b", 3), std::string_view("tab\t"),
                               std::string_view("\xc0\x80"), std::string_view("\xed\xa0\x80")}) {
    auto pushed = push_tag(bad);
    ASSERT_FALSE(pushed) << quoted_tag_name(bad);
    EXPECT_EQ(pushed.error().code, Errc::invalid_argument);
    EXPECT_NE(pushed.error().message.find("offset"), std::string::npos) << pushed.error().message;
    EXPECT_EQ(current_tag(), default_tag) << "nothing opened";
    EXPECT_FALSE(pop_tag());
  }
  EXPECT_FALSE(push_tag(std::string(max_tag_name_bytes + 1, 'x')));
  must(push_tag(std::string(max_tag_name_bytes, 'x')));
  must(push_tag("\xe6\x9d\x83\xe9\x87\x8d"));  // valid UTF-8 (CJK) is a tag
  EXPECT_TRUE(pop_tag());
  EXPECT_TRUE(pop_tag());
  EXPECT_THROW(TagScope scope(std::string_view("\xff", 1)), std::invalid_argument);
  EXPECT_EQ(current_tag(), default_tag);
}

// A block that grows between pauses leaves its old buffer to no one: the cache frees it at the next pause,
// instead of keeping every size it ever held (the cache stays within one buffer per block that may pause).
TEST_F(TagPauseTest, TheBackupCacheKeepsOnlyBuffersALiveBlockOfAPausingTagCouldTake) {
  make(1024);
  Bytes size = 1 * MiB;
  Bytes most_kept = 0;
  for (int cycle = 0; cycle < 40; ++cycle) {
    const Address block = allocate(size, "grow");
    must(allocator_->pause("grow", true));
    EXPECT_EQ(allocator_->tessera_stats().backup_cache_bytes, 0u) << "cycle " << cycle << ": the old buffer went";
    must(allocator_->resume("grow"));
    EXPECT_TRUE(holds(block));
    const Bytes kept = allocator_->tessera_stats().backup_cache_bytes;
    EXPECT_LE(kept, 2 * size) << "cycle " << cycle;
    EXPECT_GE(kept, size) << "cycle " << cycle << ": the live block's buffer is kept for its next pause";
    most_kept = std::max(most_kept, kept);
    free(block);
    size += size / 20;  // 5% a cycle: no old buffer fits the next block
  }
  EXPECT_LE(driver_->census().host_bytes, 2 * size);
  EXPECT_LT(most_kept, 2 * size);
}

}  // namespace
}  // namespace tessera
