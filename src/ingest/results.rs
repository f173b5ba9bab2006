//! An analysis' own output folder read back: its `summary.json` (the one typed definition in
//! `steptrace_formats`) and the per-node peaks of `node_stats.csv`, so that `compare` sets
//! runs side by side from what `analyze` wrote instead of analysing them again.

use std::collections::BTreeMap;
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
    /// Its ops' and kernels' totals (`node_stats.csv`, `kernels.csv`; empty where absent).
    pub ops: OpTotals,
}

/// What a run's ops and kernels add up to, by name: for `compare`'s op-level diff
/// (HolisticTraceAnalysis's trace diff).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpTotals {
    /// Per op (the nodes' op), its nodes per iteration and their CPU time per iteration, s
    /// (the nodes' medians, each weighted by the share of iterations it ran in).
    pub ops: BTreeMap<String, (f64, f64)>,
    /// Per GPU activity name, its count and GPU time over the trace, s.
    pub kernels: BTreeMap<String, (f64, f64)>,
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
    let iterations = summary.iterations.max(1) as f64;
    let ops = OpTotals {
        ops: read_sums(
            &dir.join("node_stats.csv"),
            "op",
            ["iterations_present", "median_cpu_time_s"],
            |[present, cpu]| (present / iterations, cpu * present / iterations),
        )?,
        kernels: read_sums(
            &dir.join("kernels.csv"),
            "name",
            ["count", "total_ns"],
            |[count, ns]| (count, ns * 1e-9),
        )?,
    };
    Ok(AnalysisResults {
        summary,
        node_peaks,
        ops,
    })
}

/// A table `analyze` wrote, open, with the places of the columns asked for.
struct Table {
    r: csv::Reader<std::io::BufReader<std::fs::File>>,
    cols: Vec<usize>,
}

impl Table {
    /// `None` when the file is absent; an error naming the file when a column is missing.
    fn open(path: &Path, names: &[&str]) -> Result<Option<Table>, Error> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FileError::new(path, e).into()),
        };
        let mut r = csv::Reader::from_reader(std::io::BufReader::new(file));
        let headers = r
            .headers()
            .map_err(|e| format_error(path, e.to_string()))?
            .clone();
        let cols = names
            .iter()
            .map(|name| {
                headers
                    .iter()
                    .position(|h| h == *name)
                    .ok_or_else(|| format_error(path, format!("no column {name}")))
            })
            .collect::<Result<Vec<usize>, Error>>()?;
        Ok(Some(Table { r, cols }))
    }
}

fn format_error(path: &Path, what: String) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        what,
    }
}

/// Sums per `key` of `f` of the two numeric columns `cols`, over the rows of a table
/// `analyze` wrote; nothing when the file is absent.
fn read_sums(
    path: &Path,
    key: &str,
    cols: [&str; 2],
    f: impl Fn([f64; 2]) -> (f64, f64),
) -> Result<BTreeMap<String, (f64, f64)>, Error> {
    let Some(Table { mut r, cols: c }) = Table::open(path, &[key, cols[0], cols[1]])? else {
        return Ok(BTreeMap::new());
    };
    let bad = |what: String| format_error(path, what);
    let (k, a, b) = (c[0], c[1], c[2]);
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (i, rec) in r.records().enumerate() {
        if i >= MAX_NODES {
            return Err(bad(format!("more than {MAX_NODES} rows")));
        }
        let rec = rec.map_err(|e| bad(e.to_string()))?;
        let num = |c: usize, name: &str| -> Result<f64, Error> {
            let v = rec.get(c).unwrap_or("");
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    bad(format!(
                        "line {}: {name} {v:?} is not a count or a time",
                        i + 2
                    ))
                })
        };
        let (x, y) = f([num(a, cols[0])?, num(b, cols[1])?]);
        let e = out.entry(rec.get(k).unwrap_or("").to_owned()).or_default();
        e.0 += x;
        e.1 += y;
    }
    Ok(out)
}

/// `rank` and `median_peak_mem_bytes` of each row; nothing when the file is absent.
fn read_node_peaks(path: &Path) -> Result<Vec<(u32, i64)>, Error> {
    let Some(Table { mut r, cols: c }) = Table::open(path, &["rank", "median_peak_mem_bytes"])?
    else {
        return Ok(Vec::new());
    };
    let bad = |what: String| format_error(path, what);
    let (rank, peak) = (c[0], c[1]);
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
