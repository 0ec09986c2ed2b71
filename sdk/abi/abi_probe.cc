// The plugin ABI as a binary for libabigail: one exported function whose
// parameters reach every type a plugin and the host share (the C descriptor
// and the C++ interfaces). abidw describes what it reaches; the description
// is compared with the committed baseline (tests/sdk/abi_check.sh).
#include "trainbench/sdk/abi.h"
#include "trainbench/sdk/batch_norm.h"
#include "trainbench/sdk/device.h"
#include "trainbench/sdk/model.h"
#include "trainbench/sdk/options.h"
#include "trainbench/sdk/status.h"

#if TRAINBENCH_SDK_ABI_MINOR < 2
struct TbDeviceTraits;  // (probing the headers of an older SDK)
#endif

extern "C" __attribute__((visibility("default"))) void trainbench_sdk_abi_probe(
    const TbPluginDescriptor* descriptor, const TbParamSpec* param, const TbDeviceTraits* traits,
    const TbBuildFingerprint* fingerprint, TbEntryFn entry, trainbench::sdk::Model* model,
    trainbench::sdk::Device* device, trainbench::sdk::DeviceSettings* settings, trainbench::sdk::Status* status,
    trainbench::sdk::CrossRankSum* sum) {
  (void)descriptor, (void)param, (void)traits, (void)fingerprint, (void)entry;
  (void)model, (void)device, (void)settings, (void)status, (void)sum;
}
