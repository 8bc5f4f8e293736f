// torch.cuda.MemPool's allocation functions (tessera_c.h, "torch.cuda.MemPool"), called by name as
// CUDAPluggableAllocator finds them: each slot allocates under its tag, leaves the caller's own tag as it
// was, and pauses with the tag; the slots' refusals name what is wrong. On the host driver.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tessera/tessera_c.h"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
using SlotAllocate = void*(size_t, int, void*);

SlotAllocate* slot_function(int slot) {
  const std::string name = "tessera_mem_pool_alloc_" + std::to_string(slot);
  return reinterpret_cast<SlotAllocate*>(dlsym(RTLD_DEFAULT, name.c_str()));
}

std::uint64_t tag_bytes(const std::string& tag) {
  const char* text = tessera_tags_json(0);
  if (text == nullptr) return 0;
  for (const auto& entry : nlohmann::json::parse(text)) {
    if (entry["name"] == tag) return entry["allocated_bytes"].get<std::uint64_t>();
  }
  return 0;
}

class MemPoolSlots : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tessera_configure("host", ""), 0) << tessera_last_error(); }
};

TEST_F(MemPoolSlots, AnUnboundSlotThrowsNamingItself) {
  SlotAllocate* unbound = slot_function(TESSERA_MEM_POOL_SLOTS - 1);  // no test binds the last one before this
  ASSERT_NE(unbound, nullptr);
  try {
    (void)unbound(mib, 0, nullptr);
    ADD_FAILURE() << "an unbound slot allocated";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("never bound"), std::string::npos) << error.what();
  }
}

TEST_F(MemPoolSlots, ASlotAllocatesUnderItsTagAndPausesWithIt) {
  const int slot = tessera_mem_pool_slot("mp_kv", 1);
  ASSERT_GE(slot, 0) << tessera_last_error();
  EXPECT_EQ(tessera_mem_pool_slot("mp_kv", 1), slot) << "the same tag and choice: the same slot";
  EXPECT_NE(tessera_mem_pool_slot("mp_kv", 0), slot) << "without backup: another slot";
  ASSERT_EQ(tessera_push_tag("callers_tag"), 0);
  void* segment = slot_function(slot)(2 * mib, 0, nullptr);
  ASSERT_NE(segment, nullptr) << tessera_last_error();
  void* own = tessera_alloc(mib, 0, nullptr);  // the caller's tag is back
  tessera_pop_tag();
  EXPECT_GE(tag_bytes("mp_kv"), 2 * mib);
  EXPECT_GE(tag_bytes("callers_tag"), mib);
  EXPECT_LT(tag_bytes("callers_tag"), 2 * mib) << "the segment went to the caller's tag";
  std::memset(segment, 0x6b, 2 * mib);
  ASSERT_EQ(tessera_pause(0, "mp_kv", 0), 0) << tessera_last_error();  // backed up: the slot's choice
  ASSERT_EQ(tessera_resume(0, "mp_kv"), 0) << tessera_last_error();
  EXPECT_EQ(static_cast<unsigned char*>(segment)[2 * mib - 1], 0x6b);
  tessera_free(segment, 2 * mib, 0, nullptr);
  tessera_free(own, mib, 0, nullptr);
  EXPECT_EQ(tag_bytes("mp_kv"), 0u);
}

TEST_F(MemPoolSlots, ABadTagAndTheLastSlotTakenAreRefused) {
  EXPECT_EQ(tessera_mem_pool_slot("bad\x01tag", 0), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("control byte"), std::string::npos) << tessera_last_error();
  const int kept = tessera_mem_pool_slot("mp_kv", 1);
  ASSERT_GE(kept, 0) << tessera_last_error();
  int bound = 1;
  bool refused = false;
  for (int i = 0; i < 2 * TESSERA_MEM_POOL_SLOTS; ++i) {
    const std::string tag = "mp_many_" + std::to_string(i);
    if (tessera_mem_pool_slot(tag.c_str(), 0) < 0) {
      refused = true;
      EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(tessera_last_error()).find("slots hold other tags"), std::string::npos);
      break;
    }
    ++bound;
  }
  EXPECT_TRUE(refused);
  EXPECT_LE(bound, TESSERA_MEM_POOL_SLOTS) << "more slots than there are";
  EXPECT_EQ(tessera_mem_pool_slot("mp_kv", 1), kept) << "a bound tag keeps its slot when all are taken";
}

}  // namespace
