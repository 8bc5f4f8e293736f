// The C ABI (include/tessera/tessera_c.h) as PyTorch uses it, over the host and sim drivers, the fake
// libcuda and the stand-in libascendcl: allocation and free, the failures and their messages, statistics
// JSON with PyTorch's keys, the summary, and the snapshot file read back with tessera's own reader.
//
// The library chooses its driver once per process, so every test runs its body in a child process of its own
// (gtest's death-test fork): run the binary directly or through ctest, each test starts afresh.
#include <dlfcn.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "tessera/tessera_c.h"
#include "tessera/trace.hpp"

namespace {

using Json = nlohmann::json;
using tessera::test_support::describe;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string last_error() { return tessera_last_error(); }

// Runs `body` in a forked child with a clean Tessera environment plus `variables`. The child's failures are
// printed on its stderr, which gtest shows when the child exits with 1.
template <class Body>
void in_fresh_process(std::vector<std::pair<const char*, std::string>> variables, Body body) {
  EXPECT_EXIT(
      {
        for (const char* name : {"TESSERA_DRIVER", "TESSERA_ALLOC_CONF", "TESSERA_CAPACITY", "TESSERA_CUDA_LIBRARY",
                                 "TESSERA_ASCEND_LIBRARY"}) {
          unsetenv(name);
        }
        for (const auto& [name, value] : variables) setenv(name, value.c_str(), 1);
        ::testing::TestPartResultArray results;
        {
          ::testing::ScopedFakeTestPartResultReporter reporter(
              ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &results);
          body();
        }
        int failures = 0;
        for (int i = 0; i < results.size(); ++i) {
          const ::testing::TestPartResult& result = results.GetTestPartResult(i);
          if (!result.failed()) continue;
          std::fprintf(stderr, "%s:%d: %s\n", result.file_name() ? result.file_name() : "?", result.line_number(),
                       result.message());
          ++failures;
        }
        std::fflush(nullptr);
        std::_Exit(failures == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

tessera_memory_stats stats_of(int device) {
  tessera_memory_stats stats{};
  EXPECT_EQ(tessera_get_memory_stats(device, &stats), 0) << last_error();
  return stats;
}

Json stats_json(int device) {
  const char* text = tessera_memory_stats_json(device);
  EXPECT_NE(text, nullptr) << last_error();
  return text == nullptr ? Json::object() : Json::parse(text);
}

std::filesystem::path temporary_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / (std::to_string(getpid()) + "-" + name);
}

// ---- host driver: real memory

TEST(CApiHost, AllocatesWritableAlignedMemoryAndFreesIt) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_has_allocator(0), 0);
    EXPECT_STREQ(tessera_driver_name(), "");
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t size : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{513}, std::size_t{4096},
                             std::size_t{1} << 20, (std::size_t{1} << 20) + 1, std::size_t{5} << 20}) {
      void* block = tessera_alloc(size, 0, nullptr);
      ASSERT_NE(block, nullptr) << size << ": " << last_error();
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % 64, 0U) << "c10 expects 64-byte alignment";
      std::memset(block, static_cast<int>(size & 0xff), size);
      blocks.emplace_back(block, size);
    }
    for (const auto& [block, size] : blocks) {  // nothing overlapped
      const auto* bytes = static_cast<const unsigned char*>(block);
      EXPECT_EQ(bytes[0], size & 0xff);
      EXPECT_EQ(bytes[size - 1], size & 0xff);
    }
    EXPECT_EQ(tessera_has_allocator(0), 1);
    EXPECT_STREQ(tessera_driver_name(), "host");
    tessera_memory_stats stats = stats_of(0);
    EXPECT_EQ(stats.allocations, blocks.size());
    EXPECT_EQ(stats.allocations_total, blocks.size());
    EXPECT_GE(stats.requested_bytes, (std::size_t{6} << 20) + 4096);
    EXPECT_GE(stats.reserved_bytes, stats.allocated_bytes);
    for (const auto& [block, size] : blocks) tessera_free(block, size, 0, nullptr);
    stats = stats_of(0);
    EXPECT_EQ(stats.allocations, 0U);
    EXPECT_EQ(stats.allocated_bytes, 0U);
    EXPECT_EQ(stats.frees_total, blocks.size());
    EXPECT_EQ(stats.bad_frees, 0U);
    EXPECT_STREQ(tessera_last_error(), "");
    tessera_empty_cache();
    EXPECT_EQ(stats_of(0).reserved_bytes, 0U) << "empty_cache gives every idle page back";
  });
}

TEST(CApiHost, ZeroBytesIsNullWithoutAnErrorAndFreeingNullIsANoOp) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_alloc(0, 0, nullptr), nullptr);
    EXPECT_STREQ(tessera_last_error(), "");
    tessera_free(nullptr, 0, 0, nullptr);
    tessera_npu_free(nullptr, 0, 0, nullptr);
    EXPECT_STREQ(tessera_last_error(), "");
  });
}

TEST(CApiHost, OutOfMemoryIsNullAndAMessageAndTheAllocatorStaysUsable) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "64MiB"}}, [] {
    void* kept = tessera_alloc(40 << 20, 0, nullptr);
    ASSERT_NE(kept, nullptr) << last_error();
    EXPECT_EQ(tessera_alloc(std::size_t{100} << 20, 0, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "tessera_alloc(104857600 bytes, device 0)")) << message;
    EXPECT_TRUE(contains(message, "out_of_memory")) << message;
    EXPECT_EQ(stats_of(0).num_ooms, 1U);
    EXPECT_EQ(std::string(tessera_last_error_any_thread()), message);
    void* small = tessera_alloc(1 << 20, 0, nullptr);
    EXPECT_NE(small, nullptr) << last_error();
    tessera_free(small, 1 << 20, 0, nullptr);
    tessera_free(kept, 40 << 20, 0, nullptr);
    EXPECT_EQ(stats_of(0).allocations, 0U);
    tessera_clear_error();
    EXPECT_STREQ(tessera_last_error(), "");
  });
}

// What PyTorch loads: a failure is an exception (PyTorch does not check for NULL), and out of memory reads as
// PyTorch's own message begins.
TEST(CApiHost, TheTorchEntryPointThrowsWhereTesseraAllocReturnsNull) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "16MiB"}}, [] {
    void* block = tessera_torch_alloc(4096, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_EQ(tessera_torch_alloc(0, 0, nullptr), nullptr) << "0 bytes is no failure";
    try {
      (void)tessera_torch_alloc(std::size_t{32} << 20, 0, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind("CUDA out of memory. tessera_torch_alloc(33554432 bytes, device 0): out_of_memory", 0),
                0U)
          << message;
    }
    try {
      (void)tessera_torch_npu_alloc(4096, 70, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& error) {
      EXPECT_TRUE(contains(error.what(), "device 70 is out of range")) << error.what();
      EXPECT_FALSE(contains(error.what(), "out of memory")) << error.what();
    }
    tessera_free(block, 4096, 0, nullptr);
  });
}

TEST(CApiHost, SizesNearTwoToThe64AreRefusedWithAMessage) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    for (std::size_t size : {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() - 511,
                             std::size_t{1} << 63}) {
      tessera_clear_error();
      EXPECT_EQ(tessera_alloc(size, 0, nullptr), nullptr);
      const std::string message = last_error();
      EXPECT_TRUE(contains(message, std::to_string(size) + " bytes")) << message;
      EXPECT_TRUE(contains(message, "out_of_memory")) << message;
    }
    void* block = tessera_alloc(4096, 0, nullptr);
    EXPECT_NE(block, nullptr) << last_error();
    tessera_free(block, 4096, 0, nullptr);
  });
}

TEST(CApiHost, FreeingAnUnknownPointerChangesNothingAndSaysSo) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    void* block = tessera_alloc(1000, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    int local = 0;
    tessera_free(&local, sizeof local, 0, nullptr);
    std::string message = last_error();
    EXPECT_TRUE(contains(message, "not a live block of Tessera on device 0")) << message;
    EXPECT_TRUE(contains(message, "nothing was freed")) << message;
    tessera_free(static_cast<char*>(block) + 8, 992, 0, nullptr);  // inside a block is not a block
    EXPECT_EQ(stats_of(0).allocations, 1U);
    tessera_free(block, 1000, 0, nullptr);
    tessera_free(block, 1000, 0, nullptr);  // a double free
    message = last_error();
    EXPECT_TRUE(contains(message, "double free")) << message;
    EXPECT_EQ(stats_of(0).bad_frees, 3U);
    EXPECT_EQ(stats_json(0)["tessera.bad_frees"], 3);
    tessera_free(&local, sizeof local, 5, nullptr);  // a device without an allocator
    EXPECT_TRUE(contains(last_error(), "device 5")) << last_error();
  });
}

TEST(CApiHost, FreeingOnTheWrongDeviceNamesBothAndFreesNothing) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    void* on0 = tessera_alloc(4096, 0, nullptr);
    void* on1 = tessera_alloc(4096, 1, nullptr);
    ASSERT_NE(on0, nullptr) << last_error();
    ASSERT_NE(on1, nullptr) << last_error();
    tessera_free(on0, 4096, 1, nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "allocated on device 0, not device 1")) << message;
    EXPECT_EQ(stats_of(0).allocations, 1U);
    EXPECT_EQ(stats_of(1).allocations, 1U);
    tessera_free(on0, 4096, 0, nullptr);
    tessera_free(on1, 4096, 1, nullptr);
    EXPECT_EQ(stats_of(0).allocations + stats_of(1).allocations, 0U);
  });
}

TEST(CApiHost, DevicesOutOfRangeAreRefused) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_alloc(100, -1, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "device -1 is out of range")) << last_error();
    EXPECT_EQ(tessera_alloc(100, 64, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "device 64 is out of range")) << last_error();
    EXPECT_EQ(tessera_memory_stats_json(1000), nullptr);
    EXPECT_EQ(tessera_get_memory_stats(0, nullptr), -1);
  });
}

