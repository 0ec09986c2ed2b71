#pragma once
/// @file
/// The frozen part of the trainbench plugin ABI: plain C data that the host can
/// read from any plugin before it trusts anything else about it.
///
/// A plugin exports exactly one symbol, the alias `trainbench_plugin_entry`
/// (see plugin.h), a function that returns a pointer to a static
/// TbPluginDescriptor. The first two fields of the descriptor never move, so a
/// host can read the ABI version of a plugin built against any SDK and refuse
/// it before it touches the rest.
///
/// Versioning rules:
/// - ABI major changes when a field or an interface changes incompatibly; the
///   host loads only plugins whose major equals its own.
/// - ABI minor grows when something is appended; the host loads plugins whose
///   minor is not newer than its own (it knows every slot they use).

#include <stddef.h>
#include <stdint.h>

/// ABI major version of this SDK. Host and plugin must agree exactly.
#define TRAINBENCH_SDK_ABI_MAJOR 1
/// ABI minor version of this SDK. A plugin's minor must be <= the host's.
/// 1.1 appended Model::SyncBatchNorm() (called only on plugins of 1.1+).
/// 1.2 appended TbPluginDescriptor::device_traits (read only from 1.2+).
/// 1.3 appended two Model methods for a model's own SGD updates, called only
/// on plugins of 1.3 and 1.4; reserved since (Model::Reserved13A/B).
/// 1.4 appended Model::PathTaken() (called only on plugins of 1.4+).
/// 1.5 appended Model::UseWorkingCopies() (called only on plugins of 1.5+)
/// and stopped calling 1.3's two methods: the host's optimizer updates
/// every parameter.
/// 1.6 appended Device::Memory() (called only on plugins of 1.6+).
#define TRAINBENCH_SDK_ABI_MINOR 6

/// Name of the one symbol a plugin exports (a Boost.DLL alias).
#define TRAINBENCH_PLUGIN_ENTRY_NAME "trainbench_plugin_entry"

#ifdef __cplusplus
extern "C" {
#endif

/// What a plugin provides.
typedef enum TbPluginKind {
  TB_PLUGIN_MODEL = 1,   ///< builds a torch::nn::Module (trainbench::sdk::Model)
  TB_PLUGIN_DEVICE = 2,  ///< places and times work (trainbench::sdk::Device)
} TbPluginKind;

/// Type of one plugin option, as the host validates it from YAML.
typedef enum TbParamType {
  TB_PARAM_BOOL = 1,
  TB_PARAM_INT = 2,
  TB_PARAM_FLOAT = 3,
  TB_PARAM_STRING = 4,
  TB_PARAM_ENUM = 5,  ///< a string from `choices`
} TbParamType;

/// One option a plugin accepts. All strings are static, owned by the plugin,
/// and live as long as its library is loaded.
typedef struct TbParamSpec {
  const char* name;           ///< key under the plugin's YAML `options`
  TbParamType type;           ///< value type
  const char* default_value;  ///< default as JSON text ("true", "4", "\"imagenet\"")
  const char* doc;            ///< one line of documentation
  const char* choices;        ///< TB_PARAM_ENUM: comma-separated values; else NULL
  int has_range;              ///< nonzero: `min`..`max` bound INT/FLOAT values
  double min;                 ///< inclusive lower bound when has_range
  double max;                 ///< inclusive upper bound when has_range
} TbParamSpec;

/// What the plugin was built with. Every plugin loaded into one process must
/// have exactly the fingerprint of that process's LibTorch build, because
/// torch C++ objects cross the boundary.
typedef struct TbBuildFingerprint {
  const char* compiler;       ///< compiler family: "gnu", "clang", "msvc"
  const char* cxx_abi;        ///< e.g. "libstdc++/cxx11=1"
  const char* torch_version;  ///< LibTorch version, e.g. "1.13.0"
  const char* cuda_version;   ///< CUDA of that LibTorch ("13.0"), or "none"
} TbBuildFingerprint;

/// What the supervising host needs to know of a device plugin to schedule its
/// cells, without loading LibTorch (ABI 1.2). Static data owned by the
/// plugin. A device plugin without traits (ABI 1.0/1.1, or NULL) is a host
/// device like the CPU: one per machine, no GPU metrics.
typedef struct TbDeviceTraits {
  /// Nonzero: an accelerator (a GPU or alike). Its cells can have one rank
  /// per accelerator (`gpus:`), the host samples its GPU metrics and reports
  /// its hardware description as the run's `system.gpu`.
  int accelerator;
  /// The INT option that selects which accelerator a process uses (rank r
  /// of a `gpus: [...]` cell gets the r-th listed index), or NULL.
  const char* index_option;
  /// A BOOL option that captures the training step in a graph, which cells
  /// of several ranks cannot do yet, or NULL.
  const char* graph_option;
} TbDeviceTraits;

/// Creates the plugin's object from its options.
/// @param options_json validated options, every schema key present, as a JSON
///        object text; owned by the caller, valid during the call.
/// @param out receives a heap object (trainbench::sdk::Model* or
///        trainbench::sdk::Device* by kind) owned by the caller, who deletes
///        it through its virtual destructor while the library is loaded.
/// @param error receives a static-or-thread-local message when creation
///        fails; valid until the next call on this thread.
/// @return 0 on success, nonzero on failure. Never throws.
typedef int (*TbCreateFn)(const char* options_json, void** out, const char** error);

/// The descriptor: static data plus one factory. Owned by the plugin, valid
/// while its library is loaded. Thread-safe to read.
typedef struct TbPluginDescriptor {
  /* Frozen: these two fields stay first in every ABI version. */
  uint32_t abi_major;
  uint32_t abi_minor;
  /* ABI 1.0 */
  TbPluginKind kind;
  const char* name;         ///< unique name used in YAML ("resnet18", "cpu")
  const char* version;      ///< semantic version of the plugin ("1.2.0")
  const char* description;  ///< one line
  TbBuildFingerprint fingerprint;
  const TbParamSpec* params;  ///< array of `num_params` option specs
  size_t num_params;
  TbCreateFn create;
  /* ABI 1.2 */
  const TbDeviceTraits* device_traits;  ///< device plugins; NULL: a host device
} TbPluginDescriptor;

/// Signature of the exported entry function.
typedef const TbPluginDescriptor* (*TbEntryFn)(void);

#ifdef __cplusplus
}  // extern "C"
#endif
