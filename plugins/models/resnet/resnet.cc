#include "resnet.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/pooling.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "batch_norm_act.h"
#include "classifier.h"
#include "cudnn_conv.h"
#include "max_pool.h"
#include "path_log.h"
#include "side_stream.h"
#include "stem.h"
#include "trainbench/sdk/support/autocast.h"
#include "trainbench/sdk/support/module_model.h"
#include "trainbench/sdk/working_copies.h"
#include "whole_map.h"

namespace trainbench::plugins {
namespace {

using sdk::BatchNorm2d;  // torch::nn::BatchNorm2d that can normalise across ranks
using sdk::CountedLinear;
using torch::nn::Conv2dOptions;

// A convolution without bias (torchvision's names and shapes): on CUDA with
// `engine_cache`, through cuDNN's backend API with its engine choices kept per
// machine (plugins/models/resnet/cudnn/cudnn_conv.h), the imagenet stem's in space-to-depth
// form with `space_to_depth` (stem.h); elsewhere LibTorch's.
class ConvImpl : public sdk::CountedConv2dImpl {
 public:
  ConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool engine_cache,
           const cudnn_conv::Settings& settings, std::optional<bool> whole_map, bool space_to_depth = false)
      : sdk::CountedConv2dImpl(Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false)),
        stride_(stride),
        padding_(padding),
        engine_cache_(engine_cache),
        space_to_depth_(space_to_depth),
        whole_map_(whole_map),
        settings_(settings) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor& w = step_weight_.defined() ? step_weight_ : weight;
    if (engine_cache_ && cudnn_conv::Supports(x, w)) {
      // Not late through the stem's weight transform: its backward reads
      // the filter gradient at once.
      if (space_to_depth_ && resnet::StemApplies(x, w, stride_, padding_)) {
        trainbench::plugins::CountPath("convolution", "stem_space_to_depth");
        return resnet::StemConv(x, w, settings_);
      }
      // As one matrix product over the whole map where it is smaller than
      // the filter (by WholeMapApplies' rule of the type the cuDNN path
      // computes in and the batch, or always or never by option whole_map_conv;
      // channels_last, where the map's pixels as channels are a view). Its
      // filter gradient and the fold of it onto the taps join late below
      // resnet::kWholeMapLateBelowRows images, as below (the convolution and
      // the fold take the group together), else at once.
      const at::ScalarType type = cudnn_conv::ComputeType(x);
      if (x.is_contiguous(c10::MemoryFormat::ChannelsLast) && resnet::WholeMapApplies(whole_map_, x.size(0), type)) {
        if (const auto map = resnet::WholeMapPlan(x.size(2), x.size(3), w.size(2), w.size(3), stride_, padding_)) {
          const bool late = resnet::WholeMapJoinsLate(x.size(0), w.scalar_type(), type);
          cudnn_conv::Settings settings = settings_;
          settings.late_join_group = late ? late_join_group_ : -1;
          const torch::Tensor filter = resnet::WholeMapFilter(w, *map, settings.late_join_group);
          trainbench::plugins::CountPath("convolution", late ? "whole_map_late_join" : "whole_map");
          return resnet::ChannelsAsMap(cudnn_conv::Conv2d(resnet::MapAsChannels(x), filter, {1, 1}, {0, 0}, settings),
                                       *map);
        }
      }
      cudnn_conv::Settings settings = settings_;
      settings.late_join_group = late_join_group_;
      trainbench::plugins::CountPath("convolution", "cudnn_path");
      return cudnn_conv::Conv2d(x, w, {stride_, stride_}, {padding_, padding_}, settings);
    }
    trainbench::plugins::CountPath("convolution", "libtorch");
    return sdk::CountedConv2dImpl::forward(x);
  }

  bool engine_cache() const { return engine_cache_; }

  /// For one forward on the cuDNN path (StepWeights): the weight already in
  /// autocast's type and/or behind JoinBeforeGradients of `late_join_group`
  /// (then its filter gradient may be joined late; -1: it is not behind
  /// one); undefined: the parameter itself.
  void UseStepWeight(torch::Tensor w, int64_t late_join_group) {
    step_weight_ = std::move(w);
    late_join_group_ = late_join_group;
  }

 private:
  int64_t stride_, padding_;
  bool engine_cache_, space_to_depth_;
  std::optional<bool> whole_map_;  // forced on or off; none: WholeMapApplies' rule
  cudnn_conv::Settings settings_;
  torch::Tensor step_weight_;
  int64_t late_join_group_ = -1;
};
TORCH_MODULE(Conv);