// Every entry point that takes a device says when it is out of range, with the range, and changes nothing.
TEST(CApiHost, EveryEntryPointNamesADeviceOutOfRangeAndTheRange) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    void* block = tessera_alloc(4096, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    const auto path = temporary_path("out-of-range.pickle");
    for (const int device : {-1, 64, 1000}) {
      const std::string named = "device " + std::to_string(device) + " is out of range";
      auto expect_refused = [&](const char* function) {
        const std::string message = last_error();
        EXPECT_TRUE(contains(message, function)) << message;
        EXPECT_TRUE(contains(message, named)) << function << ": " << message;
        EXPECT_TRUE(contains(message, "devices 0 to 63")) << function << ": " << message;
        EXPECT_FALSE(contains(message, "not a live block")) << function << ": " << message;
        tessera_clear_error();
      };
      EXPECT_EQ(tessera_alloc(100, device, nullptr), nullptr);
      expect_refused("tessera_alloc");
      EXPECT_EQ(tessera_npu_alloc(100, device, nullptr), nullptr);
      expect_refused("tessera_npu_alloc");
      for (auto* torch_alloc : {&tessera_torch_alloc, &tessera_torch_npu_alloc}) {
        try {
          (void)torch_alloc(100, device, nullptr);
          ADD_FAILURE() << "no exception";
        } catch (const std::runtime_error& error) {
          EXPECT_TRUE(contains(error.what(), named)) << error.what();
        }
        tessera_clear_error();
      }
      tessera_free(block, 4096, device, nullptr);
      expect_refused("tessera_free");
      tessera_npu_free(block, 4096, device, nullptr);
      expect_refused("tessera_npu_free");
      tessera_set_memory_fraction(0.5, device);
      expect_refused("tessera_set_memory_fraction");
      tessera_npu_set_memory_fraction(0.5, device);
      expect_refused("tessera_npu_set_memory_fraction");
      tessera_memory_stats stats{};
      EXPECT_EQ(tessera_get_memory_stats(device, &stats), -1);
      expect_refused("tessera_get_memory_stats");
      EXPECT_EQ(tessera_memory_stats_json(device), nullptr);
      expect_refused("tessera_memory_stats_json");
      EXPECT_EQ(tessera_memory_summary(device), nullptr);
      expect_refused("tessera_memory_summary");
      EXPECT_EQ(tessera_dump_snapshot(path.c_str(), device), -1);
      expect_refused("tessera_dump_snapshot");
      EXPECT_EQ(tessera_has_allocator(device), -1);
      expect_refused("tessera_has_allocator");
    }
    EXPECT_EQ(stats_of(0).allocations, 1U) << "no refused free freed the block";
    EXPECT_EQ(stats_of(0).bad_frees, 0U);
    tessera_free(block, 4096, 0, nullptr);
    EXPECT_STREQ(tessera_last_error(), "");
    EXPECT_EQ(tessera_has_allocator(0), 1);
    EXPECT_EQ(tessera_has_allocator(63), 0);
    EXPECT_STREQ(tessera_last_error(), "") << "a device in range without an allocator is no error";
  });
}

TEST(CApiHost, StatsJsonHasPyTorchsKeysAndAgreesWithTheStruct) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    Json before = stats_json(0);
    EXPECT_EQ(before["tessera.driver"], "") << "no allocator yet";
    EXPECT_EQ(before["allocated_bytes.all.current"], 0);
    void* small = tessera_alloc(1000, 0, nullptr);
    void* large = tessera_alloc(3 << 20, 0, nullptr);
    void* freed = tessera_alloc(2000, 0, nullptr);
    ASSERT_TRUE(small && large && freed) << last_error();
    tessera_free(freed, 2000, 0, nullptr);
    const Json json = stats_json(0);
    for (const char* key :
         {"allocated_bytes.all.current", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
          "allocated_bytes.all.freed", "allocated_bytes.small_pool.current", "allocated_bytes.large_pool.current",
          "reserved_bytes.all.current", "reserved_bytes.all.peak", "requested_bytes.all.current",
          "requested_bytes.all.peak", "allocation.all.current", "allocation.all.peak", "allocation.all.allocated",
          "allocation.all.freed", "allocation.small_pool.allocated", "allocation.large_pool.allocated",
          "num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
          "tessera.driver", "tessera.capacity", "tessera.mapped_bytes", "tessera.pooled_bytes",
          "tessera.cached_bytes", "tessera.stitches", "tessera.pages_mapped", "tessera.syncs",
          "tessera.shared_blocks", "tessera.slivers_shared", "tessera.sliver_mapped_bytes"}) {
      EXPECT_TRUE(json.contains(key)) << key << " missing from " << json.dump(2);
    }
    const tessera_memory_stats stats = stats_of(0);
    EXPECT_EQ(json["tessera.driver"], "host");
    EXPECT_EQ(json["allocated_bytes.all.current"], stats.allocated_bytes);
    EXPECT_EQ(json["allocated_bytes.all.peak"], stats.allocated_bytes_peak);
    EXPECT_EQ(json["requested_bytes.all.current"], 1000 + (3 << 20));
    EXPECT_EQ(json["requested_bytes.all.peak"], 1000 + (3 << 20) + 2000);
    EXPECT_EQ(json["reserved_bytes.all.current"], stats.reserved_bytes);
    EXPECT_EQ(json["allocation.all.current"], 2);
    EXPECT_EQ(json["allocation.all.allocated"], 3);
    EXPECT_EQ(json["allocation.all.freed"], 1);
    EXPECT_EQ(json["allocation.small_pool.allocated"], 2);
    EXPECT_EQ(json["allocation.large_pool.allocated"], 1);
    EXPECT_EQ(json["num_device_alloc"], stats.num_device_alloc);
    EXPECT_GT(stats.num_device_alloc, 0U);
    EXPECT_EQ(json["tessera.capacity"], std::uint64_t{1} << 30);
    const std::string summary = tessera_memory_summary(0);
    EXPECT_TRUE(contains(summary, "device 0, host driver")) << summary;
    EXPECT_TRUE(contains(summary, "Allocated memory")) << summary;
    EXPECT_TRUE(contains(summary, "Reserved memory")) << summary;
    EXPECT_TRUE(contains(summary, "Non-releasable memory")) << summary;
    tessera_free(small, 1000, 0, nullptr);
    tessera_free(large, 3 << 20, 0, nullptr);
  });
}

// active*, segment*, the pools of reserved_bytes and inactive_split*.current (docs/pytorch.md, "Statistics"),
// worked out by hand on the host driver's 2 MiB granules: one small block at the start of the small pool's
// region, one large block of a granule and a half at the top of the large pool's (it grows down).
TEST(CApiHost, StatsJsonHasTheActiveSegmentAndInactiveSplitFigures) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    constexpr std::uint64_t granule = 2 << 20;
    void* small = tessera_alloc(1000, 0, nullptr);
    void* large = tessera_alloc(3 << 20, 0, nullptr);
    void* waits = tessera_alloc(4096, 0, nullptr);
    ASSERT_TRUE(small && large && waits) << last_error();
    // Used on another stream too: its free waits for an event there, so it stays active until processed.
    tessera_record_stream(waits, reinterpret_cast<void*>(5));
    tessera_free(waits, 4096, 0, nullptr);
    Json json = stats_json(0);
    EXPECT_EQ(json["allocation.all.current"], 2);
    EXPECT_EQ(json["active.all.current"], 3);
    EXPECT_EQ(json["active.small_pool.current"], 2);
    EXPECT_EQ(json["active_bytes.all.current"], json["allocated_bytes.all.current"].get<std::uint64_t>() + 4096);
    EXPECT_EQ(json["segment.small_pool.current"], 1);
    EXPECT_EQ(json["segment.large_pool.current"], 1);
    EXPECT_EQ(json["segment.all.current"], 2);
    EXPECT_EQ(json["segment.all.peak"], 2);
    EXPECT_EQ(json["reserved_bytes.small_pool.current"], granule);
    EXPECT_EQ(json["reserved_bytes.large_pool.current"], 2 * granule);
    EXPECT_EQ(json["reserved_bytes.all.current"], json["reserved_bytes.small_pool.current"].get<std::uint64_t>() +
                                                      json["reserved_bytes.large_pool.current"].get<std::uint64_t>() +
                                                      json["tessera.pooled_bytes"].get<std::uint64_t>());
    // The small granule: the 1 KiB block, the waiting 4 KiB one, and the free rest after them.
    EXPECT_EQ(json["inactive_split_bytes.small_pool.current"], granule - 1024 - 4096);
    EXPECT_EQ(json["inactive_split.small_pool.current"], 1);
    // The large block's lower granule: its upper half is the block's, the lower half free.
    EXPECT_EQ(json["inactive_split_bytes.large_pool.current"], granule / 2);
    EXPECT_EQ(json["inactive_split_bytes.all.current"], 3 * granule / 2 - 1024 - 4096);
    EXPECT_EQ(json["inactive_split.all.current"], 2);
    EXPECT_FALSE(json.contains("inactive_split_bytes.all.peak")) << "read from the state: current only";

    void* next = tessera_alloc(1000, 0, nullptr);  // processes the completed free first
    ASSERT_NE(next, nullptr) << last_error();
    json = stats_json(0);
    EXPECT_EQ(json["active.all.current"], 3);
    EXPECT_EQ(json["active.all.freed"], 1);
    EXPECT_EQ(json["active.all.peak"], 3);
    EXPECT_EQ(json["active_bytes.all.current"], json["allocated_bytes.all.current"]);
    tessera_free(large, 3 << 20, 0, nullptr);
    tessera_empty_cache();
    json = stats_json(0);
    EXPECT_EQ(json["segment.large_pool.current"], 0);
    EXPECT_EQ(json["segment.large_pool.freed"], 1);
    EXPECT_EQ(json["reserved_bytes.large_pool.current"], 0);
    EXPECT_EQ(json["reserved_bytes.large_pool.peak"], 2 * granule);
    // The small granule and the rest of its chunk (which grew past it, pooled: the chunk goes back whole).
    EXPECT_EQ(json["reserved_bytes.all.current"], granule + json["tessera.pooled_bytes"].get<std::uint64_t>());
    EXPECT_EQ(json["tessera.pooled_bytes"], granule);
    EXPECT_EQ(tessera_reset_peak_memory_stats(0), 0) << last_error();
    json = stats_json(0);
    for (const char* key : {"active.all", "active_bytes.small_pool", "segment.all", "reserved_bytes.large_pool"}) {
      EXPECT_EQ(json[std::string(key) + ".peak"], json[std::string(key) + ".current"]) << key;
    }
    tessera_free(small, 1000, 0, nullptr);
    tessera_free(next, 1000, 0, nullptr);
  });
}

