// The timing phase's stopping rule, shared by the native shim and its test (no torch here, so
// the test compiles it alone). The same rule is in the Python shim (`_timing_stop`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace steptrace_timing {

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// Whether the timing phase ends at its latest reading, and why; `left_out` gets the intervals
// left out of the median. At least `steps` intervals are timed after the `settle` first ones.
// The estimate is the median of the later half of them (early steps of input-bound programs
// drift); the phase ends when that median is settled: the earlier half's median within 2.5%
// of it and its 95% confidence interval (the box-plot notch, 1.58 IQR / sqrt(n)) within
// +-2.5%; or at `max_steps` intervals or `max_ns`. The same rule is in the Python shim.
// `lockstep` (a distributed run): every rank must open its window at the same step, or their
// windows cover different steps and no collective can be matched across them; the settle rule
// and the time cap would end each rank's phase at its own step, so the phase is a fixed
// `max_steps` intervals (`steps` when there is no cap) on every rank.
inline const char* timing_stop_rule(const std::vector<int64_t>& ns, int64_t settle, int64_t steps, int64_t max_steps,
                             int64_t max_ns, bool lockstep, int64_t* left_out) {
  std::vector<double> timed;
  for (size_t i = static_cast<size_t>(settle) + 1; i < ns.size(); ++i) timed.push_back((ns[i] - ns[i - 1]) * 1e-9);
  const int64_t n = static_cast<int64_t>(timed.size());
  if (n < std::max<int64_t>(1, steps)) return nullptr;
  const int64_t later_n = n >= 2 ? n / 2 : n;
  *left_out = settle + n - later_n;
  if (lockstep) return n >= (max_steps > 0 ? max_steps : std::max<int64_t>(1, steps)) ? "lockstep" : nullptr;
  std::vector<double> later(timed.end() - later_n, timed.end());
  const double m = median_of(later);
  if (n >= 2) {
    std::vector<double> earlier(timed.begin(), timed.end() - later_n);
    std::vector<double> q = later;
    std::sort(q.begin(), q.end());
    const size_t k = q.size();
    const double iqr = q[(3 * k) / 4] - q[k / 4];
    if (m > 0 && std::abs(median_of(earlier) - m) <= 0.025 * m && 1.58 * iqr / std::sqrt(double(k)) <= 0.025 * m)
      return "settled";
  }
  if (max_steps > 0 && n >= max_steps) return "step_cap";
  if (max_ns > 0 && ns.back() - ns.front() >= max_ns) return "time_cap";
  if (n < 2) return "one_step";
  return nullptr;
}

}  // namespace steptrace_timing
