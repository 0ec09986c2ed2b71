#pragma once
// The spread of repeated measurements.

#include <vector>

namespace trainbench {

struct Spread {
  double median = 0, min = 0, max = 0, mean = 0;
  /// 95% confidence interval of the mean (Student's t over n-1 degrees of
  /// freedom); equal to the value itself for one measurement.
  double ci_low = 0, ci_high = 0;
};

/// Of at least one value.
Spread SpreadOf(std::vector<double> values);

}  // namespace trainbench
