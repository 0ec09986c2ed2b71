// See dataset_kernels.h.
#include "dataset_kernels.h"

namespace trainbench::worker::kernels {
namespace {

constexpr int kThreads = 256;

// I: the type of a position in the batch (32 bits where the batch allows:
// its divisions are several times cheaper than 64-bit ones).
template <typename I>
__global__ void __launch_bounds__(kThreads) GatherBatchKernel(BatchGather g) {
  const I s = static_cast<I>(g.size), plane = s * s, total = static_cast<I>(g.batch) * 3 * plane;
  const int64_t p = g.padded;
  const int64_t row = g.row == nullptr ? 0 : *g.row;
  const int64_t* samples = g.samples + row * g.samples_stride;
  const int64_t* crop_rows = g.crop_rows + row * g.crops_stride;
  const int64_t* crop_columns = g.crop_columns + row * g.crops_stride;
  const int64_t offsets = p - s + 1;
  for (I i = blockIdx.x * I{kThreads} + threadIdx.x; i < total; i += I{gridDim.x} * kThreads) {
    I n, c, y, x;
    if (g.channels_last) {
      c = i % 3;
      const I pixel = i / 3;
      x = pixel % s;
      y = (pixel / s) % s;
      n = pixel / plane;
    } else {
      x = i % s;
      y = (i / s) % s;
      c = (i / plane) % 3;
      n = i / (3 * plane);
    }
    const int64_t sample = samples[n], code = crop_columns[n];
    const int64_t sy = crop_rows[n] + y, sx = code < offsets ? code + x : code - offsets + (s - 1 - x);
    const uint8_t v = g.channels_last ? g.images[((sample * p + sy) * p + sx) * 3 + c]
                                      : g.images[((sample * 3 + c) * p + sy) * p + sx];
    // As the float path computes it: (pixel - mean) / std, IEEE division.
    g.out[i] = (static_cast<float>(v) - g.mean[c]) / g.std[c];
  }
}

}  // namespace

cudaError_t GatherBatch(const BatchGather& g, cudaStream_t stream) noexcept {
  const int64_t total = g.batch * 3 * g.size * g.size;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  if (total + kThreads * int64_t{grid} < (int64_t{1} << 31))
    GatherBatchKernel<uint32_t><<<grid, kThreads, 0, stream>>>(g);
  else
    GatherBatchKernel<int64_t><<<grid, kThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace trainbench::worker::kernels
