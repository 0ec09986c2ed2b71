#include "dataset.h"

#include <random>

#include <torch/torch.h>

namespace trainbench::worker {

DeviceDataset::DeviceDataset(const data::ImageSet& set, c10::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  torch::Tensor images =
      torch::from_blob(const_cast<uint8_t*>(set.pixels.data()), {set.count, 3, 32, 32}, u8);
  padded_ = torch::constant_pad_nd(images, {4, 4, 4, 4}, 0).to(device);
  labels_ = torch::from_blob(const_cast<uint8_t*>(set.labels.data()), {set.count}, u8)
                .to(torch::kInt64)
                .to(device);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  mean_ = torch::tensor({kMean[0], kMean[1], kMean[2]}, f32).view({1, 3, 1, 1}).to(device);
  inv_std_ = (1.0 / torch::tensor({kStd[0], kStd[1], kStd[2]}, f32)).view({1, 3, 1, 1}).to(device);
}

torch::Tensor DeviceDataset::Permutation() const {
  return torch::randperm(size(), torch::TensorOptions().dtype(torch::kInt64).device(device_));
}

torch::Tensor DeviceDataset::Images(const torch::Tensor& indices, bool augment) const {
  const int64_t b = indices.size(0);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  torch::Tensor offset_y, offset_x;
  if (augment) {
    offset_y = torch::randint(0, 9, {b, 1}, i64);
    offset_x = torch::randint(0, 9, {b, 1}, i64);
  } else {
    offset_y = torch::full({b, 1}, 4, i64);
    offset_x = offset_y;
  }
  torch::Tensor span = torch::arange(32, i64).view({1, 32});
  torch::Tensor rows = offset_y + span;  // b,32
  torch::Tensor cols = offset_x + span;  // b,32
  if (augment) {
    // A horizontal flip is reading the chosen columns right to left.
    torch::Tensor flip = torch::rand({b, 1}, torch::TensorOptions().device(device_)) < 0.5;
    cols = torch::where(flip, cols.flip({1}), cols);
  }
  // One gather does selection, crop and flip: out[n,c,i,j] =
  // padded[indices[n], c, rows[n,i], cols[n,j]].
  torch::Tensor out = padded_.index({indices.view({b, 1, 1, 1}),
                                     torch::arange(3, i64).view({1, 3, 1, 1}),
                                     rows.view({b, 1, 32, 1}), cols.view({b, 1, 1, 32})});
  out = (out.to(torch::kFloat32) - mean_) * inv_std_;
  if (channels_last_) out = out.contiguous(torch::MemoryFormat::ChannelsLast);
  return out;
}

data::ImageSet SyntheticImageSet(int64_t count, uint64_t seed) {
  data::ImageSet set;
  set.count = count;
  set.pixels.resize(static_cast<size_t>(count * data::kImageBytes));
  set.labels.resize(static_cast<size_t>(count));
  std::mt19937_64 rng(seed);
  for (auto& p : set.pixels) p = static_cast<uint8_t>(rng());
  for (auto& l : set.labels) l = static_cast<uint8_t>(rng() % data::kNumClasses);
  return set;
}

}  // namespace trainbench::worker
