#pragma once
// The CUDA kernel of the on-device batch pipeline (dataset.h), on raw device
// pointers (nvcc alone, no LibTorch): a training batch gathered from the
// padded uint8 images, cropped, mirrored and normalised to float32 in one
// pass, its row of the epoch's table read on the device (so a captured step
// replays it for the next batch).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainbench::worker::kernels {

struct BatchGather {
  const uint8_t* images;  ///< N padded images, P x P x 3 (channels_last) or 3 x P x P
  int64_t padded;         ///< P: the image size plus both borders
  int64_t size;           ///< S: the crop's height and width
  bool channels_last;     ///< the images' layout, and the output's
  /// The batch is row `*row` (row 0 where `row` is null) of three tables:
  /// the samples, `samples_stride` elements a row, and each sample's crop row
  /// offset (0..P-S) and column code (0..P-S: straight, from P-S+1: the
  /// offset minus P-S+1, mirrored), `crops_stride` a row.
  const int64_t* row;
  const int64_t* samples;
  int64_t samples_stride;
  const int64_t* crop_rows;
  const int64_t* crop_columns;
  int64_t crops_stride;
  int64_t batch;  ///< B
  float mean[3], std[3];
  /// B x 3 x S x S, dense in the images' layout (B x S x S x 3 in memory
  /// where channels_last): (pixel - mean[c]) / std[c].
  float* out;
};

cudaError_t GatherBatch(const BatchGather& g, cudaStream_t stream) noexcept;

}  // namespace trainbench::worker::kernels
