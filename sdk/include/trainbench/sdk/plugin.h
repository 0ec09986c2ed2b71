#pragma once
/// @file
/// Defining a plugin: one macro that builds the static descriptor and exports
/// it as the single entry symbol.
///
/// Example (a model plugin):
/// @code
///   static const TbParamSpec kParams[] = {
///       {"num_classes", TB_PARAM_INT, "10", "output classes", nullptr, 1, 2, 100000},
///   };
///   std::unique_ptr<trainbench::sdk::Model> Make(const trainbench::sdk::Options& o);
///   TRAINBENCH_MODEL_PLUGIN("my_net", "1.0.0", "My network", kParams, Make)
/// @endcode
/// The factory may throw: the SDK turns any exception into a creation error,
/// so nothing crosses the boundary as an exception. Build the plugin with
/// hidden visibility (the `trainbench_add_plugin` CMake function does); the
/// entry alias is the only exported symbol.

#include <boost/dll/alias.hpp>
#include <exception>
#include <memory>
#include <string>

#include "trainbench/sdk/abi.h"
#include "trainbench/sdk/device.h"
#include "trainbench/sdk/fingerprint.h"
#include "trainbench/sdk/model.h"
#include "trainbench/sdk/options.h"

namespace trainbench::sdk::detail {

/// Calls `factory(Options(options_json))` and hands the result out as a raw
/// pointer to the interface type; converts every exception to an error text.
template <class Interface, class Factory>
int GuardedCreate(Factory factory, const char* options_json, void** out, const char** error) noexcept {
  static thread_local std::string message;
  try {
    Options options(options_json);
    std::unique_ptr<Interface> object = factory(options);
    if (!object) {
      message = "factory returned no object";
      *error = message.c_str();
      return 1;
    }
    *out = static_cast<Interface*>(object.release());
    return 0;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  *error = message.c_str();
  return 1;
}

}  // namespace trainbench::sdk::detail

#define TRAINBENCH_SDK_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define TRAINBENCH_DEFINE_PLUGIN_(KIND, INTERFACE, NAME, VERSION, DESCRIPTION, PARAMS, NUM_PARAMS, FACTORY, TRAITS) \
  namespace {                                                                                                       \
  int TrainbenchCreate(const char* options_json, void** out, const char** error) {                                  \
    return ::trainbench::sdk::detail::GuardedCreate<INTERFACE>(FACTORY, options_json, out, error);                  \
  }                                                                                                                 \
  const TbPluginDescriptor kTrainbenchDescriptor = {TRAINBENCH_SDK_ABI_MAJOR,                                       \
                                                    TRAINBENCH_SDK_ABI_MINOR,                                       \
                                                    KIND,                                                           \
                                                    NAME,                                                           \
                                                    VERSION,                                                        \
                                                    DESCRIPTION,                                                    \
                                                    TRAINBENCH_BUILD_FINGERPRINT,                                   \
                                                    PARAMS,                                                         \
                                                    NUM_PARAMS,                                                     \
                                                    &TrainbenchCreate,                                              \
                                                    TRAITS};                                                        \
  const TbPluginDescriptor* TrainbenchEntry() { return &kTrainbenchDescriptor; }                                    \
  }                                                                                                                 \
  BOOST_DLL_ALIAS(TrainbenchEntry, trainbench_plugin_entry)

/// Defines a model plugin. PARAMS: a static TbParamSpec array. FACTORY:
/// callable `std::unique_ptr<trainbench::sdk::Model>(const Options&)`.
#define TRAINBENCH_MODEL_PLUGIN(NAME, VERSION, DESCRIPTION, PARAMS, FACTORY)                               \
  TRAINBENCH_DEFINE_PLUGIN_(TB_PLUGIN_MODEL, ::trainbench::sdk::Model, NAME, VERSION, DESCRIPTION, PARAMS, \
                            TRAINBENCH_SDK_ARRAY_SIZE(PARAMS), FACTORY, nullptr)

/// Defines a device plugin of a host device (like the CPU: one per machine).
/// FACTORY: callable `std::unique_ptr<trainbench::sdk::Device>(const Options&)`.
#define TRAINBENCH_DEVICE_PLUGIN(NAME, VERSION, DESCRIPTION, PARAMS, FACTORY)                                \
  TRAINBENCH_DEFINE_PLUGIN_(TB_PLUGIN_DEVICE, ::trainbench::sdk::Device, NAME, VERSION, DESCRIPTION, PARAMS, \
                            TRAINBENCH_SDK_ARRAY_SIZE(PARAMS), FACTORY, nullptr)

/// Defines a device plugin that describes itself to the host (ABI 1.2):
/// TRAITS is a static TbDeviceTraits, e.g. for a GPU
/// `static const TbDeviceTraits kTraits = {1, "device_index", "cuda_graph"};`
/// (its index_option and graph_option must name an INT and a BOOL option).
#define TRAINBENCH_DEVICE_PLUGIN_WITH_TRAITS(NAME, VERSION, DESCRIPTION, PARAMS, FACTORY, TRAITS)            \
  TRAINBENCH_DEFINE_PLUGIN_(TB_PLUGIN_DEVICE, ::trainbench::sdk::Device, NAME, VERSION, DESCRIPTION, PARAMS, \
                            TRAINBENCH_SDK_ARRAY_SIZE(PARAMS), FACTORY, &TRAITS)
