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

pub use steptrace_formats::shim::ShimStatus;

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
            Some((name, ShimStatus::from_json(&text).ok()?))
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
