//! The annotated trace: the original Chrome trace with steptrace's findings added as tracks, for
//! Perfetto UI, chrome://tracing and TensorBoard's profiler (`*.pt.trace.json.gz`).
//!
//! Original events are copied byte for byte (or, with `compact`, only the operator, kernel and
//! annotation events, to stay under chrome://tracing's 256 MB); added under process
//! `steptrace` (pid 999999): a counter track of memory by category after every allocator event
//! (its parts add up to `Total Allocated`), a track of nodes with rank, phase and category,
//! and each activation's lifetime as an async slice.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use super::{io, Error};
use crate::analysis::memory::{Category, CATEGORIES};
use crate::analysis::Analysis;
use crate::ingest::{json_scan, source};
use crate::model::Trace;

/// Process id of the added tracks.
pub const PID: i64 = 999_999;

fn us(ns: i64) -> String {
    format!("{}.{:03}", ns.div_euclid(1000), ns.rem_euclid(1000))
}

fn keep_compact(ev: &[u8]) -> bool {
    let Ok(e) = serde_json::from_slice::<crate::ingest::kineto::raw::RawEvent<'_>>(ev) else {
        return false;
    };
    if e.ph.0.as_deref() == Some("M") {
        return true;
    }
    matches!(
        e.cat.0.as_deref(),
        Some(
            "cpu_op"
                | "user_annotation"
                | "gpu_user_annotation"
                | "kernel"
                | "gpu_memcpy"
                | "gpu_memset"
                | "Trace"
        )
    )
}

/// The added events, as JSON texts.
pub fn extra_events(t: &Trace, a: &Analysis) -> Vec<String> {
    let mut v = Vec::new();
    let esc = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    v.push(format!(
        r#"{{"ph":"M","name":"process_name","pid":{PID},"tid":0,"args":{{"name":"steptrace"}}}}"#
    ));
    for (tid, name) in [
        (1, "nodes (main thread)"),
        (2, "nodes (other threads)"),
        (3, "activations"),
    ] {
        v.push(format!(r#"{{"ph":"M","name":"thread_name","pid":{PID},"tid":{tid},"args":{{"name":"{name}"}}}}"#));
    }
    for r in &a.timeline {
        let mut args = String::new();
        for (i, c) in CATEGORIES.iter().enumerate() {
            let _ = write!(
                args,
                "{}\"{}\":{}",
                if i > 0 { "," } else { "" },
                c.key(),
                r.breakdown[i]
            );
        }
        v.push(format!(
            r#"{{"ph":"C","name":"memory by category","pid":{PID},"tid":0,"ts":{},"args":{{{args}}}}}"#,
            us(r.ts)
        ));
    }
    let rank_of: rustc_hash::FxHashMap<&str, &crate::analysis::NodeStat> = a
        .node_stats
        .iter()
        .map(|s| (s.node_name.as_str(), s))
        .collect();
    for n in &a.step.nodes {
        let op = t.op(n.op);
        let tid = if Some(op.thread) == t.main_thread {
            1
        } else {
            2
        };
        let st = rank_of.get(n.name.as_str());
        v.push(format!(
            r#"{{"ph":"X","cat":"steptrace_node","name":{},"pid":{PID},"tid":{tid},"ts":{},"dur":{},"args":{{"rank":{},"phase":"{}","type":"{}","iteration":{},"gpu_time_us":{},"kernels":{}}}}}"#,
            esc(&n.name),
            us(op.start),
            us(op.dur),
            st.map_or(n.rank, |s| s.rank),
            n.phase.as_str(),
            st.map_or("OTHER", |s| s.node_type.as_str()),
            n.iteration,
            us(n.gpu_time),
            n.kernels
        ));
    }
    let mut id = 0u64;
    let mut per_producer: rustc_hash::FxHashMap<usize, u32> = rustc_hash::FxHashMap::default();
    for b in &a.memory.blocks {
        if b.category != Category::Activation {
            continue;
        }
        let (Some(p), Some(free)) = (b.producer, b.free) else {
            continue;
        };
        let k = per_producer.entry(p).or_insert(0);
        let name = format!("{}/act{}", a.step.nodes[p].name, k);
        *k += 1;
        id += 1;
        v.push(format!(
            r#"{{"ph":"b","cat":"activation","name":{},"id":{id},"pid":{PID},"tid":3,"ts":{},"args":{{"bytes":{}}}}}"#,
            esc(&name),
            us(b.alloc),
            b.size
        ));
        v.push(format!(
            r#"{{"ph":"e","cat":"activation","name":{},"id":{id},"pid":{PID},"tid":3,"ts":{}}}"#,
            esc(&name),
            us(free)
        ));
    }
    v
}

/// Writes the annotated trace (gzip) to `path`.
pub fn write(path: &Path, t: &Trace, a: &Analysis, compact: bool) -> Result<(), Error> {
    let src = source::read(&t.kineto.path).map_err(|e| Error::Io {
        path: t.kineto.path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let buf = src.bytes;
    let bad = |what: &str| Error::Io {
        path: t.kineto.path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
    };
    let start = json_scan::find_top_level_key(&buf, b"traceEvents")
        .ok()
        .flatten()
        .ok_or_else(|| bad("no traceEvents"))?
        .value_start;
    // One chunk per element gives every element's boundaries.
    let arr =
        json_scan::chunk_array(&buf, start, 1).map_err(|_| bad("traceEvents is not an array"))?;
    let f = super::create(path)?;
    let mut w =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(f), flate2::Compression::new(6));
    let mut out = |bytes: &[u8]| w.write_all(bytes).map_err(io(path));
    out(&buf[..=start])?;
    let mut first = true;
    for &(s, e) in &arr.chunks {
        let ev = &buf[s..e];
        if compact && !keep_compact(ev) {
            continue;
        }
        if !first {
            out(b",\n")?;
        }
        first = false;
        out(ev)?;
    }
    for ev in extra_events(t, a) {
        if !first {
            out(b",\n")?;
        }
        first = false;
        out(ev.as_bytes())?;
    }
    out(b"]")?;
    match arr.end {
        Some(end) => out(&buf[end..])?,
        None => out(b"}\n")?,
    }
    let inner = w.finish().map_err(io(path))?;
    inner.into_inner().map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e.into_error(),
    })?;
    Ok(())
}