TEST(CApiHost, TheHistoryWritesASnapshotThatTesserasReaderReadsBack) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    const auto path = temporary_path("capi-snapshot.pickle");
    EXPECT_EQ(tessera_dump_snapshot(path.c_str(), 0), -1) << "no allocator yet";
    EXPECT_TRUE(contains(last_error(), "device 0 has no allocator yet")) << last_error();
    ASSERT_EQ(tessera_record_memory_history(10000), 0) << last_error();
    std::vector<void*> blocks;
    for (std::size_t i = 1; i <= 10; ++i) blocks.push_back(tessera_alloc(i * 10000, 0, nullptr));
    for (std::size_t i = 0; i < 10; i += 2) tessera_free(blocks[i], (i + 1) * 10000, 0, nullptr);
    ASSERT_EQ(tessera_dump_snapshot(path.c_str(), 0), 0) << last_error();
    auto trace = tessera::read_pytorch_snapshot(path);
    ASSERT_TRUE(trace.ok()) << tessera::describe(trace.error());
    const tessera::TraceSummary summary = tessera::summarize(*trace);
    EXPECT_EQ(summary.allocs, 10U);
    EXPECT_EQ(summary.frees, 5U);
    EXPECT_EQ(summary.live_blocks_at_end, 5U);
    EXPECT_EQ(summary.largest_alloc, 100000U);
    std::filesystem::remove(path);
    for (std::size_t i = 1; i < 10; i += 2) tessera_free(blocks[i], (i + 1) * 10000, 0, nullptr);
    EXPECT_EQ(tessera_dump_snapshot("/nonexistent-directory/x.pickle", 0), -1);
    EXPECT_TRUE(contains(last_error(), "/nonexistent-directory/x.pickle")) << last_error();
  });
}

// A stack capture installed through the C ABI: each recorded alloc files what it writes, when `ready` lets it
// run on the allocating thread; the snapshot carries the frames.
int stacks_ready = 1;
int stack_captures = 0;
const void* ready_for_stacks() { return stacks_ready != 0 ? &stacks_ready : nullptr; }
int capture_two_frames(char* buffer, size_t capacity) {
  ++stack_captures;
  const std::string text = "/work/model.py\t42\tforward\nnot a frame\n/work/train.py\t7\t<module>\n";
  if (text.size() > capacity) return 0;
  std::memcpy(buffer, text.data(), text.size());
  return static_cast<int>(text.size());
}

TEST(CApiHost, HistoryStacksComeFromTheInstalledCapture) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    ASSERT_EQ(tessera_record_memory_history(10000), 0) << last_error();
    ASSERT_EQ(tessera_set_history_stacks(capture_two_frames, ready_for_stacks), 0) << last_error();
    void* with_stack = tessera_alloc(4096, 0, nullptr);
    stacks_ready = 0;  // the thread may not run the capture now
    void* not_ready = tessera_alloc(4096, 0, nullptr);
    stacks_ready = 1;
    ASSERT_EQ(tessera_set_history_stacks(nullptr, nullptr), 0) << last_error();
    void* stopped = tessera_alloc(4096, 0, nullptr);
    ASSERT_TRUE(with_stack && not_ready && stopped) << last_error();
    EXPECT_EQ(stack_captures, 1);
    const auto path = temporary_path("capi-stacks.pickle");
    ASSERT_EQ(tessera_dump_snapshot(path.c_str(), 0), 0) << last_error();
    std::ifstream file(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    // The frames as the pickle spells them; the unparsable line is dropped.
    EXPECT_TRUE(contains(bytes, "/work/model.py")) << "the first frame";
    EXPECT_TRUE(contains(bytes, "<module>")) << "the second frame";
    EXPECT_FALSE(contains(bytes, "not a frame"));
    auto trace = tessera::read_pytorch_snapshot(path);
    ASSERT_TRUE(trace.ok()) << tessera::describe(trace.error());
    EXPECT_EQ(tessera::summarize(*trace).allocs, 3U);
    std::filesystem::remove(path);
    for (void* block : {with_stack, not_ready, stopped}) tessera_free(block, 4096, 0, nullptr);
  });
}

// Without a history and without a live block, the snapshot is the segments alone: a file both readers read,
// with no event.
TEST(CApiHost, ASnapshotWithoutHistoryOrLiveBlocksIsWrittenAndReadsBack) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    const auto path = temporary_path("capi-no-history.pickle");
    auto expect_empty_snapshot = [&](const char* when) {
      ASSERT_EQ(tessera_dump_snapshot(path.c_str(), 0), 0) << when << ": " << last_error();
      auto trace = tessera::read_pytorch_snapshot(path);
      ASSERT_TRUE(trace.ok()) << when << ": " << tessera::describe(trace.error());
      const tessera::TraceSummary summary = tessera::summarize(*trace);
      EXPECT_EQ(summary.allocs, 0U) << when;
      EXPECT_EQ(summary.frees, 0U) << when;
      EXPECT_EQ(summary.live_blocks_at_end, 0U) << when;
      std::filesystem::remove(path);
    };
    tessera_set_memory_fraction(1.0, 0);  // creates the allocator, allocates nothing
    ASSERT_EQ(tessera_has_allocator(0), 1) << last_error();
    expect_empty_snapshot("a fresh allocator");
    void* block = tessera_alloc(3 << 20, 0, nullptr);
    void* small = tessera_alloc(1000, 0, nullptr);
    ASSERT_TRUE(block && small) << last_error();
    tessera_free(block, 0, 0, nullptr);
    tessera_free(small, 0, 0, nullptr);
    expect_empty_snapshot("after an alloc and a free");
    // History recorded, then stopped (and forgotten): the same.
    ASSERT_EQ(tessera_record_memory_history(100), 0) << last_error();
    tessera_free(tessera_alloc(5000, 0, nullptr), 0, 0, nullptr);
    ASSERT_EQ(tessera_record_memory_history(0), 0) << last_error();
    expect_empty_snapshot("after the history was stopped");
    // A live block without a history is an initial block of the snapshot.
    void* live = tessera_alloc(7000, 0, nullptr);
    ASSERT_NE(live, nullptr) << last_error();
    ASSERT_EQ(tessera_dump_snapshot(path.c_str(), 0), 0) << last_error();
    auto trace = tessera::read_pytorch_snapshot(path);
    ASSERT_TRUE(trace.ok()) << tessera::describe(trace.error());
    EXPECT_EQ(tessera::summarize(*trace).live_blocks_at_end, 1U);
    std::filesystem::remove(path);
    tessera_free(live, 0, 0, nullptr);
  });
}

TEST(CApiHost, ThreadsAllocateAndFreeConcurrently) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 2000; ++i) {
          const std::size_t size = 512 + static_cast<std::size_t>((i * 7919 + t) % 300000);
          void* block = tessera_alloc(size, 0, reinterpret_cast<void*>(static_cast<std::uintptr_t>(t % 2)));
          if (block == nullptr) std::abort();
          static_cast<char*>(block)[size - 1] = 1;
          tessera_free(block, size, 0, nullptr);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    const tessera_memory_stats stats = stats_of(0);
    EXPECT_EQ(stats.allocations_total, 8000U);
    EXPECT_EQ(stats.frees_total, 8000U);
    EXPECT_EQ(stats.allocations, 0U);
  });
}

TEST(CApiHost, AFailureOnAnotherThreadIsReadableFromThisOne) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "8MiB"}}, [] {
    std::thread([] { EXPECT_EQ(tessera_alloc(std::size_t{16} << 20, 0, nullptr), nullptr); }).join();
    EXPECT_STREQ(tessera_last_error(), "") << "this thread failed nothing";
    EXPECT_TRUE(contains(tessera_last_error_any_thread(), "out_of_memory")) << tessera_last_error_any_thread();
  });
}

TEST(CApiHost, MemoryFractionAndRecordStreamHooks) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "64MiB"}}, [] {
    tessera_set_memory_fraction(0.25, 0);
    EXPECT_STREQ(tessera_last_error(), "");
    EXPECT_EQ(tessera_alloc(std::size_t{20} << 20, 0, nullptr), nullptr) << "20 MiB is more than a quarter of 64";
    tessera_set_memory_fraction(1.0, 0);
    void* block = tessera_alloc(std::size_t{20} << 20, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    tessera_record_stream(block, reinterpret_cast<void*>(7));
    EXPECT_STREQ(tessera_last_error(), "") << "record_stream succeeded: the refused allocation's message is gone";
    tessera_free(block, 0, 0, nullptr);
    tessera_record_stream(block, reinterpret_cast<void*>(7));
    EXPECT_TRUE(contains(last_error(), "not a live block")) << last_error();
    tessera_set_memory_fraction(1.5, 0);
    EXPECT_TRUE(contains(last_error(), "tessera_set_memory_fraction(1.5, device 0)")) << last_error();
  });
}

