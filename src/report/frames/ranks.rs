//! Per-rank Parquet: a rank's results written for a merge elsewhere, and read back by `merge`
//! (the schema is in docs/distributed.md).

use std::path::Path;

use polars::prelude::*;

use super::columns::{col, write};
use crate::file_error::FileError;
use crate::report::Error;

/// A rank's results for a merge elsewhere: `rank<N>.summary.parquet` (one row) and
/// `rank<N>.nodes.parquet` (one row per node) in `dir`. The schema is in docs/distributed.md.
pub fn write_rank(dir: &Path, r: &crate::analysis::ranks::RankResult) -> Result<(), Error> {
    let g = &r.gpu;
    write(
        &dir.join(format!("rank{}.summary.parquet", r.rank)),
        vec![
            col("rank", [r.rank]),
            col("trace", [r.trace.as_str()]),
            col("iterations", [r.iterations as u64]),
            col("step_time_s", [r.step_time_s]),
            col("step_time_instrumented_s", [r.step_time_instrumented_s]),
            col(
                "slowest_iteration",
                [r.slowest_iteration().map(|s| s.0 as u64)],
            ),
            col("slowest_iteration_s", [r.slowest_iteration().map(|s| s.1)]),
            col("gpu_span_ns", [g.span_ns]),
            col("idle_ns", [g.idle_ns]),
            col("compute_ns", [g.compute_ns]),
            col("non_compute_ns", [g.non_compute_ns]),
            col("communication_ns", [g.communication_ns]),
            col("memory_ns", [g.memory_ns]),
            col("comm_comp_overlap_pct", [g.comm_comp_overlap_pct]),
            col("peak_allocated_bytes", [r.peak_allocated_bytes]),
            col("own_optimizer_step_s", [r.own_optimizer_step_s]),
        ],
    )?;
    let co = &r.collective_overlap;
    write(
        &dir.join(format!("rank{}.collective_overlap.parquet", r.rank)),
        vec![
            col("rank", vec![r.rank; co.len()]),
            col(
                "collective",
                co.keys().map(String::as_str).collect::<Vec<_>>(),
            ),
            col(
                "communication_ns",
                co.values().map(|c| c.communication_ns).collect::<Vec<_>>(),
            ),
            col(
                "overlapped_ns",
                co.values().map(|c| c.overlapped_ns).collect::<Vec<_>>(),
            ),
        ],
    )?;
    write(
        &dir.join(format!("rank{}.iterations.parquet", r.rank)),
        vec![
            col("rank", vec![r.rank; r.step_times_s.len()]),
            col(
                "iteration",
                (0..r.step_times_s.len() as u64).collect::<Vec<u64>>(),
            ),
            col("step_time_s", r.step_times_s.clone()),
        ],
    )?;
    let c = &r.collectives;
    write(
        &dir.join(format!("rank{}.collectives.parquet", r.rank)),
        vec![
            col("rank", vec![r.rank; c.len()]),
            col(
                "iteration",
                c.iter().map(|c| c.iteration.as_str()).collect::<Vec<_>>(),
            ),
            col("pg", c.iter().map(|c| c.pg.as_str()).collect::<Vec<_>>()),
            col("seq", c.iter().map(|c| c.seq).collect::<Vec<_>>()),
            col("op", c.iter().map(|c| c.op.as_str()).collect::<Vec<_>>()),
            col(
                "dtype",
                c.iter().map(|c| c.dtype.as_str()).collect::<Vec<_>>(),
            ),
            col(
                "in_nelems",
                c.iter().map(|c| c.in_nelems).collect::<Vec<_>>(),
            ),
            col(
                "out_nelems",
                c.iter().map(|c| c.out_nelems).collect::<Vec<_>>(),
            ),
            col("start_ns", c.iter().map(|c| c.start_ns).collect::<Vec<_>>()),
            col("dur_ns", c.iter().map(|c| c.dur_ns).collect::<Vec<_>>()),
        ],
    )?;
    write(
        &dir.join(format!("rank{}.nodes.parquet", r.rank)),
        vec![
            col("rank", vec![r.rank; r.nodes.len()]),
            col(
                "node",
                r.nodes.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
            ),
            col(
                "median_run_time_s",
                r.nodes.iter().map(|n| n.1).collect::<Vec<_>>(),
            ),
            col(
                "median_cpu_time_s",
                r.nodes.iter().map(|n| n.2).collect::<Vec<_>>(),
            ),
        ],
    )
}

