//! Small numeric helpers the analyses share: medians, percentages, seconds, host scale.

/// The scale from profiled host time to the program's own: its host time per step (the step
/// less the host's lead over the GPU at the step's end) over the profiled step, in [0, 1]; 1
/// without a profiled step. What the planner's step model and the critical path's host time
/// at the program's speed both use.
pub fn host_scale(step_s: f64, instrumented_s: f64, lead_s: Option<f64>) -> f64 {
    if instrumented_s <= 0.0 {
        return 1.0;
    }
    let lead = lead_s.unwrap_or(0.0).max(0.0);
    ((step_s - lead) / instrumented_s).clamp(0.0, 1.0)
}

/// `part` as a percentage of `whole`; `None` when `whole` is not positive.
pub fn percent(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| 100.0 * part / whole)
}

/// Median of a slice of f64 (mean of the middle two for even lengths); `None` when empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Seconds from nanoseconds, as the f64 nearest the 9-decimal value (so JSON shows
/// `0.05912032`, not `0.059120320000000004`).
pub fn ns_to_s(ns: f64) -> f64 {
    format!("{:.9}", ns * 1e-9).parse().unwrap_or(0.0)
}

/// Lower median of integers (an element of the data, so byte counts stay whole).
pub fn median_low(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}
