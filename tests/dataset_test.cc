// The on-device batch pipeline: selection, crop, flip, normalisation, in
// both memory layouts.
#include "dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainbench::worker {
namespace {

// A set whose pixel values say where they come from: image n, channel c,
// row i, column j.
data::ImageSet CodedSet(int64_t count) {
  data::ImageSet set;
  set.count = count;
  for (int64_t n = 0; n < count; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) set.pixels.push_back(static_cast<uint8_t>((n * 7 + c * 50 + i * 3 + j) % 256));
  set.labels.assign(static_cast<size_t>(count), 1);
  return set;
}

TEST(DeviceDataset, WithoutAugmentationABatchIsTheNormalisedImages) {
  const data::ImageSet set = CodedSet(5);
  for (bool channels_last : {false, true}) {
    DeviceDataset d(set, torch::kCPU, channels_last);
    const torch::Tensor idx = torch::tensor({3, 0, 3}, torch::kInt64);
    const torch::Tensor got = d.Images(idx, /*augment=*/false);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 3, 32, 32}));
    EXPECT_EQ(got.is_contiguous(torch::MemoryFormat::ChannelsLast), channels_last);
    const torch::Tensor raw =
        torch::from_blob(const_cast<uint8_t*>(set.pixels.data()), {5, 3, 32, 32}, torch::kUInt8).to(torch::kFloat32);
    const torch::Tensor mean = torch::tensor({kMean[0], kMean[1], kMean[2]}).to(torch::kFloat32).view({1, 3, 1, 1});
    const torch::Tensor std = torch::tensor({kStd[0], kStd[1], kStd[2]}).to(torch::kFloat32).view({1, 3, 1, 1});
    const torch::Tensor expected = (raw.index_select(0, idx) - mean) / std;
    EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5)) << "channels_last " << channels_last;
  }
}

TEST(DeviceDataset, AugmentedBatchesAreTheSameCropsAndFlipsInBothLayouts) {
  const data::ImageSet set = CodedSet(16);
  DeviceDataset nchw(set, torch::kCPU, false), nhwc(set, torch::kCPU, true);
  const torch::Tensor idx = torch::randperm(16, torch::kInt64);
  torch::manual_seed(5);
  const torch::Tensor a = nchw.Images(idx, true);
  torch::manual_seed(5);
  const torch::Tensor b = nhwc.Images(idx, true);
  EXPECT_TRUE(b.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(a, b.contiguous()));
  // Each image is a 32x32 window of its padded (40x40) image: off-centre
  // crops show the padding, normalised black.
  const float black0 = static_cast<float>(-kMean[0] / kStd[0]);
  int64_t with_border = 0;
  for (int64_t n = 0; n < 16; ++n) with_border += (a[n][0] == black0).any().item<bool>() ? 1 : 0;
  EXPECT_GT(with_border, 0);
}

}  // namespace
}  // namespace trainbench::worker
