// The page pool on its own: a page put back coalesces with the pooled runs of its own chunk on either side
// and never with another chunk's; take_at_most answers the largest run that fits, else (where it may split)
// the first granules of the smallest larger run, the rest staying pooled; take_whole_chunk answers only
// wholly pooled chunks, the largest first; the counts (granules, pooled_of, chunk_count, visit_chunks) agree
// with what was put and taken. Checked against a plain set of pooled (chunk, granule) over random puts
// and takes.
#include "core/page_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tessera::core {
namespace {

constexpr ChunkId chunk_a{1};
constexpr ChunkId chunk_b{2};
constexpr ChunkId chunk_c{3};

bool same(const Page& left, const Page& right) {
  return left.chunk == right.chunk && left.granules == right.granules && left.offset == right.offset;
}

std::string show(const Page& page) {
  return "{chunk " + std::to_string(static_cast<std::uint64_t>(page.chunk)) + ", " + std::to_string(page.granules) +
         " granules at " + std::to_string(page.offset) + "}";
}

// Whether the pool answered exactly `expected`.
::testing::AssertionResult is_page(const std::optional<Page>& answer, const Page& expected) {
  if (!answer) return ::testing::AssertionFailure() << "no page, expected " << show(expected);
  if (!same(*answer, expected)) {
    return ::testing::AssertionFailure() << show(*answer) << " instead of " << show(expected);
  }
  return ::testing::AssertionSuccess();
}

TEST(PagePool, APutPageCoalescesWithThePooledRunsOfItsChunkOnEitherSide) {
  PagePool pool;
  pool.add_chunk(chunk_a, 6);
  pool.put(Page{chunk_a, 2, 0});
  pool.put(Page{chunk_a, 2, 4});
  EXPECT_FALSE(pool.take_whole_chunk().has_value()) << "two runs with a gap between them are not the chunk";
  pool.put(Page{chunk_a, 2, 2});  // fills the gap: one run of the whole chunk, at offset 0
  EXPECT_EQ(pool.granules(), 6u);
  EXPECT_TRUE(is_page(pool.take_at_most(6, false), Page{chunk_a, 6, 0}));
  EXPECT_TRUE(pool.empty());
}

TEST(PagePool, APutPageCoalescesWithARunBeforeItAndWithARunAfterIt) {
  PagePool pool;
  pool.add_chunk(chunk_a, 8);
  pool.put(Page{chunk_a, 3, 0});
  pool.put(Page{chunk_a, 2, 3});  // after a run: one run of 5 at 0
  EXPECT_TRUE(is_page(pool.take_at_most(5, false), Page{chunk_a, 5, 0}));
  pool.put(Page{chunk_a, 3, 5});
  pool.put(Page{chunk_a, 1, 4});  // before a run: one run of 4 at 4
  EXPECT_TRUE(is_page(pool.take_at_most(7, false), Page{chunk_a, 4, 4}));
  EXPECT_TRUE(pool.empty());
}

TEST(PagePool, RunsOfTwoChunksNeverCoalesceEvenWhereOneEndsAndTheNextBegins) {
  PagePool pool;
  pool.add_chunk(chunk_a, 4);
  pool.add_chunk(chunk_b, 4);
  pool.put(Page{chunk_a, 2, 2});  // the end of chunk a
  pool.put(Page{chunk_b, 2, 0});  // the start of chunk b, the next id
  EXPECT_EQ(pool.granules(), 4u);
  const std::optional<Page> taken = pool.take_at_most(4, false);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->granules, 2u) << "a run across two chunks: " << show(*taken);
  EXPECT_FALSE(pool.take_whole_chunk().has_value());
  EXPECT_EQ(pool.granules(), 2u);
}

TEST(PagePool, TakeAtMostGivesTheLargestRunThatFits) {
  PagePool pool;
  pool.add_chunk(chunk_a, 8);
  pool.add_chunk(chunk_b, 5);
  pool.put(Page{chunk_a, 1, 0});
  pool.put(Page{chunk_a, 3, 4});
  pool.put(Page{chunk_b, 5, 0});
  EXPECT_TRUE(is_page(pool.take_at_most(4, false), Page{chunk_a, 3, 4}));
  EXPECT_TRUE(is_page(pool.take_at_most(4, false), Page{chunk_a, 1, 0}));
  EXPECT_FALSE(pool.take_at_most(4, false).has_value()) << "only a larger run is left, and no split is allowed";
  EXPECT_EQ(pool.granules(), 5u) << "a refusal takes nothing";
  EXPECT_FALSE(pool.take_at_most(0, true).has_value()) << "no page has 0 granules";
  EXPECT_EQ(pool.granules(), 5u);
}

