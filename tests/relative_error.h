#pragma once
// The tests' measure of how far a tensor is from another: ||a - b|| / ||b||,
// in fp64 (b of norm zero counts as 1e-30).

#include <torch/types.h>

namespace trainbench::testing {

inline double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item<double>();
}

}  // namespace trainbench::testing