// For one forward on CUDA, the weights of the convolutions on the cuDNN path,
// a group at a time (the stem's, then each stage's): through the host's
// working copies where it offered them (sdk::WorkingCopies: under autocast in
// its type, the host's casts or its mixed-precision SGD's kept copies; the
// group's node of the backward is where its gradients are final), else under
// autocast each weight's cast; inside a captured step with side streams,
// behind JoinBeforeGradients, so that each convolution's backward may leave
// its filter gradient running beside the rest of the backward, joined before
// the group's gradients are read (side_stream.h).
// Prepare(g) comes just before the forward of group g - 1: autograd runs a
// backward node after every node created after it that is ready (the
// higher sequence number first), so group g's join and the host's node run
// once group g - 1's backward is queued, when its filter gradients have long
// finished, and its weights' gradients are final from there on: the
// optimizer can update them beside the rest of the backward.
class StepWeights {
 public:
  StepWeights(const std::vector<std::vector<ConvImpl*>>& groups, const torch::Tensor& input, sdk::WorkingCopies* copies)
      : groups_(groups) {
    if (!input.is_cuda()) return;
    cast_ = sdk::autocast::Enabled(c10::kCUDA);
    late_ = SideStreamsApply(input.device()) && torch::GradMode::is_enabled();
    copies_ = copies;
    if (copies_) copies_->BeginForward();
  }
  ~StepWeights() {
    for (ConvImpl* conv : used_) conv->UseStepWeight({}, -1);
  }
  StepWeights(const StepWeights&) = delete;
  StepWeights& operator=(const StepWeights&) = delete;

  /// Group g's weights for this forward (nothing past the last group).
  void Prepare(size_t g) {
    if ((!cast_ && !late_ && !copies_) || g >= groups_.size()) return;
    std::vector<ConvImpl*> convs;
    std::vector<torch::Tensor> weights;
    for (ConvImpl* conv : groups_[g]) {
      if (!conv->engine_cache()) continue;
      convs.push_back(conv);
      weights.push_back(conv->weight);
    }
    if (weights.empty()) return;
    const std::optional<at::ScalarType> type =
        cast_ ? std::optional<at::ScalarType>(sdk::autocast::Type(c10::kCUDA)) : std::nullopt;
    if (copies_) {
      weights = copies_->Group(g, type);
    } else if (cast_) {
      for (torch::Tensor& w : weights) w = w.to(*type);
    }
    if (late_) weights = JoinBeforeGradients(weights, static_cast<int64_t>(g));
    for (size_t i = 0; i < convs.size(); ++i) {
      convs[i]->UseStepWeight(std::move(weights[i]), late_ ? static_cast<int64_t>(g) : -1);
      used_.push_back(convs[i]);
    }
  }

 private:
  const std::vector<std::vector<ConvImpl*>>& groups_;
  bool cast_ = false, late_ = false;
  sdk::WorkingCopies* copies_ = nullptr;
  std::vector<ConvImpl*> used_;
};

// How the batch norms run (batch_norm_act.h): fused, and then how the
// kernels may launch.
struct BnPath {
  bool fused;
  resnet::BnLaunch launch;
};

torch::Tensor BatchNormAct(BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu,
                           BnPath path) {
  return resnet::BatchNormAct(*bn, x, residual, relu, path.fused, path.launch);
}

// What the blocks share: the fused batch norm and max pool, the engine cache;
// and the stem's space-to-depth form.
struct Paths {
  BnPath batchnorm;
  bool fused_maxpool;
  bool fused_classifier;
  bool engine_cache;
  cudnn_conv::Settings conv;
  std::optional<bool> whole_map;
  bool stem_space_to_depth;
};

Conv Conv3x3(int64_t in, int64_t out, int64_t stride, const Paths& paths) {
  return Conv(in, out, 3, stride, 1, paths.engine_cache, paths.conv, paths.whole_map);
}
Conv Conv1x1(int64_t in, int64_t out, int64_t stride, const Paths& paths) {
  return Conv(in, out, 1, stride, 0, paths.engine_cache, paths.conv, paths.whole_map);
}

