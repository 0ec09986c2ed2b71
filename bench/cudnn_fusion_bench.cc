// MLPerf's ResNet fusion through cuDNN's backend API, measured before it is
// built into the model (issue 16: "the normalisation applied in the next
// convolution's prologue and the statistics gathered in the previous one's
// epilogue"). For each convolution of ResNet50 (or ResNet18) at 32x32 input
// (imagenet stem; the stem itself left out), NHWC, bf16 by default:
//   conv        the convolution alone (what the model runs now);
//   conv+stats  the convolution with per-channel sum and sum of squares of its
//               output gathered in the same kernel (cuDNN's GEN_STATS);
//   sbr+conv+stats  where its input is a batch norm + ReLU output: that
//               normalisation (scale, bias, ReLU) applied as the convolution
//               reads its input, so the normalised tensor is never written;
//   bn fwd      this project's batch-norm training forward of the output
//               (statistics and apply, with the ReLU or add + ReLU after it);
//   bn apply    its element-wise pass alone (evaluation mode): what the fused
//               path still runs where the output is kept (the add + ReLU);
//   wgrad, sbr+wgrad  the weight gradient from a stored input, and from the
//               raw input normalised on the fly (the fused path keeps no
//               normalised tensor for it).
// Each cuDNN graph takes the fastest of cuDNN's candidates (heuristics mode A,
// then the fallback list; runtime-compiled engines included, their build
// time summed), each timed as a training step runs it (bench/graph_timer.h).
// Then the network's forward both ways: now (conv + bn fwd each), fused
// (conv+stats or sbr+conv+stats each, plus the apply where the output is
// kept), leaving out the per-channel finalize each batch norm needs between
// the statistics and the next convolution (one small kernel), and the
// backward's extra cost (sbr+wgrad less wgrad).
//   build-gpu/bin/cudnn_fusion_bench [batch] [resnet50|resnet18] [bf16|fp16|fp32]
#include <c10/cuda/CUDAStream.h>
#include <cudnn.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "batch_norm_act.h"
#include "cudnn_descriptors.h"
#include "graph_timer.h"

namespace {

using trainbench::plugins::cudnn_backend::Check;
using trainbench::plugins::cudnn_backend::ConvolutionOp;
using trainbench::plugins::cudnn_backend::Descriptor;
using trainbench::plugins::cudnn_backend::DescriptorPtr;
using trainbench::plugins::cudnn_backend::Make;

enum class Act { kPlain, kRelu, kAddRelu };

// One convolution of the network and the batch norm after it.
struct Conv {
  int64_t c, k, hw, r, stride;  // input channels, output channels, input map side, kernel side, stride
  bool prologue;                // its input is a batch norm + ReLU output (the fused path stores none)
  Act act;                      // what follows its batch norm
  int count = 1;
  int64_t Pad() const { return r / 2; }
  int64_t OutHw() const { return (hw + 2 * Pad() - r) / stride + 1; }
  bool Same(const Conv& o) const {
    return c == o.c && k == o.k && hw == o.hw && r == o.r && stride == o.stride && prologue == o.prologue &&
           act == o.act;
  }
};

// The network's convolutions after the stem (torchvision's blocks, the
// stride on the 3x3 convolution), each shape once with its count.
std::vector<Conv> Network(bool resnet18) {
  std::vector<Conv> convs;
  auto add = [&convs](const Conv& conv) {
    for (Conv& seen : convs)
      if (seen.Same(conv)) {
        ++seen.count;
        return;
      }
    convs.push_back(conv);
  };
  const int64_t widths[4] = {64, 128, 256, 512};
  const int blocks[4] = {resnet18 ? 2 : 3, resnet18 ? 2 : 4, resnet18 ? 2 : 6, resnet18 ? 2 : 3};
  int64_t in = 64, hw = 8;  // 32x32 images after the stem and its max pool
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t stride = (b == 0 && stage > 0) ? 2 : 1, w = widths[stage];
      const int64_t out = resnet18 ? w : 4 * w;
      if (resnet18) {
        add({in, w, hw, 3, stride, false, Act::kRelu});
        add({w, w, hw / stride, 3, 1, true, Act::kAddRelu});
      } else {
        add({in, w, hw, 1, 1, false, Act::kRelu});
        add({w, w, hw, 3, stride, true, Act::kRelu});
        add({w, out, hw / stride, 1, 1, true, Act::kAddRelu});
      }
      if (stride != 1 || in != out) add({in, out, hw, 1, stride, false, Act::kPlain});
      in = out;
      hw /= stride;
    }
  }
  return convs;
}