/// A Parquet file read whole, with its path for errors.
struct Frame {
    path: std::path::PathBuf,
    df: DataFrame,
}

/// The most rows each of a rank's tables may declare, checked against the count in the file's
/// footer before any row is read: a 10 KB file can declare 10^8 rows (a run-length-encoded
/// column), and reading them all aborted a merge at 6.3 GB. Far above what steptrace writes:
/// one summary row, a row per profiled step, a row per node of the step (84k in the largest
/// corpus run), a row per collective call of the window, a row per kind of collective.
#[derive(Debug, Clone, Copy)]
enum MaxRows {
    Summary,
    Iterations,
    Nodes,
    Collectives,
    Overlap,
}

impl MaxRows {
    const fn rows(self) -> usize {
        match self {
            MaxRows::Summary => 1,
            MaxRows::Iterations => 1 << 20,
            MaxRows::Nodes => 1 << 22,
            // Each row read costs about 250 bytes until the merge is written (two ranks of
            // 4M: 2.0 GB); a window of FSDP over a 100-layer model launches about 10^4.
            MaxRows::Collectives => 1 << 22,
            MaxRows::Overlap => 1 << 16,
        }
    }
}

impl Frame {
    /// The table in `path`, refused before any row is read when its file declares more than
    /// `max_rows` (see [`MaxRows`]).
    fn read(path: std::path::PathBuf, max_rows: MaxRows) -> Result<Frame, Error> {
        // Only a regular file is opened: opening a FIFO named like a table waits for a writer
        // that never comes (`merge` hung).
        let meta = std::fs::metadata(&path).map_err(crate::report::io(&path))?;
        if !meta.is_file() {
            return Err(Error::from(FileError::new(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file: not a table steptrace wrote",
                ),
            )));
        }
        let f = std::fs::File::open(&path).map_err(crate::report::io(&path))?;
        let mut reader = ParquetReader::new(f);
        let rows = reader.num_rows().map_err(|e| Frame::bad(&path, e))?;
        if rows > max_rows.rows() {
            return Err(Error::from(FileError::new(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "declares {rows} rows, more than a rank's table of this kind holds (at most {}): not a table steptrace wrote",
                        max_rows.rows()
                    ),
                ),
            )));
        }
        let df = reader.finish().map_err(|e| Frame::bad(&path, e))?;
        Ok(Frame { path, df })
    }

    fn bad(path: &Path, e: PolarsError) -> Error {
        Error::from(FileError::new(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        ))
    }

    /// Column `c` as `dt` (a cast where the file stored another width).
    fn column(&self, c: &str, dt: &DataType) -> Result<Series, Error> {
        let e = |e| Frame::bad(&self.path, e);
        let col = self.df.column(c).map_err(e)?.cast(dt).map_err(e)?;
        Ok(col.as_materialized_series().clone())
    }

    fn f64s(&self, c: &str) -> Result<Vec<Option<f64>>, Error> {
        let s = self.column(c, &DataType::Float64)?;
        let ca = s.f64().map_err(|e| Frame::bad(&self.path, e))?;
        Ok((0..ca.len()).map(|i| ca.get(i)).collect())
    }

    fn i64s(&self, c: &str) -> Result<Vec<Option<i64>>, Error> {
        let s = self.column(c, &DataType::Int64)?;
        let ca = s.i64().map_err(|e| Frame::bad(&self.path, e))?;
        Ok((0..ca.len()).map(|i| ca.get(i)).collect())
    }

    fn strs(&self, c: &str) -> Result<Vec<String>, Error> {
        let s = self.column(c, &DataType::String)?;
        let ca = s.str().map_err(|e| Frame::bad(&self.path, e))?;
        Ok((0..ca.len())
            .map(|i| ca.get(i).unwrap_or_default().to_owned())
            .collect())
    }

    /// The first row's value of an integer column that must be there.
    fn i64_first(&self, c: &str) -> Result<i64, Error> {
        self.i64s(c)?.first().copied().flatten().ok_or_else(|| {
            Error::from(FileError::new(
                &self.path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("no {c}")),
            ))
        })
    }

    fn f64_first(&self, c: &str) -> Result<Option<f64>, Error> {
        Ok(self.f64s(c)?.first().copied().flatten())
    }

    /// The same, `None` where a file written before the column was kept lacks it.
    fn f64_first_if_any(&self, c: &str) -> Result<Option<f64>, Error> {
        if self.df.column(c).is_err() {
            return Ok(None);
        }
        self.f64_first(c)
    }
}

