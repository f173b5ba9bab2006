//! Parquet copies of the main tables, through polars (the only module that imports it).
//! Column names and values are those of the CSV files of the same name.

use std::path::Path;

use super::Error;
use crate::analysis::Analysis;
use crate::model::Trace;

mod columns;
mod ranks;
mod tables;
use columns::{col, write};
pub use ranks::{read_ranks, write_rank};
use tables::{activation_stats, flops, memory_timeline, node_stats};

/// Files written.
pub const FILES: [&str; 4] = [
    "node_stats.parquet",
    "activation_stats.parquet",
    "memory_timeline.parquet",
    "flops.parquet",
];

/// Writes one Parquet file into the directory.
type Writer = fn(&Path, &Trace, &Analysis) -> Result<(), Error>;

/// The Parquet files, one writer each, so the report runs them side by side.
pub(super) fn writers() -> [Writer; 4] {
    [node_stats, activation_stats, memory_timeline, flops]
}

/// The Parquet copies of a snapshot analysis's timeline and top sites
/// ([`super::snapshot::PARQUET_FILES`]): the rows and columns of `memory_timeline.csv` and
/// `top_sites.csv`, with the times and shares at full precision.
pub(super) fn write_snapshot(
    dir: &Path,
    a: &crate::analysis::snapshot::SnapshotAnalysis,
) -> Result<(), Error> {
    use super::snapshot::{timeline_rows, top_site_rows, TimelineRow};
    let tl: Vec<TimelineRow> = timeline_rows(a).collect();
    write(
        &dir.join("memory_timeline.parquet"),
        vec![
            col("device", tl.iter().map(|r| r.device).collect::<Vec<i64>>()),
            col(
                "entry",
                tl.iter().map(|r| r.entry as u64).collect::<Vec<u64>>(),
            ),
            col(
                "time_ms",
                tl.iter().map(|r| r.time_ms).collect::<Vec<Option<f64>>>(),
            ),
            col(
                "allocated_bytes",
                tl.iter().map(|r| r.allocated_bytes).collect::<Vec<u64>>(),
            ),
            col(
                "reserved_bytes",
                tl.iter().map(|r| r.reserved_bytes).collect::<Vec<u64>>(),
            ),
        ],
    )?;
    let sites = top_site_rows(a);
    write(
        &dir.join("top_sites.parquet"),
        vec![
            col(
                "device",
                sites.iter().map(|r| r.device).collect::<Vec<i64>>(),
            ),
            col(
                "by",
                sites.iter().map(|r| r.by.as_str()).collect::<Vec<&str>>(),
            ),
            col("site", sites.iter().map(|r| r.site).collect::<Vec<&str>>()),
            col(
                "kind",
                sites.iter().map(|r| r.kind.name()).collect::<Vec<&str>>(),
            ),
            col("bytes", sites.iter().map(|r| r.bytes).collect::<Vec<u64>>()),
            col(
                "blocks",
                sites.iter().map(|r| r.blocks as u64).collect::<Vec<u64>>(),
            ),
            col(
                "pct_of_peak",
                sites
                    .iter()
                    .map(|r| r.pct_of_peak)
                    .collect::<Vec<Option<f64>>>(),
            ),
        ],
    )
}
