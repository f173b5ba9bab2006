//! `steptrace plan`'s outputs: `plan.json` (what `capture --plan` applies and
//! `compare` checks), `plan.csv`, the console table, and two plots: the memory timeline before
//! and after, and the budget curve.

use crate::file_error::FileError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{human_bytes, human_time, plot, Error};
use crate::plan::Plan;

mod measured;
pub use measured::{
    against_every_block, budget_sweep_table, predicted_vs_measured, write_budget_sweep,
    AgainstEveryBlock, PlannedRun,
};

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

/// The plan as Python a user pastes into the training program after the model is built
/// (`model`: the module the capture's qualified names are under): each recomputed module's
/// forward under non-reentrant `torch.utils.checkpoint`, each swapped one's under
/// `torch.autograd.graph.save_on_cpu`, by qualified name. A module the capture did not name
/// (a run captured before names were recorded) is listed by its instance name in a comment.
pub fn policy_code(p: &Plan) -> String {
    use crate::plan::Action;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# steptrace plan for {}: {} module(s); predicted peak {} (measured without the plan: {}), step {}.",
        comment_text(&p.run),
        p.decisions.len(),
        human_bytes(p.predicted_peak_bytes),
        human_bytes(p.measured_peak_bytes),
        human_time(p.predicted_step_time_s)
    );
    let _ = writeln!(
        o,
        "# Paste after the model is built; `model` is the module the names below are under."
    );
    let names = |action: Action| -> Vec<String> {
        p.decisions
            .iter()
            .filter(|d| d.action == action)
            .filter_map(|d| d.fqn.as_deref().map(py_str))
            .collect()
    };
    let (rec, swp) = (names(Action::Recompute), names(Action::Swap));
    let unnamed: Vec<String> = p
        .decisions
        .iter()
        .filter(|d| d.fqn.is_none())
        .map(|d| comment_text(&d.instance))
        .collect();
    o.push_str("import torch\nfrom torch.utils.checkpoint import checkpoint\n\n");
    if !rec.is_empty() {
        o.push_str(
            "def _recompute(module):\n    forward = module.forward\n    module.forward = lambda *a, **k: checkpoint(forward, *a, use_reentrant=False, **k)\n\n",
        );
    }
    if !swp.is_empty() {
        o.push_str(
            "def _swap(module):\n    forward = module.forward\n    def swapped(*a, **k):\n        with torch.autograd.graph.save_on_cpu(pin_memory=True):\n            return forward(*a, **k)\n    module.forward = swapped\n\n",
        );
    }
    if !rec.is_empty() {
        let _ = writeln!(
            o,
            "for name in [{}]:\n    _recompute(model.get_submodule(name))",
            rec.join(", ")
        );
    }
    if !swp.is_empty() {
        let _ = writeln!(
            o,
            "for name in [{}]:\n    _swap(model.get_submodule(name))",
            swp.join(", ")
        );
    }
    if !p.already_recomputed.is_empty() {
        let names: Vec<String> = p
            .already_recomputed
            .iter()
            .map(|n| comment_text(n))
            .collect();
        let _ = writeln!(
            o,
            "# Already recomputed by the program itself (left as it is): {}",
            names.join(", ")
        );
    }
    if !unnamed.is_empty() {
        let _ = writeln!(
            o,
            "# Not named by the capture (capture again with this build to have their names): {}",
            unnamed.join(", ")
        );
    }
    // Every block recomputed is what frameworks offer as one switch.
    let every = p.every_block.as_ref().is_some_and(|e| {
        e.decisions == p.decisions.len()
            && p.decisions.iter().all(|d| d.action == Action::Recompute)
            && p.decisions.windows(2).all(|w| w[0].class == w[1].class)
    });
    if every {
        let class = comment_text(&p.decisions[0].class);
        let _ = writeln!(
            o,
            "# This is every {class} recomputed: with HF Transformers, \
             model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}}) \
             does the same for its blocks; with torchtitan, [activation_checkpoint] mode = \"full\"."
        );
    }
    o
}

/// Text for a `#` comment of printed Python: every control character and Unicode line
/// separator written as its escape, so no string from the input (a run folder's name, an
/// instance name) can end the comment and put a line of its own into code that users paste
/// and run.
fn comment_text(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escape = c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
            let one: Vec<char> = if escape {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            one
        })
        .collect()
}

/// A Python string literal holding `s` exactly: backslashes, quotes and control characters
/// escaped the way Python reads them (Rust's `{:?}` writes `\u{1b}`, which Python refuses).
fn py_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                let v = c as u32;
                let _ = if v <= 0xff {
                    write!(o, "\\x{v:02x}")
                } else {
                    write!(o, "\\u{v:04x}")
                };
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::{comment_text, py_str};

    /// Issue 80, item 6: a newline in a run folder's or an instance's name put a line of the
    /// user's choosing into the printed Python.
    #[test]
    fn no_input_string_leaves_a_comment_or_a_string_literal() {
        let evil = "run\nimport os; os.system('x')\r\u{2028}\u{1b}[2J";
        let c = comment_text(evil);
        assert!(!c.contains(['\n', '\r', '\u{2028}', '\u{1b}']), "{c}");
        assert!(c.contains("import os"), "kept as text: {c}");
        let lit = py_str("a\"b\\c\nd\u{1b}");
        assert_eq!(lit, r#""a\"b\\c\x0ad\x1b""#);
    }
}
