//! The cross-rank table as Parquet: `ranks.parquet`, the rows and columns of `ranks.csv`
//! (µs and shares at full precision).

use polars::prelude::Column;

use super::columns::col;
use crate::analysis::ranks::Ranks;

fn columns(r: &Ranks) -> Vec<Column> {
    let rows = &r.ranks;
    let arrivals = |rank: i64| r.collectives.arrivals.iter().find(|a| a.rank == rank);
    let us = |name: &str, f: &dyn Fn(&crate::analysis::ranks::RankResult) -> i64| {
        col(
            name,
            rows.iter().map(|x| f(x) as f64 / 1e3).collect::<Vec<f64>>(),
        )
    };
    let pct = |name: &str, f: &dyn Fn(&crate::analysis::ranks::RankResult) -> Option<f64>| {
        col(name, rows.iter().map(f).collect::<Vec<Option<f64>>>())
    };
    vec![
        col("rank", rows.iter().map(|x| x.rank).collect::<Vec<i64>>()),
        col(
            "trace",
            rows.iter().map(|x| x.trace.as_str()).collect::<Vec<&str>>(),
        ),
        col(
            "iterations",
            rows.iter()
                .map(|x| x.iterations as u64)
                .collect::<Vec<u64>>(),
        ),
        col(
            "step_time_s",
            rows.iter().map(|x| x.step_time_s).collect::<Vec<f64>>(),
        ),
        col(
            "step_time_instrumented_s",
            rows.iter()
                .map(|x| x.step_time_instrumented_s)
                .collect::<Vec<f64>>(),
        ),
        col(
            "slowest_iteration",
            rows.iter()
                .map(|x| x.slowest_iteration().map(|s| s.0 as u64))
                .collect::<Vec<Option<u64>>>(),
        ),
        pct("slowest_iteration_s", &|x| {
            x.slowest_iteration().map(|s| s.1)
        }),
        us("gpu_span_us", &|x| x.gpu.span_ns),
        us("idle_us", &|x| x.gpu.idle_ns),
        us("compute_us", &|x| x.gpu.compute_ns),
        us("non_compute_us", &|x| x.gpu.non_compute_ns),
        us("communication_us", &|x| x.gpu.communication_ns),
        us("memory_us", &|x| x.gpu.memory_ns),
        pct("idle_pct", &|x| x.gpu.pct(x.gpu.idle_ns)),
        pct("compute_pct", &|x| x.gpu.pct(x.gpu.compute_ns)),
        pct("comm_comp_overlap_pct", &|x| x.gpu.comm_comp_overlap_pct),
        col(
            "peak_allocated_bytes",
            rows.iter()
                .map(|x| x.peak_allocated_bytes)
                .collect::<Vec<Option<i64>>>(),
        ),
        col(
            "last_arrivals",
            rows.iter()
                .map(|x| arrivals(x.rank).map_or(0, |a| a.last as u64))
                .collect::<Vec<u64>>(),
        ),
        us("wait_caused_us", &|x| {
            arrivals(x.rank).map_or(0, |a| a.wait_caused_ns)
        }),
        us("waited_us", &|x| {
            arrivals(x.rank).map_or(0, |a| a.waited_ns)
        }),
        pct("exposed_communication_us", &|x| {
            x.gpu.exposed_communication_ns().map(|ns| ns as f64 / 1e3)
        }),
    ]
}

/// Writes `ranks.parquet` into `dir`.
pub(crate) fn write_ranks_table(
    dir: &std::path::Path,
    r: &Ranks,
) -> Result<(), crate::report::Error> {
    super::columns::write(&dir.join("ranks.parquet"), columns(r))
}

/// `ranks.parquet`'s bytes, in memory (the Python module's `Ranks.ranks`).
pub fn ranks_parquet_bytes(r: &Ranks) -> Result<Vec<u8>, crate::report::Error> {
    super::columns::to_bytes("ranks", columns(r))
}