// One residual block, basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 x4).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t in, int64_t width, int64_t stride, bool bottleneck, const Paths& paths)
      : bottleneck_(bottleneck), bn_(paths.batchnorm) {
    const int64_t out = bottleneck ? width * 4 : width;
    if (bottleneck) {
      conv1_ = register_module("conv1", Conv1x1(in, width, 1, paths));
      bn1_ = register_module("bn1", BatchNorm2d(width));
      conv2_ = register_module("conv2", Conv3x3(width, width, stride, paths));
      bn2_ = register_module("bn2", BatchNorm2d(width));
      conv3_ = register_module("conv3", Conv1x1(width, out, 1, paths));
      bn3_ = register_module("bn3", BatchNorm2d(out));
    } else {
      conv1_ = register_module("conv1", Conv3x3(in, width, stride, paths));
      bn1_ = register_module("bn1", BatchNorm2d(width));
      conv2_ = register_module("conv2", Conv3x3(width, width, 1, paths));
      bn2_ = register_module("bn2", BatchNorm2d(width));
    }
    if (stride != 1 || in != out) {
      downsample_conv_ = Conv1x1(in, out, stride, paths);
      downsample_bn_ = BatchNorm2d(out);
      downsample_ = register_module("downsample", torch::nn::Sequential(downsample_conv_, downsample_bn_));
    }
  }

  // Each batch norm with what follows it (ReLU, the residual add) in one
  // call: fused kernels on CUDA, else torchvision's composite, whose ReLU and
  // residual add run in place: besides saving memory, they keep the
  // convolutions' channels_last strides where the maps are 1x1 (layer4 at
  // 32x32 input), which out-of-place ops would turn into NCHW strides; cuDNN
  // then computes the next weight gradient in NCHW and the step pays for
  // transposing it back. Batch normalisation's backward does not read its
  // output, so overwriting it is safe.
  // Inside a captured step the downsampling branch (a 1x1 convolution and
  // its batch norm) runs on a side stream beside the main path (side_stream.h);
  // autograd runs its backward on that stream too.
  torch::Tensor forward(const torch::Tensor& x) { return Forward(x, x, /*split=*/false).first; }

  // The block on the previous block's output as its two readers see it: `x`
  // (the first convolution's input) and `x_branch` (the residual branch's:
  // the same values, see resnet::BatchNormActTwice). `split`: this block's
  // output so too, else the same tensor twice.
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& x, const torch::Tensor& x_branch, bool split) {
    if (!downsample_) return Tail(MainPath(x), x_branch, split);
    if (!SideStreamsApply(x.device())) return Tail(MainPath(x), Downsample(x_branch), split);
    SideStream side(x.device());
    torch::Tensor identity;
    side.Run([&] { identity = Downsample(x_branch); });
    const torch::Tensor y = MainPath(x);
    side.Join();
    side.HandOver(identity);
    return Tail(y, identity, split);
  }

 private:
  // Every convolution and batch norm before the last batch norm.
  torch::Tensor MainPath(const torch::Tensor& x) {
    torch::Tensor y = BatchNormAct(bn1_, conv1_(x), {}, /*relu=*/true, bn_);
    if (!bottleneck_) return conv2_(y);
    y = BatchNormAct(bn2_, conv2_(y), {}, /*relu=*/true, bn_);
    return conv3_(y);
  }
  torch::Tensor Downsample(const torch::Tensor& x) {
    return BatchNormAct(downsample_bn_, downsample_conv_(x), {}, /*relu=*/false, bn_);
  }
  // The last batch norm, the residual add and ReLU.
  std::pair<torch::Tensor, torch::Tensor> Tail(const torch::Tensor& y, const torch::Tensor& identity, bool split) {
    BatchNorm2d& bn = bottleneck_ ? bn3_ : bn2_;
    if (split) return resnet::BatchNormActTwice(*bn, y, identity, bn_.fused, bn_.launch);
    torch::Tensor out = BatchNormAct(bn, y, identity, /*relu=*/true, bn_);
    return {out, out};
  }

  bool bottleneck_;
  BnPath bn_;
  Conv conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr}, downsample_conv_{nullptr};
  BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr}, downsample_bn_{nullptr};
  torch::nn::Sequential downsample_{nullptr};  // (downsample_conv_, downsample_bn_), torchvision's names
};
TORCH_MODULE(Block);

