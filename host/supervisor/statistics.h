#pragma once
// The spread of repeated measurements.

#include <cstddef>
#include <utility>
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

/// Student's t, two-sided 95%, for `dof` degrees of freedom (>= 1).
double StudentT975(size_t dof);

/// A 95% interval of the ratio of the means of `a` and `b` (positive
/// values; either may be a single measurement), by the delta method on the
/// log of the ratio: always positive, and wider the noisier either side.
/// Degrees of freedom: the smaller side's, less one (conservative).
/// Returns {ratio, ratio} when neither side was repeated.
std::pair<double, double> RatioInterval(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace trainbench