TEST(PagePool, TakeFromWholeChunkSkipsChunksPartlyMapped) {
  PagePool pool;
  pool.add_chunk(chunk_a, 8);
  pool.add_chunk(chunk_b, 5);
  pool.add_chunk(chunk_c, 3);
  pool.put(Page{chunk_a, 4, 4});  // half of a is mapped elsewhere
  pool.put(Page{chunk_b, 5, 0});
  pool.put(Page{chunk_c, 3, 0});
  EXPECT_TRUE(is_page(pool.take_from_whole_chunk(4, true), Page{chunk_b, 4, 0}))
      << "the smallest whole chunk that holds them, cut: never a's pooled half";
  EXPECT_EQ(pool.pooled_of(chunk_b), 1u);
  EXPECT_TRUE(is_page(pool.take_from_whole_chunk(4, false), Page{chunk_c, 3, 0})) << "else the largest smaller one";
  EXPECT_FALSE(pool.take_from_whole_chunk(4, true).has_value()) << "b is partly taken now, a partly mapped";
  EXPECT_EQ(pool.granules(), 5u);
  EXPECT_FALSE(pool.take_from_whole_chunk(0, true).has_value());
}

TEST(PagePool, ASplitGivesTheFirstGranulesOfTheSmallestLargerRunAndPoolsTheRest) {
  PagePool pool;
  pool.add_chunk(chunk_a, 7);
  pool.add_chunk(chunk_b, 5);
  pool.add_chunk(chunk_c, 9);
  pool.put(Page{chunk_a, 7, 0});
  pool.put(Page{chunk_b, 5, 0});
  pool.put(Page{chunk_c, 9, 0});
  EXPECT_TRUE(is_page(pool.take_at_most(3, true), Page{chunk_b, 3, 0}));
  EXPECT_EQ(pool.granules(), 18u);
  EXPECT_EQ(pool.pooled_of(chunk_b), 2u);
  EXPECT_TRUE(is_page(pool.take_at_most(2, false), Page{chunk_b, 2, 3})) << "the rest, pooled as one run";
  EXPECT_EQ(pool.pooled_of(chunk_b), 0u);
  // A split is only the fallback: a run that fits goes first.
  pool.put(Page{chunk_b, 1, 4});
  EXPECT_TRUE(is_page(pool.take_at_most(3, true), Page{chunk_b, 1, 4}));
}

TEST(PagePool, TakeWholeChunkGivesOnlyWhollyPooledChunksLargestFirst) {
  PagePool pool;
  pool.add_chunk(chunk_a, 4);
  pool.add_chunk(chunk_b, 8);
  pool.add_chunk(chunk_c, 6);
  pool.put(Page{chunk_a, 4, 0});
  pool.put(Page{chunk_b, 7, 0});  // a larger run than either whole chunk, at offset 0, but not all of b
  pool.put(Page{chunk_c, 6, 0});
  EXPECT_TRUE(is_page(pool.take_whole_chunk(), Page{chunk_c, 6, 0}));
  EXPECT_TRUE(is_page(pool.take_whole_chunk(), Page{chunk_a, 4, 0}));
  EXPECT_FALSE(pool.take_whole_chunk().has_value());
  EXPECT_EQ(pool.granules(), 7u);
  pool.put(Page{chunk_b, 1, 7});
  EXPECT_TRUE(is_page(pool.take_whole_chunk(), Page{chunk_b, 8, 0}));
  EXPECT_TRUE(pool.empty());
}