// Unique ids of the graphs' tensors.
enum Uid : int64_t { kX = 1, kW = 2, kY = 3, kScale = 4, kBias = 5, kSum = 6, kSquares = 7 };

// A tensor of NHWC strides (or KRSC for filters, {1, C, 1, 1} for channels).
DescriptorPtr Tensor(std::vector<DescriptorPtr>* keep, int64_t uid, cudnnDataType_t type,
                     const std::array<int64_t, 4>& dims, bool is_virtual = false) {
  const std::array<int64_t, 4> strides = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  DescriptorPtr t = trainbench::plugins::cudnn_backend::Tensor(uid, type, dims, strides, 16, is_virtual);
  keep->push_back(t);
  return t;
}

// y = mode(x[, b]) in fp32.
DescriptorPtr Pointwise(std::vector<DescriptorPtr>* keep, cudnnPointwiseMode_t mode, const Descriptor& x,
                        const Descriptor* b, const Descriptor& y) {
  DescriptorPtr pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  pw->Set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .Set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
  Check(pw->Finalize(), "pointwise descriptor");
  DescriptorPtr op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw)
      .SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) op->SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op->SetDescriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  Check(op->Finalize(), "pointwise operation");
  keep->push_back(pw);
  keep->push_back(op);
  return op;
}

// The operation graph of a forward convolution (or weight gradient) of
// `conv` at `batch`, with the scale-bias-ReLU prologue on x and the
// statistics of y as asked; its descriptors with the graph last.
std::vector<DescriptorPtr> Graph(const Conv& conv, int64_t batch, ConvolutionOp kind, cudnnDataType_t io,
                                 cudnnDataType_t affine, bool prologue, bool stats, cudnnHandle_t handle) {
  std::vector<DescriptorPtr> keep;
  const int64_t p = conv.OutHw();
  DescriptorPtr x = Tensor(&keep, kX, io, {batch, conv.c, conv.hw, conv.hw});
  DescriptorPtr w = Tensor(&keep, kW, io, {conv.k, conv.c, conv.r, conv.r});
  DescriptorPtr y = Tensor(&keep, kY, io, {batch, conv.k, p, p});
  std::vector<cudnnBackendDescriptor_t> ops;
  DescriptorPtr input = x;
  if (prologue) {
    const std::array<int64_t, 4> per_channel = {1, conv.c, 1, 1}, full = {batch, conv.c, conv.hw, conv.hw};
    DescriptorPtr scale = Tensor(&keep, kScale, affine, per_channel);
    DescriptorPtr bias = Tensor(&keep, kBias, affine, per_channel);
    DescriptorPtr scaled = Tensor(&keep, 101, CUDNN_DATA_FLOAT, full, true);
    DescriptorPtr shifted = Tensor(&keep, 102, CUDNN_DATA_FLOAT, full, true);
    DescriptorPtr relu = Tensor(&keep, 103, CUDNN_DATA_FLOAT, full, true);
    ops.push_back(Pointwise(&keep, CUDNN_POINTWISE_MUL, *x, scale.get(), *scaled)->get());
    ops.push_back(Pointwise(&keep, CUDNN_POINTWISE_ADD, *scaled, bias.get(), *shifted)->get());
    ops.push_back(Pointwise(&keep, CUDNN_POINTWISE_RELU_FWD, *shifted, nullptr, *relu)->get());
    input = relu;
  }
  DescriptorPtr descriptor =
      trainbench::plugins::cudnn_backend::Convolution({conv.stride, conv.stride}, {conv.Pad(), conv.Pad()});
  keep.push_back(descriptor);
  DescriptorPtr op =
      trainbench::plugins::cudnn_backend::ConvolutionOperation(kind, {input.get(), w.get(), y.get()}, *descriptor);
  keep.push_back(op);
  ops.push_back(op->get());
  if (stats) {
    DescriptorPtr sum = Tensor(&keep, kSum, CUDNN_DATA_FLOAT, {1, conv.k, 1, 1});
    DescriptorPtr squares = Tensor(&keep, kSquares, CUDNN_DATA_FLOAT, {1, conv.k, 1, 1});
    DescriptorPtr gen = Make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    gen->Set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode)
        .Set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision)
        .SetDescriptor(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, *y)
        .SetDescriptor(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, *sum)
        .SetDescriptor(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, *squares);
    Check(gen->Finalize(), "statistics operation");
    keep.push_back(gen);
    ops.push_back(gen->get());
  }
  DescriptorPtr graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph->Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data())
      .Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  Check(graph->Finalize(), "operation graph");
  keep.push_back(graph);
  return keep;
}