// ---- the choice of driver and configuration

TEST(CApiSettings, AnUnknownDriverIsNamedWithTheKnownOnes) {
  in_fresh_process({{"TESSERA_DRIVER", "quantum"}}, [] {
    EXPECT_EQ(tessera_alloc(1000, 0, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "TESSERA_DRIVER: unknown driver 'quantum'")) << message;
    EXPECT_TRUE(contains(message, "host")) << message;
    EXPECT_EQ(tessera_has_allocator(0), 0);
    EXPECT_EQ(tessera_configure(nullptr, nullptr), -1);
    EXPECT_TRUE(contains(last_error(), "'quantum'")) << last_error();
    EXPECT_EQ(tessera_configure("warp", nullptr), -1);
    EXPECT_TRUE(contains(last_error(), "tessera_configure: unknown driver 'warp'")) << last_error();
  });
}

TEST(CApiSettings, ABadAllocConfIsNamedByItsKey) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_ALLOC_CONF", "garbage_collection_threshold:2"}}, [] {
    EXPECT_EQ(tessera_alloc(1000, 0, nullptr), nullptr);
    std::string message = last_error();
    EXPECT_TRUE(contains(message, "TESSERA_ALLOC_CONF")) << message;
    EXPECT_TRUE(contains(message, "garbage_collection_threshold")) << message;
    EXPECT_EQ(tessera_has_allocator(0), 0);
    EXPECT_EQ(tessera_configure(nullptr, "max_split_size_mb:128"), -1);
    message = last_error();
    EXPECT_TRUE(contains(message, "unknown key 'max_split_size_mb'")) << message;
    // A good configuration given in code replaces the environment's.
    EXPECT_EQ(tessera_configure(nullptr, "reclaim:first,garbage_collection_threshold:0.5"), 0) << last_error();
    void* block = tessera_alloc(1000, 0, nullptr);
    EXPECT_NE(block, nullptr) << last_error();
    tessera_free(block, 1000, 0, nullptr);
  });
}

TEST(CApiSettings, ConfigureChoosesTheDriverUntilTheFirstAllocator) {
  in_fresh_process({}, [] {
    ASSERT_EQ(tessera_configure("sim", "reclaim:first"), 0) << last_error();
    void* block = tessera_alloc(std::size_t{8} << 30, 0, nullptr);  // the sim driver has 80 GiB and no memory
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_STREQ(tessera_driver_name(), "sim");
    EXPECT_EQ(tessera_configure("sim", "reclaim:first"), 0) << "the same settings again change nothing";
    EXPECT_EQ(tessera_configure("host", nullptr), -1);
    EXPECT_TRUE(contains(last_error(), "too late to choose the host driver")) << last_error();
    EXPECT_EQ(tessera_configure(nullptr, "reclaim:never"), -1);
    EXPECT_TRUE(contains(last_error(), "too late to change the configuration")) << last_error();
    tessera_free(block, 0, 0, nullptr);
  });
}

TEST(CApiSettings, ConfigureRefusesADriverThatContradictsTesseraDriver) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_configure("sim", nullptr), -1);
    EXPECT_TRUE(contains(last_error(), "TESSERA_DRIVER=host")) << last_error();
    EXPECT_EQ(tessera_configure("host", nullptr), 0) << last_error();
  });
}

TEST(CApiSettings, ABadCapacityIsNamed) {
  in_fresh_process({{"TESSERA_DRIVER", "sim"}, {"TESSERA_CAPACITY", "lots"}}, [] {
    EXPECT_EQ(tessera_alloc(1000, 0, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "TESSERA_CAPACITY: bad value 'lots'")) << last_error();
  });
}

// TESSERA_CAPACITY is a whole number of the driver's 2 MiB granules; every refusal names the variable and why.
TEST(CApiSettings, ACapacityThatIsNoWholeNumberOfGranulesIsRefusedNamingTesseraCapacity) {
  for (const char* driver : {"host", "sim"}) {
    for (const auto& [value, why] : std::vector<std::pair<std::string, std::string>>{
             {"1", "below one granule"},
             {"4096", "below one granule"},
             {"1KiB", "below one granule"},
             {"3MiB", "not a whole number of granules"},
             {"1073741825", "not a whole number of granules"}}) {
      in_fresh_process({{"TESSERA_DRIVER", driver}, {"TESSERA_CAPACITY", value}}, [&] {
        EXPECT_EQ(tessera_alloc(1, 0, nullptr), nullptr) << value;
        const std::string message = last_error();
        EXPECT_TRUE(contains(message, "TESSERA_CAPACITY: bad value '" + value + "'")) << message;
        EXPECT_TRUE(contains(message, why)) << message;
        EXPECT_TRUE(contains(message, "2MiB")) << "names the granule: " << message;
        EXPECT_EQ(tessera_has_allocator(0), 0);
      });
    }
  }
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "3MiB"}}, [] {
    EXPECT_EQ(tessera_alloc(1, 0, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "2MiB or 4MiB")) << "the neighbours: " << last_error();
  });
}

// The allocator reserves virtual_factor x capacity of address space for each pool (small, large) of a stream:
// a capacity whose reservations cannot fit in x86-64's 2^47 bytes of user space is refused, naming the limit,
// rather than failing every allocation as out of memory (or wrapping the host driver's arithmetic).
TEST(CApiSettings, ACapacityBeyondTheAddressSpaceIsRefusedNamingTheLimit) {
  for (const char* driver : {"host", "sim"}) {
    for (const std::string value : {"64TiB", "17TiB", "8388608TiB", "9223372036854775808", "18446744073709551615",
                                    "99999999999999999999", "20000000TiB"}) {
      in_fresh_process({{"TESSERA_DRIVER", driver}, {"TESSERA_CAPACITY", value}}, [&] {
        EXPECT_EQ(tessera_alloc(1, 0, nullptr), nullptr) << value;
        const std::string message = last_error();
        EXPECT_TRUE(contains(message, "TESSERA_CAPACITY: bad value '" + value + "'")) << message;
        EXPECT_TRUE(contains(message, "address space")) << message;
        EXPECT_TRUE(contains(message, "virtual_factor (2)")) << message;
        EXPECT_TRUE(contains(message, "at most 16TiB")) << message;
        EXPECT_FALSE(contains(message, "out of memory")) << message;
        EXPECT_EQ(tessera_has_allocator(0), 0);
      });
    }
  }
  // The limit follows virtual_factor.
  in_fresh_process({{"TESSERA_DRIVER", "sim"}, {"TESSERA_CAPACITY", "17TiB"}, {"TESSERA_ALLOC_CONF", "virtual_factor:1"}},
                   [] {
                     void* block = tessera_alloc(1, 0, nullptr);
                     EXPECT_NE(block, nullptr) << "17 TiB fits with virtual_factor 1: " << last_error();
                     tessera_free(block, 0, 0, nullptr);
                   });
  in_fresh_process({{"TESSERA_DRIVER", "sim"}, {"TESSERA_CAPACITY", "1TiB"}, {"TESSERA_ALLOC_CONF", "virtual_factor:64"}},
                   [] {
                     EXPECT_EQ(tessera_alloc(1, 0, nullptr), nullptr);
                     EXPECT_TRUE(contains(last_error(), "virtual_factor (64)")) << last_error();
                     EXPECT_TRUE(contains(last_error(), "at most 512GiB")) << last_error();
                   });
  // At the limit both pools' reservations are made and used.
  in_fresh_process({{"TESSERA_DRIVER", "sim"}, {"TESSERA_CAPACITY", "16TiB"}}, [] {
    void* small = tessera_alloc(1000, 0, nullptr);
    void* large = tessera_alloc(std::size_t{1} << 30, 0, nullptr);
    EXPECT_NE(small, nullptr) << last_error();
    EXPECT_NE(large, nullptr) << last_error();
    EXPECT_EQ(stats_json(0)["tessera.capacity"], std::uint64_t{16} << 40);
    tessera_free(small, 0, 0, nullptr);
    tessera_free(large, 0, 0, nullptr);
  });
}

// ---- sim driver: no memory, modelled calls

