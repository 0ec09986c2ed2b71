#ifdef TRAINBENCH_CUDNN_CONV
#include "cudnn_plans.h"

#include <c10/cuda/CUDAGuard.h>

#include <sstream>
#include <unordered_map>

namespace trainbench::plugins::cudnn_conv::detail {

cudnnDataType_t DataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return CUDNN_DATA_FLOAT;
    case at::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case at::kHalf:
      return CUDNN_DATA_HALF;
    default:
      TORCH_CHECK(false, "cuDNN convolution: unsupported type ", type);
  }
}

bool ChannelsLast(const at::Tensor& x, const at::Tensor& w) {
  return x.suggest_memory_format() == at::MemoryFormat::ChannelsLast ||
         w.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

TensorSpec Spec(const at::Tensor& t, bool channels_last) {
  TensorSpec spec;
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  spec.dims = {n, c, h, w};
  spec.strides =
      channels_last ? std::array<int64_t, 4>{h * w * c, 1, w * c, c} : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  while (spec.alignment > 1 && address % spec.alignment != 0) spec.alignment /= 2;
  return spec;
}

std::string Key(const Problem& p, const Settings& settings, bool benchmark, int64_t limit, bool tf32,
                bool deterministic) {
  std::ostringstream key;
  key << kOpNames[static_cast<int>(p.op)] << " type " << static_cast<int>(p.type) << " stride " << p.stride[0] << ','
      << p.stride[1] << " pad " << p.padding[0] << ',' << p.padding[1];
  for (const TensorSpec& t : p.tensors) {
    key << " [";
    for (int i = 0; i < 4; ++i) key << (i ? "," : "") << t.dims[i];
    key << "]/[";
    for (int i = 0; i < 4; ++i) key << (i ? "," : "") << t.strides[i];
    key << "]a" << t.alignment;
  }
  if (p.type == CUDNN_DATA_FLOAT) key << " tf32 " << tf32;
  if (!settings.runtime_compiled) key << " precompiled";
  key << " deterministic " << deterministic;
  if (settings.workspace_limit > 0) key << " workspace " << settings.workspace_limit;
  if (benchmark)
    key << " limit " << limit;
  else
    key << " heuristic";
  return key.str();
}

cudnnHandle_t Handle(int device) {
  // One handle per thread and device, as LibTorch keeps them; never
  // destroyed (CUDA may be gone by the time threads end).
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  cudnnHandle_t& handle = handles[device];
  if (handle == nullptr) Check(cudnnCreate(&handle), "create handle");
  return handle;
}

std::vector<DescriptorPtr> Graph(const Problem& p, cudnnHandle_t handle) {
  std::vector<DescriptorPtr> keep;
  DescriptorPtr tensors[3];
  for (int i = 0; i < 3; ++i) {
    const TensorSpec& t = p.tensors[i];
    tensors[i] = cudnn_backend::Tensor(i + 1, p.type, t.dims, t.strides, t.alignment);
    keep.push_back(tensors[i]);
  }
  DescriptorPtr conv = cudnn_backend::Convolution(p.stride, p.padding);
  keep.push_back(conv);

  DescriptorPtr op =
      cudnn_backend::ConvolutionOperation(p.op, {tensors[0].get(), tensors[1].get(), tensors[2].get()}, *conv);
  keep.push_back(op);

  DescriptorPtr graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t raw_op = op->get();
  graph->Set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_op)
      .Set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  Check(graph->Finalize(), "operation graph");
  keep.push_back(graph);  // last: Graph(...).back() is the graph
  return keep;
}

PlanPtr Finalize(std::vector<DescriptorPtr> keep, const DescriptorPtr& config, cudnnHandle_t handle) {
  auto plan = std::make_shared<Plan>();
  plan->keep = std::move(keep);
  plan->keep.push_back(config);
  plan->plan = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan->plan->Set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *config);
  if (plan->plan->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(plan->plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                               &plan->workspace) != CUDNN_STATUS_SUCCESS)
    return nullptr;
  return plan;
}

