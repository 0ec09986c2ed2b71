#pragma once
/// @file
/// The interface a model plugin's object implements.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "trainbench/sdk/status.h"
#include "trainbench/sdk/working_copies.h"

namespace trainbench::sdk {

class CrossRankSum;  // cross_rank_sum.h

/// The argument of Model::Reserved13A(): SDK ABI 1.3's layout, kept so that
/// plugins built against 1.3 and 1.4 keep theirs. No host passes it.
struct Reserved13Args {
  double reserved0 = 0;
  double reserved1 = 0;
  double reserved2 = 0;
  bool reserved3 = false;
  bool reserved4 = false;
};

/// A classification network made by a model plugin (TB_PLUGIN_MODEL).
///
/// Created by the plugin's TbCreateFn, owned by the host, which keeps the
/// plugin's library loaded until this object and every tensor or module it
/// handed out are gone. Not thread-safe: the host drives one model from one
/// thread. No method throws; failures come back as Status.
///
/// The training step's contract (what the host does around Forward and the
/// backward of its logits, and what a model may rely on):
/// - The host owns precision, streams and capture. Forward runs under the
///   host's autocast for the device (sdk::autocast reads it; a model never
///   enters or leaves autocast itself), on the device's current stream.
/// - The step may be captured in a CUDA graph (the device's cuda_graph) and
///   replayed: Forward and its backward must not wait on the host (no
///   .item(), no host copies, no allocation sized by data), must give the
///   same kernels on every step of a shape, and may fork work onto side
///   streams only while the current stream is capturing, joining them before
///   the step ends (the ResNets do: side_stream.h).
/// - A model may read the device settings the host applied to the process
///   (cuDNN's autotuning and TF32 flags in LibTorch's global context, the
///   CUDA device current) but not change them; its own choices come from its
///   options, which the host records.
/// - The optimizer is the host's: every parameter of module() is updated by
///   it (a model reads low-precision copies through UseWorkingCopies()).
class Model {
 public:
  virtual ~Model() = default;

  /// The module holding every parameter and buffer. Owned by this Model; the
  /// host moves it to a device, switches train/eval and reads parameters.
  virtual torch::nn::Module& module() noexcept = 0;

  /// Runs the network on a batch `input` of shape [N, C, H, W] (InputShape()
  /// per sample) and stores logits [N, NumClasses()] in `logits`.
  virtual Status Forward(const torch::Tensor& input, torch::Tensor* logits) noexcept = 0;

  /// Shape of one input sample: {channels, height, width}.
  virtual std::array<int64_t, 3> InputShape() const noexcept = 0;

  /// Number of output classes.
  virtual int64_t NumClasses() const noexcept = 0;

  /// Number of trainable parameters (elements), counted from the module.
  virtual int64_t ParameterCount() noexcept {
    int64_t n = 0;
    for (const auto& p : module().parameters()) n += p.numel();
    return n;
  }

  /// Floating-point operations of one training step (forward and backward)
  /// per sample, measured by running the network (see flops.h), not typed in.
  virtual Status TrainingFlopsPerSample(int64_t* flops) noexcept = 0;

  /// SDK ABI 1.1. Data-parallel cells with `sync_batchnorm: true`: make every
  /// batch normalisation use the statistics of the combined batch of all
  /// ranks, summed through `sum` (kept alive by the host while training;
  /// see batch_norm.h). A model without batch normalisation returns Ok. The
  /// default refuses; ModuleModel implements it for networks built from
  /// trainbench::sdk::BatchNorm2d. The host calls it only on plugins built
  /// against ABI 1.1 or newer, before the first Forward().
  virtual Status SyncBatchNorm(CrossRankSum* sum) noexcept {
    (void)sum;
    return Status::Error("this model cannot synchronise batch normalisation across ranks");
  }

  /// Reserved: two slots SDK ABI 1.3 added and ABI 1.5 retired (hosts of
  /// 1.5 and newer never call them; the optimizer is the host's, see
  /// UseWorkingCopies()). They keep the place of every slot after them, so
  /// that a plugin built against 1.3 or 1.4 that overrides them still loads
  /// and trains. Do not override or call them.
  virtual Status Reserved13A(const Reserved13Args& args, std::vector<torch::Tensor>* out) noexcept {
    (void)args;
    out->clear();
    return Status::Ok();
  }
  /// Reserved (see Reserved13A()).
  virtual Status Reserved13B(double value) noexcept {
    (void)value;
    return Status::Error("reserved");
  }

  /// SDK ABI 1.4. What the model's own rules chose for the steps it ran, for
  /// the cell's record (results.json's `path`): a JSON object of names to
  /// numbers, strings, booleans or objects of those, such as which kernel
  /// form each layer took or how its engines were chosen. Asked once, after
  /// the last step; at most 64 KiB, 8 objects deep and 4,096 values; no
  /// arrays or nulls. A model without rules of its own leaves it empty (the
  /// default); a refusal (an error Status) is recorded as an error, never as
  /// a choice; an answer out of these bounds fails the cell, naming the
  /// plugin. The host calls it only on plugins built against ABI 1.4 or
  /// newer.
  virtual Status PathTaken(std::string* json_object) noexcept {
    json_object->clear();
    return Status::Ok();
  }

  /// SDK ABI 1.5. The host's offer, once, after moving the module to its
  /// device and before the first Forward(): `copies` (working_copies.h),
  /// through which the model may read some of its parameters. The model
  /// lists those in `groups`: each a set of parameters whose gradients are
  /// final at the same point of the backward (a stage of a network), each
  /// parameter of its module() at most once; every Forward() then asks
  /// `copies` for a group's tensors (Group()) instead of reading those
  /// parameters. Leaving `groups` empty (the default) declines: the model
  /// reads its parameters as usual. The host checks the answer (a tensor
  /// that is not one of the module's parameters, or one listed twice, fails
  /// the cell naming the plugin) and calls it only on plugins built against
  /// ABI 1.5 or newer. `copies` stays valid while the host trains the model.
  virtual Status UseWorkingCopies(WorkingCopies* copies, std::vector<std::vector<torch::Tensor>>* groups) noexcept {
    (void)copies;
    groups->clear();
    return Status::Ok();
  }
};

}  // namespace trainbench::sdk
