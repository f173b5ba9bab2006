//! `steptrace plan`'s outputs: `plan.json` (what `capture --plan` applies and
//! `compare` checks), `plan.csv`, the console table, and two plots: the memory timeline before
//! and after, and the budget curve.

use crate::file_error::FileError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{human_bytes, human_time, plot, Error};
use crate::plan::Plan;

mod measured;
mod policy;
pub use measured::{
    against_every_block, budget_sweep_table, predicted_vs_measured, write_budget_sweep,
    AgainstEveryBlock, PlannedRun,
};
pub use policy::policy_code;

const GIB: f64 = (1u64 << 30) as f64;

/// The unit of a plot's memory axis for a step whose peak is `peak_bytes`: GiB for large
/// steps, MiB for small ones (the axis starts at 0 and spans at least 1).
pub(super) fn peak_unit(peak_bytes: i64) -> (f64, &'static str) {
    if peak_bytes >= 2 << 30 {
        (GIB, "GiB")
    } else {
        (GIB / 1024.0, "MiB")
    }
}

/// The console table.
pub fn table(p: &Plan) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "plan for {}: {} (measured peak {}, step {} [{}]; liveness from {})",
        p.run,
        match p.budget_bytes {
            Some(b) => format!("budget {}", human_bytes(b)),
            None => "no budget (the curve only)".into(),
        },
        human_bytes(p.measured_peak_bytes),
        human_time(p.measured_step_time_s),
        p.step_time_source,
        p.liveness_source
    );
    let _ = writeln!(
        o,
        "{:>3}  {:<44} {:<9} {:>11} {:>11} {:>10} {:>12} {:>10}",
        "#", "module", "action", "act. bytes", "peak saved", "time +", "pred. peak", "pred. step"
    );
    for (i, d) in p.decisions.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:>3}  {:<44} {:<9} {:>11} {:>11} {:>10} {:>12} {:>10}",
            i + 1,
            super::truncate(&d.module, 44),
            action_name(d.action),
            human_bytes(d.activation_bytes),
            human_bytes(d.peak_saved_bytes),
            human_time(d.time_added_s),
            human_bytes(d.predicted_peak_bytes),
            human_time(d.predicted_step_time_s)
        );
    }
    let _ = writeln!(
        o,
        "predicted: peak {} ({}), step {} ({:+.1}%)",
        human_bytes(p.predicted_peak_bytes),
        if p.feasible {
            "meets the budget".to_string()
        } else {
            // In MiB to a tenth and as a share of the peak: at one decimal of GiB a budget
            // of 1,675 MiB and the 1,730 MiB reached both read "1.7 GiB".
            let share = |b: i64| 100.0 * b as f64 / p.measured_peak_bytes.max(1) as f64;
            let mib = |b: i64| b as f64 / (1u64 << 20) as f64;
            let budget = p.budget_bytes.map_or_else(String::new, |b| {
                format!(" of {:.1} MiB, {:.1}% of the peak", mib(b), share(b))
            });
            format!(
                "over the budget{budget}; the smallest this order reaches is {:.1} MiB, {:.1}%",
                mib(p.smallest_feasible_bytes),
                share(p.smallest_feasible_bytes)
            )
        },
        human_time(p.predicted_step_time_s),
        100.0 * (p.predicted_step_time_s / p.measured_step_time_s.max(1e-12) - 1.0)
    );
    if let Some(e) = &p.every_block {
        let _ = writeln!(
            o,
            "for comparison, {}: peak {}, step {}",
            e.label,
            human_bytes(e.peak_bytes),
            human_time(e.step_time_s)
        );
    }
    for n in &p.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

fn action_name(a: crate::plan::Action) -> &'static str {
    a.as_str()
}

