#pragma once
// The training and test sets as tensors resident on the training device, with
// augmentation (random crop with 4-pixel padding, horizontal flip) and
// per-channel normalisation done on that device: no per-step host-to-device
// copy. The images stay uint8 there (a CIFAR-10 image takes 4.8 KB with its
// border); a batch is normalised to float32 as it is gathered.

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "cifar10.h"

namespace trainbench::worker {

/// Per-channel mean and standard deviation of the CIFAR-10 training set, on
/// the 0-255 scale (measured on the files in ../shared/data).
inline constexpr double kMean[3] = {125.27, 122.93, 113.86};
inline constexpr double kStd[3] = {62.53, 61.91, 66.46};

/// Pixels of black border around each image, so a random crop is a gather.
inline constexpr int64_t kPad = 4;
/// Crop offsets each way: 0 to 2 * kPad.
inline constexpr int64_t kCropOffsets = 2 * kPad + 1;

/// One split on a device.
class DeviceDataset {
 public:
  /// Moves `set` to `device`, normalised.
  DeviceDataset(const data::ImageSet& set, c10::Device device, bool channels_last);

  int64_t size() const { return labels_.size(0); }
  /// Height and width of its images.
  int64_t image_size() const { return size_; }

  /// A fresh random order of the samples, on the device.
  torch::Tensor Permutation() const;

  /// Where each of `count` samples is cropped from its padded image (int64
  /// on the device): a row offset (0 to 2 * kPad) and a column code (0 to
  /// 2 * kPad: that offset; from kCropOffsets on: the offset plus
  /// kCropOffsets, mirrored). Drawn at random when `augment`, else centred.
  struct Crops {
    torch::Tensor rows, columns;
  };
  Crops DrawCrops(int64_t count, bool augment) const;

  /// Writes batch `row` (an int64 tensor of one element on the device) into
  /// `out`: the samples of that row of `samples` (int64 [rows, B], rows of
  /// any stride, unit stride within one) with the crops of that row of
  /// `crops` (each [rows, B]), normalised, as float32 [B, 3, S, S] (NCHW, or
  /// NHWC-strided when channels_last, as Images returns them). On a CUDA
  /// device one kernel that reads `row` where it runs (a captured step
  /// replays it for the next row); elsewhere LibTorch's indexing.
  void Batch(const torch::Tensor& samples, const Crops& crops, const torch::Tensor& row, torch::Tensor& out) const;

  /// A new [B, 3, S, S] float32 tensor in this set's layout, for Batch.
  torch::Tensor NewBatch(int64_t batch) const;

  /// The batch of samples `indices` (int64 on the device), augmented when
  /// `augment`, normalised, as float32 NCHW (or NHWC when channels_last).
  torch::Tensor Images(const torch::Tensor& indices, bool augment) const;
  torch::Tensor Labels(const torch::Tensor& indices) const { return labels_.index_select(0, indices); }

 private:
  c10::Device device_;
  bool channels_last_;
  int64_t size_ = 32;
  // N,3,S+8,S+8 uint8 (N,S+8,S+8,3 when channels_last): the images with a
  // 4-pixel black border, so a batch is one gather.
  torch::Tensor padded_;
  // The per-channel mean and standard deviation, float32 [1,3,1,1].
  torch::Tensor mean_, std_;
  torch::Tensor labels_;  // N int64
  // Index tables: for crop offset o (0-8), rows_[o] = o..o+S-1; for crop and
  // flip code c (0-17), columns_[c] = the columns read, right to left when
  // flipped; channels_ = 0..2. A batch's indices are two lookups.
  torch::Tensor rows_, columns_, channels_;
};

/// A synthetic set: uniform random pixels of `image_size` x `image_size`
/// (32: CIFAR-10's shape) and labels below `num_classes`.
data::ImageSet SyntheticImageSet(int64_t count, uint64_t seed, int64_t image_size = 32, int64_t num_classes = 10);

}  // namespace trainbench::worker