DescriptorPtr ConfigOf(const EngineChoice& choice, const Descriptor& graph, std::vector<DescriptorPtr>* keep) {
  DescriptorPtr engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine->SetDescriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph)
      .Set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &choice.engine);
  if (engine->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  keep->push_back(engine);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const auto& [type, value] : choice.knobs) {
    if (type < 0 || type >= CUDNN_KNOB_TYPE_COUNTS) return nullptr;
    DescriptorPtr knob = Make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    const auto knob_type = static_cast<cudnnBackendKnobType_t>(type);
    knob->Set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knob_type)
        .Set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value);
    if (knob->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
    keep->push_back(knob);
    raw.push_back(knob->get());
  }
  DescriptorPtr config = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config->SetDescriptor(CUDNN_ATTR_ENGINECFG_ENGINE, *engine);
  if (!raw.empty())
    config->Set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
                raw.data());
  if (config->Finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  return config;
}

bool Describe(const Descriptor& config, bool runtime_compiled, bool is_float, bool tf32, bool deterministic,
              Candidate* candidate) {
  EngineChoice* choice = &candidate->choice;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw_engine = engine.get();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                               &raw_engine) != CUDNN_STATUS_SUCCESS)
    return false;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                               &choice->engine) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t note_count = 0;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes) != CUDNN_STATUS_SUCCESS)
    note_count = 0;
  cudnnBackendBehaviorNote_t behaviours[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  int64_t behaviour_count = 0;
  if (cudnnBackendGetAttribute(raw_engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &behaviour_count, behaviours) != CUDNN_STATUS_SUCCESS)
    behaviour_count = 0;
  candidate->runtime_compiled = std::find(behaviours, behaviours + behaviour_count,
                                          CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != behaviours + behaviour_count;
  if (candidate->runtime_compiled && !runtime_compiled) return false;
  for (int64_t i = 0; i < note_count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (is_float && !tf32 && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
    if (deterministic && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  }
  std::vector<std::unique_ptr<Descriptor> > knobs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    raw.push_back(knobs.back()->get());
  }
  int64_t knob_count = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw.size()), &knob_count, raw.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  choice->knobs.clear();
  for (int64_t i = 0; i < knob_count && i < static_cast<int64_t>(raw.size()); ++i) {
    cudnnBackendKnobType_t type;
    int64_t value = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &count, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &count, &value) !=
            CUDNN_STATUS_SUCCESS)
      return false;
    choice->knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  return true;
}

DescriptorPtr Pack(const std::array<void*, 3>& pointers, void* workspace_ptr) {
  DescriptorPtr pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {1, 2, 3};
  pack->Set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)
      .Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data())
      .Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr);
  Check(pack->Finalize(), "variant pack");
  return pack;
}

void Execute(cudnnHandle_t handle, const Plan& plan, const Descriptor& pack) {
  Check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), "execute");
}

void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, void* workspace_ptr) {
  Execute(handle, plan, *Pack(pointers, workspace_ptr));
}

at::Tensor Workspace(int64_t bytes, const at::Device& device) {
  return at::empty({std::max<int64_t>(bytes, 1)}, at::TensorOptions().dtype(at::kByte).device(device));
}

void Execute(cudnnHandle_t handle, const Plan& plan, const std::array<void*, 3>& pointers, const at::Device& device) {
  const at::Tensor workspace = plan.workspace > 0 ? Workspace(plan.workspace, device) : at::Tensor();
  Execute(handle, plan, pointers, workspace.defined() ? workspace.data_ptr() : nullptr);
}

std::vector<Listed> ListCandidates(const Problem& p, const at::Device& device, bool runtime_compiled, bool is_float,
                                   bool tf32, bool deterministic) {
  c10::cuda::CUDAGuard guard(device);
  const std::vector<DescriptorPtr> graph = Graph(p, Handle(device.index()));
  std::vector<Listed> listed;
  ForEachCandidate(*graph.back(), runtime_compiled, is_float, tf32, deterministic, [&](Candidate& candidate) {
    listed.push_back({candidate.choice, candidate.runtime_compiled});
    return true;
  });
  return listed;
}

}  // namespace trainbench::plugins::cudnn_conv::detail
#endif  // TRAINBENCH_CUDNN_CONV
