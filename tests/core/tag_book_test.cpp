// The tag book over a mapper on the sim driver, without the allocator: tags in the order first used, the
// paused count, the error naming the known tags, backups and the buffers kept for the next pause, and no
// host buffer left behind when the book goes.
#include "core/tag_book.hpp"

#include <gtest/gtest.h>

#include "driver/driver_fixtures.hpp"
#include "support/must.hpp"
#include "tessera/drivers.hpp"

namespace tessera::core {
namespace {

using test_support::must;

constexpr Bytes granule = 2 * MiB;

struct TagBookTest : ::testing::Test {
  SimDriverHandle sim = must(make_sim_driver({.capacity = 64 * granule, .granularity = granule}));
  Observers observers;
  Mapper mapper{*sim.driver, observers};

  std::size_t host_buffers() const { return sim.driver->census().host_buffers; }
};

TEST_F(TagBookTest, TagsAreKeptInTheOrderFirstUsedAndPausesAreCounted) {
  TagBook book(mapper, true);
  const TagId weights = must(intern_tag("weights"));
  const TagId cache = must(intern_tag("kv.cache"));
  book.note_used(cache);
  book.note_used(weights);
  book.note_used(cache);
  EXPECT_EQ(book.names(), (std::vector<std::string>{"kv.cache", "weights"}));
  EXPECT_FALSE(book.any_paused());
  book.set_paused(*book.state_of(weights), true);
  book.set_paused(*book.state_of(weights), true);  // twice: counted once
  EXPECT_TRUE(book.is_paused(weights));
  EXPECT_EQ(book.paused_count(), 1u);
  book.set_paused(*book.state_of(weights), false);
  EXPECT_FALSE(book.any_paused());
  EXPECT_TRUE(book.state_of(weights)->paused_before);
  EXPECT_FALSE(book.state_of(cache)->paused_before);
}

TEST_F(TagBookTest, AnUnknownTagIsAnErrorNamingTheKnownOnes) {
  TagBook book(mapper, true);
  EXPECT_NE(book.known("weights", "pause").error().message.find("tags here: none"), std::string::npos);
  book.note_used(must(intern_tag("weights")));
  EXPECT_EQ(must(book.known("weights", "pause")), must(intern_tag("weights")));
  const Error error = book.known("never-used-here", "resume").error();
  EXPECT_EQ(error.code, Errc::not_found);
  EXPECT_NE(error.message.find("resume of tag 'never-used-here'"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find("'weights'"), std::string::npos) << error.message;
}

TEST_F(TagBookTest, ABackupsBufferIsKeptForTheNextPauseOrFreedWhenTheOptionIsOff) {
  Block block;
  block.address = 0x1000;
  block.requested = 1 << 20;
  {
    TagBook book(mapper, true);
    const HostBuffer buffer = must(book.buffer_for(block.requested));
    book.keep_backup(&block, buffer);
    EXPECT_TRUE(book.has_backup(&block));
    book.drop_backup(&block);
    EXPECT_FALSE(book.has_backup(&block));
    EXPECT_EQ(host_buffers(), 1u) << "kept";
    EXPECT_EQ(book.kept_buffer_bytes(), buffer.size);
    const HostBuffer again = must(book.buffer_for(block.requested));
    EXPECT_EQ(again.id, buffer.id) << "the kept buffer serves the next pause";
    EXPECT_EQ(host_buffers(), 1u);
    book.keep_backup(&block, again);
  }
  EXPECT_EQ(host_buffers(), 0u) << "the book frees every backup and kept buffer when it goes";
  TagBook book(mapper, false);
  book.keep_backup(&block, must(book.buffer_for(block.requested)));
  book.drop_backups_if([&](const Block* candidate) { return candidate == &block; });
  EXPECT_EQ(host_buffers(), 0u) << "off: freed at once";
  EXPECT_EQ(book.kept_buffer_bytes(), 0u);
}

TEST_F(TagBookTest, TrimmingKeepsOneBufferPerWantedSize) {
  TagBook book(mapper, true);
  for (Bytes size : {Bytes{1} << 20, Bytes{1} << 20, Bytes{4} << 20}) book.release_buffer(must(book.buffer_for(size)));
  EXPECT_EQ(host_buffers(), 2u) << "the second 1 MiB took the first one's buffer; 4 MiB fits in neither";
  std::vector<HostBuffer> held;
  for (Bytes size : {Bytes{1} << 20, Bytes{1} << 20, Bytes{4} << 20}) held.push_back(must(book.buffer_for(size)));
  for (const HostBuffer& buffer : held) book.release_buffer(buffer);
  EXPECT_EQ(host_buffers(), 3u);
  book.keep_buffers_only_for({Bytes{1} << 20});
  EXPECT_EQ(host_buffers(), 1u);
  EXPECT_EQ(book.kept_buffer_bytes(), Bytes{1} << 20);
  book.free_kept_buffers();
  EXPECT_EQ(host_buffers(), 0u);
}

}  // namespace
}  // namespace tessera::core
