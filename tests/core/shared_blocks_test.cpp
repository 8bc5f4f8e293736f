// The shared blocks' list without the allocator: found from their block by address, none for an arena's
// block or a block at the same address that is not theirs, and removal keeps the others in order.
#include "core/shared_blocks.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::core {
namespace {

std::unique_ptr<SharedBlock> shared_at(Address address) {
  auto shared = std::make_unique<SharedBlock>();
  shared->base = address & ~Address{0xfff};
  shared->block.address = address;
  shared->block.size = 4096;
  return shared;
}

std::vector<Address> addresses(const SharedBlocks& blocks) {
  std::vector<Address> found;
  for (const auto& shared : blocks) found.push_back(shared->block.address);
  return found;
}

TEST(SharedBlocks, AreFoundFromTheirBlockAndOnlyFromIt) {
  SharedBlocks blocks;
  SharedBlock& first = blocks.add(shared_at(0x10'0100));
  SharedBlock& second = blocks.add(shared_at(0x20'0000));
  EXPECT_EQ(blocks.of(&first.block), &first);
  EXPECT_EQ(blocks.of(&second.block), &second);
  Block elsewhere;
  elsewhere.address = 0x10'0100;  // an arena's block at the same address is not the shared one
  EXPECT_EQ(blocks.of(&elsewhere), nullptr);
  elsewhere.address = 0x30'0000;
  EXPECT_EQ(blocks.of(&elsewhere), nullptr);
  const SharedBlocks& view = blocks;
  EXPECT_EQ(view.of(&first.block), &first);
}

TEST(SharedBlocks, RemovingOneKeepsTheOthersInTheOrderBuilt) {
  SharedBlocks blocks;
  blocks.add(shared_at(0x10'0000));
  Block* middle = &blocks.add(shared_at(0x20'0000)).block;
  blocks.add(shared_at(0x30'0000));
  blocks.remove(middle);
  EXPECT_EQ(addresses(blocks), (std::vector<Address>{0x10'0000, 0x30'0000}));
  EXPECT_EQ(blocks.size(), 2u);
  Block stranger;
  stranger.address = 0x10'0000;
  blocks.remove(&stranger);  // not one of them: nothing changes
  EXPECT_EQ(blocks.size(), 2u);
  blocks.add(shared_at(0x20'0000));  // an address may be used again once its block went
  EXPECT_EQ(addresses(blocks), (std::vector<Address>{0x10'0000, 0x30'0000, 0x20'0000}));
  EXPECT_FALSE(blocks.empty());
}

}  // namespace
}  // namespace tessera::core
