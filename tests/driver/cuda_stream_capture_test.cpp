// The cuda driver's stream_is_capturing over the stand-in libcuda, whose streams capture as the CUDA runtime's
// cudaStreamBeginCapture makes them: what the C ABI asks before it serves an allocation while graph capture is
// refused (tessera_refuse_graph_capture).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "fake_platforms.hpp"

namespace tessera {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#ifdef TESSERA_FAKE_CUDA_LIBRARY

class CudaStreamCapture : public testing::FakeCuda {
 protected:
  // The calls the CUDA runtime makes for torch.cuda.graph, straight to the stand-in (mode 0: global).
  int begin_capture(StreamId stream) { return control<int(void*, int)>("cuStreamBeginCapture_v2")(raw(stream), 0); }
  int end_capture(StreamId stream) {
    void* graph = nullptr;
    return control<int(void*, void**)>("cuStreamEndCapture")(raw(stream), &graph);
  }
  static void* raw(StreamId stream) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(stream)); }
};

TEST_F(CudaStreamCapture, AStreamCapturesFromBeginToEndAndAnInvalidatedCaptureStillCounts) {
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  Driver& driver = **made;
  const StreamId capture{0x1234};
  const StreamId other{0x5678};
  EXPECT_FALSE(*driver.stream_is_capturing(capture));
  ASSERT_EQ(begin_capture(capture), 0);
  EXPECT_TRUE(*driver.stream_is_capturing(capture));
  EXPECT_FALSE(*driver.stream_is_capturing(other));
  EXPECT_FALSE(*driver.stream_is_capturing(default_stream));
  // A capture an error has invalidated is still one until it ends: work on the stream is not run.
  ASSERT_EQ(control<int(void*)>("fake_cuda_invalidate_capture")(raw(capture)), 0);
  EXPECT_TRUE(*driver.stream_is_capturing(capture));
  EXPECT_EQ(end_capture(capture), 901);  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  EXPECT_FALSE(*driver.stream_is_capturing(capture));
  // The query runs in the device's context, and puts back the thread's own.
  int other_context = 0;
  control<void(void*)>("fake_cuda_set_current_context")(&other_context);
  EXPECT_FALSE(*driver.stream_is_capturing(capture));
  EXPECT_EQ(control<void*()>("fake_cuda_current_context")(), &other_context);
}

TEST_F(CudaStreamCapture, AFailedQueryIsAPlatformErrorNamingTheCallAndTheStream) {
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  control<void(int)>("fake_cuda_set_is_capturing_result")(906);  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
  auto asked = (*made)->stream_is_capturing(StreamId{0x1234});
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.error().code, Errc::platform);
  EXPECT_EQ(asked.error().platform_code, 906);
  EXPECT_TRUE(contains(asked.error().message, "cuStreamIsCapturing(stream 0x1234)")) << asked.error().message;
}

// The decorators pass the query through, and count nothing: it is no DriverCall (the replay reports' keys).
TEST_F(CudaStreamCapture, DecoratorsForwardTheQueryWithoutCountingIt) {
  auto made = make();
  ASSERT_TRUE(made.ok()) << describe(made.error());
  CountingDriver counting(std::move(*made));
  const StreamId capture{0x1234};
  ASSERT_EQ(begin_capture(capture), 0);
  EXPECT_TRUE(*counting.stream_is_capturing(capture));
  EXPECT_EQ(counting.tally().total_calls(), 0u);
  EXPECT_EQ(end_capture(capture), 0);
}

#ifdef TESSERA_FAKE_CUDA_NO_CAPTURE_LIBRARY
// cuStreamIsCapturing is in every libcuda with the virtual memory calls (CUDA 10.0 has it, 10.2 the rest);
// one without it still loads, and the query says what is missing instead of guessing "not capturing".
TEST_F(CudaStreamCapture, ALibcudaWithoutCuStreamIsCapturingLoadsAndTheQueryIsUnsupported) {
  auto made = make_cuda_driver({.device = 0, .library = TESSERA_FAKE_CUDA_NO_CAPTURE_LIBRARY});
  ASSERT_TRUE(made.ok()) << describe(made.error());
  auto asked = (*made)->stream_is_capturing(default_stream);
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.error().code, Errc::unsupported);
  EXPECT_TRUE(contains(asked.error().message, "cuStreamIsCapturing")) << asked.error().message;
}
#endif

#endif  // TESSERA_FAKE_CUDA_LIBRARY

TEST(StreamCapture, DriversWhoseStreamsCannotCaptureAnswerFalse) {
  auto host = make_host_driver({});
  ASSERT_TRUE(host.ok()) << describe(host.error());
  EXPECT_FALSE(*(*host)->stream_is_capturing(StreamId{0x1234}));
  auto sim = make_sim_driver({});
  ASSERT_TRUE(sim.ok()) << describe(sim.error());
  EXPECT_FALSE(*sim->driver->stream_is_capturing(StreamId{0x1234}));
}

}  // namespace
}  // namespace tessera