TEST(PagePool, TheCountsFollowEveryChunkAddedPutTakenAndForgotten) {
  PagePool pool;
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.chunk_count(), 0u);
  pool.add_chunk(chunk_a, 4);
  pool.add_chunk(chunk_b, 2);
  EXPECT_EQ(pool.chunk_count(), 2u);
  EXPECT_TRUE(pool.empty()) << "a new chunk has none of it pooled";
  EXPECT_EQ(pool.pooled_of(chunk_a), 0u);
  EXPECT_EQ(pool.chunk_granules(chunk_a), 4u);
  EXPECT_EQ(pool.chunk_granules(chunk_c), 0u) << "unknown";
  pool.put(Page{chunk_a, 1, 3});
  pool.put(Page{chunk_b, 2, 0});
  EXPECT_FALSE(pool.empty());
  EXPECT_EQ(pool.granules(), 3u);
  EXPECT_EQ(pool.pooled_of(chunk_a), 1u);
  EXPECT_EQ(pool.pooled_of(chunk_b), 2u);
  std::map<ChunkId, std::uint32_t> visited;
  pool.visit_chunks([&](ChunkId chunk, std::uint32_t granules) {
    EXPECT_TRUE(visited.emplace(chunk, granules).second) << "visited twice";
  });
  EXPECT_EQ(visited, (std::map<ChunkId, std::uint32_t>{{chunk_a, 4}, {chunk_b, 2}}));
  EXPECT_TRUE(is_page(pool.take_whole_chunk(), Page{chunk_b, 2, 0}));
  EXPECT_EQ(pool.pooled_of(chunk_b), 0u);
  EXPECT_EQ(pool.chunk_count(), 2u) << "taken out, not forgotten";
  pool.forget_chunk(chunk_b);
  EXPECT_EQ(pool.chunk_count(), 1u);
  EXPECT_EQ(pool.chunk_granules(chunk_b), 0u);
  EXPECT_EQ(pool.granules(), 1u);
}

// The reference: the pooled granules as a plain set, and the chunks' sizes. Its runs are the maximal runs
// of consecutive granules of one chunk — what a pool that coalesces holds.
struct Reference {
  std::map<std::uint64_t, std::uint32_t> chunks;     // id -> granules
  std::set<std::pair<std::uint64_t, std::uint32_t>> pooled;  // (chunk, granule)

  std::vector<Page> runs() const {
    std::vector<Page> runs;
    for (const auto& [chunk, granule] : pooled) {
      if (!runs.empty() && static_cast<std::uint64_t>(runs.back().chunk) == chunk &&
          runs.back().offset + runs.back().granules == granule) {
        ++runs.back().granules;
      } else {
        runs.push_back(Page{ChunkId{chunk}, 1, granule});
      }
    }
    return runs;
  }
  std::uint32_t pooled_of(std::uint64_t chunk) const {
    auto from = pooled.lower_bound({chunk, 0});
    auto to = pooled.lower_bound({chunk + 1, 0});
    return static_cast<std::uint32_t>(std::distance(from, to));
  }
  void put(const Page& page) {
    for (std::uint32_t g = page.offset; g < page.offset + page.granules; ++g) {
      pooled.emplace(static_cast<std::uint64_t>(page.chunk), g);
    }
  }
  // Removes what the pool answered; false if some of it was not pooled.
  bool take(const Page& page) {
    for (std::uint32_t g = page.offset; g < page.offset + page.granules; ++g) {
      if (pooled.erase({static_cast<std::uint64_t>(page.chunk), g}) == 0) return false;
    }
    return true;
  }
};

void expect_counts_agree(const PagePool& pool, const Reference& reference, int step) {
  ASSERT_EQ(pool.granules(), reference.pooled.size()) << "step " << step;
  ASSERT_EQ(pool.empty(), reference.pooled.empty()) << "step " << step;
  ASSERT_EQ(pool.chunk_count(), reference.chunks.size()) << "step " << step;
  std::map<std::uint64_t, std::uint32_t> visited;
  pool.visit_chunks([&](ChunkId chunk, std::uint32_t granules) {
    EXPECT_TRUE(visited.emplace(static_cast<std::uint64_t>(chunk), granules).second) << "visited twice";
  });
  ASSERT_EQ(visited, reference.chunks) << "step " << step;
  for (const auto& [chunk, granules] : reference.chunks) {
    ASSERT_EQ(pool.chunk_granules(ChunkId{chunk}), granules) << "step " << step;
    ASSERT_EQ(pool.pooled_of(ChunkId{chunk}), reference.pooled_of(chunk)) << "chunk " << chunk << " step " << step;
  }
}