TEST(CApiSim, AllocatesAndRunsOutOfMemoryAtTheConfiguredCapacity) {
  in_fresh_process({{"TESSERA_DRIVER", "sim"}, {"TESSERA_CAPACITY", "4GiB"}}, [] {
    void* block = tessera_alloc(std::size_t{3} << 30, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_EQ(tessera_alloc(std::size_t{2} << 30, 0, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "out_of_memory")) << last_error();
    EXPECT_EQ(stats_json(0)["tessera.driver"], "sim");
    EXPECT_EQ(stats_json(0)["tessera.capacity"], std::uint64_t{4} << 30);
    tessera_free(block, 0, 0, nullptr);
    void* again = tessera_alloc(std::size_t{2} << 30, 0, nullptr);
    EXPECT_NE(again, nullptr) << last_error();
    tessera_free(again, 0, 0, nullptr);
  });
}

// ---- cuda driver over the fake libcuda

#ifdef TESSERA_FAKE_CUDA_LIBRARY
TEST(CApiFakeCuda, TesseraAllocUsesTheCudaDriverByDefault) {
  in_fresh_process({{"TESSERA_CUDA_LIBRARY", TESSERA_FAKE_CUDA_LIBRARY}}, [] {
    void* fake = dlopen(TESSERA_FAKE_CUDA_LIBRARY, RTLD_NOW);
    ASSERT_NE(fake, nullptr) << dlerror();
    using Count = std::size_t (*)();
    auto live_allocations = reinterpret_cast<Count>(dlsym(fake, "fake_cuda_live_allocations"));
    ASSERT_NE(live_allocations, nullptr);
    tessera_init(1);
    EXPECT_STREQ(tessera_last_error(), "");
    void* stream = reinterpret_cast<void*>(0x1234);
    void* block = tessera_alloc(std::size_t{4} << 20, 0, stream);
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_STREQ(tessera_driver_name(), "cuda");
    EXPECT_GT(live_allocations(), 0U) << "the pages came from cuMemCreate";
    // The fake's device has 256 MiB.
    EXPECT_EQ(tessera_alloc(std::size_t{300} << 20, 0, stream), nullptr);
    EXPECT_TRUE(contains(last_error(), "out_of_memory")) << last_error();
    tessera_record_stream(block, reinterpret_cast<void*>(0x5678));
    tessera_free(block, std::size_t{4} << 20, 0, stream);
    EXPECT_EQ(stats_of(0).allocations, 0U);
    tessera_empty_cache();
    EXPECT_EQ(stats_of(0).reserved_bytes, 0U);
    EXPECT_EQ(live_allocations(), 0U) << "empty_cache released every page to the driver";
  });
}

TEST(CApiFakeCuda, ADeviceTheDriverDoesNotHaveIsAClearError) {
  in_fresh_process({{"TESSERA_CUDA_LIBRARY", TESSERA_FAKE_CUDA_LIBRARY}}, [] {
    EXPECT_EQ(tessera_alloc(1000, 3, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "cannot start the cuda driver for device 3")) << message;
  });
}
#endif

// ---- ascend driver over the stand-in libascendcl

#ifdef TESSERA_FAKE_ASCEND_LIBRARY
// The stand-in's controls and ACL calls, from the library the driver opens (dlopen gives the same handle, so
// one state). Never closed: a control may be set before the driver loads it, and the child process ends soon.
template <class F>
F* fake_ascend(const char* name) {
  void* fake = dlopen(TESSERA_FAKE_ASCEND_LIBRARY, RTLD_NOW);
  if (fake == nullptr) throw std::runtime_error(dlerror());
  void* found = dlsym(fake, name);
  if (found == nullptr) throw std::runtime_error(name);
  return reinterpret_cast<F*>(found);
}

TEST(CApiFakeAscend, TheNpuEntryPointsAllocateWriteAndFreeOnTheAscendDriver) {
  in_fresh_process({{"TESSERA_ASCEND_LIBRARY", TESSERA_FAKE_ASCEND_LIBRARY}}, [] {
    tessera_npu_init(1);
    EXPECT_STREQ(tessera_last_error(), "");
    constexpr std::size_t size = std::size_t{6} << 20;
    void* stream = reinterpret_cast<void*>(0x1234);
    void* block = tessera_npu_alloc(size, 0, stream);
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_STREQ(tessera_driver_name(), "ascend");
    auto live = [](const char* what) { return fake_ascend<std::size_t()>(what)(); };
    EXPECT_GT(live("fake_ascend_live_handles"), 0U) << "the pages came from aclrtMallocPhysical";

    // The block is device memory, mapped whole: written and read back with aclrtMemcpy (host to device 1,
    // device to host 2), in the context the driver made current on this thread.
    using Memcpy = int(void*, std::size_t, const void*, std::size_t, int);
    std::vector<unsigned char> written(size), back(size);
    for (std::size_t i = 0; i < size; ++i) written[i] = static_cast<unsigned char>(i * 11 + 1);
    ASSERT_EQ(fake_ascend<Memcpy>("aclrtMemcpy")(block, size, written.data(), size, 1), 0);
    ASSERT_EQ(fake_ascend<Memcpy>("aclrtMemcpy")(back.data(), size, block, size, 2), 0);
    EXPECT_EQ(back, written);

    const tessera_memory_stats held = stats_of(0);
    EXPECT_EQ(held.allocations, 1U);
    EXPECT_GE(held.allocated_bytes, size);
    EXPECT_GE(held.reserved_bytes, size);
    EXPECT_EQ(stats_json(0)["allocation.all.current"], 1);
    tessera_npu_record_stream(block, reinterpret_cast<void*>(0x5678));
    tessera_npu_free(block, size, 0, stream);
    EXPECT_STREQ(tessera_last_error(), "");
    EXPECT_EQ(stats_of(0).allocations, 0U);
    EXPECT_EQ(stats_of(0).frees_total, 1U);
    tessera_npu_empty_cache(true);
    EXPECT_EQ(stats_of(0).reserved_bytes, 0U);
    EXPECT_EQ(live("fake_ascend_live_mappings"), 0U);
    EXPECT_EQ(live("fake_ascend_live_handles"), 0U) << "empty_cache gave every page back with aclrtFreePhysical";
  });
}

// torch_npu's statistics hooks, called through the function-pointer types torch_npu casts their addresses to:
// the struct agrees with the C ABI's own statistics, and a peak reset starts every peak from the current value.
TEST(CApiFakeAscend, TorchNpusStatisticsHooksReportTheAllocatorsFigures) {
  in_fresh_process({{"TESSERA_ASCEND_LIBRARY", TESSERA_FAKE_ASCEND_LIBRARY}}, [] {
    tessera_npu_device_stats (*get_device_stats)(int) = &tessera_npu_get_device_stats;
    void (*reset_peak_status)(int) = &tessera_npu_reset_peak_stats;
    constexpr std::size_t big = std::size_t{6} << 20, small = 300 * 1024;
    void* large_block = tessera_npu_alloc(big, 0, nullptr);
    void* small_block = tessera_npu_alloc(small, 0, nullptr);
    ASSERT_NE(large_block, nullptr) << last_error();
    ASSERT_NE(small_block, nullptr) << last_error();
    tessera_npu_device_stats stats = get_device_stats(0);
    const tessera_memory_stats own = stats_of(0);
    EXPECT_EQ(stats.allocation[TESSERA_NPU_STAT_AGGREGATE].current, 2);
    EXPECT_EQ(stats.allocation[TESSERA_NPU_STAT_SMALL_POOL].current, 1);
    EXPECT_EQ(stats.allocation[TESSERA_NPU_STAT_LARGE_POOL].current, 1);
    EXPECT_EQ(stats.requested_bytes[TESSERA_NPU_STAT_AGGREGATE].current, static_cast<std::int64_t>(big + small));
    EXPECT_EQ(stats.allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].current, static_cast<std::int64_t>(own.allocated_bytes));
    EXPECT_EQ(stats.reserved_bytes[TESSERA_NPU_STAT_AGGREGATE].current, static_cast<std::int64_t>(own.reserved_bytes));
    EXPECT_EQ(stats.reserved_bytes[TESSERA_NPU_STAT_SMALL_POOL].current +
                  stats.reserved_bytes[TESSERA_NPU_STAT_LARGE_POOL].current + static_cast<std::int64_t>(own.pooled_bytes),
              static_cast<std::int64_t>(own.reserved_bytes));
    EXPECT_EQ(stats.segment[TESSERA_NPU_STAT_AGGREGATE].current, 2) << "a segment of each pool holds pages";
    EXPECT_EQ(stats.segment[TESSERA_NPU_STAT_SMALL_POOL].current, 1);
    EXPECT_EQ(stats.active_bytes[TESSERA_NPU_STAT_AGGREGATE].current,
              stats.allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].current) << "no free waits for an event";
    // The small block's granule (2 MiB) holds it and free bytes; the large block is whole granules.
    EXPECT_EQ(stats.inactive_split_bytes[TESSERA_NPU_STAT_SMALL_POOL].current,
              static_cast<std::int64_t>((std::size_t{2} << 20) - small));
    EXPECT_EQ(stats.inactive_split_bytes[TESSERA_NPU_STAT_LARGE_POOL].current, 0);
    EXPECT_EQ(stats.inactive_split[TESSERA_NPU_STAT_AGGREGATE].current, 1);
    EXPECT_EQ(stats.inactive_split_bytes[TESSERA_NPU_STAT_AGGREGATE].peak, 0) << "current only";

    tessera_npu_free(large_block, big, 0, nullptr);
    EXPECT_GT(get_device_stats(0).allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].peak,
              get_device_stats(0).allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].current);
    reset_peak_status(0);
    EXPECT_STREQ(tessera_last_error(), "");
    stats = get_device_stats(0);
    EXPECT_EQ(stats.allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].peak,
              stats.allocated_bytes[TESSERA_NPU_STAT_AGGREGATE].current);
    EXPECT_EQ(stats.reserved_bytes[TESSERA_NPU_STAT_AGGREGATE].peak,
              stats.reserved_bytes[TESSERA_NPU_STAT_AGGREGATE].current);
    const tessera_memory_stats reset = stats_of(0);
    EXPECT_EQ(reset.allocated_bytes_peak, reset.allocated_bytes);
    EXPECT_EQ(reset.reserved_bytes_peak, reset.reserved_bytes);
    EXPECT_EQ(stats_json(0)["allocation.all.peak"], 1);

    tessera_npu_free(small_block, small, 0, nullptr);
    EXPECT_EQ(get_device_stats(64).allocation[TESSERA_NPU_STAT_AGGREGATE].current, 0);
    EXPECT_TRUE(contains(last_error(), "tessera_npu_get_device_stats: device 64 is out of range")) << last_error();
  });
}

