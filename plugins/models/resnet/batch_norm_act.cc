#include "batch_norm_act.h"

#include <vector>

#include "path_log.h"

#ifdef TRAINBENCH_RESNET_KERNELS
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include "batch_norm_act_kernels.h"
#include "kernel_dtype.h"
#include "tensor_alias.h"
#endif

namespace resnet {
namespace {

using trainbench::sdk::BatchNorm2dImpl;

// torchvision's block: the module's batch norm, then in place the residual
// add and ReLU (see resnet.cc for why in place).
torch::Tensor Composite(BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu) {
  torch::Tensor y = bn.forward(x);
  if (residual.defined()) y += residual;
  return relu ? y.relu_() : y;
}

#ifdef TRAINBENCH_RESNET_KERNELS
using kernels::Format;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// channels_last when x is (a 1x1 map is both: the same memory either way).
bool IsNhwc(const torch::Tensor& x) { return x.is_contiguous(c10::MemoryFormat::ChannelsLast); }

kernels::BnProblem Problem(const torch::Tensor& x, bool nhwc, bool relu, bool residual, BnLaunch launch = {}) {
  return kernels::BnProblem{kernels::DTypeOf(x.scalar_type()),
                            nhwc ? kernels::Layout::kNhwc : kernels::Layout::kNchw,
                            x.size(0),
                            x.size(1),
                            x.size(2) * x.size(3),
                            relu,
                            residual,
                            launch.one_pass,
                            launch.sm90_launches};
}

bool IsFloatOn(const torch::Tensor& t, const torch::Tensor& x) {
  return t.defined() && t.scalar_type() == torch::kFloat && t.device() == x.device() && t.is_contiguous() &&
         t.dim() == 1 && t.size(0) == x.size(1);
}

bool FusedApplies(const BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu) {
  const auto type = x.scalar_type();
  if (!x.is_cuda() || x.dim() != 4 || !kernels::Takes(type)) return false;
  if (bn.HasCrossRankSum() || !bn.options.affine() || !bn.options.momentum().has_value()) return false;
  if (!IsFloatOn(bn.weight, x) || !IsFloatOn(bn.bias, x)) return false;
  if (bn.options.track_running_stats() && (!IsFloatOn(bn.running_mean, x) || !IsFloatOn(bn.running_var, x)))
    return false;
  if (!x.is_contiguous() && !IsNhwc(x)) return false;
  if (residual.defined() &&
      (!relu || residual.sizes() != x.sizes() || residual.scalar_type() != type || residual.device() != x.device()))
    return false;
  return kernels::Supported(Problem(x, IsNhwc(x), relu, residual.defined()));
}

// LibTorch's autograd functions take defined tensors only: an absent one
// (no residual, running statistics not tracked) travels as an empty tensor.
torch::Tensor OrAbsent(const torch::Tensor& t, const torch::Tensor& like) {
  return t.defined() ? t : torch::empty({0}, like.options());
}
bool Present(const torch::Tensor& t) { return t.defined() && t.numel() > 0; }

// dy as the kernels read it: in x's type and layout.
torch::Tensor AsGradient(const torch::Tensor& g, const torch::Tensor& x, bool nhwc) {
  return g.to(x.scalar_type()).contiguous(Format(nhwc));
}

struct FusedBatchNormAct : public torch::autograd::Function<FusedBatchNormAct> {
  // residual: OrAbsent; running_mean, running_var: updated in place, or
  // OrAbsent (not tracked). `twice` (with a residual): y and an alias of it,
  // two outputs whose gradients the backward adds.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& residual,
                               const torch::Tensor& running_mean, const torch::Tensor& running_var,
                               const torch::Tensor& num_batches_tracked, double eps, double momentum, bool relu,
                               bool one_pass, bool sm90_launches, bool twice) {
    const c10::cuda::CUDAGuard guard(x.device());
    const bool nhwc = IsNhwc(x);
    const torch::Tensor r = Present(residual) ? residual.contiguous(Format(nhwc)) : torch::Tensor();
    const kernels::BnProblem problem = Problem(x, nhwc, relu, r.defined(), {one_pass, sm90_launches});
    const auto f32 = x.options().dtype(torch::kFloat).memory_format(c10::MemoryFormat::Contiguous);
    // x's own strides (a 1x1 map's NCHW and NHWC are the same memory): the
    // convolutions after it see what they would see after the composite.
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor mean = torch::empty({x.size(1)}, f32), invstd = torch::empty({x.size(1)}, f32);
    torch::Tensor workspace = torch::empty({kernels::WorkspaceFloats(problem)}, f32);
    // A block's output keeps, for the backward, y's ReLU mask (a byte per
    // 16-byte pack: kernels::ReluMaskBytes) instead of y itself where the
    // layout allows: the backward's reduction reads 1/16 of the bytes, the
    // forward writes them beside y (+0.4 to +1.3% a step at batch 1024 on an
    // H200).
    const int64_t mask_bytes = r.defined() ? kernels::ReluMaskBytes(problem) : 0;
    const torch::Tensor mask =
        mask_bytes > 0 ? torch::empty({mask_bytes}, x.options().dtype(torch::kUInt8)) : torch::Tensor();
    kernels::BnForwardArgs args{};
    args.x = x.data_ptr();
    args.residual = r.defined() ? r.data_ptr() : nullptr;
    args.weight = weight.data_ptr<float>();
    args.bias = bias.data_ptr<float>();
    args.running_mean = Present(running_mean) ? running_mean.data_ptr<float>() : nullptr;
    args.running_var = Present(running_var) ? running_var.data_ptr<float>() : nullptr;
    args.num_batches_tracked = Present(num_batches_tracked) ? num_batches_tracked.data_ptr<int64_t>() : nullptr;
    args.eps = static_cast<float>(eps);
    args.momentum = static_cast<float>(momentum);
    args.y = y.data_ptr();
    args.save_mean = mean.data_ptr<float>();
    args.save_invstd = invstd.data_ptr<float>();
    args.workspace = workspace.data_ptr<float>();
    args.relu_mask = mask.defined() ? mask.data_ptr() : nullptr;
    C10_CUDA_CHECK(kernels::BnForwardTraining(problem, args, c10::cuda::getCurrentCUDAStream()));
    // y is read back only with a residual (ReLU's mask: y, or the mask the
    // forward wrote); without one the backward recomputes the mask from x.
    if (r.defined())
      ctx->save_for_backward({x, weight, bias, mean, invstd, mask.defined() ? mask : y});
    else
      ctx->save_for_backward({x, weight, bias, mean, invstd});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["one_pass"] = one_pass;
    ctx->saved_data["sm90_launches"] = sm90_launches;
    if (!twice) return {y};
    // Either output may get no gradient (a reader outside autograd).
    ctx->set_materialize_grads(false);
    return {y, Alias(y)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &invstd = saved[4];
    const bool residual = saved.size() > 5;
    const c10::cuda::CUDAGuard guard(x.device());
    const bool nhwc = IsNhwc(x);
    const kernels::BnProblem problem =
        Problem(x, nhwc, ctx->saved_data["relu"].toBool(), residual,
                {ctx->saved_data["one_pass"].toBool(), ctx->saved_data["sm90_launches"].toBool()});
    // Two outputs: either gradient may be undefined (materialize_grads off).
    const torch::Tensor& g0 = grads[0];
    const torch::Tensor g1 = grads.size() > 1 ? grads[1] : torch::Tensor();
    const torch::Tensor dy = g0.defined()   ? AsGradient(g0, x, nhwc)
                             : g1.defined() ? AsGradient(g1, x, nhwc)
                                            : torch::zeros_like(x);
    const torch::Tensor dy2 = g0.defined() && g1.defined() ? AsGradient(g1, x, nhwc) : torch::Tensor();
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor dr = residual ? torch::empty_like(x) : torch::Tensor();
    const auto f32 = x.options().dtype(torch::kFloat).memory_format(c10::MemoryFormat::Contiguous);
    torch::Tensor dw = torch::empty({x.size(1)}, f32), db = torch::empty({x.size(1)}, f32);
    torch::Tensor workspace = torch::empty({kernels::WorkspaceFloats(problem)}, f32);
    kernels::BnBackwardArgs args{};
    args.grad_y = dy.data_ptr();
    args.x = x.data_ptr();
    // With a residual: y, or its ReLU mask (bytes) where the forward wrote one.
    const bool masked = residual && saved[5].scalar_type() == torch::kUInt8;
    args.y = residual && !masked ? saved[5].data_ptr() : nullptr;
    args.relu_mask = masked ? saved[5].data_ptr() : nullptr;
    args.weight = weight.data_ptr<float>();
    args.bias = bias.data_ptr<float>();
    args.save_mean = mean.data_ptr<float>();
    args.save_invstd = invstd.data_ptr<float>();
    args.grad_x = dx.data_ptr();
    args.grad_residual = residual ? dr.data_ptr() : nullptr;
    args.grad_weight = dw.data_ptr<float>();
    args.grad_bias = db.data_ptr<float>();
    args.workspace = workspace.data_ptr<float>();
    args.grad_y2 = dy2.defined() ? dy2.data_ptr() : nullptr;
    // Autograd runs this on the forward's stream, which may be a side
    // stream of a captured step that has not asked for its counters yet.
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    TORCH_CHECK(kernels::PrepareDevice(stream), "fused batch norm: no counters left for this CUDA stream (",
                "80 streams of device ", static_cast<int>(x.device().index()),
                " ran these kernels); set the model option fused_batchnorm: false");
    C10_CUDA_CHECK(kernels::BnBackwardTraining(problem, args, stream));
    // One per input of forward: x, weight, bias, residual, then none for the
    // running statistics, the counter, eps, momentum, relu, one_pass,
    // sm90_launches and twice.
    variable_list out(13);
    out[0] = dx;
    out[1] = dw;
    out[2] = db;
    out[3] = dr;
    return out;
  }
};

// Evaluation with the running statistics, no autograd.
torch::Tensor Inference(const BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu) {
  const c10::cuda::CUDAGuard guard(x.device());
  const bool nhwc = IsNhwc(x);
  const torch::Tensor r = residual.defined() ? residual.contiguous(Format(nhwc)) : torch::Tensor();
  torch::Tensor y = torch::empty_like(x);
  torch::Tensor workspace = torch::empty({2 * x.size(1)}, x.options().dtype(torch::kFloat));
  C10_CUDA_CHECK(kernels::BnForwardInference(
      Problem(x, nhwc, relu, r.defined()), x.data_ptr(), r.defined() ? r.data_ptr() : nullptr,
      bn.weight.data_ptr<float>(), bn.bias.data_ptr<float>(), bn.running_mean.data_ptr<float>(),
      bn.running_var.data_ptr<float>(), static_cast<float>(bn.options.eps()), y.data_ptr(), workspace.data_ptr<float>(),
      c10::cuda::getCurrentCUDAStream()));
  return y;
}
#endif

}  // namespace

bool FusedKernelsBuilt() noexcept {
#ifdef TRAINBENCH_RESNET_KERNELS
  return true;
#else
  return false;
#endif
}

bool OnePassApplies(const torch::Tensor& x, bool relu, bool residual) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (!x.is_cuda() || x.dim() != 4 || !kernels::Takes(x.scalar_type())) return false;
  const c10::cuda::CUDAGuard guard(x.device());
  return kernels::OnePass(Problem(x, IsNhwc(x), relu, residual));
#else
  (void)x, (void)relu, (void)residual;
  return false;
#endif
}

