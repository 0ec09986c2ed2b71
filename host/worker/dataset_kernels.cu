// See dataset_kernels.h.
#include "dataset_kernels.h"

namespace trainbench::worker::kernels {
namespace {

// A block per image (and, for large images, per band of its rows): its
// threads walk the rows (kRows at a time) and each row's elements
// (kRowThreads at a time), so the only division by a size known at run time
// is one per row, and a warp reads one source row and writes one output row.
constexpr unsigned kRowThreads = 32, kRows = 8;
// Rows a block takes at most: 4 per thread row (a CIFAR image's 32 rows in
// one block; a 224-pixel image's in 7).
constexpr unsigned kBandRows = 4 * kRows;

__device__ __forceinline__ float Normalised(uint8_t v, unsigned c, const BatchGather& g) {
  // As the float path computes it: (pixel - mean) / std, IEEE division. The
  // channel's constants picked by value (an indexed parameter array would be
  // copied to each thread's local memory).
  const float mean = c == 0 ? g.mean[0] : c == 1 ? g.mean[1] : g.mean[2];
  const float std = c == 0 ? g.std[0] : c == 1 ? g.std[1] : g.std[2];
  return (static_cast<float>(v) - mean) / std;
}

__global__ void __launch_bounds__(kRowThreads* kRows) GatherBatchKernel(BatchGather g) {
  const unsigned s = static_cast<unsigned>(g.size), p = static_cast<unsigned>(g.padded), offsets = p - s + 1;
  const int64_t row = g.row == nullptr ? 0 : *g.row;
  for (int64_t n = blockIdx.x; n < g.batch; n += gridDim.x) {
    const int64_t sample = g.samples[row * g.samples_stride + n];
    const unsigned top = static_cast<unsigned>(g.crop_rows[row * g.crops_stride + n]);
    const unsigned code = static_cast<unsigned>(g.crop_columns[row * g.crops_stride + n]);
    const bool mirrored = code >= offsets;
    const unsigned left = mirrored ? code - offsets : code;
    const uint8_t* image = g.images + sample * int64_t{p} * p * 3;
    float* out = g.out + n * int64_t{s} * s * 3;
    if (g.channels_last) {
      // Output row y: 3 * s floats; source row top + y of the padded image.
      for (unsigned y = blockIdx.y * kRows + threadIdx.y; y < s; y += kRows * gridDim.y) {
        const uint8_t* src = image + (top + y) * p * 3;
        float* dst = out + y * s * 3;
        for (unsigned r = threadIdx.x; r < 3 * s; r += kRowThreads) {
          const unsigned x = r / 3, c = r - 3 * x;
          const unsigned sx = mirrored ? left + (s - 1 - x) : left + x;
          dst[r] = Normalised(src[sx * 3 + c], c, g);
        }
      }
    } else {
      // Output rows (c, y): s floats each.
      for (unsigned cy = blockIdx.y * kRows + threadIdx.y; cy < 3 * s; cy += kRows * gridDim.y) {
        const unsigned c = cy / s, y = cy - c * s;
        const uint8_t* src = image + (c * p + top + y) * p;
        float* dst = out + cy * s;
        for (unsigned x = threadIdx.x; x < s; x += kRowThreads)
          dst[x] = Normalised(src[mirrored ? left + (s - 1 - x) : left + x], c, g);
      }
    }
  }
}

}  // namespace

cudaError_t GatherBatch(const BatchGather& g, cudaStream_t stream) noexcept {
  if (g.batch == 0) return cudaSuccess;
  const int64_t rows = g.channels_last ? g.size : 3 * g.size;
  const dim3 grid(static_cast<unsigned>(g.batch < (int64_t{1} << 30) ? g.batch : int64_t{1} << 30),
                  static_cast<unsigned>((rows + kBandRows - 1) / kBandRows));
  GatherBatchKernel<<<grid, dim3(kRowThreads, kRows), 0, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace trainbench::worker::kernels