/// The communication by collective of a `rank<N>.collective_overlap.parquet`.
fn read_collective_overlap(
    f: &Frame,
) -> Result<std::collections::BTreeMap<String, crate::analysis::kernels::CollectiveOverlap>, Error>
{
    let (k, comm, over) = (
        f.strs("collective")?,
        f.i64s("communication_ns")?,
        f.i64s("overlapped_ns")?,
    );
    Ok((0..k.len())
        .map(|i| {
            let c = crate::analysis::kernels::CollectiveOverlap {
                communication_ns: comm[i].unwrap_or(0),
                overlapped_ns: over[i].unwrap_or(0),
            };
            (k[i].clone(), c)
        })
        .collect())
}

/// The collectives of a `rank<N>.collectives.parquet`.
fn read_calls(f: &Frame) -> Result<Vec<crate::analysis::collectives::Call>, Error> {
    use crate::analysis::collectives::{Call, Names};
    let bad = |e| Frame::bad(&f.path, e);
    let text = |c| f.column(c, &DataType::String);
    let int = |c| f.column(c, &DataType::Int64);
    let (it, pg, op, dtype) = (text("iteration")?, text("pg")?, text("op")?, text("dtype")?);
    let (seq, inn, out) = (int("seq")?, int("in_nelems")?, int("out_nelems")?);
    let (start, dur) = (int("start_ns")?, int("dur_ns")?);
    // Straight from the columns: a rank's collectives run to millions of rows, and a vector
    // per column beside the frame more than doubled what reading them took. The few texts
    // they repeat are shared names.
    let mut names = Names::default();
    let mut rows = Vec::with_capacity(it.len());
    let texts = it
        .str()
        .map_err(bad)?
        .iter()
        .zip(pg.str().map_err(bad)?.iter());
    let texts = texts.zip(
        op.str()
            .map_err(bad)?
            .iter()
            .zip(dtype.str().map_err(bad)?.iter()),
    );
    let sizes = inn
        .i64()
        .map_err(bad)?
        .iter()
        .zip(out.i64().map_err(bad)?.iter());
    let times = start
        .i64()
        .map_err(bad)?
        .iter()
        .zip(dur.i64().map_err(bad)?.iter());
    let cells = texts
        .zip(seq.i64().map_err(bad)?.iter())
        .zip(sizes.zip(times));
    for ((((i, p), (o, d)), s), ((inn, out), (start, dur))) in cells {
        let s = s.unwrap_or(0);
        let mut name = |v: Option<&str>| names.get(v.unwrap_or_default());
        rows.push(Call {
            iteration: name(i),
            pg: name(p),
            seq: u32::try_from(s).map_err(|_| out_of_range(&f.path, "seq", s))?,
            op: name(o),
            dtype: name(d),
            in_nelems: inn,
            out_nelems: out,
            start_ns: start.unwrap_or(0),
            dur_ns: dur.unwrap_or(0),
        });
    }
    Ok(rows)
}