bool ReluMaskApplies(const torch::Tensor& x) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (!x.is_cuda() || x.dim() != 4 || !kernels::Takes(x.scalar_type())) return false;
  return kernels::ReluMaskBytes(Problem(x, IsNhwc(x), true, true)) > 0;
#else
  (void)x;
  return false;
#endif
}

int ReduceTileChannels(const torch::Tensor& x) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (!x.is_cuda() || x.dim() != 4 || !kernels::Takes(x.scalar_type()) || !IsNhwc(x)) return 0;
  const c10::cuda::CUDAGuard guard(x.device());
  return kernels::ReduceTileChannels(Problem(x, true, true, false));
#else
  (void)x;
  return 0;
#endif
}

namespace {

// The fused path's outputs (one, or two with `twice`), or none where it does
// not apply.
std::vector<torch::Tensor> Fused(BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu,
                                 bool fused, BnLaunch launch, bool twice) {
#ifdef TRAINBENCH_RESNET_KERNELS
  if (fused && FusedApplies(bn, x, residual, relu)) {
    const bool batch_statistics = bn.is_training() || !bn.options.track_running_stats();
    if (!batch_statistics) {
      const bool needs_grad =
          torch::GradMode::is_enabled() && (x.requires_grad() || bn.weight.requires_grad() || bn.bias.requires_grad() ||
                                            (residual.defined() && residual.requires_grad()));
      if (!needs_grad) return {Inference(bn, x, residual, relu)};
    } else if (kernels::PrepareDevice(c10::cuda::getCurrentCUDAStream(x.device().index()))) {
      const bool track = bn.is_training() && bn.options.track_running_stats();
      // The batch is counted as the module's own forward would: by the
      // statistics kernel where the count is on the device (one launch
      // fewer per layer), else here. FusedApplies asked for a momentum;
      // without running statistics it is not used.
      const double momentum = track ? *bn.options.momentum() : 0.0;
      const bool counter_on_device = track && bn.num_batches_tracked.defined() &&
                                     bn.num_batches_tracked.scalar_type() == torch::kLong &&
                                     bn.num_batches_tracked.device() == x.device() &&
                                     bn.num_batches_tracked.numel() == 1 && bn.num_batches_tracked.is_contiguous();
      if (track && bn.num_batches_tracked.defined() && !counter_on_device) bn.CountBatch();
      return FusedBatchNormAct::apply(
          x, bn.weight, bn.bias, OrAbsent(residual, x), OrAbsent(track ? bn.running_mean : torch::Tensor(), bn.weight),
          OrAbsent(track ? bn.running_var : torch::Tensor(), bn.weight),
          OrAbsent(counter_on_device ? bn.num_batches_tracked : torch::Tensor(), bn.weight), bn.options.eps(), momentum,
          relu, launch.one_pass, launch.sm90_launches, twice && residual.defined());
    }
  }
#else
  (void)bn, (void)x, (void)residual, (void)relu, (void)fused, (void)launch, (void)twice;
#endif
  return {};
}

}  // namespace

torch::Tensor BatchNormAct(BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu,
                           bool fused, BnLaunch launch) {
  std::vector<torch::Tensor> out = Fused(bn, x, residual, relu, fused, launch, /*twice=*/false);
  if (!out.empty()) return out[0];
  trainbench::plugins::CountPath("batch_norm", "composite");
  return Composite(bn, x, residual, relu);
}

std::pair<torch::Tensor, torch::Tensor> BatchNormActTwice(BatchNorm2dImpl& bn, const torch::Tensor& x,
                                                          const torch::Tensor& residual, bool fused, BnLaunch launch) {
  std::vector<torch::Tensor> out = Fused(bn, x, residual, /*relu=*/true, fused, launch, /*twice=*/true);
  if (out.empty()) {
    trainbench::plugins::CountPath("batch_norm", "composite");
    out = {Composite(bn, x, residual, /*relu=*/true)};
  }
  return out.size() > 1 ? std::make_pair(out[0], out[1]) : std::make_pair(out[0], out[0]);
}

}  // namespace resnet
