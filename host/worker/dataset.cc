#include "dataset.h"

#include <torch/torch.h>

#include <random>

#ifdef TRAINBENCH_DATASET_KERNEL
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "dataset_kernels.h"
#endif

namespace trainbench::worker {

DeviceDataset::DeviceDataset(const data::ImageSet& set, c10::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  auto u8 = torch::TensorOptions().dtype(torch::kUInt8);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const int64_t s = set.image_size, p = s + 2 * kPad;
  size_ = s;
  torch::Tensor images = torch::from_blob(const_cast<uint8_t*>(set.pixels.data()), {set.count, 3, s, s}, u8);
  mean_ = torch::tensor({kMean[0], kMean[1], kMean[2]}, f32).view({1, 3, 1, 1}).to(device);
  std_ = torch::tensor({kStd[0], kStd[1], kStd[2]}, f32).view({1, 3, 1, 1}).to(device);
  // The border is black, as with torchvision's RandomCrop(32, padding=4)
  // before Normalize. Stored NHWC for channels_last cells, so that a batch
  // gathered from it is already in the layout the model wants.
  padded_ = channels_last ? torch::zeros({set.count, p, p, 3}, u8.device(device))
                          : torch::zeros({set.count, 3, p, p}, u8.device(device));
  torch::Tensor padded_nchw = channels_last ? padded_.permute({0, 3, 1, 2}) : padded_;
  // One slice at a time, to keep the device's transient memory small.
  const int64_t chunk = std::max<int64_t>(1, 4096 * 32 * 32 / (s * s));
  for (int64_t start = 0; start < set.count; start += chunk) {
    const int64_t end = std::min(start + chunk, set.count);
    padded_nchw.slice(0, start, end)
        .slice(2, kPad, kPad + s)
        .slice(3, kPad, kPad + s)
        .copy_(images.slice(0, start, end).to(device));
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

DeviceDataset::Crops DeviceDataset::DrawCrops(int64_t count, bool augment) const {
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  if (!augment) return {torch::full({count}, kPad, i64), torch::full({count}, kPad, i64)};
  // Crop offsets 0-8 in each direction, and a coin for the flip.
  torch::Tensor rows = torch::randint(0, kCropOffsets, {count}, i64);
  return {rows, torch::randint(0, 2 * kCropOffsets, {count}, i64)};
}

torch::Tensor DeviceDataset::NewBatch(int64_t batch) const {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  return channels_last_ ? torch::empty({batch, size_, size_, 3}, f32).permute({0, 3, 1, 2})
                        : torch::empty({batch, 3, size_, size_}, f32);
}

void DeviceDataset::Batch(const torch::Tensor& samples, const Crops& crops, const torch::Tensor& row,
                          torch::Tensor& out) const {
  const int64_t b = samples.size(1);
#ifdef TRAINBENCH_DATASET_KERNEL
  if (device_.is_cuda()) {
    TORCH_CHECK(
        samples.stride(1) == 1 && crops.rows.stride(1) == 1 && crops.columns.stride(1) == 1 &&
            crops.rows.strides() == crops.columns.strides() && out.size(0) == b &&
            out.is_contiguous(channels_last_ ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous),
        "DeviceDataset::Batch: tables or output of an unexpected layout");
    kernels::BatchGather g{};
    g.images = padded_.data_ptr<uint8_t>();
    g.padded = size_ + 2 * kPad;
    g.size = size_;
    g.channels_last = channels_last_;
    g.row = row.data_ptr<int64_t>();
    g.samples = samples.data_ptr<int64_t>();
    g.samples_stride = samples.stride(0);
    g.crop_rows = crops.rows.data_ptr<int64_t>();
    g.crop_columns = crops.columns.data_ptr<int64_t>();
    g.crops_stride = crops.rows.stride(0);
    g.batch = b;
    for (int c = 0; c < 3; ++c) {
      g.mean[c] = static_cast<float>(kMean[c]);
      g.std[c] = static_cast<float>(kStd[c]);
    }
    g.out = out.data_ptr<float>();
    C10_CUDA_CHECK(kernels::GatherBatch(g, c10::cuda::getCurrentCUDAStream(device_.index())));
    return;
  }
#endif
  const torch::Tensor indices = samples.index_select(0, row).view({b});
  const torch::Tensor rows = rows_.index_select(0, crops.rows.index_select(0, row).view({b}));
  const torch::Tensor cols = columns_.index_select(0, crops.columns.index_select(0, row).view({b}));
  // One gather does selection, crop and flip: out[n,c,i,j] =
  // padded[indices[n], c, rows[n,i], cols[n,j]].
  torch::Tensor gathered;
  if (channels_last_) {
    // NHWC: whole pixels (3 channels) gathered; the [B,3,S,S] view of the
    // [B,S,S,3] result has channels_last strides.
    gathered = padded_.index({indices.view({b, 1, 1}), rows.view({b, size_, 1}), cols.view({b, 1, size_})})
                   .permute({0, 3, 1, 2});
  } else {
    gathered = padded_.index(
        {indices.view({b, 1, 1, 1}), channels_, rows.view({b, 1, size_, 1}), cols.view({b, 1, 1, size_})});
  }
  out.copy_((gathered.to(torch::kFloat32) - mean_) / std_);
}

torch::Tensor DeviceDataset::Images(const torch::Tensor& indices, bool augment) const {
  const int64_t b = indices.size(0);
  const Crops crops = DrawCrops(b, augment);
  torch::Tensor out = NewBatch(b);
  Batch(indices.view({1, b}), {crops.rows.view({1, b}), crops.columns.view({1, b})},
        torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(device_)), out);
  return out;
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