// The fastest plan cuDNN has for a graph.
struct Best {
  double micros = std::numeric_limits<double>::infinity();
  int64_t engine = -1;
  bool runtime_compiled = false;
  int candidates = 0;    // plans built and timed
  double build_s = 0.0;  // building them (NVRTC for runtime-compiled engines)
  std::string failure;   // why there is none
};

constexpr int kMaxCandidatesPerMode = 16;

// Times every candidate plan of the graph with the tensors of `pointers`
// (uids in `uids`), keeping the fastest.
Best Fastest(const std::vector<DescriptorPtr>& graph, cudnnHandle_t handle, const std::vector<int64_t>& uids,
             std::vector<void*> pointers) {
  Best best;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const std::vector<DescriptorPtr> configs = trainbench::plugins::cudnn_backend::EngineConfigs(*graph.back(), mode);
    int tried = 0;
    for (size_t i = 0; i < configs.size() && tried < kMaxCandidatesPerMode; ++i) {
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t raw_engine = engine.get();
      int64_t count = 0, index = -1;
      if (cudnnBackendGetAttribute(configs[i]->get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &count, &raw_engine) != CUDNN_STATUS_SUCCESS ||
          cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index) !=
              CUDNN_STATUS_SUCCESS)
        continue;
      cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
      int64_t note_count = 0;
      if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                   CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &note_count, notes) != CUDNN_STATUS_SUCCESS)
        note_count = 0;
      bool runtime_compiled = false;
      for (int64_t n = 0; n < note_count; ++n) runtime_compiled |= notes[n] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
      ++tried;
      const auto began = std::chrono::steady_clock::now();
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
          .SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
      const cudnnStatus_t status = plan.Finalize();
      best.build_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (status != CUDNN_STATUS_SUCCESS) {
        best.failure = cudnnGetErrorString(status);
        continue;
      }
      int64_t workspace_bytes = 0;
      Check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                     &workspace_bytes),
            "workspace size");
      const torch::Tensor workspace =
          torch::empty({std::max<int64_t>(workspace_bytes, 1)}, torch::TensorOptions(torch::kCUDA).dtype(torch::kByte));
      void* workspace_ptr = workspace.data_ptr();
      Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack.Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data())
          .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
               pointers.data())
          .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr);
      Check(pack.Finalize(), "variant pack");
      double micros = std::numeric_limits<double>::infinity();
      try {
        micros = bench::MedianMicros(
            [&] {
              Check(cudnnSetStream(handle, c10::cuda::getCurrentCUDAStream().stream()), "set stream");
              Check(cudnnBackendExecute(handle, plan.get(), pack.get()), "execute");
            },
            10);
      } catch (const c10::Error& e) {
        best.failure = e.what_without_backtrace();
        continue;
      }
      ++best.candidates;
      if (micros < best.micros) {
        best.micros = micros;
        best.engine = index;
        best.runtime_compiled = runtime_compiled;
      }
    }
  }
  if (best.candidates == 0 && best.failure.empty()) best.failure = "no engine";
  return best;
}

