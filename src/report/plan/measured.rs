//! A run captured with a plan beside what it measured: `compare`'s line per planned run and
//! `sweep --budgets`' table, CSV and curve.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::peak_unit;
use crate::analysis::Analysis;
use crate::plan::Plan;
use crate::report::{human_bytes, human_time, plot, Error};
use steptrace_formats::summary::Summary;

/// A run captured with a plan (`capture --plan` copies the plan.json it applied into the run
/// directory) beside what the run measured: one point of `sweep --budgets`, one line of
/// `compare`.
#[derive(Debug, Clone)]
pub struct PlannedRun<'a> {
    /// What the plan was asked for, as the user wrote it (`90%`, `8GiB`, `smallest`).
    pub label: String,
    /// The budget in bytes (`None`: the plan had none).
    pub budget_bytes: Option<i64>,
    /// Decisions the plan took.
    pub decisions: usize,
    /// Whether the plan predicted the budget met.
    pub feasible: bool,
    /// The plan's predicted peak, bytes.
    pub predicted_peak_bytes: i64,
    /// The plan's predicted step time, s.
    pub predicted_step_time_s: f64,
    /// The step time the plan started from (the run without a plan), s.
    pub base_step_time_s: Option<f64>,
    /// The planned run's summary.
    pub measured: &'a Summary,
}

impl<'a> PlannedRun<'a> {
    /// From a plan.json's text and the analysis of the run that applied it; `None` when the
    /// text is not a plan with predictions.
    pub fn from_plan_json(label: &str, plan_json: &str, measured: &'a Summary) -> Option<Self> {
        let p = crate::plan::Plan::from_json(plan_json).ok()?;
        // A hand-written plan (decisions only) predicts nothing to compare.
        if p.predicted_peak_bytes <= 0 || p.predicted_step_time_s <= 0.0 {
            return None;
        }
        Some(PlannedRun {
            label: label.to_owned(),
            budget_bytes: p.budget_bytes,
            decisions: p.decisions.len(),
            feasible: p.feasible,
            predicted_peak_bytes: p.predicted_peak_bytes,
            predicted_step_time_s: p.predicted_step_time_s,
            base_step_time_s: (p.measured_step_time_s > 0.0).then_some(p.measured_step_time_s),
            measured,
        })
    }

    /// The planned run's peak, bytes (the allocator's, over its profiled iterations).
    pub fn measured_peak_bytes(&self) -> Option<i64> {
        self.measured.peak_allocated_bytes
    }

    /// Predicted against measured peak, percent.
    pub fn peak_error_pct(&self) -> Option<f64> {
        error_pct(
            self.predicted_peak_bytes as f64,
            self.measured_peak_bytes()? as f64,
        )
    }

    /// Predicted against measured step time, percent.
    pub fn step_error_pct(&self) -> Option<f64> {
        error_pct(self.predicted_step_time_s, self.measured.step_time_s)
    }

    /// The time the plan predicts it adds to a step, s.
    pub fn predicted_added_s(&self) -> Option<f64> {
        Some(self.predicted_step_time_s - self.base_step_time_s?)
    }

    /// The planned run's timing phase with steps alternating with and without the plan.
    pub fn timed_both_ways(&self) -> Option<&crate::model::run::PlanTimedBothWays> {
        self.measured.plan_timed_both_ways.as_ref()
    }

    /// Steps in each way's median of the planned run's timing phase (the fewer of with and
    /// without the plan).
    pub fn median_steps_each_way(&self) -> Option<usize> {
        let ab = self.timed_both_ways()?;
        Some(ab.steps_with.min(ab.steps_without))
    }

    /// Which cap its timing phase stopped at before its medians settled (`step_cap`,
    /// `time_cap`); `None` when they settled or the run was not timed both ways.
    pub fn timing_stopped_at(&self) -> Option<&'static str> {
        self.timed_both_ways()?.stopped_at.map(|s| s.as_str())
    }

    /// The time the plan added to a step in the planned run itself (its steps with the plan
    /// against its steps without), s.
    pub fn measured_added_s(&self) -> Option<f64> {
        let ab = self.timed_both_ways()?;
        Some(ab.step_time_with_s - ab.step_time_without_s)
    }

    /// The prediction set on the planned run's own steps without the plan (the program's step
    /// in that process plus what the plan predicts it adds) against its steps with it,
    /// percent: the planner's error free of the drift between two runs of the program.
    pub fn same_run_step_error_pct(&self) -> Option<f64> {
        let ab = self.timed_both_ways()?;
        error_pct(
            ab.step_time_without_s + self.predicted_added_s()?,
            ab.step_time_with_s,
        )
    }

    /// torch's `max_memory_allocated` over the planned run's whole run, first step to exit,
    /// where capture read it.
    pub fn run_peak_bytes(&self) -> Option<i64> {
        self.measured.run_peak_allocated_bytes
    }

    /// Whether the run stayed at or under the budget (`None`: no budget or no peak): over its
    /// whole run where capture read that peak (the first step, which makes the optimizer's
    /// state, included), else over its profiled iterations.
    pub fn within_budget(&self) -> Option<bool> {
        let peak = self.run_peak_bytes().or(self.measured_peak_bytes())?;
        Some(peak <= self.budget_bytes?)
    }

    /// Whether this run is the sweep's every-block reference (`--budgets ...,every-block`).
    pub fn is_every_block(&self) -> bool {
        self.label == crate::plan::EVERY_BLOCK
    }
}

