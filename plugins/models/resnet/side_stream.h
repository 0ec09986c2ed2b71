#pragma once
// Work beside the current CUDA stream while a CUDA graph is being captured:
// at the ResNets' small maps (32x32 images, batch 128) one convolution fills
// a fraction of an H200, so independent pieces of the step run side by side
// as branches of the captured graph: a convolution's two gradients
// (cudnn_conv.cc), a residual block's downsampling branch beside its main
// path (resnet.cc), the filter gradients left running past their
// convolution's backward until every weight's gradient is needed
// (JoinBeforeGradients). Outside a capture nothing forks (the cuDNN engines
// are tuned there, and a neighbour on the GPU would skew their timing).
// Kernels with per-device state must not run on two streams at once; the batch norm's counters are per stream
// (batch_norm_act_kernels.h).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

namespace trainbench::plugins {

/// Whether work on `device` may fork now: a CUDA device whose current stream
/// is capturing a graph, and this build has CUDA.
bool SideStreamsApply(const c10::Device& device);

/// A side stream of `device` that waits for the work queued so far on the
/// current stream; Run() queues work on it, Join() makes the current stream
/// (the one at construction) wait for all of it (the destructor joins if
/// Join() was not called). Tensors that Run() reads or writes must be
/// allocated on the current stream and kept until Join(): then the allocator
/// can only hand their memory out again behind the side stream's work (what
/// Run() allocates and frees itself, such as a workspace, belongs to the side
/// stream and is safe there).
/// Throws c10::Error where SideStreamsApply is false for lack of CUDA.
/// The side stream has the current stream's priority class (LibTorch's
/// pools: high or default).
class SideStream {
 public:
  explicit SideStream(const c10::Device& device);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  void Run(const std::function<void()>& work);
  void Join();
  /// A tensor that Run() allocated and the current stream reads after
  /// Join(): its memory goes back to the side stream only behind that work.
  void HandOver(const torch::Tensor& tensor);
  /// Instead of Join(): the side stream's work so far is joined later, by
  /// JoinLeft(device, group) on this device (the backward of
  /// JoinBeforeGradients with that group calls it).
  /// `read`: the current stream's tensors that Run() read or wrote, whose
  /// memory then goes back to the current stream only behind that work (the
  /// caller may drop them before the join).
  void Leave(const std::vector<torch::Tensor>& read, int64_t group = 0);
  /// Before Run(): the side stream waits as well for every side stream left
  /// on this device with `group` so far, in this capture (they stay left; a
  /// later JoinLeft joins them): for work that reads what they write and is
  /// itself left with `group` (the whole map's filter gradient folded behind
  /// its convolution's, whole_map.h).
  void AfterLeft(int64_t group);

 private:
  struct Streams;
  std::unique_ptr<Streams> streams_;
};

/// The current stream of `device` waits for every side stream left there
/// with `group` (SideStream::Leave) and forgets them.
void JoinLeft(const c10::Device& device, int64_t group = 0);

/// The tensors themselves (views, no copy), for autograd: in the backward
/// their gradients go on only once every side stream left on their device
/// with `group` has been joined (JoinLeft), so whatever reads them (an
/// optimizer, a cast, gradient accumulation) reads them whole. A model puts
/// it between its weights and the convolutions it lets leave their filter
/// gradients running (cudnn_conv::Settings::late_join_group, the same
/// group); one group per set of weights whose gradients may go on
/// together (resnet.cc: one per stage, so that the optimizer can update a
/// stage while the backward goes on). Every tensor on one CUDA device.
std::vector<torch::Tensor> JoinBeforeGradients(const std::vector<torch::Tensor>& tensors, int64_t group = 0);

}  // namespace trainbench::plugins
