// Private pools through the C ABI on the host driver: PyTorch's CUDA graph hooks called through the C++
// function types PyTorch casts their addresses to (tessera_torch_hooks.hpp), and the C functions whose pool
// takes the calling thread's allocations (tessera_c.h, "Private pools"), with their refusals.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "tessera/tessera_c.h"
#include "tessera/tessera_torch_hooks.hpp"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

// PyTorch's types (torch/csrc/cuda/CUDAPluggableAllocator.cpp): the setters cast an integer address to these.
using MempoolId = std::pair<unsigned long long, unsigned long long>;
using BeginHook = void(int, MempoolId, std::function<bool(CUstream_st*)>);
using PoolHook = void(int, MempoolId);

template <class Function>
Function* hook(const char* name) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  EXPECT_NE(symbol, nullptr) << name;
  const auto address = reinterpret_cast<std::uintptr_t>(symbol);  // as PyTorch gets it: an integer
  return reinterpret_cast<Function*>(address);
}

CUstream_st* stream(std::uintptr_t value) { return reinterpret_cast<CUstream_st*>(value); }

class PoolHooks : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tessera_configure("host", ""), 0) << tessera_last_error(); }
};

TEST_F(PoolHooks, ACaptureStreamsAllocationsGoToTheGraphPoolAndStayThere) {
  auto* begin = hook<BeginHook>("tessera_begin_allocate_to_pool");
  auto* end = hook<PoolHook>("tessera_end_allocate_to_pool");
  auto* release = hook<PoolHook>("tessera_release_pool");
  CUstream_st* capture = stream(0x1234);
  const MempoolId graph{7, 0};
  begin(0, graph, [capture](CUstream_st* asked) { return asked == capture; });
  void* captured = tessera_torch_alloc(mib, 0, capture);
  void* eager = tessera_torch_alloc(mib, 0, nullptr);  // another stream: the shared cache
  end(0, graph);
  ASSERT_NE(captured, nullptr);
  ASSERT_NE(eager, nullptr);
  tessera_free(captured, mib, 0, capture);
  tessera_free(eager, mib, 0, nullptr);
  void* after = tessera_torch_alloc(mib, 0, capture);
  EXPECT_NE(after, captured) << "eager code got the graph's freed block";
  // A second capture into the same pool reuses the first one's freed block.
  begin(0, graph, [capture](CUstream_st* asked) { return asked == capture; });
  EXPECT_EQ(tessera_torch_alloc(mib, 0, capture), captured);
  end(0, graph);
  tessera_free(captured, mib, 0, capture);
  tessera_free(after, mib, 0, capture);
  release(0, graph);
  release(0, graph);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_OK) << tessera_last_error();
  try {
    release(0, graph);
    ADD_FAILURE() << "a third release of a pool of two uses";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("pool (7, 0)"), std::string::npos) << error.what();
    EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
  }
}

TEST_F(PoolHooks, TheHooksRefuseWhatPyTorchNeverSendsWithAnException) {
  auto* begin = hook<BeginHook>("tessera_begin_allocate_to_pool");
  auto* end = hook<PoolHook>("tessera_end_allocate_to_pool");
  EXPECT_THROW(begin(0, MempoolId{0, 0}, [](CUstream_st*) { return true; }), std::runtime_error);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_THROW(begin(0, MempoolId{1, 1}, std::function<bool(CUstream_st*)>{}), std::runtime_error);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_THROW(end(0, MempoolId{1, 1}), std::runtime_error);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
  EXPECT_THROW(end(64, MempoolId{1, 1}), std::runtime_error);  // no device 64
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
}

TEST_F(PoolHooks, ThePoolOfTheCFunctionsTakesOnlyTheCallingThreadsAllocations) {
  ASSERT_EQ(tessera_pool_begin(0, 3, 4, 1), 0) << tessera_last_error();
  void* mine = tessera_alloc(mib, 0, nullptr);
  void* theirs = nullptr;
  std::thread other([&] { theirs = tessera_alloc(mib, 0, nullptr); });
  other.join();
  ASSERT_EQ(tessera_pool_end(0, 3, 4), 0) << tessera_last_error();
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(theirs, nullptr);
  tessera_free(mine, mib, 0, nullptr);
  tessera_free(theirs, mib, 0, nullptr);
  EXPECT_EQ(tessera_alloc(mib, 0, nullptr), theirs) << "the other thread's block was the shared cache's";
  ASSERT_EQ(tessera_pool_begin(0, 3, 4, 1), 0);
  EXPECT_EQ(tessera_alloc(mib, 0, nullptr), mine) << "this thread's block was the pool's";
  ASSERT_EQ(tessera_pool_end(0, 3, 4), 0);
  tessera_free(mine, mib, 0, nullptr);
  tessera_free(theirs, mib, 0, nullptr);
  EXPECT_EQ(tessera_pool_release(0, 3, 4), 0);
  EXPECT_EQ(tessera_pool_release(0, 3, 4), 0);
  EXPECT_EQ(tessera_pool_release(0, 3, 4), -1);
}

TEST_F(PoolHooks, TheCFunctionsRefuseBadArgumentsNamingThem) {
  EXPECT_EQ(tessera_pool_begin(0, 3, 4, 2), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("kind 2"), std::string::npos) << tessera_last_error();
  EXPECT_EQ(tessera_pool_begin(0, 0, 0, 0), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(tessera_pool_end(0, 3, 4), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(tessera_last_error()).find("tessera_pool_end(device 0, pool (3, 4))"), std::string::npos)
      << tessera_last_error();
  EXPECT_EQ(tessera_pool_release(0, 9, 9), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
  EXPECT_EQ(tessera_pool_begin(-1, 3, 4, 0), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(tessera_pool_begin(0, 3, 4, 0), 0);
  EXPECT_EQ(tessera_pool_begin(0, 3, 4, 1), -1) << "a graph pool begun as a plain one";
  EXPECT_EQ(tessera_pool_release(0, 3, 4), -1) << "released while begun";
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(tessera_pool_end(0, 3, 4), 0);
  EXPECT_EQ(tessera_pool_release(0, 3, 4), 0);
}

}  // namespace