/// A budget's plan set against every block checkpointed, both measured in their own runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgainstEveryBlock {
    /// By how much every block's measured peak is under this plan's budget, bytes (negative:
    /// over).
    pub every_block_room_bytes: i64,
    /// The plan's predicted added time less every block's, s (negative: the plan is cheaper).
    pub predicted_added_s: Option<f64>,
    /// The same, measured: each run's steps with its plan against its own steps without, s.
    pub measured_added_s: Option<f64>,
}

/// `run` against the every-block run among `runs`; `None` for the every-block run itself, a
/// run without a budget, or a sweep without an every-block run.
pub fn against_every_block(
    run: &PlannedRun<'_>,
    runs: &[PlannedRun<'_>],
) -> Option<AgainstEveryBlock> {
    if run.is_every_block() {
        return None;
    }
    let every = runs.iter().find(|r| r.is_every_block())?;
    let budget = run.budget_bytes?;
    let every_peak = every.measured_peak_bytes()?;
    let diff = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
    Some(AgainstEveryBlock {
        every_block_room_bytes: budget - every_peak,
        predicted_added_s: diff(run.predicted_added_s(), every.predicted_added_s()),
        measured_added_s: diff(run.measured_added_s(), every.measured_added_s()),
    })
}

impl AgainstEveryBlock {
    /// Whether every block's measured peak is at or under this plan's budget.
    pub fn every_block_within_budget(&self) -> bool {
        self.every_block_room_bytes >= 0
    }
}

fn error_pct(predicted: f64, measured: f64) -> Option<f64> {
    (measured > 0.0).then(|| 100.0 * (predicted / measured - 1.0))
}

/// Which steps a step time was timed over, for the table's notes.
fn timed_over(source: steptrace_formats::StepTimeSource) -> &'static str {
    use steptrace_formats::StepTimeSource as S;
    match source {
        S::AfterWindow => "over the steps after the window",
        S::TimingPhase => "over the timing phase before the window (too few steps after it)",
        S::Instrumented => "under the profiler (no step timed without it)",
    }
}

fn pct_text(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |p| format!("{p:+.1}%"))
}

/// For `compare`: a run captured with `--plan` against the plan's prediction. `None` when the
/// text is not a plan with predictions or the run measured no peak.
pub fn predicted_vs_measured(label: &str, plan_json: &str, s: &Summary) -> Option<String> {
    let r = PlannedRun::from_plan_json(label, plan_json, s)?;
    let mut line = format!(
        "{label}: plan of {} decision(s): peak predicted {} measured {} ({}); step predicted {} measured {} [{}] ({})",
        r.decisions,
        human_bytes(r.predicted_peak_bytes),
        human_bytes(r.measured_peak_bytes()?),
        pct_text(r.peak_error_pct()),
        human_time(r.predicted_step_time_s),
        human_time(s.step_time_s),
        s.step_time_source,
        pct_text(r.step_error_pct())
    );
    if let (Some(m), Some(p)) = (r.measured_added_s(), r.predicted_added_s()) {
        let _ = write!(
            line,
            "; in one process the plan added {} per step, predicted {} ({})",
            human_time(m),
            human_time(p),
            pct_text(r.same_run_step_error_pct())
        );
    }
    line.push('\n');
    Some(line)
}

