#include "statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>

namespace trainbench {
double StudentT975(size_t dof) {
  static const double kTable[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                  2.201, 2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
                                  2.074, 2.069,  2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < std::size(kTable)) return kTable[dof];
  return dof < 60 ? 2.000 : dof < 120 ? 1.980 : 1.960;
}

Spread SpreadOf(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.min = values.front();
  s.max = values.back();
  s.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(n);
  if (n < 2) {
    s.ci_low = s.ci_high = s.mean;
    return s;
  }
  double squares = 0;
  for (double v : values) squares += (v - s.mean) * (v - s.mean);
  const double sd = std::sqrt(squares / static_cast<double>(n - 1));
  const double half = StudentT975(n - 1) * sd / std::sqrt(static_cast<double>(n));
  s.ci_low = s.mean - half;
  s.ci_high = s.mean + half;
  return s;
}

std::pair<double, double> RatioInterval(const std::vector<double>& a, const std::vector<double>& b) {
  auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); };
  // Squared relative standard error of a side's mean (0 when not repeated).
  auto relative_se2 = [&](const std::vector<double>& v) {
    if (v.size() < 2) return 0.0;
    const double m = mean(v);
    double squares = 0;
    for (double x : v) squares += (x - m) * (x - m);
    const double variance = squares / static_cast<double>(v.size() - 1);
    return variance / (m * m) / static_cast<double>(v.size());
  };
  const double ratio = mean(a) / mean(b);
  const size_t smaller = std::min(a.size() > 1 ? a.size() : SIZE_MAX, b.size() > 1 ? b.size() : SIZE_MAX);
  if (smaller == SIZE_MAX) return {ratio, ratio};
  const double half = StudentT975(smaller - 1) * std::sqrt(relative_se2(a) + relative_se2(b));
  return {ratio * std::exp(-half), ratio * std::exp(half)};
}

}  // namespace trainbench
