#pragma once
// Whether a CUDA stream is capturing a graph now: the worker's updates during
// the backward (optimizer.cc, mixed_precision.cc) fork onto side streams only
// inside a capture. CUDA builds only.

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace trainbench::worker {

inline bool Capturing(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream.stream(), &status));
  return status == cudaStreamCaptureStatusActive;
}

}  // namespace trainbench::worker