/// One rank's results: its summary file at `p` and the files beside it.
fn read_rank(p: &std::path::Path) -> Result<crate::analysis::ranks::RankResult, Error> {
    use crate::analysis::kernels::Temporal;
    use crate::analysis::ranks::RankResult;
    let s = Frame::read(p.to_path_buf(), MaxRows::Summary)?;
    let rank = s.i64_first("rank")?;
    // The rank its name says (`rank<N>.summary.parquet`) is the one it holds: a rank's files
    // copied under another's name would count it twice.
    let named = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .and_then(|n| {
            n.strip_prefix("rank")?
                .split('.')
                .next()?
                .parse::<i64>()
                .ok()
        });
    if named.is_some_and(|n| n != rank) {
        return Err(Error::from(FileError::new(
            p,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("holds rank {rank}, not the rank its name says"),
            ),
        )));
    }
    let sibling = |what: &str| p.with_file_name(format!("rank{rank}.{what}.parquet"));
    let it = Frame::read(sibling("iterations"), MaxRows::Iterations)?;
    let nd = Frame::read(sibling("nodes"), MaxRows::Nodes)?;
    let (gpu, cpu) = (nd.f64s("median_run_time_s")?, nd.f64s("median_cpu_time_s")?);
    let nodes = nd
        .strs("node")?
        .into_iter()
        .zip(gpu.into_iter().zip(cpu))
        .map(|(n, (g, c))| (n, g.unwrap_or(0.0), c.unwrap_or(0.0)))
        .collect();
    // Written since collectives were matched; a rank written before has none.
    let calls = sibling("collectives");
    let collectives = if calls.exists() {
        read_calls(&Frame::read(calls, MaxRows::Collectives)?)?
    } else {
        Vec::new()
    };
    let r = RankResult {
        collectives,
        rank,
        trace: s.strs("trace")?.into_iter().next().unwrap_or_default(),
        iterations: {
            let n = s.i64_first("iterations")?;
            if !(0..=MaxRows::Iterations.rows() as i64).contains(&n) {
                return Err(out_of_range(p, "iterations", n));
            }
            n as usize
        },
        step_time_s: s.f64_first("step_time_s")?.unwrap_or(0.0),
        step_time_instrumented_s: s.f64_first("step_time_instrumented_s")?.unwrap_or(0.0),
        own_optimizer_step_s: s.f64_first_if_any("own_optimizer_step_s")?,
        // Written since it was kept; a rank written before has none.
        collective_overlap: {
            let p = sibling("collective_overlap");
            if p.exists() {
                read_collective_overlap(&Frame::read(p, MaxRows::Overlap)?)?
            } else {
                Default::default()
            }
        },
        // The summary keeps the two step times: they differ where capture timed the program.
        profiler_cost_s: match (
            s.f64_first("step_time_s")?,
            s.f64_first("step_time_instrumented_s")?,
        ) {
            (Some(own), Some(instr)) if own > 0.0 && instr != own => Some((instr - own).max(0.0)),
            _ => None,
        },
        step_times_s: it
            .f64s("step_time_s")?
            .into_iter()
            .map(|v| v.unwrap_or(0.0))
            .collect(),
        gpu: Temporal {
            span_ns: s.i64_first("gpu_span_ns")?,
            idle_ns: s.i64_first("idle_ns")?,
            compute_ns: s.i64_first("compute_ns")?,
            non_compute_ns: s.i64_first("non_compute_ns")?,
            communication_ns: s.i64_first("communication_ns")?,
            memory_ns: s.i64_first("memory_ns")?,
            comm_comp_overlap_pct: s.f64_first("comm_comp_overlap_pct")?,
        },
        peak_allocated_bytes: s.i64s("peak_allocated_bytes")?.first().copied().flatten(),
        nodes,
    };
    check_ranges(p, &r)?;
    Ok(r)
}

/// A value of a rank's tables that steptrace never writes (a negative duration or size, a
/// wrapped count, a time that is not a number): one line naming the file and the column.
fn out_of_range(p: &Path, column: &str, v: impl std::fmt::Display) -> Error {
    Error::from(FileError::new(
        p,
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{column} = {v} is out of range"),
        ),
    ))
}