TEST(PagePool, AgreesWithASetOfPooledGranulesThroughRandomPutsAndTakes) {
  std::mt19937 random(20240607);
  PagePool pool;
  Reference reference;
  std::uint64_t next_chunk = 1;
  int fits = 0, splits = 0, refusals = 0, whole_chunks = 0;  // so that the walk is seen to reach every answer
  auto below = [&](std::uint32_t bound) { return static_cast<std::uint32_t>(random() % bound); };
  for (int step = 0; step < 4000; ++step) {
    const std::uint32_t action = below(10);
    if (action == 0 && reference.chunks.size() < 12) {
      const std::uint32_t granules = 1 + below(8);
      pool.add_chunk(ChunkId{next_chunk}, granules);
      reference.chunks.emplace(next_chunk++, granules);
    } else if (action <= 4 && !reference.chunks.empty()) {
      // Put back a random part of what is out of the pool (mapped, in the allocator) of a random chunk.
      auto chunk = std::next(reference.chunks.begin(), below(static_cast<std::uint32_t>(reference.chunks.size())));
      std::vector<std::uint32_t> out;
      for (std::uint32_t g = 0; g < chunk->second; ++g) {
        if (!reference.pooled.contains({chunk->first, g})) out.push_back(g);
      }
      if (out.empty()) continue;
      const std::uint32_t first = out[below(static_cast<std::uint32_t>(out.size()))];
      std::uint32_t end = first + 1;
      while (end < chunk->second && !reference.pooled.contains({chunk->first, end}) && below(3) != 0) ++end;
      const Page page{ChunkId{chunk->first}, end - first, first};
      pool.put(page);
      reference.put(page);
    } else if (action <= 8) {
      const std::uint32_t granules = below(2) == 0 ? 1 + below(2) : 1 + below(9);
      const bool split = below(2) == 0;
      const std::vector<Page> runs = reference.runs();
      std::uint32_t largest_fit = 0;
      std::uint32_t smallest_larger = UINT32_MAX;
      for (const Page& run : runs) {
        if (run.granules <= granules) largest_fit = std::max(largest_fit, run.granules);
        if (run.granules > granules) smallest_larger = std::min(smallest_larger, run.granules);
      }
      const std::optional<Page> taken = pool.take_at_most(granules, split);
      auto is_run_of = [&](const Page& page, std::uint32_t size) {
        for (const Page& run : runs) {
          if (run.chunk == page.chunk && run.offset == page.offset && run.granules == size) return true;
        }
        return false;
      };
      if (largest_fit > 0) {
        ASSERT_TRUE(taken.has_value()) << "step " << step;
        ASSERT_EQ(taken->granules, largest_fit) << "not the largest run of at most " << granules << ", step " << step;
        ASSERT_TRUE(is_run_of(*taken, largest_fit)) << show(*taken) << " is not a whole run, step " << step;
        ++fits;
      } else if (split && smallest_larger != UINT32_MAX) {
        ASSERT_TRUE(taken.has_value()) << "step " << step;
        ASSERT_EQ(taken->granules, granules) << "step " << step;
        ASSERT_TRUE(is_run_of(*taken, smallest_larger))
            << show(*taken) << " is not the head of a smallest larger run, step " << step;
        ++splits;
      } else {
        ASSERT_FALSE(taken.has_value()) << show(*taken) << " step " << step;
        ++refusals;
      }
      if (taken) {
        ASSERT_TRUE(reference.take(*taken)) << "answered granules that were not pooled, step " << step;
      }
    } else {
      std::uint32_t largest_whole = 0;
      for (const auto& [chunk, granules] : reference.chunks) {
        if (reference.pooled_of(chunk) == granules) largest_whole = std::max(largest_whole, granules);
      }
      const std::optional<Page> taken = pool.take_whole_chunk();
      if (largest_whole == 0) {
        ASSERT_FALSE(taken.has_value()) << show(*taken) << " step " << step;
      } else {
        ASSERT_TRUE(taken.has_value()) << "step " << step;
        const std::uint64_t chunk = static_cast<std::uint64_t>(taken->chunk);
        ASSERT_TRUE(reference.chunks.contains(chunk));
        ASSERT_EQ(taken->offset, 0u);
        ASSERT_EQ(taken->granules, reference.chunks.at(chunk)) << "not all of the chunk, step " << step;
        ASSERT_EQ(taken->granules, largest_whole) << "not the largest wholly pooled chunk, step " << step;
        ASSERT_TRUE(reference.take(*taken));
        ++whole_chunks;
        if (below(2) == 0) {  // given back to the device
          pool.forget_chunk(taken->chunk);
          reference.chunks.erase(chunk);
        }
      }
    }
    expect_counts_agree(pool, reference, step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(fits, 500);
  EXPECT_GT(splits, 30);
  EXPECT_GT(refusals, 50);
  EXPECT_GT(whole_chunks, 30);
}

}  // namespace
}  // namespace tessera::core
