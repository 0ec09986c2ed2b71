#pragma once
// The cuda device plugin's name, version, description, options and traits,
// in one place for the plugin (cuda_device.cc) and for its schema-only
// stand-in (tests/fixtures/cuda_schema_plugin.cc), which lets a build whose
// LibTorch has no CUDA print the same option table (docs/usage.md).

#include "trainbench/sdk/plugin.h"

#define TRAINBENCH_CUDA_PLUGIN_NAME "cuda"
#define TRAINBENCH_CUDA_PLUGIN_VERSION "1.2.0"
#define TRAINBENCH_CUDA_PLUGIN_DESCRIPTION "one NVIDIA GPU through LibTorch's CUDA and cuDNN"

namespace trainbench::cuda_device {

inline const TbParamSpec kParams[] = {
    {"device_index", TB_PARAM_INT, "0", "which CUDA GPU", nullptr, 1, 0, 1024},
    {"cudnn_benchmark", TB_PARAM_BOOL, "true", "let cuDNN autotune convolution algorithms", nullptr, 0, 0, 0},
    {"cudnn_benchmark_limit", TB_PARAM_INT, "0",
     "cuDNN engines timed per convolution shape when autotuning (0: all; PyTorch's default is 10)", nullptr, 1, 0,
     10000},
    {"tf32", TB_PARAM_BOOL, "true",
     "let cuDNN use TF32 for fp32 convolutions (PyTorch's default); matrix products stay fp32", nullptr, 0, 0, 0},
    {"amp", TB_PARAM_ENUM, "\"none\"", "automatic mixed precision", "none,bf16,fp16", 0, 0, 0},
    {"channels_last", TB_PARAM_BOOL, "false", "use the NHWC memory format", nullptr, 0, 0, 0},
    {"cuda_graph", TB_PARAM_BOOL, "false",
     "capture the whole training step (forward, backward, optimizer) in a CUDA graph", nullptr, 0, 0, 0},
    {"graph_fill", TB_PARAM_ENUM, "\"auto\"",
     "with cuda_graph, the captured step's memset nodes (cuDNN zeroing a workspace) rewritten as kernels writing the "
     "same bytes, which the GPU runs without the idle gap around each memset node: auto from 512 x 32 x 32 image "
     "pixels a step (where it was measured to pay), always, or never",
     "auto,always,never", 0, 0, 0},
    {"memory_limit_gib", TB_PARAM_FLOAT, "0",
     "the most GPU memory (GiB) the cell's allocations may hold, its autotuning and captured step included, as "
     "torch.cuda.set_per_process_memory_fraction sets it (0: the whole GPU); 8 is about an 8 GB card, its CUDA context "
     "aside",
     nullptr, 1, 0, 1048576},
    {"expandable_segments", TB_PARAM_BOOL, "true",
     "LibTorch's CUDA allocator grows its segments in place (PYTORCH_CUDA_ALLOC_CONF's expandable_segments, which "
     "this overrides), so memory freed between tensors of different sizes is not stranded: a footprint near the "
     "tensors' own (false: fixed blocks, PyTorch's default; set at run time with LibTorch 2.9 or later, elsewhere "
     "left as PYTORCH_CUDA_ALLOC_CONF has it and said in the cell's log)",
     nullptr, 0, 0, 0},
};

// An accelerator: one per rank, chosen by device_index; its step can be a CUDA graph.
inline const TbDeviceTraits kTraits = {1, "device_index", "cuda_graph"};

}  // namespace trainbench::cuda_device