std::string Cell(const Best& best) {
  if (best.candidates == 0) return "none";
  char cell[64];
  std::snprintf(cell, sizeof cell, "%.1f (e%lld%s)", best.micros, static_cast<long long>(best.engine),
                best.runtime_compiled ? "r" : "");
  return cell;
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "cudnn_fusion_bench: no CUDA device\n");
    return 1;
  }
  const int64_t batch = argc > 1 ? std::stoll(argv[1]) : 1024;
  const bool resnet18 = argc > 2 && std::string(argv[2]) == "resnet18";
  const std::string precision = argc > 3 ? argv[3] : "bf16";
  const torch::ScalarType dtype = precision == "fp32"   ? torch::kFloat
                                  : precision == "fp16" ? torch::kHalf
                                                        : torch::kBFloat16;
  const cudnnDataType_t io = dtype == torch::kFloat  ? CUDNN_DATA_FLOAT
                             : dtype == torch::kHalf ? CUDNN_DATA_HALF
                                                     : CUDNN_DATA_BFLOAT16;
  cudnnHandle_t handle = nullptr;
  Check(cudnnCreate(&handle), "create handle");

  std::printf("%s, %s, batch %lld, NHWC, cuDNN %zu; us per call (engine; r: runtime-compiled)\n",
              resnet18 ? "ResNet18" : "ResNet50", precision.c_str(), static_cast<long long>(batch), cudnnGetVersion());
  std::printf(
      "| conv | map | count | conv | conv+stats | sbr+conv+stats | bn fwd | bn apply | wgrad | sbr+wgrad |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  const char* act_names[] = {"bn", "bn+relu", "bn+add+relu"};
  double now_forward = 0, fused_forward = 0, wgrad_extra = 0, build_s = 0;
  int finalizes = 0, missing = 0;
  std::string failures;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  for (const Conv& conv : Network(resnet18)) {
    const int64_t p = conv.OutHw();
    const torch::Tensor x = torch::randn({batch, conv.c, conv.hw, conv.hw}, cuda).to(dtype).contiguous(cl);
    const torch::Tensor w = (torch::randn({conv.k, conv.c, conv.r, conv.r}, cuda) * 0.05).to(dtype).contiguous(cl);
    const torch::Tensor y = torch::empty({batch, conv.k, p, p}, cuda.dtype(dtype)).contiguous(cl);
    const torch::Tensor dy = torch::randn({batch, conv.k, p, p}, cuda).to(dtype).contiguous(cl);
    const torch::Tensor dw = torch::empty_like(w);
    const torch::Tensor sum = torch::zeros({conv.k}, cuda), squares = torch::zeros({conv.k}, cuda);
    // The prologue's scale and bias in fp32 (a batch norm's), else in the
    // tensors' type where cuDNN takes only that.
    const torch::Tensor scale32 = torch::rand({conv.c}, cuda) + 0.5, bias32 = torch::randn({conv.c}, cuda) * 0.1;
    const torch::Tensor scale_io = scale32.to(dtype), bias_io = bias32.to(dtype);

    auto run = [&](ConvolutionOp kind, bool prologue, bool stats) {
      Best found;
      for (const bool fp32_affine : {true, false}) {
        if (!prologue && !fp32_affine) break;
        const torch::Tensor& scale = fp32_affine ? scale32 : scale_io;
        const torch::Tensor& bias = fp32_affine ? bias32 : bias_io;
        std::vector<int64_t> uids = {kX, kW, kY};
        std::vector<void*> pointers = {x.data_ptr(), (kind == ConvolutionOp::kForward ? w : dw).data_ptr(),
                                       (kind == ConvolutionOp::kForward ? y : dy).data_ptr()};
        if (prologue) {
          uids.insert(uids.end(), {kScale, kBias});
          pointers.insert(pointers.end(), {scale.data_ptr(), bias.data_ptr()});
        }
        if (stats) {
          uids.insert(uids.end(), {kSum, kSquares});
          pointers.insert(pointers.end(), {sum.data_ptr(), squares.data_ptr()});
        }
        try {
          found = Fastest(Graph(conv, batch, kind, io, fp32_affine ? CUDNN_DATA_FLOAT : io, prologue, stats, handle),
                          handle, uids, pointers);
        } catch (const c10::Error& e) {
          found = Best{};
          found.failure = e.what_without_backtrace();
        }
        build_s += found.build_s;
        if (found.candidates > 0) break;
      }
      return found;
    };
    const Best plain = run(ConvolutionOp::kForward, false, false);
    const Best with_stats = run(ConvolutionOp::kForward, false, true);
    const Best fused = conv.prologue ? run(ConvolutionOp::kForward, true, true) : Best{};
    const Best wgrad = run(ConvolutionOp::kBackwardFilter, false, false);
    const Best fused_wgrad = conv.prologue ? run(ConvolutionOp::kBackwardFilter, true, false) : Best{};

    // This project's batch norm of the output, as the model runs it.
    trainbench::sdk::BatchNorm2d bn(conv.k);
    bn->to(torch::kCUDA);
    const torch::Tensor out = torch::randn({batch, conv.k, p, p}, cuda).to(dtype).contiguous(cl).requires_grad_();
    const bool add = conv.act == Act::kAddRelu, relu = conv.act != Act::kPlain;
    const torch::Tensor residual =
        add ? torch::randn({batch, conv.k, p, p}, cuda).to(dtype).contiguous(cl) : torch::Tensor();
    const double bn_forward = bench::MedianMicros([&] { resnet::BatchNormAct(*bn, out, residual, relu, true); });
    bn->eval();
    const double bn_apply = bench::MedianMicros([&] {
      const torch::NoGradGuard no_grad;
      resnet::BatchNormAct(*bn, out, residual, relu, true);
    });

    const Best& fused_conv = conv.prologue ? fused : with_stats;
    std::printf("| %lldx%lld %lld->%lld /%lld %s | %lldx%lld | %d | %s | %s | %s | %.1f | %.1f | %s | %s |\n",
                static_cast<long long>(conv.r), static_cast<long long>(conv.r), static_cast<long long>(conv.c),
                static_cast<long long>(conv.k), static_cast<long long>(conv.stride),
                act_names[static_cast<int>(conv.act)], static_cast<long long>(conv.hw), static_cast<long long>(conv.hw),
                conv.count, Cell(plain).c_str(), Cell(with_stats).c_str(), conv.prologue ? Cell(fused).c_str() : "-",
                bn_forward, bn_apply, Cell(wgrad).c_str(), conv.prologue ? Cell(fused_wgrad).c_str() : "-");
    for (const Best* b : {&plain, &with_stats, &fused, &wgrad, &fused_wgrad})
      if (b->candidates == 0 && !b->failure.empty() && failures.find(b->failure) == std::string::npos)
        failures += "  " + b->failure + "\n";
    if (plain.candidates == 0 || fused_conv.candidates == 0) {
      missing += conv.count;
      continue;
    }
    now_forward += conv.count * (plain.micros + bn_forward);
    // The add + ReLU's output is kept (the next block's input and residual);
    // a downsampling batch norm's apply joins that pass (two inputs read).
    fused_forward += conv.count * (fused_conv.micros + (add ? bn_apply : 0.0));
    finalizes += conv.count;
    if (conv.prologue && wgrad.candidates > 0 && fused_wgrad.candidates > 0)
      wgrad_extra += conv.count * (fused_wgrad.micros - wgrad.micros);
  }
  std::printf(
      "\nforward of the convolutions and their batch norms: now %.0f us, fused %.0f us (%.2fx) plus %d per-channel "
      "finalizes (not timed); the weight gradients' prologue adds %.0f us backward",
      now_forward, fused_forward, now_forward / fused_forward, finalizes, wgrad_extra);
  if (missing > 0) std::printf("; %d convolutions left out (no engine)", missing);
  std::printf("\nplans built in %.1f s\n", build_s);
  if (!failures.empty()) std::printf("failures:\n%s", failures.c_str());
  return 0;
}
