// The live-block table against std::unordered_map, over random inserts and erases with many collisions.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "support/address_table.hpp"

namespace tessera::support {
namespace {

// The key that marks an empty slot is never found, even while empty slots are everywhere.
TEST(AddressTable, TheEmptyMarkerIsNeverAKey) {
  AddressTable<std::uint64_t> table;
  table.insert(Address{1} << 40, 1);
  const Address marker = ~Address{0};
  EXPECT_EQ(table.find(marker), nullptr);
  EXPECT_EQ(table.slot_of(marker), table.npos);
  EXPECT_FALSE(table.erase(marker));
  EXPECT_EQ(table.size(), 1u);
  ASSERT_NE(table.find(Address{1} << 40), nullptr);
  const std::size_t slot = table.slot_of(Address{1} << 40);
  EXPECT_EQ(table.value_at(slot), 1u);
  table.erase_slot(slot);
  EXPECT_EQ(table.find(Address{1} << 40), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(AddressTable, AgreesWithAStandardMapThroughRandomInsertsAndErases) {
  AddressTable<std::uint64_t> table;
  std::unordered_map<Address, std::uint64_t> reference;
  std::mt19937_64 random(7);
  std::vector<Address> keys;
  for (int step = 0; step < 200000; ++step) {
    // Few distinct keys on 512-byte boundaries: long probe chains and wrap-around.
    const Address key = (random() % 4096) * 512 + (Address{1} << 40);
    if (random() % 3 != 0) {
      if (reference.count(key) == 0) {
        table.insert(key, key ^ 0x55);
        reference.emplace(key, key ^ 0x55);
      }
    } else {
      EXPECT_EQ(table.erase(key), reference.erase(key) == 1);
    }
    if (step % 997 == 0) {
      ASSERT_EQ(table.size(), reference.size());
      for (const auto& [present, value] : reference) {
        const std::uint64_t* found = table.find(present);
        ASSERT_NE(found, nullptr) << std::hex << present;
        ASSERT_EQ(*found, value);
      }
      ASSERT_EQ(table.find(Address{512}), nullptr);
    }
  }
}

}  // namespace
}  // namespace tessera::support
