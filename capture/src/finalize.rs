//! After the child: compress what the shims wrote, cut a native program's whole-run trace down
//! to the schedule's active window, and collect the shims' status files.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Schedule;

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

/// The active window of a native run, from the boundaries (epoch ns): iteration `i` runs from
/// boundary `i-1` to boundary `i` (iteration 0 from program start). Returns `(start, end,
/// complete)`; `end` is `None` when the program stopped inside the window.
pub fn active_window(boundaries: &[i64], s: &Schedule) -> Option<(i64, Option<i64>, bool)> {
    let first = (s.skip_first + s.wait + s.warmup) as usize;
    let last = first + s.active as usize;
    if first == 0 {
        return None; // would start at program start, before any boundary: not trimmed
    }
    let start = *boundaries.get(first - 1)?;
    let end = boundaries.get(last - 1).copied();
    Some((start, end, end.is_some()))
}

/// What trimming kept, and the GPU the trace names.
#[derive(Debug, Clone, PartialEq)]
pub struct Trimmed {
    /// Events kept.
    pub kept: usize,
    /// Events in the whole-run trace.
    pub total: usize,
    /// `deviceProperties[0].name`.
    pub gpu: Option<String>,
    /// `deviceProperties[0].totalGlobalMem`.
    pub gpu_memory_bytes: Option<i64>,
    /// `Record function id`s of the ops kept (to cut the Execution Trace the same way).
    pub rf_ids: HashSet<i64>,
}

