#include "distributed.h"

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <stdexcept>

#if defined(TRAINBENCH_WITH_GLOO) || defined(TRAINBENCH_WITH_NCCL)
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#ifdef TRAINBENCH_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef TRAINBENCH_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace trainbench::worker {

std::vector<std::string> DistributedBackends() {
  std::vector<std::string> out;
#ifdef TRAINBENCH_WITH_NCCL
  out.push_back("nccl");
#endif
#ifdef TRAINBENCH_WITH_GLOO
  out.push_back("gloo");
#endif
  return out;
}

#if defined(TRAINBENCH_WITH_GLOO) || defined(TRAINBENCH_WITH_NCCL)
namespace {

// One c10d process group (Gloo's and NCCL's have the same collective calls).
template <typename Group>
class GroupCollective : public Collective {
 public:
  GroupCollective(c10::intrusive_ptr<Group> group, int rank, int world, std::string backend)
      : group_(std::move(group)), rank_(rank), world_(world), backend_(std::move(backend)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return backend_; }

  void AllReduceSum(const std::vector<torch::Tensor>& tensors, double scale) override {
    // One flat buffer per dtype: one collective instead of one per tensor.
    std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
    for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
    for (auto& [type, group] : by_type) {
      if (group.size() == 1 && group[0].is_contiguous()) {
        // One tensor: reduced where it is.
        std::vector<torch::Tensor> one{group[0]};
        group_->allreduce(one)->wait();
        if (scale != 1.0) one[0].mul_(scale);
        continue;
      }
      std::vector<torch::Tensor> flat_parts;
      for (const auto& t : group) flat_parts.push_back(t.reshape({-1}));
      std::vector<torch::Tensor> buffer{torch::cat(flat_parts)};
      group_->allreduce(buffer)->wait();
      if (scale != 1.0) buffer[0].mul_(scale);
      int64_t offset = 0;
      for (const auto& t : group) {
        t.copy_(buffer[0].narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
  }

  void Broadcast(const std::vector<torch::Tensor>& tensors) override {
    for (const auto& t : tensors) {
      std::vector<torch::Tensor> one{t.is_contiguous() ? t : t.contiguous()};
      group_->broadcast(one)->wait();
      if (!one[0].is_same(t)) t.copy_(one[0]);
    }
  }

 private:
  c10::intrusive_ptr<Group> group_;
  int rank_, world_;
  std::string backend_;
};

}  // namespace
#endif

std::unique_ptr<Collective> ConnectCollective(const DistributedSpec& spec, c10::Device device) {
#if defined(TRAINBENCH_WITH_GLOO) || defined(TRAINBENCH_WITH_NCCL)
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(spec.timeout_seconds * 1000));
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(spec.store_port);
  options.isServer = spec.rank == 0;
  options.numWorkers = static_cast<std::size_t>(spec.world_size);
  options.waitWorkers = true;
  options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(spec.store_host, options);
  if (device.is_cuda()) {
#ifdef TRAINBENCH_WITH_NCCL
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, spec.rank, spec.world_size, nccl_options);
    return std::make_unique<GroupCollective<c10d::ProcessGroupNCCL>>(group, spec.rank, spec.world_size, "nccl");
#endif
  } else {
#ifdef TRAINBENCH_WITH_GLOO
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(spec.store_host));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, spec.rank, spec.world_size, gloo_options);
    return std::make_unique<GroupCollective<c10d::ProcessGroupGloo>>(group, spec.rank, spec.world_size, "gloo");
#endif
  }
#endif
  std::string built;
  for (const auto& b : DistributedBackends()) built += (built.empty() ? "" : ", ") + b;
  throw std::runtime_error(
      std::string("data-parallel cells on ") + (device.is_cuda() ? "CUDA need NCCL" : "the CPU need Gloo") +
      ", which this trainbench-worker was built without (built with: " + (built.empty() ? "none" : built) +
      "); rebuild with LibTorch's c10d headers and " +
      (device.is_cuda() ? "nccl.h" : "gloo's headers (Debian: libgloo-dev)"));
}

}  // namespace trainbench::worker