class ResNetImpl : public torch::nn::Module {
 public:
  ResNetImpl(const ResNetSpec& spec, int64_t num_classes, bool imagenet_stem, const Paths& paths)
      : imagenet_stem_(imagenet_stem),
        bn_(paths.batchnorm),
        fused_pool_(paths.fused_maxpool),
        fused_classifier_(paths.fused_classifier) {
    conv1_ = register_module("conv1", imagenet_stem ? Conv(3, 64, 7, 2, 3, paths.engine_cache, paths.conv,
                                                           paths.whole_map, paths.stem_space_to_depth)
                                                    : Conv3x3(3, 64, 1, paths));
    bn1_ = register_module("bn1", BatchNorm2d(64));
    int64_t in = 64;
    const int64_t widths[4] = {64, 128, 256, 512};
    for (int stage = 0; stage < 4; ++stage) {
      torch::nn::Sequential layer;
      for (int64_t b = 0; b < spec.layers[stage]; ++b) {
        const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
        layer->push_back(Block(in, widths[stage], stride, spec.bottleneck, paths));
        in = spec.bottleneck ? widths[stage] * 4 : widths[stage];
      }
      layers_[stage] = register_module("layer" + std::to_string(stage + 1), layer);
      for (const auto& block : layer->children()) blocks_[stage].push_back(block->as<BlockImpl>());
    }
    fc_ = register_module("fc", CountedLinear(in, num_classes));
    Initialise();
    conv_groups_.push_back({conv1_.get()});
    for (auto& layer : layers_) {
      conv_groups_.emplace_back();
      for (auto& m : layer->modules(/*include_self=*/false))
        if (auto* conv = m->as<ConvImpl>()) conv_groups_.back().push_back(conv);
    }
  }

  torch::Tensor forward(const torch::Tensor& input) {
    // Each group's weights just before the previous group's forward
    // (StepWeights): the stem's and layer1's first, layer2's before layer1.
    StepWeights weights(conv_groups_, input, copies_);
    weights.Prepare(0);
    weights.Prepare(1);
    torch::Tensor x = BatchNormAct(bn1_, conv1_(input), {}, /*relu=*/true, bn_);
    if (imagenet_stem_) {
      x = resnet::MaxPool2d(x, /*kernel=*/3, /*stride=*/2, /*padding=*/1, fused_pool_);
    }
    // Each block hands its output to the next as two tensors, one per reader
    // (resnet::BatchNormActTwice): the backward adds their gradients inside
    // the batch norm's kernels (on the composite path the same tensor twice;
    // +0.9 to +1.9% a ResNet50 step on an H200).
    torch::Tensor branch = x;
    for (size_t stage = 0; stage < 4; ++stage) {
      weights.Prepare(stage + 2);
      for (size_t b = 0; b < blocks_[stage].size(); ++b) {
        const bool last = stage == 3 && b + 1 == blocks_[stage].size();  // read once: by the pooling
        std::tie(x, branch) = blocks_[stage][b]->Forward(x, branch, !last);
      }
    }
    // At a 1x1 map (32 px images through the ImageNet stem) the average is
    // the map itself: a view, no kernel either way (5 us of ResNet18's step
    // at batch 128 on an H200).
    x = x.size(2) * x.size(3) == 1 ? x.flatten(1) : torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    // Elsewhere the counted layer (the FLOP count runs on the CPU).
    if (fused_classifier_ && resnet::ClassifierApplies(x, fc_->weight, fc_->bias)) {
      trainbench::plugins::CountPath("classifier", "kernels");
      return resnet::Classifier(x, fc_->weight, fc_->bias);
    }
    trainbench::plugins::CountPath("classifier", "libtorch");
    return fc_(x);
  }

  /// The weights of the convolutions on the cuDNN path, a group per stage
  /// (the stem's first), read through `copies` from the next forward on;
  /// none (and `copies` unused) where those weights are not dense fp32 CUDA
  /// tensors on one device.
  std::vector<std::vector<torch::Tensor>> UseWorkingCopies(sdk::WorkingCopies* copies) {
    copies_ = nullptr;
    std::vector<std::vector<torch::Tensor>> groups;
    size_t count = 0;
    for (const auto& group : conv_groups_) {
      groups.emplace_back();
      for (ConvImpl* conv : group) {
        const torch::Tensor& w = conv->weight;
        if (!conv->engine_cache()) continue;
        if (!w.is_cuda() || w.scalar_type() != at::kFloat || !w.is_non_overlapping_and_dense() ||
            w.device() != conv_groups_[0][0]->weight.device())
          return {};
        groups.back().push_back(w);
        ++count;
      }
    }
    if (count == 0) return {};  // no convolution on the cuDNN path
    copies_ = copies;
    return groups;
  }

