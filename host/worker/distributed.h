#pragma once
// Data parallelism across worker processes: one rank per process (per GPU
// for cuda cells), gradients averaged with LibTorch's c10d (NCCL on CUDA,
// Gloo on the CPU), rendezvous through c10d's TCPStore served by rank 0.
// The host starts the ranks and gives each its rank, the world size and the
// store's port (docs/architecture.md, "Data-parallel cells").

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/protocol/cell_spec.h"
#include "trainbench/sdk/support/batch_norm.h"

namespace trainbench::worker {

using protocol::DistributedSpec;

/// Collectives over the ranks of one cell. All calls are collective: every
/// rank makes the same calls in the same order.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// "nccl" or "gloo".
  virtual std::string backend() const = 0;
  /// Sums `tensors` across ranks and multiplies by `scale`, in place, as one
  /// flat buffer per dtype (one collective and one scaling kernel each).
  virtual void AllReduceSum(const std::vector<torch::Tensor>& tensors, double scale = 1.0) = 0;
  /// Copies rank 0's `tensors` into every rank's, in place.
  virtual void Broadcast(const std::vector<torch::Tensor>& tensors) = 0;
};

/// The SDK's cross-rank sum (for sdk::BatchNorm2d) over a Collective.
class CollectiveSum : public sdk::CrossRankSum {
 public:
  explicit CollectiveSum(Collective& collective) : collective_(collective) {}
  void SumInPlace(torch::Tensor& t) override { collective_.AllReduceSum({t}); }
  int Rank() const noexcept override { return collective_.rank(); }
  int WorldSize() const noexcept override { return collective_.world_size(); }

 private:
  Collective& collective_;
};

/// Which backends this worker was built with ("nccl", "gloo"), for messages.
std::vector<std::string> DistributedBackends();

/// Connects this rank: NCCL for tensors on a CUDA device, Gloo on the CPU.
/// Throws std::runtime_error naming what is missing when the backend was not
/// built in, or when the rendezvous times out.
std::unique_ptr<Collective> ConnectCollective(const DistributedSpec& spec, c10::Device device);

}  // namespace trainbench::worker
