//! Parquet copies of the main tables, through polars (the only module that imports it).
//! Column names and values are those of the CSV files of the same name.

use crate::file_error::FileError;
use std::path::Path;

use polars::prelude::*;

use super::Error;
use crate::analysis::memory::CATEGORIES;
use crate::analysis::Analysis;
use crate::model::Trace;

mod ranks;
pub use ranks::{read_ranks, write_rank};

/// Files written.
pub const FILES: [&str; 4] = [
    "node_stats.parquet",
    "activation_stats.parquet",
    "memory_timeline.parquet",
    "flops.parquet",
];

fn write(path: &Path, columns: Vec<Column>) -> Result<(), Error> {
    let fail =
        |e: PolarsError| Error::from(FileError::new(path, std::io::Error::other(e.to_string())));
    let mut df = DataFrame::new_infer_height(columns).map_err(fail)?;
    let f = super::create(path)?;
    // Columns serialized on this thread: the four files are already written side by side with
    // the other outputs, and handing each column to polars' own pool made every file wait on
    // it (the last Parquet file done at +0.046 s of the writing stage against +0.021 s
    // serial, byte-identical files, the benchmark trace on 2 cores).
    ParquetWriter::new(f)
        .set_parallel(false)
        .finish(&mut df)
        .map_err(fail)?;
    Ok(())
}

fn col<T, P>(name: &str, v: T) -> Column
where
    Series: NamedFrom<T, P>,
    P: ?Sized,
    T: AsRef<P>,
{
    Column::new(name.into(), v)
}

/// Writes one Parquet file into the directory.
type Writer = fn(&Path, &Trace, &Analysis) -> Result<(), Error>;

/// The Parquet files, one writer each, so the report runs them side by side.
pub(super) fn writers() -> [Writer; 4] {
    [node_stats, activation_stats, memory_timeline, flops]
}

fn node_stats(dir: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    use crate::analysis::NodeStat;
    let n = &a.node_stats;
    // Borrowed texts: a `String` per cell was most of this file's time.
    fn s<'a>(n: &'a [NodeStat], f: impl Fn(&'a NodeStat) -> &'a str) -> Vec<&'a str> {
        n.iter().map(f).collect()
    }
    let opt = |id| super::opt(t, id);
    write(
        &dir.join("node_stats.parquet"),
        vec![
            col("rank", n.iter().map(|x| x.rank).collect::<Vec<u32>>()),
            col("node_name", s(n, |x| &x.node_name)),
            col("op", s(n, |x| t.kineto.str(x.op))),
            col("node_type", s(n, |x| x.node_type.as_str())),
            col("gtype", s(n, |x| x.gtype.as_str())),
            col("module", s(n, |x| opt(x.module))),
            col("autograd_fn", s(n, |x| opt(x.autograd_fn))),
            col(
                "recompute",
                n.iter().map(|x| x.recompute).collect::<Vec<bool>>(),
            ),
            col(
                "median_run_time_s",
                n.iter().map(|x| x.median_run_time_s).collect::<Vec<f64>>(),
            ),
            col(
                "median_cpu_time_s",
                n.iter().map(|x| x.median_cpu_time_s).collect::<Vec<f64>>(),
            ),
            col(
                "median_gpu_span_s",
                n.iter().map(|x| x.median_gpu_span_s).collect::<Vec<f64>>(),
            ),
            col(
                "median_peak_mem_bytes",
                n.iter()
                    .map(|x| x.median_peak_mem_bytes)
                    .collect::<Vec<i64>>(),
            ),
            col(
                "median_active_mem_bytes",
                n.iter()
                    .map(|x| x.median_active_mem_bytes)
                    .collect::<Vec<i64>>(),
            ),
            col(
                "median_alloc_bytes",
                n.iter().map(|x| x.median_alloc_bytes).collect::<Vec<i64>>(),
            ),
            col(
                "median_free_bytes",
                n.iter().map(|x| x.median_free_bytes).collect::<Vec<i64>>(),
            ),
            col("kernels", n.iter().map(|x| x.kernels).collect::<Vec<i64>>()),
            col("device", s(n, |x| &x.device)),
            col(
                "iterations_present",
                n.iter().map(|x| x.iterations_present).collect::<Vec<u32>>(),
            ),
        ],
    )
}

