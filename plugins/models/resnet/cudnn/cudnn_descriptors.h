#pragma once
// What every user of cuDNN's backend API here needs: a descriptor that is
// destroyed with its object, a status check that throws c10::Error (as
// LibTorch's own cuDNN calls do), tensor, convolution and convolution
// operation descriptors, and cuDNN's engine configurations for a graph. Used
// by the convolutions (cudnn_conv.cc) and by bench/cudnn_fusion_bench.cc.
// Include only where cudnn.h is on the include path.
#include <c10/util/Exception.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace trainbench::plugins::cudnn_backend {

inline void Check(cudnnStatus_t status, const char* what) {
  TORCH_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN ", what, ": ", cudnnGetErrorString(status));
}

// One cuDNN backend descriptor, destroyed with the object.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) { Check(cudnnBackendCreateDescriptor(type, &d_), "create"); }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Descriptor& Set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values) {
    Check(cudnnBackendSetAttribute(d_, name, type, count, values), "set attribute");
    return *this;
  }
  Descriptor& SetDescriptor(cudnnBackendAttributeName_t name, const Descriptor& other) {
    cudnnBackendDescriptor_t raw = other.get();
    return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  cudnnStatus_t Finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};
using DescriptorPtr = std::shared_ptr<Descriptor>;

inline DescriptorPtr Make(cudnnBackendDescriptorType_t type) { return std::make_shared<Descriptor>(type); }

// A finalized tensor descriptor: 4 dimensions and their strides, 16-byte or
// less aligned, virtual (an intermediate of a fused graph) where asked.
inline DescriptorPtr Tensor(int64_t uid, cudnnDataType_t type, const std::array<int64_t, 4>& dims,
                            const std::array<int64_t, 4>& strides, int64_t alignment, bool is_virtual = false) {
  DescriptorPtr t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t->Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) {
    const bool yes = true;
    t->Set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  Check(t->Finalize(), "tensor descriptor");
  return t;
}

// cuDNN's engine configurations for a finalized operation graph in one
// heuristics mode, in its order of preference (none where the query fails).
inline std::vector<DescriptorPtr> EngineConfigs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.SetDescriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heuristics.Finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t available = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                               &available, nullptr) != CUDNN_STATUS_SUCCESS ||
      available <= 0)
    return {};
  std::vector<DescriptorPtr> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < available; ++i) {
    configs.push_back(Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               available, &got, raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  configs.resize(static_cast<size_t>(std::min(got, available)));
  return configs;
}

// A finalized 2-D cross-correlation with fp32 accumulation (LibTorch's choice
// for float, bfloat16 and half), no dilation, the same padding both sides.
inline DescriptorPtr Convolution(const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding) {
  DescriptorPtr conv = Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2, dilation[2] = {1, 1};
  conv->Set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .Set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .Set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial)
      .Set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation)
      .Set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data())
      .Set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data())
      .Set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data());
  Check(conv->Finalize(), "convolution descriptor");
  return conv;
}

enum class ConvolutionOp { kForward, kBackwardData, kBackwardFilter };

// A finalized convolution operation (alpha 1, beta 0) on its three tensors in
// the order forward x, w, y; backward data dx, w, dy; backward filter x, dw, dy.
inline DescriptorPtr ConvolutionOperation(ConvolutionOp op, const std::array<const Descriptor*, 3>& tensors,
                                          const Descriptor& convolution) {
  // Per operation: its descriptor type and the attributes of the three
  // tensors, the convolution, alpha and beta.
  struct OpAttributes {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t tensor[3], conv, alpha, beta;
  };
  static const OpAttributes kAttributes[] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
        CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
  };
  const OpAttributes& a = kAttributes[static_cast<int>(op)];
  DescriptorPtr operation = Make(a.type);
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < 3; ++i) operation->SetDescriptor(a.tensor[i], *tensors[i]);
  operation->SetDescriptor(a.conv, convolution)
      .Set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha)
      .Set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  Check(operation->Finalize(), "convolution operation");
  return operation;
}

}  // namespace trainbench::plugins::cudnn_backend
