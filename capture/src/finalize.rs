//! After the child: compress what the shims wrote, collect the shims' status files, and turn
//! the timing phase's clock readings into the program's own step time.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Gzips `path` into `path.gz` and removes the original. Returns the new file name.
pub fn gzip_file(path: &Path) -> std::io::Result<PathBuf> {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    {
        let mut r = BufReader::new(File::open(path)?);
        let mut w = flate2::write::GzEncoder::new(
            BufWriter::new(File::create(&gz)?),
            flate2::Compression::new(6),
        );
        std::io::copy(&mut r, &mut w)?;
        w.finish()?.flush()?;
    }
    std::fs::remove_file(path)?;
    Ok(gz)
}

/// A shim's status file (`shim[_rankN].json`), as written by either shim.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
pub struct ShimStatus {
    /// Rank under torch.distributed.
    #[serde(default)]
    pub rank: i64,
    /// World size.
    #[serde(default = "one")]
    pub world_size: i64,
    /// torch version.
    #[serde(default)]
    pub torch: Option<String>,
    /// CUDA version torch was built with.
    #[serde(default)]
    pub cuda: Option<String>,
    /// GPU name.
    #[serde(default)]
    pub gpu: Option<String>,
    /// GPU memory.
    #[serde(default)]
    pub gpu_memory_bytes: Option<i64>,
    /// Step boundaries seen.
    #[serde(default)]
    pub steps: i64,
    /// How boundaries were found.
    #[serde(default)]
    pub boundary: Option<String>,
    /// Whether the active window was recorded whole.
    #[serde(default)]
    pub window_complete: bool,
    /// Whether the exit handler ran.
    #[serde(default)]
    pub exited_cleanly: bool,
    /// Files written, by role.
    #[serde(default)]
    pub files: std::collections::BTreeMap<String, String>,
    /// Errors the shim met (it never stops the program for them).
    #[serde(default)]
    pub errors: Vec<String>,
    /// What the user should know about how steps were found (e.g. gradient accumulation).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Why there is no trace, when the program never imported torch.
    #[serde(default)]
    pub no_trace_reason: Option<String>,
    /// Why there is no snapshot.
    #[serde(default)]
    pub no_snapshot_reason: Option<String>,
    /// Native shim: boundaries, epoch ns.
    #[serde(default)]
    pub boundaries_epoch_ns: Vec<i64>,
    /// Written by the C++ shim.
    #[serde(default)]
    pub native: bool,
    /// Clock readings (ns) at the boundaries of the timing phase.
    #[serde(default)]
    pub timing_ns: Vec<i64>,
    /// Timing intervals left out of the median (warm-up, and the earlier half of the phase).
    #[serde(default)]
    pub timing_settle: usize,
    /// Why the timing phase ended: settled, step_cap, time_cap, one_step (absent in shims
    /// before the rule, and when the program ended inside the phase).
    #[serde(default)]
    pub timing_stop: Option<String>,
    /// Steps the program had completed at the timing phase's first reading (counted in the
    /// rule that marks steps): interval `i` is the program's step `timing_first_step + i`,
    /// counted from 0.
    #[serde(default)]
    pub timing_first_step: Option<i64>,
    /// CUDA-event intervals (ms) between the same boundaries.
    #[serde(default)]
    pub timing_cuda_ms: Vec<f64>,
    /// Where the shim was when it last wrote: before_window, window, timing, reference,
    /// finished.
    #[serde(default)]
    pub phase: Option<String>,
    /// Why the window is incomplete, when the shim knows.
    #[serde(default)]
    pub window_incomplete_reason: Option<String>,
    /// Validation references (STEPTRACE_REFERENCE=1), passed through to the manifest.
    #[serde(default)]
    pub reference: Option<serde_json::Value>,
}

fn one() -> i64 {
    1
}

/// Reads every `shim*.json` in `dir`, sorted by rank.
pub fn read_statuses(dir: &Path) -> Vec<(String, ShimStatus)> {
    let mut v: Vec<(String, ShimStatus)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !(name.starts_with("shim") && name.ends_with(".json")) {
                return None;
            }
            let text = std::fs::read(e.path()).ok()?;
            Some((name, serde_json::from_slice(&text).ok()?))
        })
        .collect();
    v.sort_by_key(|(n, s)| (s.rank, n.clone()));
    v
}

/// The program's own step time, from the timing phase that comes before the active window: the
/// boundaries of steps run with nothing recorded but the boundary hooks.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Timing {
    /// Steps timed (in the median).
    pub steps: usize,
    /// Steps timed first and left out (warm-up, and the earlier half of the phase).
    pub settle: usize,
    /// Why the phase ended (the shim's rule): settled, step_cap, time_cap, one_step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// Median host-clock interval between boundaries, seconds.
    pub step_time_s: f64,
    /// Median CUDA-event interval between the same boundaries (Python programs), seconds.
    pub step_time_cuda_s: Option<f64>,
    /// Every interval, seconds, in order.
    pub intervals_s: Vec<f64>,
    /// The program's step (from 0) that the first interval covers, when the shim knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_step: Option<i64>,
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Timing from boundary clock readings (ns) and CUDA-event intervals (ms). The first `settle`
/// intervals (warm-up: autotuning, allocator growth) are left out while any remain after them.
/// `None` with fewer than two readings.
pub fn timing(
    boundaries_ns: &[i64],
    cuda_ms: &[f64],
    settle: usize,
    stop: Option<String>,
) -> Option<Timing> {
    let intervals: Vec<f64> = boundaries_ns
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 * 1e-9)
        .collect();
    let skip = if intervals.len() > settle { settle } else { 0 };
    let step_time_s = median(&intervals[skip..])?;
    let cuda: Vec<f64> = cuda_ms.iter().map(|m| m * 1e-3).collect();
    let cuda_skip = if cuda.len() > settle { settle } else { 0 };
    Some(Timing {
        steps: intervals.len() - skip,
        settle: skip,
        stop,
        step_time_s,
        step_time_cuda_s: median(&cuda[cuda_skip.min(cuda.len())..]),
        intervals_s: intervals,
        first_step: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_leaves_out_the_first_interval_and_takes_the_median() {
        // Issue 17: the program's own step time from the timing phase.
        let ns = [0, 50_000_000, 60_000_000, 71_000_000, 80_000_000];
        let t = timing(&ns, &[50.0, 10.0, 11.0, 9.0], 1, Some("settled".into())).unwrap();
        assert_eq!(
            (t.steps, t.settle, t.stop.as_deref()),
            (3, 1, Some("settled"))
        );
        assert!((t.step_time_s - 0.010).abs() < 1e-12, "{t:?}");
        assert!((t.step_time_cuda_s.unwrap() - 0.010).abs() < 1e-12);
        assert_eq!(t.intervals_s.len(), 4);
        // Two readings: one interval, kept.
        let t = timing(&[0, 20_000_000], &[], 5, None).unwrap();
        assert!((t.step_time_s - 0.02).abs() < 1e-12);
        assert_eq!(t.step_time_cuda_s, None);
        assert!(timing(&[5], &[], 0, None).is_none());
    }
}
