//! An analysis' own output folder read back: its `summary.json` (the one typed definition in
//! `steptrace_formats`) and the per-node peaks of `node_stats.csv`, so that `compare` sets
//! runs side by side from what `analyze` wrote instead of analysing them again.

use std::path::Path;

use steptrace_formats::summary::Summary;

use super::Error;
use crate::file_error::{read_side_file, FileError};

/// The largest summary.json read back (one holds a few KB; a 10,000-iteration run some MB).
const MAX_SUMMARY_BYTES: u64 = 256 << 20;
/// The most node rows read back for the peak-by-node overlay.
const MAX_NODES: usize = 10_000_000;

/// What `compare` needs of one analysis output folder.
#[derive(Debug, Clone)]
pub struct AnalysisResults {
    /// Its `summary.json`.
    pub summary: Summary,
    /// Each node's median peak memory by execution rank, bytes (`node_stats.csv`; empty where
    /// the folder has none).
    pub node_peaks: Vec<(u32, i64)>,
}

/// Whether `path` is a folder `analyze` wrote (it holds `summary.json`); a capture's run
/// directory holds none.
pub fn is_results_dir(path: &Path) -> bool {
    path.is_dir() && path.join("summary.json").is_file()
}

/// Reads `dir/summary.json` and `dir/node_stats.csv`. A summary written by a newer steptrace
/// is refused with one line naming the file.
pub fn read_results(dir: &Path) -> Result<AnalysisResults, Error> {
    let path = dir.join("summary.json");
    let bytes = read_side_file(&path, MAX_SUMMARY_BYTES)?.ok_or_else(|| {
        FileError::new(
            &path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no summary.json here"),
        )
    })?;
    let bad = |what: String| Error::Format {
        path: path.clone(),
        what,
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    let summary = Summary::from_json(text).map_err(|e| bad(e.to_string()))?;
    let node_peaks = read_node_peaks(&dir.join("node_stats.csv"))?;
    Ok(AnalysisResults {
        summary,
        node_peaks,
    })
}

/// `rank` and `median_peak_mem_bytes` of each row; nothing when the file is absent.
fn read_node_peaks(path: &Path) -> Result<Vec<(u32, i64)>, Error> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FileError::new(path, e).into()),
    };
    let bad = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let mut r = csv::Reader::from_reader(std::io::BufReader::new(file));
    let headers = r.headers().map_err(|e| bad(e.to_string()))?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| bad(format!("no column {name}")))
    };
    let (rank, peak) = (col("rank")?, col("median_peak_mem_bytes")?);
    let mut out = Vec::new();
    for (i, rec) in r.records().enumerate() {
        if i >= MAX_NODES {
            return Err(bad(format!("more than {MAX_NODES} node rows")));
        }
        let rec = rec.map_err(|e| bad(e.to_string()))?;
        let field = |c: usize| rec.get(c).unwrap_or("");
        let line = i + 2;
        let n: u32 = field(rank).parse().map_err(|_| {
            bad(format!(
                "line {line}: rank {:?} is not a count",
                field(rank)
            ))
        })?;
        let p: i64 = field(peak)
            .parse()
            .ok()
            .filter(|&v| v >= 0)
            .ok_or_else(|| {
                bad(format!(
                    "line {line}: median_peak_mem_bytes {:?} is not a size",
                    field(peak)
                ))
            })?;
        out.push((n, p));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_from_a_newer_steptrace_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("summary.json"),
            br#"{"format_version": 99}"#,
        )
        .unwrap();
        assert!(is_results_dir(dir.path()));
        let e = read_results(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("summary.json") && e.contains("version 99"),
            "{e}"
        );
    }

    #[test]
    fn node_peaks_refuse_a_negative_size_and_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("node_stats.csv");
        std::fs::write(&p, "rank,node_name,median_peak_mem_bytes\n0,a,10\n1,b,-3\n").unwrap();
        let e = read_node_peaks(&p).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("node_stats.csv"), "{e}");
        std::fs::write(&p, "rank,node_name,median_peak_mem_bytes\n0,a,10\n1,b,7\n").unwrap();
        assert_eq!(read_node_peaks(&p).unwrap(), vec![(0, 10), (1, 7)]);
        assert!(read_node_peaks(&dir.path().join("none.csv"))
            .unwrap()
            .is_empty());
    }
}
