// Side streams (plugins/models/resnet/side_stream.h): nothing forks outside a
// capture; on CUDA, the side streams' priorities.
#include "side_stream.h"

#include <gtest/gtest.h>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace {

// Outside a capture nothing forks: on the CPU, and (without CUDA) anywhere.
TEST(SideStreamsApply, NeverOutsideACapture) {
  EXPECT_FALSE(trainbench::plugins::SideStreamsApply(c10::Device(c10::kCPU)));
#ifdef TRAINBENCH_RESNET_KERNELS
  if (torch::cuda::is_available()) {
    EXPECT_FALSE(trainbench::plugins::SideStreamsApply(c10::Device(c10::kCUDA, 0)));
  }
#endif
}

#ifdef TRAINBENCH_RESNET_KERNELS
// A side stream takes the current stream's priority class.
TEST(SideStreamPriority, FollowsTheCurrentStream) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  using trainbench::plugins::SideStream;
  const c10::Device device(c10::kCUDA, 0);
  auto priority_in = [&] {
    int priority = 1;
    SideStream side(device);
    side.Run([&] { priority = c10::cuda::getCurrentCUDAStream(0).priority(); });
    side.Join();
    return priority;
  };
  {
    const c10::cuda::CUDAStreamGuard high(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, 0));
    EXPECT_LT(priority_in(), 0);
  }
  const c10::cuda::CUDAStreamGuard normal(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  EXPECT_EQ(priority_in(), 0);
}
#endif

}  // namespace
