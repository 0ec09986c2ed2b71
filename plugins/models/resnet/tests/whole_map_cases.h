#pragma once
// The small convolutions the whole map's tests try its rule on
// (plugins/models/resnet/whole_map.h): h x w maps (1-4 x 1-3), r x r filters
// (1, 3, 5), strides 1-3, paddings 0-2. The CPU tests (whole_map_test.cc)
// and the kernel's (whole_map_kernel_test.cc) take the same ones.

#include <cstdint>

namespace trainbench::testing {

/// f(h, w, r, stride, padding) for every small case.
template <typename F>
void ForEachSmallWholeMapCase(F f) {
  for (int64_t h = 1; h <= 4; ++h)
    for (int64_t w = 1; w <= 3; ++w)
      for (int64_t r : {1, 3, 5})
        for (int64_t stride = 1; stride <= 3; ++stride)
          for (int64_t padding = 0; padding <= 2; ++padding) f(h, w, r, stride, padding);
}

}  // namespace trainbench::testing
