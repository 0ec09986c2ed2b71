#include "dataset.h"

#include <torch/torch.h>

#include <random>

namespace trainbench::worker {

DeviceDataset::DeviceDataset(const data::ImageSet& set, c10::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor images = torch::from_blob(const_cast<uint8_t*>(set.pixels.data()), {set.count, 3, 32, 32}, u8);
  const torch::Tensor mean = torch::tensor({kMean[0], kMean[1], kMean[2]}, f32).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({kStd[0], kStd[1], kStd[2]}, f32).view({1, 3, 1, 1});
  // Normalise on the device, one slice at a time, to keep host memory flat.
  // The border is black, as with torchvision's RandomCrop(32, padding=4)
  // before Normalize.
  // Stored NHWC for channels_last cells, so that a batch gathered from it is
  // already in the layout the model wants (no copy per step).
  padded_ = channels_last ? torch::zeros({set.count, 40, 40, 3}, f32.device(device))
                          : torch::zeros({set.count, 3, 40, 40}, f32.device(device));
  torch::Tensor padded_nchw = channels_last ? padded_.permute({0, 3, 1, 2}) : padded_;
  padded_nchw += ((-mean) / std).to(device);
  const int64_t chunk = 4096;
  for (int64_t start = 0; start < set.count; start += chunk) {
    const int64_t end = std::min(start + chunk, set.count);
    torch::Tensor part = images.slice(0, start, end).to(device).to(torch::kFloat32);
    padded_nchw.slice(0, start, end).slice(2, 4, 36).slice(3, 4, 36).copy_((part - mean.to(device)) / std.to(device));
  }
  labels_ = torch::from_blob(const_cast<uint8_t*>(set.labels.data()), {set.count}, u8).to(torch::kInt64).to(device);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor span = torch::arange(32, i64);
  rows_ = (torch::arange(9, i64).view({9, 1}) + span).to(device);
  const torch::Tensor straight = torch::arange(9, i64).view({9, 1}) + span;
  columns_ = torch::cat({straight, straight.flip({1})}, 0).to(device);  // 18 x 32
  channels_ = torch::arange(3, i64).view({1, 3, 1, 1}).to(device);
}

torch::Tensor DeviceDataset::Permutation() const {
  return torch::randperm(size(), torch::TensorOptions().dtype(torch::kInt64).device(device_));
}

torch::Tensor DeviceDataset::Images(const torch::Tensor& indices, bool augment) const {
  const int64_t b = indices.size(0);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  torch::Tensor rows, cols;
  if (augment) {
    // Crop offsets 0-8 in each direction, and a coin for the flip.
    rows = rows_.index_select(0, torch::randint(0, 9, {b}, i64));
    cols = columns_.index_select(0, torch::randint(0, 18, {b}, i64));
  } else {
    rows = rows_[4].expand({b, 32});
    cols = columns_[4].expand({b, 32});
  }
  // One gather does selection, crop and flip: out[n,c,i,j] =
  // padded[indices[n], c, rows[n,i], cols[n,j]].
  if (channels_last_) {
    // NHWC: whole pixels (3 channels) gathered; the [B,3,32,32] view of the
    // [B,32,32,3] result has channels_last strides.
    return padded_.index({indices.view({b, 1, 1}), rows.view({b, 32, 1}), cols.view({b, 1, 32})}).permute({0, 3, 1, 2});
  }
  return padded_.index({indices.view({b, 1, 1, 1}), channels_, rows.view({b, 1, 32, 1}), cols.view({b, 1, 1, 32})});
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
