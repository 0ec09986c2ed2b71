// TRAINBENCH_SIDE_STREAMS, the switch for what runs on side streams inside a
// captured step (plugins/common/side_stream.h): every value it takes, and a
// one-line error naming it for any other; on CUDA, the side streams'
// priorities.
#include "side_stream.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace {

using trainbench::plugins::Fork;
using trainbench::plugins::ForkAllowed;

TEST(SideStreamSetting, UnsetOrOneAllowsEveryFork) {
  for (const char* setting : {static_cast<const char*>(nullptr), "", "1"}) {
    EXPECT_TRUE(ForkAllowed(Fork::kGradients, setting));
    EXPECT_TRUE(ForkAllowed(Fork::kBranches, setting));
    EXPECT_TRUE(ForkAllowed(Fork::kLateJoin, setting));
    EXPECT_TRUE(ForkAllowed(Fork::kUpdates, setting));
  }
}

TEST(SideStreamSetting, ZeroAllowsNone) {
  EXPECT_FALSE(ForkAllowed(Fork::kGradients, "0"));
  EXPECT_FALSE(ForkAllowed(Fork::kBranches, "0"));
  EXPECT_FALSE(ForkAllowed(Fork::kLateJoin, "0"));
  EXPECT_FALSE(ForkAllowed(Fork::kUpdates, "0"));
}

TEST(SideStreamSetting, AListAllowsWhatItNames) {
  EXPECT_TRUE(ForkAllowed(Fork::kGradients, "grads"));
  EXPECT_FALSE(ForkAllowed(Fork::kBranches, "grads"));
  EXPECT_FALSE(ForkAllowed(Fork::kLateJoin, "grads"));
  EXPECT_TRUE(ForkAllowed(Fork::kBranches, "grads,branches"));
  EXPECT_FALSE(ForkAllowed(Fork::kLateJoin, "grads,branches"));
  EXPECT_TRUE(ForkAllowed(Fork::kLateJoin, "late,grads"));
  EXPECT_FALSE(ForkAllowed(Fork::kBranches, "late,grads"));
  // A late join needs the gradients' fork it joins.
  EXPECT_FALSE(ForkAllowed(Fork::kLateJoin, "late"));
  EXPECT_FALSE(ForkAllowed(Fork::kGradients, "late"));
  EXPECT_TRUE(ForkAllowed(Fork::kBranches, "branches"));
  EXPECT_TRUE(ForkAllowed(Fork::kUpdates, "updates"));
  EXPECT_FALSE(ForkAllowed(Fork::kUpdates, "grads,branches,late"));
  EXPECT_FALSE(ForkAllowed(Fork::kGradients, "updates"));
}

TEST(SideStreamSetting, AnythingElseIsAnErrorNamingTheVariable) {
  for (const char* setting : {"grad", "grads,", ",grads", ",", "grads, late", "update", "yes", "2", "GRADS",
                              "grads,,late", "\xff", "grads,\nlate"}) {
    try {
      ForkAllowed(Fork::kGradients, setting);
      ADD_FAILURE() << "accepted '" << setting << "'";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("TRAINBENCH_SIDE_STREAMS"), std::string::npos) << message;
      EXPECT_NE(message.find("grads, branches, late, updates"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

#ifdef TRAINBENCH_RESNET_KERNELS
// A side stream takes the current stream's priority class unless asked for
// the default one (the SGD updates below a step captured at high priority).
TEST(SideStreamPriority, FollowsTheCurrentStreamUnlessTheDefaultIsAsked) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  using trainbench::plugins::SidePriority;
  using trainbench::plugins::SideStream;
  const c10::Device device(c10::kCUDA, 0);
  auto priority_in = [&](SidePriority asked) {
    int priority = 1;
    SideStream side(device, asked);
    side.Run([&] { priority = c10::cuda::getCurrentCUDAStream(0).priority(); });
    side.Join();
    return priority;
  };
  {
    const c10::cuda::CUDAStreamGuard high(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, 0));
    EXPECT_LT(priority_in(SidePriority::kAsHere), 0);
    EXPECT_EQ(priority_in(SidePriority::kDefault), 0);
  }
  const c10::cuda::CUDAStreamGuard normal(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0));
  EXPECT_EQ(priority_in(SidePriority::kAsHere), 0);
  EXPECT_EQ(priority_in(SidePriority::kDefault), 0);
}
#endif

}  // namespace
