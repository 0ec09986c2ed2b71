#pragma once
// Options shared by the ResNet plugins.
#include "trainbench/sdk/abi.h"

namespace trainbench::plugins {

inline const TbParamSpec kResNetParams[] = {
    {"num_classes", TB_PARAM_INT, "10", "number of output classes", nullptr, 1, 2, 100000},
    {"image_size", TB_PARAM_INT, "32",
     "height and width of the input images (any size the stem reduces to at least 1x1; the host sets it from "
     "dataset.image_size)",
     nullptr, 1, 8, 1024},
    {"stem", TB_PARAM_ENUM, "\"imagenet\"",
     "imagenet: 7x7/2 conv + max-pool (torchvision, as in the study); cifar: 3x3/1 conv, no pool", "imagenet,cifar", 0,
     0, 0},
    {"fused_batchnorm", TB_PARAM_BOOL, "true",
     "on CUDA, each batch norm with its ReLU and residual add as two kernels forward and two backward (false: "
     "LibTorch's batch_norm, add and relu)",
     nullptr, 0, 0, 0},
    {"batchnorm_one_pass", TB_PARAM_BOOL, "true",
     "with fused_batchnorm, in training on channels_last tensors small enough for a few blocks per channel tile "
     "(the ResNets' layers 2-4 at batch 128 and 32 px), statistics and normalisation as one kernel each way, each "
     "element read once (false: the two kernels each way)",
     nullptr, 0, 0, 0},
    {"sm90_launches", TB_PARAM_ENUM, "\"auto\"",
     "with fused_batchnorm, on GPUs of compute capability 9.0 and later, a one-pass batch norm's blocks as a thread "
     "block cluster and the passes as programmatic dependents of the kernel before them (auto); never: launched as "
     "on earlier GPUs (their blocks wait for each other through global memory), which runs those paths on a newer GPU",
     "auto,never", 0, 0, 0},
    {"fused_maxpool", TB_PARAM_BOOL, "true",
     "on CUDA, the imagenet stem's max pool as this plugin's kernels (the window's maximum kept as a byte; the "
     "backward a gather, several times faster than LibTorch's at the stem's shape; false: LibTorch's max_pool2d)",
     nullptr, 0, 0, 0},
    {"fused_classifier", TB_PARAM_BOOL, "true",
     "on CUDA, for at most 16 classes, the fc layer as this plugin's kernels: one kernel forward that writes fp32 "
     "logits from the activations in their own type (no weight casts, no separate bias add) and one backward for "
     "every gradient, summed in fp32 (false: torch::nn::Linear; under autocast its casts and cuBLAS in bf16)",
     nullptr, 0, 0, 0},
    {"cudnn_engine_cache", TB_PARAM_BOOL, "true",
     "on CUDA, the convolutions through cuDNN's backend API, their autotuned engines kept per machine under "
     "$XDG_CACHE_HOME/trainbench so that a repeat run times nothing (`trainbench cache` lists them, --clear "
     "removes them; false: LibTorch's convolution)",
     nullptr, 0, 0, 0},
    {"cudnn_runtime_compiled", TB_PARAM_BOOL, "false",
     "with cudnn_engine_cache, whether cuDNN's runtime-compiled engines are autotuning candidates too, as in "
     "LibTorch (0.1-0.4 s each to build in NVRTC on a first run; on an H200 one won 2 of 288 ResNet convolutions)",
     nullptr, 0, 0, 0},
    {"cudnn_workspace_limit_mb", TB_PARAM_INT, "1024",
     "with cudnn_engine_cache, the most workspace (MiB) a cuDNN engine may need to be chosen, in autotuning and in "
     "cuDNN's heuristic choice (0: no limit; the engine cache keeps choices per limit)",
     nullptr, 1, 0, 1048576},
    {"cudnn_tune_log", TB_PARAM_BOOL, "false",
     "with cudnn_engine_cache, one line in the cell's log per autotuned convolution: its candidates, their times "
     "and the engine chosen (a diagnostic: bench/tuning_log.py sums the lines up; the choice is the same)",
     nullptr, 0, 0, 0},
    {"whole_map_conv", TB_PARAM_ENUM, "\"auto\"",
     "with cudnn_engine_cache, on channels_last input, a convolution over a map smaller than its filter (layer 4 at "
     "32 px) as one matrix product over the whole map: auto by the measured rule (fp32 at any batch; bf16 and fp16 "
     "from 512 images a step), always, or never",
     "auto,always,never", 0, 0, 0},
    {"stem_space_to_depth", TB_PARAM_BOOL, "true",
     "with cudnn_engine_cache, the imagenet stem's 7x7/2 convolution as a 4x4/1 one over 2x2 pixel blocks (the same "
     "sums; on an H200 2x faster at 32 px, 2.6x at 224 px than cuDNN's kernels for the 7x7 one), for channels_last "
     "input on CUDA; false: the 7x7 one",
     nullptr, 0, 0, 0},
};

}  // namespace trainbench::plugins
