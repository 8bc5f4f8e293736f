// Graph capture refused where PyTorch cannot take the graph pool hooks (tessera_refuse_graph_capture,
// tessera_c.h), over the cuda driver and the stand-in libcuda, whose streams capture as the CUDA runtime's
// cudaStreamBeginCapture makes them. One process for every test: the driver is chosen once, each test puts
// the switch and the stand-in's knobs back, and uses streams of its own.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tessera/tessera_c.h"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The stand-in's calls and knobs, from the library the driver opens (dlopen gives the same handle: one state).
template <class F>
F* fake_cuda(const char* name) {
  void* fake = dlopen(TESSERA_FAKE_CUDA_LIBRARY, RTLD_NOW);
  if (fake == nullptr) throw std::runtime_error(dlerror());
  void* found = dlsym(fake, name);
  if (found == nullptr) throw std::runtime_error(std::string("the stand-in libcuda has no ") + name);
  return reinterpret_cast<F*>(found);
}

void* stream(std::uintptr_t value) { return reinterpret_cast<void*>(value); }

int begin_capture(void* on) { return fake_cuda<int(void*, int)>("cuStreamBeginCapture_v2")(on, 0); }
int end_capture(void* on) {
  void* graph = nullptr;
  return fake_cuda<int(void*, void**)>("cuStreamEndCapture")(on, &graph);
}
int is_capturing_calls() { return fake_cuda<int()>("fake_cuda_is_capturing_calls")(); }

std::uint64_t live_blocks() {
  tessera_memory_stats stats{};
  EXPECT_EQ(tessera_get_memory_stats(0, &stats), 0) << tessera_last_error();
  return stats.allocations;
}

class GraphCaptureRefusal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"TESSERA_DRIVER", "TESSERA_ALLOC_CONF", "TESSERA_CAPACITY"}) unsetenv(name);
    setenv("TESSERA_CUDA_LIBRARY", TESSERA_FAKE_CUDA_LIBRARY, 1);
  }
  void SetUp() override {
    ASSERT_EQ(tessera_configure("cuda", nullptr), 0) << tessera_last_error();
    // Device 0's driver exists from here, and this thread has its context current (the stand-in's capture
    // calls need it, as CUDA's do).
    void* first = tessera_alloc(mib, 0, nullptr);
    ASSERT_NE(first, nullptr) << tessera_last_error();
    tessera_free(first, mib, 0, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(tessera_refuse_graph_capture(0), 0);
    fake_cuda<void(int)>("fake_cuda_set_is_capturing_result")(0);
  }
};

TEST_F(GraphCaptureRefusal, AnAllocationOnACapturingStreamIsRefusedNamingPyTorch23) {
  ASSERT_EQ(tessera_refuse_graph_capture(1), 0);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_OK);
  void* capture = stream(0x1234);
  ASSERT_EQ(begin_capture(capture), 0);
  const std::uint64_t before = live_blocks();

  EXPECT_EQ(tessera_alloc(mib, 0, capture), nullptr);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_UNSUPPORTED);
  const std::string message = tessera_last_error();
  EXPECT_TRUE(contains(message, "tessera_alloc(1048576 bytes, device 0): stream 0x1234 is capturing a CUDA graph"))
      << message;
  EXPECT_TRUE(contains(message, "lacks set_begin_allocate_to_pool: PyTorch 2.3 has it")) << message;
  EXPECT_TRUE(contains(message, "memory the graph still uses")) << message;

  // PyTorch's entry point throws it, as every failure, for a Python RuntimeError.
  try {
    tessera_torch_alloc(mib, 0, capture);
    ADD_FAILURE() << "tessera_torch_alloc served a capturing stream";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(contains(error.what(), "tessera_torch_alloc(1048576 bytes, device 0): stream 0x1234")) << error.what();
    EXPECT_TRUE(contains(error.what(), "PyTorch 2.3")) << error.what();
    EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_UNSUPPORTED);
  }
  EXPECT_EQ(tessera_npu_alloc(mib, 0, capture), nullptr);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_UNSUPPORTED);
  EXPECT_TRUE(contains(tessera_last_error(), "tessera_npu_alloc(1048576 bytes, device 0)")) << tessera_last_error();
  EXPECT_EQ(live_blocks(), before) << "a refused allocation holds nothing";

  // Streams not capturing are served: eager work beside the capture, and the default stream.
  for (void* eager : {stream(0x5678), stream(0)}) {
    void* block = tessera_torch_alloc(mib, 0, eager);
    ASSERT_NE(block, nullptr) << tessera_last_error();
    tessera_free(block, mib, 0, eager);
  }
  // An invalidated capture is still one until it ends; once ended the stream is served again.
  ASSERT_EQ(fake_cuda<int(void*)>("fake_cuda_invalidate_capture")(capture), 0);
  EXPECT_EQ(tessera_alloc(mib, 0, capture), nullptr);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_UNSUPPORTED);
  EXPECT_EQ(end_capture(capture), 901);  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  void* after = tessera_alloc(mib, 0, capture);
  ASSERT_NE(after, nullptr) << tessera_last_error();
  tessera_free(after, mib, 0, capture);
}