// The runtime's ACL_ERROR_RT_MEMORY_ALLOCATION, below the capacity the device reports, is out of memory all
// the way up: null and a message from tessera_npu_alloc, torch_npu's message from the throwing entry point.
TEST(CApiFakeAscend, TheRuntimesOutOfMemoryReachesTheNpuEntryPoints) {
  in_fresh_process({{"TESSERA_ASCEND_LIBRARY", TESSERA_FAKE_ASCEND_LIBRARY}}, [] {
    fake_ascend<void(std::size_t)>("fake_ascend_set_physical_limit")(std::size_t{8} << 20);
    void* kept = tessera_npu_alloc(std::size_t{4} << 20, 0, nullptr);
    ASSERT_NE(kept, nullptr) << last_error();
    EXPECT_EQ(tessera_npu_alloc(std::size_t{16} << 20, 0, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "tessera_npu_alloc(16777216 bytes, device 0)")) << message;
    EXPECT_TRUE(contains(message, "out_of_memory")) << message;
    EXPECT_EQ(stats_of(0).num_ooms, 1U);
    try {
      (void)tessera_torch_npu_alloc(std::size_t{16} << 20, 0, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& error) {
      EXPECT_EQ(std::string(error.what()).rfind("NPU out of memory. tessera_torch_npu_alloc(16777216 bytes", 0), 0U)
          << error.what();
    }
    tessera_npu_free(kept, std::size_t{4} << 20, 0, nullptr);
    EXPECT_EQ(stats_of(0).allocations, 0U) << last_error();
  });
}
#endif

// ---- fork(): a child never shares the parent's memory or finds a lock held

// A block of the parent's, its bytes checked in the child and after it.
bool holds(const void* block, std::size_t size, unsigned char value) {
  const auto* bytes = static_cast<const unsigned char*>(block);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

TEST(CApiFork, AHostDevicesChildFreesAndAllocatesOnlyItsOwnMemory) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "256MiB"}}, [] {
    constexpr std::size_t size = std::size_t{1} << 20;
    void* live = tessera_alloc(size, 0, nullptr);
    ASSERT_NE(live, nullptr) << last_error();
    std::memset(live, 0xab, size);
    const auto end = tessera::test_support::run_in_child([&] {
      if (!holds(live, size, 0xab)) return 10;
      tessera_free(live, size, 0, nullptr);
      std::vector<void*> mine;
      for (int i = 0; i < 16; ++i) {
        mine.push_back(tessera_alloc(size, 0, nullptr));
        if (mine.back() == nullptr) return 11;
        std::memset(mine.back(), 0xcd, size);
      }
      for (void* block : mine) tessera_free(block, size, 0, nullptr);
      tessera_empty_cache();
      return 0;
    });
    EXPECT_EQ(end.exit_code, 0) << describe(end);
    EXPECT_TRUE(holds(live, size, 0xab)) << "the child's allocations wrote the parent's block";
    EXPECT_EQ(stats_of(0).allocations, 1U) << "the child's free freed the parent's block";
    tessera_free(live, size, 0, nullptr);
    EXPECT_EQ(stats_of(0).allocations, 0U);
  });
}

// Other threads hold the registry's, the error message's and the statistics' locks over and over while the
// main thread forks: every child allocates, reads the message and the statistics, and exits.
TEST(CApiFork, ForkWhileOtherThreadsAreInTheCApiNeverHangsTheChild) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "64MiB"}}, [] {
    ASSERT_NE(tessera_alloc(512, 0, nullptr), nullptr) << last_error();
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        while (!stop.load(std::memory_order_relaxed)) {
          (void)tessera_alloc(std::size_t{1} << 40, t, nullptr);  // refused: the message's lock; device 1 is created
          tessera_memory_stats stats{};
          (void)tessera_get_memory_stats(0, &stats);
          (void)tessera_last_error_any_thread();
        }
      });
    }
    int hung = 0;
    int failed = 0;
    for (int i = 0; i < 20; ++i) {
      const auto end = tessera::test_support::run_in_child(
          [] {
            void* block = tessera_alloc(4096, 0, nullptr);
            if (block == nullptr) return 10;
            tessera_free(block, 4096, 0, nullptr);
            tessera_memory_stats stats{};
            if (tessera_get_memory_stats(0, &stats) != 0) return 11;
            (void)tessera_last_error_any_thread();
            return tessera_alloc(4096, 2, nullptr) == nullptr ? 12 : 0;  // a device of its own
          },
          std::chrono::seconds(10));
      hung += end.hung ? 1 : 0;
      failed += !end.hung && end.exit_code != 0 ? 1 : 0;
    }
    stop = true;
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(hung, 0);
    EXPECT_EQ(failed, 0);
  });
}

#ifdef TESSERA_FAKE_CUDA_LIBRARY
TEST(CApiFork, ACudaDevicesChildIsRefusedByNameAndFreesNothing) {
  in_fresh_process({{"TESSERA_CUDA_LIBRARY", TESSERA_FAKE_CUDA_LIBRARY}}, [] {
    constexpr std::size_t size = std::size_t{4} << 20;
    void* live = tessera_alloc(size, 0, nullptr);
    ASSERT_NE(live, nullptr) << last_error();
    tessera_free(tessera_alloc(size, 0, nullptr), size, 0, nullptr);  // cached: the child must not get it
    const auto end = tessera::test_support::run_in_child([&] {
      if (tessera_alloc(size, 0, nullptr) != nullptr) return 10;
      const std::string refused = last_error();
      if (!contains(refused, "is a fork() of it") || !contains(refused, "spawn")) return 11;
      tessera_free(live, size, 0, nullptr);
      if (!contains(last_error(), "nothing was freed")) return 12;
      return stats_of(0).allocations == 1U ? 0 : 13;
    });
    EXPECT_EQ(end.exit_code, 0) << describe(end);
    EXPECT_EQ(stats_of(0).allocations, 1U);
    tessera_free(live, size, 0, nullptr);
    EXPECT_EQ(stats_of(0).allocations, 0U) << last_error();
  });
}
#endif

// ---- without the platform libraries

TEST(CApiUnavailable, AscendWithoutCannFailsWithAClearMessage) {
  if (void* cann = dlopen("libascendcl.so", RTLD_LAZY)) {
    dlclose(cann);
    GTEST_SKIP() << "the CANN runtime is present";
  }
  in_fresh_process({}, [] {
    ASSERT_EQ(tessera_npu_alloc(1000, 0, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "tessera_npu_alloc(1000 bytes, device 0)")) << message;
    EXPECT_TRUE(contains(message, "cannot start the ascend driver for device 0")) << message;
    EXPECT_TRUE(contains(message, "libascendcl")) << message;
    EXPECT_EQ(tessera_has_allocator(0), 0);
  });
}

TEST(CApiUnavailable, AMissingCudaLibraryIsNamed) {
  in_fresh_process({{"TESSERA_CUDA_LIBRARY", "libtessera-no-such-cuda.so.1"}}, [] {
    EXPECT_EQ(tessera_alloc(1000, 0, nullptr), nullptr);
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "cannot start the cuda driver for device 0")) << message;
    EXPECT_TRUE(contains(message, "libtessera-no-such-cuda.so.1")) << message;
  });
}

TEST(CApi, VersionIsTheProjects) { EXPECT_STRNE(tessera_version(), ""); }

// ---- pausing memory by tag

TEST(CApiPause, TaggedMemoryIsPausedWithBackupAndResumedAtTheSameAddresses) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    tessera_push_tag("weights");
    tessera_push_tag("kv_cache");
    void* kv = tessera_alloc(3 << 20, 0, nullptr);
    tessera_pop_tag();
    void* weights = tessera_alloc(5 << 20, 0, nullptr);
    tessera_pop_tag();
    tessera_pop_tag();  // none open: nothing happens, and the code says so
    EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
    void* other = tessera_alloc(1 << 20, 0, nullptr);
    ASSERT_TRUE(kv && weights && other) << last_error();
    for (std::size_t i = 0; i < (5u << 20); ++i) static_cast<unsigned char*>(weights)[i] = static_cast<unsigned char>(i * 7);
    Json stats = stats_json(0);
    EXPECT_EQ(stats["tessera.tag.weights.allocated_bytes"], 5u << 20);
    EXPECT_EQ(stats["tessera.tag.kv_cache.allocated_bytes"], 3u << 20);
    EXPECT_EQ(stats["tessera.tag.default.allocated_bytes"], 1u << 20);
    const std::uint64_t reserved = stats["reserved_bytes.all.current"];

    ASSERT_EQ(tessera_pause(0, "weights", 1), 0) << last_error();
    ASSERT_EQ(tessera_pause(0, "kv_cache", 0), 0) << last_error();
    stats = stats_json(0);
    EXPECT_EQ(stats["tessera.tag.weights.paused"], 1);
    EXPECT_EQ(stats["tessera.tag.weights.reserved_bytes"], 0);
    EXPECT_GE(stats["tessera.tag.weights.backup_bytes"], 5u << 20);
    EXPECT_EQ(stats["tessera.tag.kv_cache.backup_bytes"], 0);
    EXPECT_LE(stats["reserved_bytes.all.current"], reserved - (8u << 20));
    tessera_push_tag("weights");
    EXPECT_EQ(tessera_alloc(1000, 0, nullptr), nullptr);
    EXPECT_TRUE(contains(last_error(), "'weights'")) << last_error();
    tessera_pop_tag();

    ASSERT_EQ(tessera_resume(0, nullptr), 0) << last_error();  // every tag
    stats = stats_json(0);
    EXPECT_EQ(stats["tessera.tag.weights.paused"], 0);
    EXPECT_EQ(stats["tessera.tag.kv_cache.paused"], 0);
    for (std::size_t i = 0; i < (5u << 20); ++i) {
      ASSERT_EQ(static_cast<unsigned char*>(weights)[i], static_cast<unsigned char>(i * 7)) << "byte " << i;
    }
    std::memset(kv, 1, 3 << 20);
    ASSERT_EQ(tessera_pause(0, nullptr, 0), 0) << last_error();  // every tag but "default"
    stats = stats_json(0);
    EXPECT_EQ(stats["tessera.tag.weights.paused"], 1);
    EXPECT_EQ(stats["tessera.tag.default.paused"], 0) << "memory allocated outside a tag is never paused";
    ASSERT_EQ(tessera_resume(0, nullptr), 0) << last_error();
    for (void* block : {kv, weights, other}) tessera_free(block, 0, 0, nullptr);
    EXPECT_EQ(stats_of(0).allocations, 0u);
  });
}

