// The on-device batch pipeline: selection, crop, flip, normalisation, in
// both memory layouts.
#include "dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainbench::worker {
namespace {

// A set whose pixel values say where they come from: image n, channel c,
// row i, column j.
data::ImageSet CodedSet(int64_t count, int64_t size = 32) {
  data::ImageSet set;
  set.count = count;
  set.image_size = size;
  for (int64_t n = 0; n < count; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < size; ++i)
        for (int j = 0; j < size; ++j) set.pixels.push_back(static_cast<uint8_t>((n * 7 + c * 50 + i * 3 + j) % 256));
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
    // Bit for bit what normalising the float images first gave.
    EXPECT_TRUE(torch::equal(got, expected)) << "channels_last " << channels_last;
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

// Another image size (ImageNet's 224 and anything else): the same pipeline,
// every crop a window of the padded image, flips mirror it.
TEST(DeviceDataset, OtherImageSizesAreCroppedAndFlippedTheSameWay) {
  const int64_t s = 20;
  const data::ImageSet set = CodedSet(6, s);
  DeviceDataset d(set, torch::kCPU, false);
  EXPECT_EQ(d.image_size(), s);
  const torch::Tensor idx = torch::arange(6, torch::kInt64);
  const torch::Tensor plain = d.Images(idx, false);
  ASSERT_EQ(plain.sizes(), (std::vector<int64_t>{6, 3, s, s}));
  torch::manual_seed(3);
  const torch::Tensor augmented = d.Images(idx, true);
  ASSERT_EQ(augmented.sizes(), plain.sizes());
  // Each augmented image is its plain image shifted by at most 4 pixels each
  // way (the rest black), mirrored or not.
  const torch::Tensor padded = torch::constant_pad_nd(plain, {4, 4, 4, 4}, 0.0) +
                               torch::constant_pad_nd(torch::zeros_like(plain), {4, 4, 4, 4}, 1.0) *
                                   torch::tensor({-kMean[0] / kStd[0], -kMean[1] / kStd[1], -kMean[2] / kStd[2]})
                                       .to(torch::kFloat32)
                                       .view({1, 3, 1, 1});
  for (int64_t n = 0; n < 6; ++n) {
    bool found = false;
    for (int64_t oy = 0; oy <= 8 && !found; ++oy)
      for (int64_t ox = 0; ox <= 8 && !found; ++ox) {
        const torch::Tensor window = padded[n].slice(1, oy, oy + s).slice(2, ox, ox + s);
        found = torch::allclose(augmented[n], window, 1e-5, 1e-5) ||
                torch::allclose(augmented[n], window.flip({2}), 1e-5, 1e-5);
      }
    EXPECT_TRUE(found) << "image " << n << " is not a crop of its padded image";
  }
}

// A training step's batch: row `row` of the epoch's tables, written into the
// step's tensor, is what Images gives for those samples and the same draws.
TEST(DeviceDataset, ABatchOfTheEpochsTablesIsThoseSamplesWithThoseCrops) {
  const data::ImageSet set = CodedSet(12);
  for (bool channels_last : {false, true}) {
    DeviceDataset d(set, torch::kCPU, channels_last);
    // Two rows of four; the tables are column slices of wider ones, as a
    // data-parallel rank's are.
    const torch::Tensor samples = torch::randperm(12, torch::kInt64).view({2, 6}).narrow(1, 1, 4);
    torch::manual_seed(9);
    const DeviceDataset::Crops crops = d.DrawCrops(8, /*augment=*/true);
    torch::Tensor out = d.NewBatch(4);
    EXPECT_EQ(out.is_contiguous(torch::MemoryFormat::ChannelsLast), channels_last);
    d.Batch(samples, {crops.rows.view({2, 4}), crops.columns.view({2, 4})}, torch::tensor({1}, torch::kInt64), out);
    torch::manual_seed(9);
    const torch::Tensor all = d.Images(samples.reshape({-1}), true);  // the same draws
    EXPECT_TRUE(torch::equal(out, all.slice(0, 4, 8))) << "channels_last " << channels_last;
    // Centred crops: the plain images.
    const DeviceDataset::Crops centred = d.DrawCrops(8, false);
    d.Batch(samples, {centred.rows.view({2, 4}), centred.columns.view({2, 4})}, torch::tensor({0}, torch::kInt64), out);
    EXPECT_TRUE(torch::equal(out, d.Images(samples[0].contiguous(), false)));
  }
}

// On a CUDA device a batch is one kernel: the same values as the CPU's
// indexing, bit for bit, in both layouts and at another image size.
TEST(DeviceDataset, TheCudaKernelGathersWhatTheCpuPathDoes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t size : {32, 20}) {
    const data::ImageSet set = CodedSet(40, size);
    for (bool channels_last : {false, true}) {
      DeviceDataset cpu(set, torch::kCPU, channels_last), gpu(set, torch::kCUDA, channels_last);
      const torch::Tensor samples = torch::randperm(40, torch::kInt64).view({4, 10}).narrow(1, 2, 7);
      torch::manual_seed(4);
      const DeviceDataset::Crops crops = cpu.DrawCrops(28, true);
      const DeviceDataset::Crops rows{crops.rows.view({4, 7}), crops.columns.view({4, 7})};
      for (int64_t row : {0, 3}) {
        torch::Tensor want = cpu.NewBatch(7), got = gpu.NewBatch(7);
        cpu.Batch(samples, rows, torch::tensor({row}, torch::kInt64), want);
        gpu.Batch(samples.cuda(), {rows.rows.cuda(), rows.columns.cuda()}, torch::tensor({row}, torch::kInt64).cuda(),
                  got);
        EXPECT_TRUE(
            got.is_contiguous(channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous));
        EXPECT_TRUE(torch::equal(got.cpu(), want))
            << "size " << size << " channels_last " << channels_last << " row " << row;
      }
    }
  }
}

TEST(DeviceDataset, SyntheticSetsTakeTheirSizeAndClasses) {
  const data::ImageSet set = SyntheticImageSet(50, 7, 24, 1000);
  EXPECT_EQ(set.image_size, 24);
  EXPECT_EQ(set.pixels.size(), 50u * 3 * 24 * 24);
  int32_t top = 0;
  for (int32_t l : set.labels) top = std::max(top, l);
  EXPECT_LT(top, 1000);
  EXPECT_GT(top, 10);  // labels spread over the classes, not CIFAR's 10
  // The same seed draws the same set.
  EXPECT_EQ(SyntheticImageSet(50, 7, 24, 1000).pixels, set.pixels);
}

}  // namespace
}  // namespace trainbench::worker
