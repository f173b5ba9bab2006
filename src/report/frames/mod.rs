//! Parquet copies of the main tables, through polars (the only module that imports it).
//! Column names and values are those of the CSV files of the same name.

use std::path::Path;

use super::Error;
use crate::analysis::Analysis;
use crate::model::Trace;

mod columns;
mod cross_ranks;
mod ranks;
mod steps;
mod tables;
use columns::{col, write};
pub use cross_ranks::ranks_parquet_bytes;
pub(crate) use cross_ranks::write_ranks_table;
pub use ranks::{read_ranks, write_rank};

/// A table of an analysis with a typed Parquet copy: its columns and values are those of the
/// CSV file of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `node_stats`: per-node medians.
    NodeStats,
    /// `activation_stats`: each activation's size and lifetime.
    ActivationStats,
    /// `memory_timeline`: allocated bytes by category over time.
    MemoryTimeline,
    /// `flops`: each node's FLOPs and roofline.
    Flops,
    /// `node_iterations`: each node of each iteration.
    NodeIterations,
    /// `iterations`: each iteration's times, peak and wall time by phase.
    Iterations,
    /// `kernels`: GPU time per kernel name.
    Kernels,
    /// `streams`: each CUDA stream's activities and busy time.
    Streams,
    /// `flops_by_op`: FLOPs and time summed per op.
    FlopsByOp,
    /// `flops_by_module`: FLOPs and time summed per top-level module.
    FlopsByModule,
    /// `idle_time`: each stream's idle time by cause (why the GPU waits).
    IdleTime,
    /// `launches`: each launched GPU activity's launch call, GPU time and launch delay.
    Launches,
    /// `critical_path`: each iteration's critical path, stretch by stretch.
    CriticalPath,
}

/// Every table, in the order their files are listed.
pub const TABLES: [Table; 13] = [
    Table::NodeStats,
    Table::ActivationStats,
    Table::MemoryTimeline,
    Table::Flops,
    Table::NodeIterations,
    Table::Iterations,
    Table::Kernels,
    Table::Streams,
    Table::FlopsByOp,
    Table::FlopsByModule,
    Table::IdleTime,
    Table::Launches,
    Table::CriticalPath,
];

impl Table {
    /// Its name: the file's stem.
    pub fn name(self) -> &'static str {
        match self {
            Table::NodeStats => "node_stats",
            Table::ActivationStats => "activation_stats",
            Table::MemoryTimeline => "memory_timeline",
            Table::Flops => "flops",
            Table::NodeIterations => "node_iterations",
            Table::Iterations => "iterations",
            Table::Kernels => "kernels",
            Table::Streams => "streams",
            Table::FlopsByOp => "flops_by_op",
            Table::FlopsByModule => "flops_by_module",
            Table::IdleTime => "idle_time",
            Table::Launches => "launches",
            Table::CriticalPath => "critical_path",
        }
    }

    /// The table of that name.
    pub fn from_name(name: &str) -> Option<Table> {
        TABLES.into_iter().find(|t| t.name() == name)
    }

    fn columns(self, t: &Trace, a: &Analysis) -> Vec<polars::prelude::Column> {
        match self {
            Table::NodeStats => tables::node_stats_columns(t, a),
            Table::ActivationStats => tables::activation_stats_columns(t, a),
            Table::MemoryTimeline => tables::memory_timeline_columns(t, a),
            Table::Flops => tables::flops_columns(t, a),
            Table::NodeIterations => steps::node_iterations_columns(t, a),
            Table::Iterations => steps::iterations_columns(t, a),
            Table::Kernels => steps::kernels_columns(t, a),
            Table::Streams => steps::streams_columns(t, a),
            Table::FlopsByOp => steps::rollup_columns("op", &crate::report::flops::by_op(a)),
            Table::FlopsByModule => {
                steps::rollup_columns("module", &crate::report::flops::by_module(a))
            }
            Table::IdleTime => steps::idle_columns(a),
            Table::Launches => steps::launches_columns(t, a),
            Table::CriticalPath => steps::critical_path_columns(t, a),
        }
    }

    /// Its Parquet file's name.
    pub fn file_name(self) -> String {
        format!("{}.parquet", self.name())
    }

    /// Writes `<name>.parquet` into `dir`.
    pub fn write(self, dir: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
        write(&dir.join(self.file_name()), self.columns(t, a))
    }

    /// The same file's bytes, in memory (the Python module hands them to polars).
    pub fn parquet_bytes(self, t: &Trace, a: &Analysis) -> Result<Vec<u8>, Error> {
        columns::to_bytes(self.name(), self.columns(t, a))
    }
}

/// The Parquet copies of a snapshot analysis's timeline and top sites
/// ([`super::snapshot::PARQUET_FILES`]): the rows and columns of `memory_timeline.csv` and
/// `top_sites.csv`, with the times and shares at full precision.
pub(super) fn write_snapshot(
    dir: &Path,
    a: &crate::analysis::snapshot::SnapshotAnalysis,
) -> Result<(), Error> {
    for name in SNAPSHOT_TABLES {
        write(
            &dir.join(format!("{name}.parquet")),
            snapshot_columns(name, a).unwrap_or_default(),
        )?;
    }
    Ok(())
}

/// The tables of a snapshot analysed alone that have Parquet copies.
pub const SNAPSHOT_TABLES: [&str; 2] = ["memory_timeline", "top_sites"];

/// A snapshot table's Parquet file in memory (one of [`SNAPSHOT_TABLES`]; `None` for another
/// name).
pub fn snapshot_parquet_bytes(
    name: &str,
    a: &crate::analysis::snapshot::SnapshotAnalysis,
) -> Option<Result<Vec<u8>, Error>> {
    snapshot_columns(name, a).map(|c| columns::to_bytes(name, c))
}

fn snapshot_columns(
    name: &str,
    a: &crate::analysis::snapshot::SnapshotAnalysis,
) -> Option<Vec<polars::prelude::Column>> {
    use super::snapshot::{timeline_rows, top_site_rows, TimelineRow};
    match name {
        "memory_timeline" => {
            let tl: Vec<TimelineRow> = timeline_rows(a).collect();
            Some(vec![
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
            ])
        }
        "top_sites" => {
            let sites = top_site_rows(a);
            Some(vec![
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
            ])
        }
        _ => None,
    }
}