/// Every figure of a rank read back within what [`write_rank`] writes: times finite and not
/// negative, durations, sizes and counts not negative, shares within 0-100%. The file named is
/// the table the column is in.
fn check_ranges(p: &Path, r: &crate::analysis::ranks::RankResult) -> Result<(), Error> {
    let table = |what: &str| p.with_file_name(format!("rank{}.{what}.parquet", r.rank));
    let secs = |f: &Path, column: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(out_of_range(f, column, v))
        }
    };
    let count = |f: &Path, column: &str, v: i64| {
        if v >= 0 {
            Ok(())
        } else {
            Err(out_of_range(f, column, v))
        }
    };
    secs(p, "step_time_s", r.step_time_s)?;
    secs(p, "step_time_instrumented_s", r.step_time_instrumented_s)?;
    if let Some(v) = r.own_optimizer_step_s {
        secs(p, "own_optimizer_step_s", v)?;
    }
    let g = &r.gpu;
    for (column, v) in [
        ("gpu_span_ns", g.span_ns),
        ("idle_ns", g.idle_ns),
        ("compute_ns", g.compute_ns),
        ("non_compute_ns", g.non_compute_ns),
        ("communication_ns", g.communication_ns),
        ("memory_ns", g.memory_ns),
        ("peak_allocated_bytes", r.peak_allocated_bytes.unwrap_or(0)),
    ] {
        count(p, column, v)?;
    }
    if let Some(pct) = g.comm_comp_overlap_pct {
        // A share of two integer nanosecond counts: 100% at most, up to rounding.
        if !(0.0..=100.0 + 1e-9).contains(&pct) {
            return Err(out_of_range(p, "comm_comp_overlap_pct", pct));
        }
    }
    for &v in &r.step_times_s {
        secs(&table("iterations"), "step_time_s", v)?;
    }
    for (_, gpu, cpu) in &r.nodes {
        secs(&table("nodes"), "median_run_time_s", *gpu)?;
        secs(&table("nodes"), "median_cpu_time_s", *cpu)?;
    }
    for c in r.collective_overlap.values() {
        count(
            &table("collective_overlap"),
            "communication_ns",
            c.communication_ns,
        )?;
        count(
            &table("collective_overlap"),
            "overlapped_ns",
            c.overlapped_ns,
        )?;
    }
    for c in &r.collectives {
        let f = table("collectives");
        count(&f, "dur_ns", c.dur_ns)?;
        count(&f, "in_nelems", c.in_nelems.unwrap_or(0))?;
        count(&f, "out_nelems", c.out_nelems.unwrap_or(0))?;
    }
    Ok(())
}

