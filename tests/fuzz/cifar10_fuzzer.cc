// libFuzzer target: the CIFAR-10 record decoder. Any input must decode or end
// in a DataError; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "cifar10.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainbench::data::ImageSet set;
  try {
    trainbench::data::DecodeRecords(data, size, "fuzz.bin", INT64_MAX, &set);
    if (set.labels.size() != static_cast<size_t>(set.count) ||
        set.pixels.size() != static_cast<size_t>(set.count * trainbench::data::kImageBytes)) {
      __builtin_trap();
    }
  } catch (const trainbench::data::DataError&) {
  }
  return 0;
}
