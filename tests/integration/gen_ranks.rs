//! Synthetic ranks of a distributed run, made from one real rank's Kineto trace (issue 18,
//! item 6): each rank a copy of it with its own `distributedInfo`, kernel durations jittered
//! by up to ±2% (deterministically per rank), and one all-reduce per iteration; one rank, the
//! straggler, runs a chosen op longer by a known amount in every iteration.
//!
//! The all-reduce: a `ncclDevKernel_AllReduce…` kernel on its own stream, launched (a
//! `cudaLaunchKernel` with a fresh correlation id) at the start of the iteration's anchor op
//! (e.g. `Optimizer.step#Adam.step`) and running until the last rank has launched its own,
//! plus a fixed transfer time: as NCCL does, it spins from its rank's arrival until every rank
//! has arrived; it carries the collective metadata PyTorch records. What is not modelled: the ranks do not resynchronise after the collective, so
//! the straggler's lag adds up over iterations.
//!
//! Used by `tests/integration/ranks.rs` (8 ranks) and by `examples/gen_ranks.rs` (the
//! benchmark's 64), which includes this file.

use serde_json::{json, Value};

/// Writes one rank's trace as text with serde_json's pretty printer: one key per line and
/// `"key": value` with a space, as Kineto writes its header (HolisticTraceAnalysis finds the
/// rank only in that form), though not byte for byte Kineto's layout of the events.
pub fn write(path: &std::path::Path, doc: &Value) -> std::io::Result<()> {
    std::fs::write(
        path,
        serde_json::to_vec_pretty(doc).map_err(std::io::Error::other)?,
    )
}

/// Transfer time of each all-reduce once every rank has arrived, µs.
const TRANSFER_US: f64 = 200.0;

/// The ranks: `n` copies of `base`, rank `straggler`'s `slow_op` (every occurrence) longer by
/// `delta_us`, an all-reduce per `anchor_op` occurrence.
pub fn ranks(
    base: &Value,
    n: usize,
    straggler: usize,
    slow_op: &str,
    anchor_op: &str,
    delta_us: f64,
) -> Vec<Value> {
    let events = base["traceEvents"].as_array().expect("traceEvents");
    let x = |e: &Value| e["ph"] == "X" && e["ts"].is_number() && e["dur"].is_number();
    let span = |e: &Value| {
        let ts = e["ts"].as_f64().unwrap_or(0.0);
        (ts, ts + e["dur"].as_f64().unwrap_or(0.0))
    };
    // Where the straggler's op ends (each occurrence), before any shift.
    let mut slow: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| x(e) && e["name"] == slow_op && e["cat"] != "gpu_user_annotation")
        .map(span)
        .collect();
    slow.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(!slow.is_empty(), "no {slow_op} in the trace");
    // The rank's timeline with its lag: every event after a stretched op moves by delta per
    // stretched op before it; an event enclosing one grows by delta per enclosed op.
    let shifted = |e: &Value, stretch: bool| -> Value {
        let mut e = e.clone();
        if !stretch || !e["ts"].is_number() {
            return e;
        }
        let (ts, end) = span(&e);
        let before = slow.iter().filter(|s| s.1 <= ts).count() as f64;
        let inside = if x(&e) {
            slow.iter().filter(|s| ts <= s.0 && s.1 <= end).count() as f64
        } else {
            0.0
        };
        e["ts"] = json!(ts + before * delta_us);
        if x(&e) {
            let d = e["dur"].as_f64().unwrap_or(0.0);
            e["dur"] = json!(d + inside * delta_us);
        }
        e
    };
    let timelines: Vec<Vec<Value>> = (0..n)
        .map(|r| {
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (r as u64 + 1);
            events
                .iter()
                .map(|e| {
                    let mut e = shifted(e, r == straggler);
                    if e["cat"] == "kernel" {
                        // xorshift: a fixed jitter per rank and kernel, within ±2%.
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let j = (seed % 4001) as f64 / 100_000.0 - 0.02;
                        let d = e["dur"].as_f64().unwrap_or(0.0);
                        e["dur"] = json!(d * (1.0 + j));
                    }
                    e
                })
                .collect()
        })
        .collect();
    // Arrivals at each collective: the anchor op's start on each rank.
    let anchors: Vec<Vec<(f64, Value)>> = timelines
        .iter()
        .map(|tl| {
            let mut a: Vec<(f64, Value)> = tl
                .iter()
                // The CPU-side range: Kineto also draws it on the GPU (`gpu_user_annotation`).
                .filter(|e| x(e) && e["name"] == anchor_op && e["cat"] != "gpu_user_annotation")
                .map(|e| (span(e).0, e.clone()))
                .collect();
            a.sort_by(|p, q| p.0.total_cmp(&q.0));
            a
        })
        .collect();
    let iterations = anchors.iter().map(Vec::len).min().unwrap_or(0);
    assert!(iterations > 0, "no {anchor_op} in the trace");
    let kernel = events
        .iter()
        .find(|e| e["cat"] == "kernel")
        .expect("a kernel");
    let device_pid = kernel["pid"].clone();
    timelines
        .into_iter()
        .enumerate()
        .map(|(r, mut tl)| {
            for k in 0..iterations {
                let last = anchors.iter().map(|a| a[k].0).fold(f64::MIN, f64::max);
                let (arrive, op) = (&anchors[r][k].0, &anchors[r][k].1);
                let corr = 900_000_000 + k as i64;
                tl.push(json!({
                    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                    "pid": op["pid"], "tid": op["tid"], "ts": arrive + 0.5, "dur": 1.0,
                    "args": {"correlation": corr},
                }));
                tl.push(json!({
                    "ph": "X", "cat": "kernel",
                    "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                    "pid": device_pid, "tid": 99, "ts": arrive + 2.0,
                    "dur": last - arrive + TRANSFER_US,
                    // The collective's metadata, as PyTorch records it on NCCL kernels.
                    "args": {
                        "device": 0, "stream": 99, "correlation": corr,
                        "Collective name": "allreduce", "In msg nelems": 11_689_512,
                        "Out msg nelems": 11_689_512, "Group size": n, "dtype": "Float",
                        "Process Group Name": "0", "Process Group Description": "default_pg",
                    },
                }));
            }
            let mut doc = base.clone();
            doc["distributedInfo"] = json!({
                "backend": "nccl", "rank": r, "world_size": n,
            });
            doc["traceEvents"] = Value::Array(tl);
            doc
        })
        .collect()
}
