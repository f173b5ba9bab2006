//! Several runs side by side: `steptrace compare` (the seed's configuration table) and
//! `steptrace sweep` (memory and latency against a swept value such as the batch size).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{csv_err, human_bytes, human_time, io, plot, Error};
use crate::analysis::memory::CATEGORIES;
use crate::analysis::Analysis;
use crate::ingest::{AnalysisResults, OpTotals};
use crate::model::Trace;
use steptrace_formats::summary::Summary;

const MIB: f64 = 1024.0 * 1024.0;

/// One run to compare: its label, its summary.json and its nodes' peaks, whether analysed
/// now or read back from a folder `analyze` wrote.
#[derive(Debug, Clone)]
pub struct Run {
    /// Label (configuration name, or the swept value).
    pub label: String,
    /// Its summary.
    pub summary: Summary,
    /// Each node's median peak memory by execution rank, bytes.
    pub node_peaks: Vec<(u32, i64)>,
    /// Its ops' and kernels' totals, for the op-level diff.
    pub ops: OpTotals,
}

impl Run {
    /// A run analysed in this process.
    pub fn analysed(label: String, t: &Trace, a: &Analysis) -> Run {
        Run {
            label,
            summary: a.summary.clone(),
            node_peaks: a
                .node_stats
                .iter()
                .map(|n| (n.rank, n.median_peak_mem_bytes))
                .collect(),
            ops: op_totals(t, a),
        }
    }

    /// A run read back from its analysis folder.
    pub fn read_back(label: String, r: AnalysisResults) -> Run {
        Run {
            label,
            summary: r.summary,
            node_peaks: r.node_peaks,
            ops: r.ops,
        }
    }
}

/// The totals `read_results` reads back from `node_stats.csv` and `kernels.csv`, from the
/// analysis itself: the same figures either way.
fn op_totals(t: &Trace, a: &Analysis) -> OpTotals {
    let iterations = a.summary.iterations.max(1) as f64;
    let mut o = OpTotals::default();
    for n in &a.node_stats {
        // As node_stats.csv writes them, so that a run read back diffs to zero against itself.
        let present: f64 = n.iterations_present as f64;
        let cpu: f64 = super::secs(n.median_cpu_time_s).parse().unwrap_or(0.0);
        let e = o.ops.entry(t.kineto.str(n.op).to_owned()).or_default();
        e.0 += present / iterations;
        e.1 += cpu * present / iterations;
    }
    for k in &a.kernels.by_name {
        let e = o.kernels.entry(k.name.clone()).or_default();
        e.0 += k.count as f64;
        e.1 += k.total_ns as f64 * 1e-9;
    }
    o
}

/// How an op or kernel changed from the first run to another.
fn status(base: Option<(f64, f64)>, run: Option<(f64, f64)>) -> &'static str {
    match (base, run) {
        (None, Some(_)) => "added",
        (Some(_), None) => "removed",
        (Some(b), Some(r)) => {
            // A change under 1% of the time and 1 µs is none: the same op measured twice.
            let (d, dc) = (r.1 - b.1, r.0 - b.0);
            let same_time = d.abs() <= (0.01 * b.1).max(1e-6);
            if same_time && dc.abs() < 1e-9 {
                "unchanged"
            } else if (!same_time && d > 0.0) || (same_time && dc > 0.0) {
                "increased"
            } else {
                "decreased"
            }
        }
        (None, None) => "",
    }
}