 private:
  // torchvision: Kaiming-normal (fan_out, ReLU) convolutions, BN weight 1 and
  // bias 0; the fc layer keeps nn.Linear's default initialisation.
  void Initialise() {
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
        torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = m->as<sdk::BatchNorm2dImpl>()) {
        torch::nn::init::ones_(bn->weight);
        torch::nn::init::zeros_(bn->bias);
      }
    }
  }

  bool imagenet_stem_;
  BnPath bn_;
  bool fused_pool_;
  bool fused_classifier_;
  // The convolutions (owned by the modules below): the stem's, then each stage's.
  std::vector<std::vector<ConvImpl*>> conv_groups_;
  sdk::WorkingCopies* copies_ = nullptr;  // the host's, where it offered them (UseWorkingCopies)
  Conv conv1_{nullptr};
  BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layers_[4] = {nullptr, nullptr, nullptr, nullptr};
  std::vector<BlockImpl*> blocks_[4];  // each layer's blocks (owned by layers_)
  CountedLinear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// The network as a Model, reading its convolutions' weights through the
// host's working copies where it offers them (sdk::Model::UseWorkingCopies).
class ResNetModel : public sdk::ModuleModel<ResNet> {
 public:
  using ModuleModel::ModuleModel;

  sdk::Status UseWorkingCopies(sdk::WorkingCopies* copies,
                               std::vector<std::vector<torch::Tensor>>* groups) noexcept override {
    try {
      *groups = net()->UseWorkingCopies(copies);
      return sdk::Status::Ok();
    } catch (const std::exception& e) {
      return sdk::Status::Error(std::string("working copies: ") + e.what());
    }
  }

  // Each rule's choices as the host ran them (path_log.h), how the cuDNN
  // path's engines were chosen and what ran beside the backward.
  sdk::Status PathTaken(std::string* json_object) noexcept override {
    try {
      nlohmann::json path = nlohmann::json::parse(trainbench::plugins::PathJson());
      if (cudnn_conv::Built()) {
        const cudnn_conv::Counts c = cudnn_conv::GetCounts();
        path["cudnn_engines"] = {{"tuned", c.tuned},
                                 {"cached", c.cached},
                                 {"heuristic", c.heuristic},
                                 {"candidates_gathered_ahead", c.gathered_ahead}};
        path["side_streams"] = {{"filter_gradients_beside", c.side_stream_grads},
                                {"filter_gradients_joined_late", c.late_filter_grads}};
      }
      *json_object = path.dump();
      return sdk::Status::Ok();
    } catch (const std::exception& e) {
      return sdk::Status::Error(std::string("path: ") + e.what());
    }
  }
};

cudnn_conv::Settings ConvSettings(const sdk::Options& options) {
  cudnn_conv::Settings settings;
  settings.runtime_compiled = options.GetBool("cudnn_runtime_compiled");
  settings.tune_log = options.GetBool("cudnn_tune_log");
  settings.workspace_limit = options.GetInt("cudnn_workspace_limit_mb") << 20;
  return settings;
}

// An `auto|always|never` option: none for auto, else forced on or off.
std::optional<bool> Forced(const sdk::Options& options, const char* name) {
  const std::string value = options.GetString(name);
  if (value == "auto") return std::nullopt;
  return value == "always";
}

}  // namespace

std::unique_ptr<sdk::Model> MakeResNet(const ResNetSpec& spec, const sdk::Options& options) {
  const int64_t classes = options.GetInt("num_classes");
  const int64_t size = options.GetInt("image_size");
  const std::string stem = options.GetString("stem");
  if (stem != "imagenet" && stem != "cifar")
    throw std::invalid_argument("stem must be 'imagenet' or 'cifar', not '" + stem + "'");
  const Paths paths{BnPath{options.GetBool("fused_batchnorm") && resnet::FusedKernelsBuilt(),
                           {options.GetBool("batchnorm_one_pass"), options.GetString("sm90_launches") == "auto"}},
                    options.GetBool("fused_maxpool") && resnet::FusedKernelsBuilt(),
                    options.GetBool("fused_classifier") && resnet::FusedKernelsBuilt(),
                    options.GetBool("cudnn_engine_cache") && cudnn_conv::Built(),
                    ConvSettings(options),
                    Forced(options, "whole_map_conv"),
                    options.GetBool("stem_space_to_depth")};
  return std::make_unique<ResNetModel>(ResNet(spec, classes, stem == "imagenet", paths),
                                       std::array<int64_t, 3>{3, size, size}, classes);
}

}  // namespace trainbench::plugins