/// Writes the events of `src` (a whole-run Kineto trace) that fall in `[start, end)` epoch ns
/// to `dst`: CPU events by their time, GPU activity with the launch it belongs to, metadata
/// always.
pub fn trim_trace(
    src: &Path,
    dst: &Path,
    start: i64,
    end: Option<i64>,
) -> std::io::Result<Trimmed> {
    let mut text = Vec::new();
    File::open(src)?.read_to_end(&mut text)?;
    let mut doc: Value = serde_json::from_slice(&text)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    drop(text);
    let dev0 = doc.pointer("/deviceProperties/0");
    let gpu = dev0
        .and_then(|d| d.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let gpu_memory_bytes = dev0
        .and_then(|d| d.get("totalGlobalMem"))
        .and_then(Value::as_i64);
    let base = doc
        .get("baseTimeNanoseconds")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let inside = |ts: f64| {
        let t = base + ts * 1000.0;
        t >= start as f64 && end.is_none_or(|e| t < e as f64)
    };
    let events = doc
        .get_mut("traceEvents")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no traceEvents"))?;
    let total = events.len();
    let is_gpu = |e: &Value| {
        matches!(
            e.get("cat").and_then(Value::as_str),
            Some("kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation")
        )
    };
    // Correlation ids of the runtime calls kept: their GPU activity comes along.
    let mut kept_corr: HashSet<i64> = HashSet::new();
    for e in events.iter() {
        if !is_gpu(e) && e.get("ts").and_then(Value::as_f64).is_some_and(inside) {
            if let Some(c) = e.pointer("/args/correlation").and_then(Value::as_i64) {
                kept_corr.insert(c);
            }
        }
    }
    events.retain(|e| {
        if e.get("ph").and_then(Value::as_str) == Some("M") {
            return true;
        }
        if is_gpu(e) {
            return e
                .pointer("/args/correlation")
                .and_then(Value::as_i64)
                .is_some_and(|c| kept_corr.contains(&c));
        }
        match e.get("cat").and_then(Value::as_str) {
            Some("ac2g") => e
                .get("id")
                .and_then(Value::as_i64)
                .is_some_and(|c| kept_corr.contains(&c)),
            _ => e.get("ts").and_then(Value::as_f64).is_some_and(inside),
        }
    });
    let kept = events.len();
    let rf_ids = events
        .iter()
        .filter_map(|e| {
            e.pointer("/args/Record function id")
                .and_then(Value::as_i64)
        })
        .collect();
    let mut w = BufWriter::new(File::create(dst)?);
    serde_json::to_writer(&mut w, &doc)?;
    w.flush()?;
    Ok(Trimmed {
        kept,
        total,
        gpu,
        gpu_memory_bytes,
        rf_ids,
    })
}

/// Keeps the Execution Trace nodes whose `rf_id` is in `rf_ids`, with their ancestors
/// (`ctrl_deps`), so the ET covers the same ops as the cut trace. Returns (kept, total).
pub fn trim_exec_trace(
    src: &Path,
    dst: &Path,
    rf_ids: &HashSet<i64>,
) -> std::io::Result<(usize, usize)> {
    let bad = |e: serde_json::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut doc: Value = serde_json::from_slice(&std::fs::read(src)?).map_err(bad)?;
    let nodes = doc
        .get_mut("nodes")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no nodes"))?;
    let total = nodes.len();
    let rf = |n: &Value| {
        n.get("attrs")?
            .as_array()?
            .iter()
            .find(|a| a.get("name").and_then(Value::as_str) == Some("rf_id"))?
            .get("value")?
            .as_i64()
    };
    let parent: std::collections::HashMap<i64, i64> = nodes
        .iter()
        .filter_map(|n| Some((n.get("id")?.as_i64()?, n.get("ctrl_deps")?.as_i64()?)))
        .collect();
    let mut keep: HashSet<i64> = HashSet::new();
    for n in nodes.iter() {
        if rf(n).is_some_and(|r| rf_ids.contains(&r)) {
            let mut id = n.get("id").and_then(Value::as_i64);
            while let Some(i) = id {
                if !keep.insert(i) {
                    break;
                }
                id = parent.get(&i).copied().filter(|p| *p != i);
            }
        }
    }
    nodes.retain(|n| {
        n.get("id")
            .and_then(Value::as_i64)
            .is_some_and(|i| keep.contains(&i))
    });
    let kept = nodes.len();
    let mut w = BufWriter::new(File::create(dst)?);
    serde_json::to_writer(&mut w, &doc)?;
    w.flush()?;
    Ok((kept, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_trace_keeps_matched_nodes_and_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("et.json");
        std::fs::write(
            &src,
            r#"{"schema":"1","nodes":[
              {"id":1,"name":"root","ctrl_deps":1,"attrs":[{"name":"rf_id","value":0}]},
              {"id":2,"name":"a","ctrl_deps":1,"attrs":[{"name":"rf_id","value":10}]},
              {"id":3,"name":"b","ctrl_deps":2,"attrs":[{"name":"rf_id","value":11}]},
              {"id":4,"name":"c","ctrl_deps":1,"attrs":[{"name":"rf_id","value":12}]}]}"#,
        )
        .unwrap();
        let dst = dir.path().join("out.json");
        let (kept, total) = trim_exec_trace(&src, &dst, &HashSet::from([11])).unwrap();
        assert_eq!((kept, total), (3, 4));
        let t = std::fs::read_to_string(&dst).unwrap();
        assert!(
            t.contains("\"b\"")
                && t.contains("\"a\"")
                && t.contains("root")
                && !t.contains("\"c\"")
        );
    }

    #[test]
    fn window_from_boundaries() {
        let s = Schedule::default(); // skip 1, wait 1, warmup 1, active 3
        let b = [10, 20, 30, 40, 50, 60, 70];
        assert_eq!(active_window(&b, &s), Some((30, Some(60), true)));
        assert_eq!(active_window(&b[..4], &s), Some((30, None, false)));
        assert_eq!(active_window(&b[..2], &s), None);
    }

    #[test]
    fn trims_by_time_and_correlation() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("full.json");
        std::fs::write(
            &src,
            r#"{"baseTimeNanoseconds": 1000, "traceEvents": [
              {"ph":"M","name":"process_name","pid":1,"args":{"name":"x"}},
              {"ph":"X","cat":"cpu_op","name":"early","ts":0.5,"dur":1},
              {"ph":"X","cat":"cuda_runtime","name":"launch","ts":2,"dur":1,"args":{"correlation":7}},
              {"ph":"X","cat":"kernel","name":"k","ts":9,"dur":1,"args":{"correlation":7}},
              {"ph":"X","cat":"kernel","name":"k0","ts":9,"dur":1,"args":{"correlation":1}},
              {"ph":"X","cat":"cpu_op","name":"late","ts":5,"dur":1}]}"#,
        )
        .unwrap();
        let dst = dir.path().join("t.json");
        let t = trim_trace(&src, &dst, 2000, Some(4000)).unwrap();
        assert_eq!((t.kept, t.total), (3, 6));
        let t = std::fs::read_to_string(&dst).unwrap();
        assert!(
            t.contains("launch")
                && t.contains("\"k\"")
                && !t.contains("early")
                && !t.contains("late")
        );
    }
}