/// `<stem>_ops.csv` (`compare_ops.csv`): per op (nodes per iteration and their CPU time) and per GPU activity
/// name (count and GPU time over the trace), each run's figures, the last run's change from
/// the first, and whether it was added, removed, increased, decreased or unchanged
/// (HolisticTraceAnalysis's trace diff). Largest time change first.
fn write_ops(path: &Path, runs: &[Run]) -> Result<(), Error> {
    let (first, last) = (&runs[0], &runs[runs.len() - 1]);
    let mut w = super::csv_writer(path)?;
    let mut header = vec!["kind".to_owned(), "name".into()];
    for r in runs {
        header.push(format!("{}_count", r.label));
        header.push(format!("{}_time_s", r.label));
    }
    header.extend(["count_change", "time_change_s", "status"].map(String::from));
    w.write_record(&header).map_err(csv_err(path))?;
    let mut rows: Vec<(&str, &str, f64)> = Vec::new();
    for (kind, pick) in [
        (
            "op",
            (|o: &OpTotals| &o.ops) as fn(&OpTotals) -> &BTreeMap<String, (f64, f64)>,
        ),
        ("kernel", |o: &OpTotals| &o.kernels),
    ] {
        let names: std::collections::BTreeSet<&str> = runs
            .iter()
            .flat_map(|r| pick(&r.ops).keys().map(String::as_str))
            .collect();
        for name in names {
            let b = pick(&first.ops).get(name).map_or(0.0, |v| v.1);
            let l = pick(&last.ops).get(name).map_or(0.0, |v| v.1);
            rows.push((kind, name, l - b));
        }
    }
    rows.sort_by(|a, b| {
        b.2.abs()
            .total_cmp(&a.2.abs())
            .then(a.0.cmp(b.0))
            .then(a.1.cmp(b.1))
    });
    for (kind, name, _) in rows {
        let pick = |o: &OpTotals| -> Option<(f64, f64)> {
            if kind == "op" {
                o.ops.get(name).copied()
            } else {
                o.kernels.get(name).copied()
            }
        };
        let mut rec = vec![kind.to_owned(), name.to_owned()];
        for r in runs {
            let (c, s) = pick(&r.ops).unwrap_or((0.0, 0.0));
            rec.push(format!("{c}"));
            rec.push(super::secs(s));
        }
        let (b, l) = (pick(&first.ops), pick(&last.ops));
        let (b0, l0) = (b.unwrap_or((0.0, 0.0)), l.unwrap_or((0.0, 0.0)));
        rec.push(format!("{}", l0.0 - b0.0));
        rec.push(super::secs(l0.1 - b0.1));
        rec.push(status(b, l).to_owned());
        w.write_record(&rec).map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

/// The op-level diff in a few lines: what changed most between the first run and the last.
pub fn ops_lines(runs: &[Run], top: usize) -> String {
    let (first, last) = (&runs[0], &runs[runs.len() - 1]);
    let mut all: Vec<(&str, &str, f64, &'static str)> = Vec::new();
    for (kind, b, l) in [
        ("op", &first.ops.ops, &last.ops.ops),
        ("kernel", &first.ops.kernels, &last.ops.kernels),
    ] {
        let names: std::collections::BTreeSet<&String> = b.keys().chain(l.keys()).collect();
        for n in names {
            let (bv, lv) = (b.get(n).copied(), l.get(n).copied());
            let d = lv.map_or(0.0, |v| v.1) - bv.map_or(0.0, |v| v.1);
            all.push((kind, n, d, status(bv, lv)));
        }
    }
    all.retain(|x| x.3 != "unchanged");
    if all.is_empty() {
        return String::new();
    }
    all.sort_by(|a, b| b.2.abs().total_cmp(&a.2.abs()).then(a.1.cmp(b.1)));
    let mut o = format!(
        "\nlargest changes, {} against {} (ops: CPU time per iteration; kernels: GPU time over the trace):\n",
        last.label, first.label
    );
    for (kind, name, d, st) in all.into_iter().take(top) {
        let sign = if d >= 0.0 { "+" } else { "-" };
        let _ = writeln!(
            o,
            "  {kind:<6} {st:<9} {sign}{:>10}  {name}",
            human_time(d.abs())
        );
    }
    o
}

fn pct(v: f64, base: f64) -> String {
    if base == 0.0 {
        return String::new();
    }
    format!("{:+.1}%", 100.0 * (v - base) / base)
}

/// The seed's comparison table: configuration, peak memory, step time, change against the first.
pub fn table(runs: &[Run]) -> String {
    let mut o = format!(
        "{:<28} {:>12} {:>9} {:>12} {:>9} {:>11}\n",
        "Configuration", "Peak Memory", "change", "Time", "change", "FLOPs/iter"
    );
    let base = runs.first().map(|r| &r.summary);
    for r in runs {
        let s = &r.summary;
        let b = base.expect("non-empty");
        // What a run did not measure is n/a, not 0 (and no change is computed against it).
        let (peak, peak_change) = match (s.peak_allocated_bytes, b.peak_allocated_bytes) {
            (Some(p), Some(q)) => (human_bytes(p), pct(p as f64, q as f64)),
            (Some(p), None) => (human_bytes(p), String::new()),
            (None, _) => ("n/a".to_owned(), String::new()),
        };
        let flops = if !s.flops_counted() {
            "n/a".to_owned()
        } else {
            super::flops::human_flops(s.flops_per_iteration as f64)
        };
        let _ = writeln!(
            o,
            "{:<28} {:>12} {:>9} {:>12} {:>9} {:>11}",
            r.label,
            peak,
            peak_change,
            human_time(s.step_time_s),
            pct(s.step_time_s, b.step_time_s),
            flops
        );
    }
    o
}

/// Writes `<stem>.csv`, the op-level diff `<stem>_ops.csv`, the memory-vs-rank overlay and the
/// breakdown bars; returns the files.
pub fn write(
    dir: &Path,
    stem: &str,
    value_name: &str,
    runs: &[Run],
) -> Result<Vec<PathBuf>, Error> {
    let folder = super::out_dir::Writer::open(dir)?;
    let mut files = Vec::new();
    let p = dir.join(format!("{stem}.csv"));
    let mut w = super::csv_writer(&p)?;
    let mut header = vec![
        value_name.to_owned(),
        "run".into(),
        "peak_allocated_bytes".into(),
        "step_time_s".into(),
        "gpu_busy_s".into(),
        "flops_per_iteration".into(),
        "peak_change_pct".into(),
        "step_time_change_pct".into(),
    ];
    header.extend(CATEGORIES.iter().map(|c| format!("peak_{}_bytes", c.key())));
    w.write_record(&header).map_err(csv_err(&p))?;
    let base = &runs[0].summary;
    for r in runs {
        let s = &r.summary;
        let peak_change = match (s.peak_allocated_bytes, base.peak_allocated_bytes) {
            (Some(p), Some(q)) => pct(p as f64, q as f64).trim_end_matches('%').to_owned(),
            _ => String::new(),
        };
        let mut rec = vec![
            r.label.clone(),
            s.name.clone(),
            s.peak_allocated_bytes
                .map(|p| p.to_string())
                .unwrap_or_default(),
            super::secs(s.step_time_s),
            super::secs(s.gpu_busy_s),
            s.flops_per_iteration.to_string(),
            peak_change,
            pct(s.step_time_s, base.step_time_s)
                .trim_end_matches('%')
                .to_owned(),
        ];
        rec.extend(CATEGORIES.iter().map(|c| {
            s.peak_breakdown_bytes
                .get(c)
                .copied()
                .unwrap_or(0)
                .to_string()
        }));
        w.write_record(&rec).map_err(csv_err(&p))?;
    }
    w.flush().map_err(io(&p))?;
    files.push(p);
    let ops = dir.join(format!("{stem}_ops.csv"));
    write_ops(&ops, runs)?;
    files.push(ops);
    let overlay: Vec<(String, Vec<(u32, f64)>)> = runs
        .iter()
        .map(|r| {
            (
                r.label.clone(),
                r.node_peaks
                    .iter()
                    .map(|&(rank, peak)| (rank, peak as f64 / MIB))
                    .collect(),
            )
        })
        .collect();
    files.extend(
        plot::write_overlay(
            &dir.join(format!("{stem}_memory_vs_rank")),
            "peak memory vs execution rank",
            &overlay,
        )?
        .files,
    );
    let bars: Vec<(String, Vec<f64>)> = runs
        .iter()
        .map(|r| {
            let mut b = vec![0f64; CATEGORIES.len()];
            for (i, c) in CATEGORIES.iter().enumerate() {
                b[i] = r.summary.peak_breakdown_bytes.get(c).copied().unwrap_or(0) as f64 / MIB;
            }
            (r.label.clone(), b)
        })
        .collect();
    files.extend(
        plot::write_stacked(
            &dir.join(format!("{stem}_breakdown")),
            "memory at the peak by category",
            "MiB",
            &CATEGORIES.map(|c| c.key()),
            &bars,
        )?
        .files,
    );
    folder.finish()?;
    Ok(files)
}

/// Sweep plots: peak memory and step time against the swept value.
pub fn write_sweep_curves(
    dir: &Path,
    value_name: &str,
    runs: &[(f64, &Summary)],
) -> Result<Vec<PathBuf>, Error> {
    let folder = super::out_dir::Writer::open(dir)?;
    let peak: Vec<(f64, f64)> = runs
        .iter()
        .map(|(v, s)| (*v, s.peak_allocated_bytes.unwrap_or(0) as f64 / MIB))
        .collect();
    let time: Vec<(f64, f64)> = runs
        .iter()
        .map(|(v, s)| (*v, s.step_time_s * 1e3))
        .collect();
    let mut files = plot::write_xy(
        &dir.join("sweep_peak_memory"),
        &format!("peak memory vs {value_name}"),
        value_name,
        "MiB",
        &[("peak allocated".into(), peak)],
    )?
    .files
    .to_vec();
    files.extend(
        plot::write_xy(
            &dir.join("sweep_step_time"),
            &format!("step time vs {value_name}"),
            value_name,
            "ms",
            &[("step time (median)".into(), time)],
        )?
        .files,
    );
    folder.finish()?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::status;

    #[test]
    fn each_change_has_its_status() {
        let s = |b: Option<(f64, f64)>, r: Option<(f64, f64)>| status(b, r);
        assert_eq!(s(None, Some((1.0, 1e-3))), "added");
        assert_eq!(s(Some((1.0, 1e-3)), None), "removed");
        assert_eq!(s(Some((1.0, 1e-3)), Some((1.0, 1.005e-3))), "unchanged");
        assert_eq!(s(Some((1.0, 1e-3)), Some((1.0, 1.2e-3))), "increased");
        assert_eq!(s(Some((1.0, 1e-3)), Some((1.0, 0.8e-3))), "decreased");
        // More calls in the same time (or less than a µs apart) is a change all the same.
        assert_eq!(s(Some((1.0, 0.0)), Some((3.0, 0.0))), "increased");
        assert_eq!(s(Some((3.0, 0.0)), Some((1.0, 0.0))), "decreased");
    }
}