/// Writes `plan.json`, `plan.csv` and (unless `plots` is false) the two plots into `dir`;
/// returns the files written.
pub fn write(dir: &Path, p: &Plan, plots: bool) -> Result<Vec<PathBuf>, Error> {
    let folder = super::out_dir::Writer::open(dir)?;
    let mut files = Vec::new();
    let json = dir.join("plan.json");
    let text = serde_json::to_string_pretty(p)
        .map_err(|e| Error::from(FileError::new(&json, std::io::Error::other(e.to_string()))))?;
    super::write_file(&json, text.as_bytes())?;
    files.push(json);

    let csv = dir.join("plan.csv");
    let order: Vec<(usize, &crate::plan::Decision)> = p.decisions.iter().enumerate().collect();
    super::write_table(
        &csv,
        &[
            "order",
            "module",
            "instance",
            "class",
            "action",
            "activation_bytes",
            "peak_saved_bytes",
            "time_added_s",
            "predicted_peak_bytes",
            "predicted_step_time_s",
        ],
        &order,
        |r, (i, d)| {
            r.num(*i + 1)
                .text(&d.module)
                .text(&d.instance)
                .text(&d.class)
                .text(action_name(d.action))
                .num(d.activation_bytes)
                .num(d.peak_saved_bytes)
                .text(&format!("{:.9}", d.time_added_s))
                .num(d.predicted_peak_bytes)
                .text(&format!("{:.9}", d.predicted_step_time_s))
                .end();
        },
    )?;
    files.push(csv);

    // The timeline plot's data, also without plots: where the predicted peak sits, point by
    // point, to set beside a planned run's own memory_timeline.csv.
    if let Some(tl) = &p.timeline {
        let path = dir.join("plan_memory_timeline.csv");
        let rows: Vec<(&str, &(f64, f64))> = tl
            .measured
            .iter()
            .map(|pt| ("measured", pt))
            .chain(tl.planned.iter().map(|pt| ("with_plan", pt)))
            .collect();
        super::write_table(
            &path,
            &[
                "iteration",
                "series",
                "ms_from_iteration_start",
                "allocated_mib",
            ],
            &rows,
            |r, (series, (ms, mib))| {
                r.text(&tl.iteration)
                    .text(series)
                    .text(&format!("{ms:.6}"))
                    .text(&format!("{mib:.6}"))
                    .end();
            },
        )?;
        files.push(path);
    }

    if plots {
        files.extend(write_plots(dir, p)?);
    }
    folder.finish()?;
    Ok(files)
}

/// The plan's two plots in `dir`: the predicted memory timeline against the measured one, and
/// the budget curve (predicted step time against peak); returns the files written.
fn write_plots(dir: &Path, p: &Plan) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    if let Some(tl) = &p.timeline {
        let d = plot::write_xy(
            &dir.join("plan_memory_timeline"),
            &format!(
                "{}: allocated memory, measured and with the plan",
                tl.iteration
            ),
            "ms from the iteration's start",
            "allocated MiB",
            &[
                ("measured".to_owned(), tl.measured.clone()),
                ("with the plan".to_owned(), tl.planned.clone()),
            ],
        )?;
        files.extend(d.files);
    }
    let (unit, unit_name) = peak_unit(p.measured_peak_bytes);
    let greedy: Vec<(f64, f64)> = p
        .curve
        .iter()
        .map(|c| (c.peak_bytes as f64 / unit, c.step_time_s * 1e3))
        .collect();
    let mut series = vec![("plan, decision by decision".to_owned(), greedy)];
    if let Some(first) = p.curve.first() {
        series.push((
            "no checkpointing".to_owned(),
            vec![(first.peak_bytes as f64 / unit, first.step_time_s * 1e3)],
        ));
    }
    if let Some(e) = &p.every_block {
        series.push((
            e.label.clone(),
            vec![(e.peak_bytes as f64 / unit, e.step_time_s * 1e3)],
        ));
    }
    if let Some(b) = p.budget_bytes {
        let ys: Vec<f64> = p.curve.iter().map(|c| c.step_time_s * 1e3).collect();
        let (lo, hi) = ys
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &y| (l.min(y), h.max(y)));
        series.push((
            "budget".to_owned(),
            vec![(b as f64 / unit, lo), (b as f64 / unit, hi)],
        ));
    }
    let d = plot::write_xy(
        &dir.join("plan_budget_curve"),
        "predicted step time against peak memory",
        &format!("predicted peak {unit_name}"),
        "predicted step ms",
        &series,
    )?;
    files.extend(d.files);
    Ok(files)
}