/// `sweep --budgets`' console table: the run without a plan, then one row per budget. A
/// planned run's step is the program's own with the plan on every step; the in-process A/B
/// columns (`capture --plan-ab`, `sweep --plan-ab`) appear only where a run measured them.
pub fn budget_sweep_table(base: &Analysis, runs: &[PlannedRun<'_>]) -> String {
    let ab = runs.iter().any(|r| r.timed_both_ways().is_some());
    // Column widths; the first column is left-aligned.
    const W: [usize; 14] = [11, 10, 5, 11, 11, 11, 7, 6, 11, 11, 7, 11, 11, 7];
    let cols = if ab { W.len() } else { W.len() - 3 };
    let mut o = String::new();
    let mut row = |cells: [String; 14]| {
        for (i, (c, w)) in cells.iter().zip(W).take(cols).enumerate() {
            let _ = match i {
                0 => write!(o, "{c:<w$}"),
                _ => write!(o, " {c:>w$}"),
            };
        }
        o.push('\n');
    };
    let dash = || "-".to_owned();
    row([
        "budget",
        "bytes",
        "plan",
        "pred. peak",
        "meas. peak",
        "run peak",
        "error",
        "fits",
        "pred. step",
        "meas. step",
        "error",
        "a/b added",
        "a/b meas.",
        "error",
    ]
    .map(str::to_owned));
    let b = &base.summary;
    row([
        "none".into(),
        dash(),
        "0".into(),
        dash(),
        b.peak_allocated_bytes.map_or_else(dash, human_bytes),
        b.run_peak_allocated_bytes.map_or_else(dash, human_bytes),
        dash(),
        dash(),
        dash(),
        human_time(b.step_time_s),
        dash(),
        dash(),
        dash(),
        dash(),
    ]);
    for r in runs {
        row([
            r.label.clone(),
            r.budget_bytes.map_or_else(dash, human_bytes),
            r.decisions.to_string(),
            human_bytes(r.predicted_peak_bytes),
            r.measured_peak_bytes().map_or_else(dash, human_bytes),
            r.run_peak_bytes().map_or_else(dash, human_bytes),
            pct_text(r.peak_error_pct()),
            match r.within_budget() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
            .into(),
            human_time(r.predicted_step_time_s),
            human_time(r.measured.step_time_s),
            pct_text(r.step_error_pct()),
            r.predicted_added_s().map_or_else(dash, human_time),
            r.measured_added_s().map_or_else(dash, human_time),
            pct_text(r.same_run_step_error_pct()),
        ]);
    }
    o + &budget_sweep_notes(b.step_time_source, runs, ab)
}

/// The notes under [`budget_sweep_table`]: which steps each step time was timed over, what the
/// A/B columns are where shown, timing phases that hit a cap, and each budget against every
/// block.
fn budget_sweep_notes(
    base_source: steptrace_formats::StepTimeSource,
    runs: &[PlannedRun<'_>],
    ab: bool,
) -> String {
    let mut o = String::new();
    let dash = || "-".to_owned();
    let _ = writeln!(
        o,
        "meas. step: the program's own step time {}, every step with the plan; pred. step: the plan's, from the run without a plan; \
         meas. peak: over the profiled steps; run peak: torch's max_memory_allocated over the whole run, which `fits` reads where it is known",
        timed_over(base_source)
    );
    for r in runs {
        let source = r.measured.step_time_source;
        if source != base_source {
            let _ = writeln!(o, "{}: its step time is {}", r.label, timed_over(source));
        }
    }
    if ab {
        let _ = writeln!(
            o,
            "a/b (secondary): what the plan adds to a step, measured in the planned run's timing phase against its own steps without the plan \
             (its error: the prediction set on those steps); the run peak leaves those steps out"
        );
    }
    // A measured "added" from a timing phase that hit its cap rests on few steps or on steps
    // that still drifted (nanoGPT's bench.py: medians of 2 each way): said, so it is not read
    // as firm.
    for r in runs {
        if let Some((stop, n)) = r.timing_stopped_at().zip(r.median_steps_each_way()) {
            let _ = writeln!(
                o,
                "{}: its timing phase stopped at its {} before the medians settled, {n} step(s) in each: a/b meas. is a rough figure",
                r.label,
                if stop == "time_cap" { "time cap" } else { "step cap" }
            );
        }
    }
    for r in runs {
        let Some(e) = against_every_block(r, runs) else {
            continue;
        };
        let signed = |v: Option<f64>| {
            v.map_or_else(dash, |v| {
                format!("{}{}", if v < 0.0 { "-" } else { "+" }, human_time(v.abs()))
            })
        };
        // What the plan adds against every block was measured only where both runs timed
        // steps both ways (a/b): otherwise the prediction alone is said.
        let measured = e.measured_added_s.map_or_else(String::new, |_| {
            format!(", {} measured (a/b)", signed(e.measured_added_s))
        });
        let _ =
            writeln!(
            o,
            "{} against every block: added {} predicted{measured}; every block {} the budget by {}",
            r.label,
            signed(e.predicted_added_s),
            if e.every_block_within_budget() { "is under" } else { "is over" },
            human_bytes(e.every_block_room_bytes.abs())
        );
    }
    o
}

/// `sweep --budgets`' files in `dir`: `sweep_budgets.csv` (one row per budget) and the
/// measured budget curve against the predicted one (`sweep_budget_curve.{png,svg}`); `curve`
/// is the plan without a budget made from `base`, whose decisions draw the predicted curve.
pub fn write_budget_sweep(
    dir: &Path,
    curve: &Plan,
    base: &Analysis,
    runs: &[PlannedRun<'_>],
) -> Result<Vec<PathBuf>, Error> {
    let folder = crate::report::out_dir::Writer::open(dir)?;
    let csv = dir.join("sweep_budgets.csv");
    let opt_f = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
    let opt_s = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.9}"));
    crate::report::write_table(
        &csv,
        &[
            "budget",
            "budget_bytes",
            "decisions",
            "feasible",
            "predicted_peak_bytes",
            "measured_peak_bytes",
            "run_peak_bytes",
            "peak_error_pct",
            "within_budget",
            "predicted_step_time_s",
            "measured_step_time_s",
            "step_time_source",
            "step_error_pct",
            "measured_step_time_without_plan_s",
            "predicted_added_s",
            "measured_added_s",
            "same_run_step_error_pct",
            "every_block_within_budget",
            "every_block_room_bytes",
            "predicted_added_vs_every_block_s",
            "measured_added_vs_every_block_s",
            "median_steps_each_way",
            "timing_stopped_at",
        ],
        runs,
        |w, r| {
            let e = against_every_block(r, runs);
            let flag = |b: Option<bool>| match b {
                Some(true) => "true",
                Some(false) => "false",
                None => "",
            };
            let opt_i = |v: Option<i64>| v.map_or_else(String::new, |v| v.to_string());
            w.text(&r.label)
                .text(&opt_i(r.budget_bytes))
                .num(r.decisions)
                .text(flag(Some(r.feasible)))
                .num(r.predicted_peak_bytes)
                .text(&opt_i(r.measured_peak_bytes()))
                .text(&opt_i(r.run_peak_bytes()))
                .text(&opt_f(r.peak_error_pct()))
                .text(flag(r.within_budget()))
                .text(&format!("{:.9}", r.predicted_step_time_s))
                .text(&format!("{:.9}", r.measured.step_time_s))
                .text(r.measured.step_time_source.as_str())
                .text(&opt_f(r.step_error_pct()))
                .text(&opt_s(r.timed_both_ways().map(|a| a.step_time_without_s)))
                .text(&opt_s(r.predicted_added_s()))
                .text(&opt_s(r.measured_added_s()))
                .text(&opt_f(r.same_run_step_error_pct()))
                .text(flag(e.map(|e| e.every_block_within_budget())))
                .text(&opt_i(e.map(|e| e.every_block_room_bytes)))
                .text(&opt_s(e.and_then(|e| e.predicted_added_s)))
                .text(&opt_s(e.and_then(|e| e.measured_added_s)))
                .text(
                    &r.median_steps_each_way()
                        .map_or_else(String::new, |n| n.to_string()),
                )
                .text(r.timing_stopped_at().unwrap_or(""))
                .end();
        },
    )?;
    let mut files = vec![csv];
    let (unit, unit_name) = peak_unit(curve.measured_peak_bytes);
    let point = |peak: i64, step_s: f64| (peak as f64 / unit, step_s * 1e3);
    let predicted_curve: Vec<(f64, f64)> = curve
        .curve
        .iter()
        .map(|c| point(c.peak_bytes, c.step_time_s))
        .collect();
    let mut predicted: Vec<(f64, f64)> = runs
        .iter()
        .map(|r| point(r.predicted_peak_bytes, r.predicted_step_time_s))
        .collect();
    let mut measured: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| Some(point(r.measured_peak_bytes()?, r.measured.step_time_s)))
        .collect();
    if let Some(p) = base.summary.peak_allocated_bytes {
        measured.push(point(p, base.summary.step_time_s));
    }
    // Lines join the points in order of peak.
    predicted.sort_by(|a, b| a.0.total_cmp(&b.0));
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let d = plot::write_xy(
        &dir.join("sweep_budget_curve"),
        "step time against peak memory: predicted and measured",
        &format!("peak {unit_name}"),
        "step ms",
        &[
            (
                "predicted, decision by decision".to_owned(),
                predicted_curve,
            ),
            ("predicted at each budget".to_owned(), predicted),
            ("measured (and without a plan)".to_owned(), measured),
        ],
    )?;
    files.extend(d.files);
    folder.finish()?;
    Ok(files)
}
