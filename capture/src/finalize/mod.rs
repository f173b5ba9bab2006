//! After the child: compress what the shims wrote, collect the shims' status files, and turn
//! the timing phase's clock readings into the program's own step time (`timing`).

mod timing;

pub use timing::{
    choose, passes_per_step, program_timing, timing_phase, AfterWindow, PhaseTiming, StepMarker,
    Timing, TimingSource, Unplanned, MIN_AFTER_WINDOW_STEPS,
};

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Gzips `path` into `path.gz` and removes the original. Returns the new file name. The file
/// is ordinary gzip in members of a few MB that say their length
/// ([`steptrace_formats::gzip_members`]), which analyze inflates on every core.
pub fn gzip_file(path: &Path) -> std::io::Result<PathBuf> {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    {
        let mut r = BufReader::new(File::open(path)?);
        let mut w = BufWriter::new(File::create(&gz)?);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        steptrace_formats::gzip_members::write(&mut r, &mut w, 6, threads)?;
        w.flush()?;
    }
    std::fs::remove_file(path)?;
    Ok(gz)
}

/// Gzips every file of `paths` as `gzip_file` does, several at once (a run's trace, Execution
/// Trace and snapshots, on every rank): the launcher's work after the program ends is the
/// largest file's, not the sum. Results in the order of `paths`.
pub fn gzip_files(paths: &[PathBuf]) -> Vec<std::io::Result<PathBuf>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(paths.len().max(1));
    // Largest first, so that the last file to start is a small one.
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(std::fs::metadata(&paths[i]).map_or(0, |m| m.len())));
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Each worker takes the next file and keeps (index, result); joined, every index is filled.
    let mut done: Vec<(usize, std::io::Result<PathBuf>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while let Some(&i) =
                        order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        mine.push((i, gzip_file(&paths[i])));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a compression worker panicked"))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
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
    /// When the GPU reached the timing phase's last boundary, on the clock of `timing_ns`.
    #[serde(default)]
    pub timing_cuda_last_done_ns: Option<i64>,
    /// With a plan timed both ways (`STEPTRACE_PLAN_AB`): whether the plan was on in each
    /// interval's step.
    #[serde(default)]
    pub timing_plan_on: Vec<bool>,
    /// Host time of each `optimizer.step()` call in the timing phase (ns, from its pre-hook
    /// to its post-hook): how fast this rank's host does the same work as the others', with
    /// nothing recorded.
    #[serde(default)]
    pub timing_optimizer_ns: Vec<i64>,
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
    /// What a plan's wrappers cost on this machine (the shim's probe at exit),
    /// passed through to the manifest for `steptrace plan`.
    #[serde(default)]
    pub plan_probe: Option<serde_json::Value>,
    /// Each module's profiler-style instance name (`GPT2Block_3`) and its fully qualified
    /// name (`transformer.h.3`), from the Python shim's module hooks.
    #[serde(default)]
    pub module_fqns: std::collections::BTreeMap<String, String>,
    /// torch.cuda.max_memory_allocated() over the whole run, read at exit (Python programs).
    #[serde(default)]
    pub run_max_memory_allocated: Option<i64>,
    /// Step boundaries after the window, found by the rule's own step hooks (Python: the
    /// optimizer or GradScaler hook), on the clock of `timing_ns`.
    #[serde(default)]
    pub after_window_ns: Vec<i64>,
    /// Start (C++: a callback on autograd nodes) or end (Python: the backward wrapper) of every
    /// backward pass of the run, on the clock of `timing_ns`.
    #[serde(default)]
    pub backward_pass_ns: Vec<i64>,
    /// When the window's files were written and the shim's hooks went: later steps run at the
    /// program's own speed.
    #[serde(default)]
    pub after_window_start_ns: Option<i64>,
    /// The same moment as `after_window_start_ns`, in ns since the Unix epoch.
    #[serde(default)]
    pub after_window_start_epoch_ns: Option<i64>,
    /// When the window opened (the shim's clock).
    #[serde(default)]
    pub window_start_ns: Option<i64>,
    /// When the window closed.
    #[serde(default)]
    pub window_end_ns: Option<i64>,
    /// When the program ended.
    #[serde(default)]
    pub exit_ns: Option<i64>,
    /// What the shim's own work cost the program, ms by piece (trace_export, snapshot,
    /// et_close, ...; the Python shim's profiler_step includes the pieces it triggers).
    #[serde(default)]
    pub costs_ms: std::collections::BTreeMap<String, f64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher compresses every rank's files at once: each result is the file at its
    /// own index (the largest is started first), and a file that cannot be read is an error
    /// in its place, not a lost result.
    #[test]
    fn files_are_compressed_concurrently_each_result_in_its_place() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let sizes = [10usize, 300_000, 5_000];
        let mut paths: Vec<PathBuf> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let p = dir.path().join(format!("f{i}.json"));
                let body: Vec<u8> = (0..n).map(|k| b"0123456789"[(k * (i + 1)) % 10]).collect();
                std::fs::write(&p, body).unwrap();
                p
            })
            .collect();
        paths.insert(1, dir.path().join("missing.json"));
        let results = gzip_files(&paths);
        assert_eq!(results.len(), 4);
        assert!(results[1].is_err());
        // (index in `paths`, index in `sizes`) of each file written.
        for (k, i) in [(0, 0), (2, 1), (3, 2)] {
            let n = sizes[i];
            let gz = results[k].as_ref().unwrap();
            assert_eq!(gz, &PathBuf::from(format!("{}.gz", paths[k].display())));
            assert!(!paths[k].exists(), "the original goes");
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(File::open(gz).unwrap())
                .read_to_end(&mut text)
                .unwrap();
            assert_eq!(text.len(), n);
            assert_eq!(text[n - 1], b"0123456789"[((n - 1) * (i + 1)) % 10]);
        }
    }
}
