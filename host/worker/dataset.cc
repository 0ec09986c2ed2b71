#include "dataset.h"

#include <torch/torch.h>

#include <random>

namespace trainbench::worker {

DeviceDataset::DeviceDataset(const data::ImageSet& set, c10::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const int64_t s = set.image_size, p = s + 2 * kPad;
  size_ = s;
  torch::Tensor images = torch::from_blob(const_cast<uint8_t*>(set.pixels.data()), {set.count, 3, s, s}, u8);
  const torch::Tensor mean = torch::tensor({kMean[0], kMean[1], kMean[2]}, f32).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({kStd[0], kStd[1], kStd[2]}, f32).view({1, 3, 1, 1});
  // Normalise on the device, one slice at a time, to keep host memory flat.
  // The border is black, as with torchvision's RandomCrop(32, padding=4)
  // before Normalize.
  // Stored NHWC for channels_last cells, so that a batch gathered from it is
  // already in the layout the model wants (no copy per step).
  padded_ = channels_last ? torch::zeros({set.count, p, p, 3}, f32.device(device))
                          : torch::zeros({set.count, 3, p, p}, f32.device(device));
  torch::Tensor padded_nchw = channels_last ? padded_.permute({0, 3, 1, 2}) : padded_;
  padded_nchw += ((-mean) / std).to(device);
  const int64_t chunk = std::max<int64_t>(1, 4096 * 32 * 32 / (s * s));
  for (int64_t start = 0; start < set.count; start += chunk) {
    const int64_t end = std::min(start + chunk, set.count);
    torch::Tensor part = images.slice(0, start, end).to(device).to(torch::kFloat32);
    padded_nchw.slice(0, start, end)
        .slice(2, kPad, kPad + s)
        .slice(3, kPad, kPad + s)
        .copy_((part - mean.to(device)) / std.to(device));
  }
  labels_ = torch::from_blob(const_cast<int32_t*>(set.labels.data()), {set.count},
                             torch::TensorOptions().dtype(torch::kInt32))
                .to(torch::kInt64)
                .to(device);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor span = torch::arange(s, i64);
  rows_ = (torch::arange(kCropOffsets, i64).view({kCropOffsets, 1}) + span).to(device);
  const torch::Tensor straight = torch::arange(kCropOffsets, i64).view({kCropOffsets, 1}) + span;
  columns_ = torch::cat({straight, straight.flip({1})}, 0).to(device);  // 2 * kCropOffsets x s
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
    rows = rows_.index_select(0, torch::randint(0, kCropOffsets, {b}, i64));
    cols = columns_.index_select(0, torch::randint(0, 2 * kCropOffsets, {b}, i64));
  } else {
    rows = rows_[kPad].expand({b, size_});
    cols = columns_[kPad].expand({b, size_});
  }
  // One gather does selection, crop and flip: out[n,c,i,j] =
  // padded[indices[n], c, rows[n,i], cols[n,j]].
  if (channels_last_) {
    // NHWC: whole pixels (3 channels) gathered; the [B,3,32,32] view of the
    // [B,32,32,3] result has channels_last strides.
    return padded_.index({indices.view({b, 1, 1}), rows.view({b, size_, 1}), cols.view({b, 1, size_})})
        .permute({0, 3, 1, 2});
  }
  return padded_.index(
      {indices.view({b, 1, 1, 1}), channels_, rows.view({b, 1, size_, 1}), cols.view({b, 1, 1, size_})});
}

data::ImageSet SyntheticImageSet(int64_t count, uint64_t seed, int64_t image_size, int64_t num_classes) {
  data::ImageSet set;
  set.count = count;
  set.image_size = image_size;
  set.num_classes = num_classes;
  set.pixels.resize(static_cast<size_t>(count * set.ImageBytes()));
  set.labels.resize(static_cast<size_t>(count));
  std::mt19937_64 rng(seed);
  // Eight pixels from each 64-bit draw (ImageNet-size sets are large). The
  // CIFAR-size set keeps one pixel per draw, as results recorded so far had it.
  if (image_size == 32) {
    for (auto& p : set.pixels) p = static_cast<uint8_t>(rng());
  } else {
    for (size_t i = 0; i < set.pixels.size(); i += 8) {
      const uint64_t r = rng();
      for (size_t k = 0; k < 8 && i + k < set.pixels.size(); ++k)
        set.pixels[i + k] = static_cast<uint8_t>(r >> (8 * k));
    }
  }
  for (auto& l : set.labels) l = static_cast<int32_t>(rng() % static_cast<uint64_t>(num_classes));
  return set;
}

}  // namespace trainbench::worker
