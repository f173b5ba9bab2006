//! Several runs side by side: `steptrace compare` (the seed's configuration table) and
//! `steptrace sweep` (memory and latency against a swept value such as the batch size).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{csv_err, human_bytes, human_time, io, plot, Error};
use crate::analysis::memory::CATEGORIES;
use crate::analysis::Analysis;
use crate::ingest::AnalysisResults;
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
}

impl Run {
    /// A run analysed in this process.
    pub fn analysed(label: String, a: &Analysis) -> Run {
        Run {
            label,
            summary: a.summary.clone(),
            node_peaks: a
                .node_stats
                .iter()
                .map(|n| (n.rank, n.median_peak_mem_bytes))
                .collect(),
        }
    }

    /// A run read back from its analysis folder.
    pub fn read_back(label: String, r: AnalysisResults) -> Run {
        Run {
            label,
            summary: r.summary,
            node_peaks: r.node_peaks,
        }
    }
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

/// Writes `<stem>.csv`, the memory-vs-rank overlay and the breakdown bars; returns the files.
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