TEST_F(GraphCaptureRefusal, OffTheCapturingStreamIsServedAndTheDriverIsNotAsked) {
  void* capture = stream(0x2345);
  ASSERT_EQ(begin_capture(capture), 0);
  const int asked = is_capturing_calls();
  void* block = tessera_torch_alloc(mib, 0, capture);
  ASSERT_NE(block, nullptr) << tessera_last_error();
  tessera_free(block, mib, 0, capture);
  EXPECT_EQ(is_capturing_calls(), asked) << "off, an allocation must not ask the driver";

  // On, then off again: served as before.
  ASSERT_EQ(tessera_refuse_graph_capture(1), 0);
  EXPECT_EQ(tessera_alloc(mib, 0, capture), nullptr);
  EXPECT_GT(is_capturing_calls(), asked);
  ASSERT_EQ(tessera_refuse_graph_capture(0), 0);
  block = tessera_alloc(mib, 0, capture);
  ASSERT_NE(block, nullptr) << tessera_last_error();
  tessera_free(block, mib, 0, capture);
  EXPECT_EQ(end_capture(capture), 0);
}

TEST_F(GraphCaptureRefusal, AQueryThatFailsIsAClearErrorAndNothingIsAllocated) {
  ASSERT_EQ(tessera_refuse_graph_capture(1), 0);
  fake_cuda<void(int)>("fake_cuda_set_is_capturing_result")(906);  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
  const std::uint64_t before = live_blocks();
  const std::size_t chunks = fake_cuda<std::size_t()>("fake_cuda_live_allocations")();
  EXPECT_EQ(tessera_alloc(std::size_t{64} << 20, 0, stream(0x3456)), nullptr);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_PLATFORM);
  const std::string message = tessera_last_error();
  EXPECT_TRUE(contains(message, "tessera_alloc(67108864 bytes, device 0): graph capture is refused")) << message;
  EXPECT_TRUE(contains(message, "whether stream 0x3456 is capturing a graph cannot be told")) << message;
  EXPECT_TRUE(contains(message, "cuStreamIsCapturing(stream 0x3456) failed")) << message;
  EXPECT_TRUE(contains(message, "906")) << message;
  EXPECT_TRUE(contains(message, "nothing was allocated")) << message;
  EXPECT_THROW(tessera_torch_alloc(mib, 0, stream(0x3456)), std::runtime_error);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_PLATFORM);
  EXPECT_EQ(live_blocks(), before);
  EXPECT_EQ(fake_cuda<std::size_t()>("fake_cuda_live_allocations")(), chunks) << "no page was created";
}

}  // namespace