TEST(CApiPause, ErrorsNameTheTagAndTheDevice) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_pause(0, "weights", 1), -1);
    EXPECT_TRUE(contains(last_error(), "device 0 has no allocator")) << last_error();
    void* block = tessera_alloc(1000, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    EXPECT_EQ(tessera_pause(0, "weights", 1), -1);
    EXPECT_TRUE(contains(last_error(), "tag 'weights'")) << last_error();
    EXPECT_TRUE(contains(last_error(), "'default'")) << "lists the tags there: " << last_error();
    EXPECT_EQ(tessera_resume(0, "weights"), -1);
    EXPECT_EQ(tessera_pause(64, "weights", 0), -1);
    EXPECT_TRUE(contains(last_error(), "64")) << last_error();
    tessera_free(block, 0, 0, nullptr);
  });
}

// Each block keeps the backup choice of the tag open when it was allocated; a later push of the same tag
// without backup changes nothing for it.
TEST(CApiPause, TheBackupChoiceIsEachBlocksAndALateBackupIsRefused) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    ASSERT_EQ(tessera_push_tag_with_backup("n", 1), 0) << last_error();
    auto* kept = static_cast<unsigned char*>(tessera_alloc(1 << 20, 0, nullptr));
    ASSERT_EQ(tessera_push_tag_with_backup("n", 0), 0) << last_error();
    void* discarded = tessera_alloc(1 << 20, 0, nullptr);
    tessera_pop_tag();
    auto* kept_too = static_cast<unsigned char*>(tessera_alloc(3 << 20, 0, nullptr));
    tessera_pop_tag();
    ASSERT_TRUE(kept && discarded && kept_too) << last_error();
    std::memset(kept, 0x5a, 1 << 20);
    std::memset(kept_too, 0xa5, 3 << 20);
    ASSERT_EQ(tessera_pause(0, "n", 0), 0) << last_error();
    const std::uint64_t backed_up = stats_json(0)["tessera.tag.n.backup_bytes"];
    EXPECT_GE(backed_up, 4u << 20) << "the two blocks allocated with backup";
    EXPECT_LT(backed_up, 5u << 20) << "and not the one without";
    // Already paused without a backup of `discarded`: a pause that asks for one is refused, naming the tag.
    EXPECT_EQ(tessera_pause(0, "n", 1), -1);
    EXPECT_TRUE(contains(last_error(), "'n'")) << last_error();
    EXPECT_TRUE(contains(last_error(), "without a backup")) << last_error();
    ASSERT_EQ(tessera_resume(0, "n"), 0) << last_error();
    for (std::size_t i = 0; i < (1u << 20); ++i) ASSERT_EQ(kept[i], 0x5a) << "byte " << i;
    for (std::size_t i = 0; i < (3u << 20); ++i) ASSERT_EQ(kept_too[i], 0xa5) << "byte " << i;
    for (void* block : {static_cast<void*>(kept), discarded, static_cast<void*>(kept_too)}) tessera_free(block, 0, 0, nullptr);
  });
}

TEST(CApiPause, TheDefaultTagIsNeverPausedAndTheEmptyNameIsIt) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    void* block = tessera_alloc(1000, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    for (const char* name : {"", "default"}) {
      EXPECT_EQ(tessera_pause(0, name, 1), -1) << name;
      EXPECT_TRUE(contains(last_error(), "tag 'default'")) << last_error();
      EXPECT_TRUE(contains(last_error(), "outside a tag")) << last_error();
      EXPECT_EQ(tessera_resume(0, name), -1) << name;
    }
    EXPECT_EQ(stats_json(0)["tessera.tag.default.paused"], 0);
    tessera_free(block, 0, 0, nullptr);
  });
}

// A name that is not a tag is refused where it enters, and nothing the process does later makes the
// statistics unreadable.
TEST(CApiPause, ABadTagIsRefusedWhereItEntersAndTheStatisticsStayReadable) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    EXPECT_EQ(tessera_push_tag("\xff"), -1);
    EXPECT_TRUE(contains(last_error(), "not valid UTF-8")) << last_error();
    EXPECT_TRUE(contains(last_error(), "\\xff")) << "the byte, escaped: " << last_error();
    EXPECT_EQ(tessera_push_tag_with_backup("bell\a", 1), -1);
    EXPECT_TRUE(contains(last_error(), "control byte 0x07")) << last_error();
    void* block = tessera_alloc(1000, 0, nullptr);  // under the default tag: nothing was opened
    ASSERT_NE(block, nullptr) << last_error();
    const Json stats = stats_json(0);
    EXPECT_GE(stats["tessera.tag.default.allocated_bytes"], 1000u);
    EXPECT_EQ(stats.size(), Json::parse(tessera_memory_stats_json(0)).size());
    EXPECT_EQ(tessera_pause(0, "\xff", 0), -1);
    EXPECT_TRUE(contains(last_error(), "not valid UTF-8")) << last_error();
    EXPECT_NE(tessera_memory_stats_json(0), nullptr) << last_error();
    tessera_free(block, 0, 0, nullptr);
  });
}

// ---- errors: a code of a stable enumeration, for the last call on this thread only (tessera_c.h, "Errors")

// The values are ABI: a program compiled against an older header reads the same numbers.
static_assert(TESSERA_OK == 0 && TESSERA_ERROR_OUT_OF_MEMORY == 1 && TESSERA_ERROR_INVALID_ARGUMENT == 2 &&
              TESSERA_ERROR_NOT_FOUND == 3 && TESSERA_ERROR_NOT_MAPPED == 4 && TESSERA_ERROR_ALREADY_MAPPED == 5 &&
              TESSERA_ERROR_STILL_MAPPED == 6 && TESSERA_ERROR_MAP_LIMIT == 7 && TESSERA_ERROR_UNAVAILABLE == 8 &&
              TESSERA_ERROR_UNSUPPORTED == 9 && TESSERA_ERROR_PLATFORM == 10 &&
              TESSERA_ERROR_HOST_OUT_OF_MEMORY == 11 && TESSERA_ERROR_INTERNAL == 12);

int code() { return tessera_last_error_code(); }

// The state after a call: its code, and a message exactly when it failed.
void expect_outcome(const char* call, int expected) {
  EXPECT_EQ(code(), expected) << call << ": " << last_error();
  if (expected == TESSERA_OK) {
    EXPECT_STREQ(tessera_last_error(), "") << call << " succeeded: no message is left from an earlier call";
  } else {
    EXPECT_STRNE(tessera_last_error(), "") << call << " failed without a message";
  }
}

// Every void function: the code after a failing call, then after a succeeding one (which clears the message).
TEST(CApiErrors, EveryVoidCallSaysWhetherItFailed) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "64MiB"}}, [] {
    void* block = tessera_alloc(4096, 0, nullptr);
    void* other = tessera_alloc(4096, 1, nullptr);
    ASSERT_TRUE(block && other) << last_error();
    int local = 0;
    for (auto* release : {&tessera_free, &tessera_npu_free}) {
      release(&local, 4, 0, nullptr);
      expect_outcome("free of a pointer that is no block", TESSERA_ERROR_NOT_FOUND);
      release(other, 4096, 0, nullptr);
      expect_outcome("free on the wrong device", TESSERA_ERROR_INVALID_ARGUMENT);
      release(block, 4096, 64, nullptr);
      expect_outcome("free on a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
      release(nullptr, 0, 0, nullptr);
      expect_outcome("free of NULL", TESSERA_OK);
    }
    for (auto* set_fraction : {&tessera_set_memory_fraction, &tessera_npu_set_memory_fraction}) {
      set_fraction(1.5, 0);
      expect_outcome("memory fraction 1.5", TESSERA_ERROR_INVALID_ARGUMENT);
      set_fraction(0.5, 64);
      expect_outcome("memory fraction of a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
      set_fraction(1.0, 0);
      expect_outcome("memory fraction 1", TESSERA_OK);
    }
    for (auto* record_stream : {&tessera_record_stream, &tessera_npu_record_stream}) {
      record_stream(&local, reinterpret_cast<void*>(7));
      expect_outcome("record_stream of a pointer that is no block", TESSERA_ERROR_NOT_FOUND);
      record_stream(block, reinterpret_cast<void*>(7));
      expect_outcome("record_stream of a live block", TESSERA_OK);
      record_stream(nullptr, reinterpret_cast<void*>(7));
      expect_outcome("record_stream of NULL", TESSERA_OK);
    }
    tessera_pop_tag();
    expect_outcome("pop_tag with no tag open", TESSERA_ERROR_NOT_FOUND);
    ASSERT_EQ(tessera_push_tag("t"), 0) << last_error();
    tessera_pop_tag();
    expect_outcome("pop_tag of an open tag", TESSERA_OK);
    tessera_npu_reset_peak_stats(64);
    expect_outcome("npu_reset_peak_stats of a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
    tessera_npu_reset_peak_stats(0);
    expect_outcome("npu_reset_peak_stats", TESSERA_OK);
    tessera_free(block, 4096, 0, nullptr);
    tessera_free(other, 4096, 1, nullptr);
    tessera_empty_cache();
    expect_outcome("empty_cache", TESSERA_OK);
    tessera_npu_empty_cache(true);
    expect_outcome("npu_empty_cache", TESSERA_OK);
    tessera_init(1);
    expect_outcome("init", TESSERA_OK);
    tessera_npu_init(1);
    expect_outcome("npu_init", TESSERA_OK);
    tessera_free(block, 4096, 0, nullptr);
    expect_outcome("a double free", TESSERA_ERROR_NOT_FOUND);
    tessera_clear_error();
    expect_outcome("clear_error", TESSERA_OK);
  });
}

TEST(CApiErrors, InitFailsWithTheCodeOfABadConfiguration) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_ALLOC_CONF", "no_such_key:1"}}, [] {
    for (auto* init : {&tessera_init, &tessera_npu_init}) {
      init(1);
      expect_outcome("init with a bad TESSERA_ALLOC_CONF", TESSERA_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(last_error(), "no_such_key")) << last_error();
      EXPECT_EQ(tessera_version()[0] != '\0', true);
      expect_outcome("version", TESSERA_OK);
    }
  });
}