fn activation_stats(dir: &Path, _: &Trace, a: &Analysis) -> Result<(), Error> {
    let act = &a.liveness.activations;
    write(
        &dir.join("activation_stats.parquet"),
        vec![
            col(
                "activation_name",
                act.iter()
                    .map(|x| x.activation_name.clone())
                    .collect::<Vec<String>>(),
            ),
            col(
                "creation_rank",
                act.iter().map(|x| x.creation_rank).collect::<Vec<u32>>(),
            ),
            col(
                "last_fw_use_rank",
                act.iter().map(|x| x.last_fw_use_rank).collect::<Vec<u32>>(),
            ),
            col(
                "first_bw_use_rank",
                act.iter()
                    .map(|x| x.first_bw_use_rank)
                    .collect::<Vec<u32>>(),
            ),
            col(
                "last_bw_use_rank",
                act.iter().map(|x| x.last_bw_use_rank).collect::<Vec<u32>>(),
            ),
            col(
                "median_mem_size_bytes",
                act.iter()
                    .map(|x| x.median_mem_size_bytes)
                    .collect::<Vec<i64>>(),
            ),
            col(
                "inactive_time_s",
                act.iter().map(|x| x.inactive_time_s).collect::<Vec<f64>>(),
            ),
            col(
                "recomp_time_s",
                act.iter().map(|x| x.recomp_time_s).collect::<Vec<f64>>(),
            ),
            col(
                "recomp_memory_bytes",
                act.iter()
                    .map(|x| x.recomp_memory_bytes)
                    .collect::<Vec<i64>>(),
            ),
            col(
                "swap_time_s",
                act.iter().map(|x| x.swap_time_s).collect::<Vec<f64>>(),
            ),
            col(
                "recompute_ratio",
                act.iter().map(|x| x.recompute_ratio).collect::<Vec<f64>>(),
            ),
            col(
                "producer_op",
                act.iter()
                    .map(|x| x.producer_op.clone())
                    .collect::<Vec<String>>(),
            ),
            col(
                "module",
                act.iter()
                    .map(|x| x.module.clone())
                    .collect::<Vec<String>>(),
            ),
            col(
                "storage_id",
                act.iter().map(|x| x.storage_id).collect::<Vec<i64>>(),
            ),
        ],
    )
}

fn memory_timeline(dir: &Path, t: &Trace, a: &Analysis) -> Result<(), Error> {
    let tl = &a.timeline;
    let t0 = t.memory.first().map_or(0, |m| m.ts);
    let mut cols = vec![
        col(
            "time_ns",
            tl.iter().map(|r| r.ts - t0).collect::<Vec<i64>>(),
        ),
        col(
            "total_allocated_bytes",
            tl.iter().map(|r| r.total).collect::<Vec<i64>>(),
        ),
    ];
    for (i, c) in CATEGORIES.iter().enumerate() {
        cols.push(col(
            c.key(),
            tl.iter().map(|r| r.breakdown[i]).collect::<Vec<i64>>(),
        ));
    }
    write(&dir.join("memory_timeline.parquet"), cols)
}

fn flops(dir: &Path, _: &Trace, a: &Analysis) -> Result<(), Error> {
    let f = &a.flops;
    write(
        &dir.join("flops.parquet"),
        vec![
            col("rank", f.iter().map(|x| x.rank).collect::<Vec<u32>>()),
            col(
                "node_name",
                f.iter()
                    .map(|x| x.node_name.clone())
                    .collect::<Vec<String>>(),
            ),
            col("flops", f.iter().map(|x| x.flops).collect::<Vec<u64>>()),
            col(
                "matmul_flops",
                f.iter().map(|x| x.matmul_flops).collect::<Vec<u64>>(),
            ),
            col("bytes", f.iter().map(|x| x.bytes).collect::<Vec<u64>>()),
            col(
                "arithmetic_intensity",
                f.iter()
                    .map(|x| x.arithmetic_intensity)
                    .collect::<Vec<f64>>(),
            ),
            col(
                "dtype",
                f.iter()
                    .map(|x| x.dtype.as_str().to_owned())
                    .collect::<Vec<String>>(),
            ),
            col(
                "achieved_tflops",
                f.iter().map(|x| x.achieved_tflops).collect::<Vec<f64>>(),
            ),
            col(
                "bound",
                f.iter()
                    .map(|x| x.bound.map_or("", |b| b.as_str()).to_owned())
                    .collect::<Vec<String>>(),
            ),
        ],
    )
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