/// Reads back every rank written by [`write_rank`] in `dirs`, in rank order.
pub fn read_ranks(
    dirs: &[std::path::PathBuf],
) -> Result<Vec<crate::analysis::ranks::RankResult>, Error> {
    let mut names: Vec<std::path::PathBuf> = Vec::new();
    for d in dirs {
        let rd = std::fs::read_dir(d).map_err(crate::report::io(d))?;
        let mut here: Vec<std::path::PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(".summary.parquet"))
            })
            .collect();
        here.sort();
        names.extend(here);
    }
    // Ranks are read on all threads: a thousand ranks are four thousand small files. The
    // first error in name order is the one reported, whatever the threads. Not on rayon's
    // workers: polars reads on its own pool, and a rayon worker waiting for it runs other
    // ranks' reads meanwhile, each on top of the last; at about a thousand ranks the stack
    // overflowed. Plain threads, a run of names each, wait without taking other work.
    let threads = rayon::current_num_threads().max(1);
    let per_thread = names.len().div_ceil(threads).max(1);
    let read: Vec<Result<_, Error>> = std::thread::scope(|sc| {
        let parts: Vec<_> = names
            .chunks(per_thread)
            .map(|part| sc.spawn(move || part.iter().map(|p| read_rank(p)).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let out = read.into_iter().collect::<Result<Vec<_>, Error>>()?;
    // Each rank once: a folder given twice would count its ranks twice (waits doubled, no
    // word of it).
    let bad = |p: &std::path::Path, what: String| {
        Error::from(FileError::new(
            p,
            std::io::Error::new(std::io::ErrorKind::InvalidData, what),
        ))
    };
    let mut seen: std::collections::BTreeMap<i64, &std::path::Path> = Default::default();
    for (p, r) in names.iter().zip(&out) {
        if let Some(first) = seen.insert(r.rank, p) {
            return Err(bad(
                p,
                format!(
                    "rank {} again (also in {}): each rank once (a folder given twice?)",
                    r.rank,
                    first.display()
                ),
            ));
        }
    }
    let mut out = out;
    out.sort_by_key(|r| r.rank);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_declaring_more_rows_than_its_kind_holds_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rank0.summary.parquet");
        let mut df = df!("rank" => [0i64, 0]).unwrap();
        ParquetWriter::new(std::fs::File::create(&p).unwrap())
            .finish(&mut df)
            .unwrap();
        let e = Frame::read(p.clone(), MaxRows::Summary)
            .err()
            .expect("two summary rows refused")
            .to_string();
        assert!(
            e.contains("declares 2 rows") && e.contains("rank0.summary.parquet"),
            "{e}"
        );
        assert_eq!(Frame::read(p, MaxRows::Iterations).unwrap().df.height(), 2);
    }

    /// 1,500 ranks: read on rayon's workers, the reads nested while each waited on polars'
    /// pool, and a merge of 1,024-2,000 ranks overflowed its stack in most runs.
    #[test]
    fn reading_thousands_of_ranks_does_not_nest_reads_on_one_stack() {
        use crate::analysis::ranks::RankResult;
        let dir = tempfile::tempdir().unwrap();
        let folder = crate::report::out_dir::Writer::open(dir.path()).unwrap();
        let n = 1500;
        for rank in 0..n {
            let r = RankResult {
                rank,
                trace: format!("trace_rank{rank}.json"),
                iterations: 1,
                step_time_s: 0.01,
                step_time_instrumented_s: 0.01,
                step_times_s: vec![0.01],
                profiler_cost_s: None,
                own_optimizer_step_s: None,
                gpu: Default::default(),
                collective_overlap: Default::default(),
                peak_allocated_bytes: Some(rank),
                nodes: vec![("forward:n".into(), 0.001, 0.002)],
                collectives: Vec::new(),
            };
            write_rank(dir.path(), &r).unwrap();
        }
        folder.finish().unwrap();
        let read = read_ranks(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(read.len(), n as usize);
        assert!(read
            .iter()
            .enumerate()
            .all(|(i, r)| r.rank == i as i64 && r.peak_allocated_bytes == Some(i as i64)));
    }

    /// Merged tables with figures steptrace never writes (a negative wait, a time that is not
    /// a number, a negative iteration count that wrapped, a share over 100%) are refused with
    /// one line naming the file and the column, not taken into the ranks table.
    #[test]
    fn out_of_range_figures_in_a_ranks_tables_are_refused_naming_file_and_column() {
        use crate::analysis::ranks::RankResult;
        let good = RankResult {
            rank: 0,
            trace: "t.json".into(),
            iterations: 2,
            step_time_s: 0.01,
            step_time_instrumented_s: 0.02,
            step_times_s: vec![0.02, 0.02],
            profiler_cost_s: None,
            own_optimizer_step_s: None,
            gpu: Default::default(),
            collective_overlap: Default::default(),
            peak_allocated_bytes: Some(1 << 20),
            nodes: vec![("forward:n".into(), 0.001, 0.002)],
            collectives: Vec::new(),
        };
        type Spoil = fn(&mut RankResult);
        let cases: [(Spoil, &str, &str); 4] = [
            (
                |r| r.gpu.communication_ns = -5,
                "rank0.summary.parquet",
                "communication_ns = -5",
            ),
            (
                |r| r.step_times_s[1] = f64::NAN,
                "rank0.iterations.parquet",
                "step_time_s = NaN",
            ),
            (
                |r| r.nodes[0].1 = -1.0,
                "rank0.nodes.parquet",
                "median_run_time_s = -1",
            ),
            (
                |r| r.gpu.comm_comp_overlap_pct = Some(250.0),
                "rank0.summary.parquet",
                "comm_comp_overlap_pct = 250",
            ),
        ];
        for (spoil, file, what) in cases {
            let dir = tempfile::tempdir().unwrap();
            let folder = crate::report::out_dir::Writer::open(dir.path()).unwrap();
            let mut r = good.clone();
            spoil(&mut r);
            write_rank(dir.path(), &r).unwrap();
            folder.finish().unwrap();
            let e = read_ranks(&[dir.path().to_path_buf()])
                .unwrap_err()
                .to_string();
            assert!(e.contains(file) && e.contains(what), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let folder = crate::report::out_dir::Writer::open(dir.path()).unwrap();
        write_rank(dir.path(), &good).unwrap();
        folder.finish().unwrap();
        assert_eq!(read_ranks(&[dir.path().to_path_buf()]).unwrap().len(), 1);
    }
}