// empty_cache fails where a device cannot be used: in a child of fork() of a CUDA process.
#ifdef TESSERA_FAKE_CUDA_LIBRARY
TEST(CApiErrors, EmptyCacheInAForkedChildOfACudaProcessFailsAsUnavailable) {
  in_fresh_process({{"TESSERA_CUDA_LIBRARY", TESSERA_FAKE_CUDA_LIBRARY}}, [] {
    tessera_free(tessera_alloc(4096, 0, nullptr), 4096, 0, nullptr);
    ASSERT_EQ(tessera_has_allocator(0), 1) << last_error();
    const auto end = tessera::test_support::run_in_child([] {
      tessera_empty_cache();
      if (code() != TESSERA_ERROR_UNAVAILABLE) return 10;
      if (!contains(last_error(), "tessera_empty_cache: device 0 (cuda driver)")) return 11;
      return 0;
    });
    EXPECT_EQ(end.exit_code, 0) << describe(end);
    tessera_empty_cache();
    expect_outcome("empty_cache in the process that opened the device", TESSERA_OK);
  });
}
#endif

// Each C++ category reaches the caller as its code, through the functions that return a failure value too.
TEST(CApiErrors, FailuresKeepTheirKind) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "16MiB"}}, [] {
    EXPECT_EQ(tessera_alloc(std::size_t{32} << 20, 0, nullptr), nullptr);
    expect_outcome("alloc beyond the capacity", TESSERA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(tessera_alloc(std::numeric_limits<std::size_t>::max(), 0, nullptr), nullptr);
    expect_outcome("alloc of 2^64 - 1 bytes", TESSERA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(tessera_alloc(0, 0, nullptr), nullptr);
    expect_outcome("alloc of 0 bytes", TESSERA_OK);
    try {
      (void)tessera_torch_alloc(std::size_t{32} << 20, 0, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error&) {
      expect_outcome("torch_alloc beyond the capacity", TESSERA_ERROR_OUT_OF_MEMORY);
    }
    try {
      (void)tessera_torch_alloc(100, 64, nullptr);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error&) {
      expect_outcome("torch_alloc on a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
    }
    EXPECT_EQ(tessera_configure("warp", nullptr), -1);
    expect_outcome("configure of an unknown driver", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tessera_get_memory_stats(0, nullptr), -1);
    expect_outcome("get_memory_stats into NULL", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tessera_memory_summary(64), nullptr);
    expect_outcome("memory_summary of a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tessera_dump_snapshot("x.pickle", 5), -1);
    expect_outcome("dump_snapshot of a device without an allocator", TESSERA_ERROR_NOT_FOUND);
    EXPECT_EQ(tessera_push_tag("bad\x07name"), -1);
    expect_outcome("push_tag of a control byte", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tessera_pause(0, "never-used", 0), -1);
    expect_outcome("pause of a device without an allocator", TESSERA_ERROR_NOT_FOUND);
    void* block = tessera_alloc(4096, 0, nullptr);
    ASSERT_NE(block, nullptr) << last_error();
    expect_outcome("alloc", TESSERA_OK);
    EXPECT_EQ(tessera_pause(0, "never-used", 0), -1);
    expect_outcome("pause of an unknown tag", TESSERA_ERROR_NOT_FOUND);
    EXPECT_EQ(tessera_resume(0, "default"), -1);
    expect_outcome("resume of the default tag", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tessera_has_allocator(0), 1);
    expect_outcome("has_allocator", TESSERA_OK);
    tessera_free(block, 4096, 0, nullptr);
  });
}

// A resume that finds no memory is out of memory, and the tag stays paused.
TEST(CApiErrors, AResumeWithoutRoomIsOutOfMemory) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "16MiB"}}, [] {
    ASSERT_EQ(tessera_push_tag("weights"), 0) << last_error();
    void* weights = tessera_alloc(std::size_t{10} << 20, 0, nullptr);
    tessera_pop_tag();
    ASSERT_NE(weights, nullptr) << last_error();
    ASSERT_EQ(tessera_pause(0, "weights", 0), 0) << last_error();
    void* squatter = tessera_alloc(std::size_t{10} << 20, 0, nullptr);
    ASSERT_NE(squatter, nullptr) << last_error();
    EXPECT_EQ(tessera_resume(0, "weights"), -1);
    expect_outcome("resume without room", TESSERA_ERROR_OUT_OF_MEMORY);
    tessera_free(squatter, 0, 0, nullptr);
    EXPECT_EQ(tessera_resume(0, "weights"), 0) << last_error();
    expect_outcome("resume with room", TESSERA_OK);
    tessera_free(weights, 0, 0, nullptr);
  });
}

// Reading the error changes nothing: the code and message stay until the next call of another function.
TEST(CApiErrors, ReadingTheErrorLeavesIt) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    tessera_pop_tag();
    const std::string message = last_error();
    EXPECT_TRUE(contains(message, "no tag is open")) << message;
    (void)tessera_last_error_any_thread();
    EXPECT_EQ(code(), TESSERA_ERROR_NOT_FOUND);
    EXPECT_EQ(code(), TESSERA_ERROR_NOT_FOUND);
    EXPECT_EQ(last_error(), message);
  });
}

// This thread's code and message are its own: another thread's failure neither shows here nor replaces this
// thread's; only tessera_last_error_any_thread() tells of it.
TEST(CApiErrors, AnotherThreadsFailureIsNotThisThreads) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}, {"TESSERA_CAPACITY", "8MiB"}}, [] {
    EXPECT_EQ(tessera_has_allocator(0), 0);
    std::thread([] {
      EXPECT_EQ(tessera_alloc(std::size_t{16} << 20, 0, nullptr), nullptr);
      EXPECT_EQ(code(), TESSERA_ERROR_OUT_OF_MEMORY);
    }).join();
    expect_outcome("has_allocator, before the other thread failed", TESSERA_OK);
    tessera_pop_tag();
    const std::string mine = last_error();
    std::thread([] { EXPECT_EQ(tessera_alloc(std::size_t{16} << 20, 0, nullptr), nullptr); }).join();
    EXPECT_EQ(code(), TESSERA_ERROR_NOT_FOUND) << "this thread's own failure";
    EXPECT_EQ(last_error(), mine);
    EXPECT_FALSE(contains(last_error(), "out_of_memory")) << last_error();
    EXPECT_TRUE(contains(tessera_last_error_any_thread(), "out_of_memory")) << tessera_last_error_any_thread();
  });
}

// tessera_tags_json: every tag the allocator has allocated under, with names that a key-scraping reader
// would break ('.', '"') and non-ASCII UTF-8, each with its paused state.
TEST(CApiErrors, TagsJsonListsTheTagsWithTheirStates) {
  in_fresh_process({{"TESSERA_DRIVER", "host"}}, [] {
    const char* empty = tessera_tags_json(0);
    ASSERT_NE(empty, nullptr) << last_error();
    EXPECT_EQ(Json::parse(empty), Json::array()) << "no allocator yet";
    const std::vector<std::string> names{"model.weights", "say \"hi\"", "gewichte-\xc3\xa4\xe9\x87\x8d"};
    std::vector<void*> blocks;
    for (const std::string& name : names) {
      ASSERT_EQ(tessera_push_tag(name.c_str()), 0) << last_error();
      blocks.push_back(tessera_alloc(std::size_t{1} << 20, 0, nullptr));
      tessera_pop_tag();
      ASSERT_NE(blocks.back(), nullptr) << last_error();
    }
    blocks.push_back(tessera_alloc(1000, 0, nullptr));  // under "default"
    ASSERT_EQ(tessera_push_tag("opened but never allocated under"), 0);
    tessera_pop_tag();
    ASSERT_EQ(tessera_pause(0, names[0].c_str(), 0), 0) << last_error();
    const char* text = tessera_tags_json(0);
    ASSERT_NE(text, nullptr) << last_error();
    expect_outcome("tags_json", TESSERA_OK);
    const Json tags = Json::parse(text);
    ASSERT_TRUE(tags.is_array()) << text;
    std::vector<std::string> listed;
    for (const Json& tag : tags) {
      listed.push_back(tag["name"]);
      const bool paused = tag["paused"];
      EXPECT_EQ(paused, tag["name"] == names[0]) << tag.dump();
      if (tag["name"] == names[1]) {
        EXPECT_EQ(tag["allocated_bytes"], std::size_t{1} << 20) << tag.dump();
      }
    }
    std::vector<std::string> expected = names;
    expected.emplace_back("default");
    std::sort(listed.begin(), listed.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(listed, expected) << text;
    EXPECT_EQ(tessera_tags_json(64), nullptr);
    expect_outcome("tags_json of a device out of range", TESSERA_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(last_error(), "tessera_tags_json: device 64 is out of range")) << last_error();
    ASSERT_EQ(tessera_resume(0, names[0].c_str()), 0) << last_error();
    for (void* block : blocks) tessera_free(block, 0, 0, nullptr);
  });
}

}  // namespace
