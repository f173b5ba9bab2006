//! `steptrace sweep`: one program captured at several values of one of its arguments, or,
//! with `--budgets`, at several memory budgets, each planned from a capture without a plan,
//! applied with `capture --plan` and measured.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use steptrace::analysis::Analysis;
use steptrace::plan::{Budget, Options, Policy};
use steptrace::report::compare::Run;
use steptrace::report::plan::PlannedRun;

use crate::cli::{PolicyArg, SweepArgs};
use crate::console::terminal_safe;

pub(crate) fn run(args: SweepArgs) -> anyhow::Result<u8> {
    if args.budgets.is_empty() {
        values(args)
    } else {
        budgets(args)
    }
}

/// What a sweep analyses a run with: the defaults.
fn props(dir: &Path) -> steptrace::AnalyzeProps {
    steptrace::AnalyzeProps {
        input: dir.to_path_buf(),
        top: 10,
        ..Default::default()
    }
}

fn analyze(dir: &Path) -> anyhow::Result<Analysis> {
    Ok(steptrace::run_analysis(&props(dir))?.1)
}

/// A run's analysis and its row for the comparison (which reads op names from the trace,
/// dropped after).
fn analyze_run(dir: &Path, label: String) -> anyhow::Result<(Analysis, Run)> {
    let (t, a, _) = steptrace::run_analysis(&props(dir))?;
    let run = Run::analysed(label, &t, &a);
    Ok((a, run))
}

/// Captures the program into `out` (with `plan` applied), saying so; a program that fails is
/// reported and its run kept, as far as it got. `Some(code)`: the user stopped it (a SIGINT or
/// SIGTERM forwarded to the program), and the sweep stops with that exit code instead of going
/// on to the next capture.
fn capture(
    args: &SweepArgs,
    what: &str,
    program: Vec<OsString>,
    out: &Path,
    plan: Option<PathBuf>,
) -> anyhow::Result<Option<u8>> {
    Ok(match capture_run(args, what, program, out, plan)? {
        Captured::Stopped(code) => Some(code),
        Captured::Run { .. } => None,
    })
}

/// How one capture of a sweep ended.
enum Captured {
    /// The user stopped it: the sweep stops with this exit code.
    Stopped(u8),
    /// It ran; `trace`: whether it wrote a Kineto trace.
    Run { trace: bool },
}

fn capture_run(
    args: &SweepArgs,
    what: &str,
    program: Vec<OsString>,
    out: &Path,
    plan: Option<PathBuf>,
) -> anyhow::Result<Captured> {
    eprintln!("steptrace: sweep {what}: capturing into {}", out.display());
    let o = steptrace_capture::run(&args.capture_props(program, out.to_path_buf(), plan)?)?;
    if let Some(sig) = o.exit.forwarded_signal {
        eprintln!(
            "steptrace: sweep {what}: stopped by signal {sig}; the runs so far are in {}",
            args.out.display()
        );
        return Ok(Captured::Stopped(
            u8::try_from(o.exit.code).unwrap_or(1).max(1),
        ));
    }
    if o.exit.code != 0 {
        eprintln!(
            "steptrace: sweep {what}: the program exited with {}",
            o.exit.code
        );
    }
    Ok(Captured::Run {
        trace: o.manifest.files.contains_key("trace"),
    })
}

/// A planned capture of `--budgets`, checked before the next starts: one that wrote no trace
/// is run once more into a fresh directory beside it; `Ok(None)` when neither wrote one (the
/// sweep goes on without that budget and names the directories).
fn planned_capture(
    args: &SweepArgs,
    label: &str,
    out: &Path,
    plan: &Path,
) -> anyhow::Result<Result<Option<PathBuf>, u8>> {
    let what = format!("budget {label}");
    let mut dir = out.to_path_buf();
    for attempt in 0..2 {
        if attempt == 1 {
            dir = out.with_file_name(format!(
                "{}_again",
                out.file_name().unwrap_or_default().to_string_lossy()
            ));
            eprintln!(
                "steptrace: sweep {what}: {} holds no trace; capturing once more",
                out.display()
            );
        }
        match capture_run(
            args,
            &what,
            args.program.clone(),
            &dir,
            Some(plan.to_path_buf()),
        )? {
            Captured::Stopped(code) => return Ok(Err(code)),
            Captured::Run { trace: true } => return Ok(Ok(Some(dir))),
            Captured::Run { trace: false } => {}
        }
    }
    eprintln!(
        "steptrace: sweep {what}: no trace in {} nor {}; left out of the sweep",
        out.display(),
        dir.display()
    );
    Ok(Ok(None))
}

fn values(args: SweepArgs) -> anyhow::Result<u8> {
    let values: Vec<f64> = args
        .values
        .iter()
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .map_err(|_| anyhow::anyhow!("--values: '{v}' is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let dirs: Vec<PathBuf> = if !args.runs.is_empty() {
        if args.runs.len() != values.len() {
            anyhow::bail!(
                "--runs: {} directories for {} values",
                args.runs.len(),
                values.len()
            );
        }
        args.runs.clone()
    } else {
        if args.program.is_empty() {
            anyhow::bail!(
                "give the program after `--` (with {{value}} in its arguments), or --runs"
            );
        }
        let mut dirs = Vec::new();
        for v in &args.values {
            let program: Vec<OsString> = args
                .program
                .iter()
                .map(|a| a.to_string_lossy().replace("{value}", v.trim()).into())
                .collect();
            let out = args.out.join(format!("{}_{}", args.name, v.trim()));
            if let Some(code) = capture(&args, &format!("{}={v}", args.name), program, &out, None)?
            {
                return Ok(code);
            }
            dirs.push(out);
        }
        dirs
    };
    let (analyses, runs): (Vec<Analysis>, Vec<Run>) = dirs
        .iter()
        .zip(&args.values)
        .map(|(d, v)| analyze_run(d, v.trim().to_owned()))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    steptrace::report::compare::write(&args.out, "sweep", &args.name, &runs)?;
    let curves: Vec<(f64, &steptrace_formats::summary::Summary)> = values
        .iter()
        .copied()
        .zip(analyses.iter().map(|a| &a.summary))
        .collect();
    steptrace::report::compare::write_sweep_curves(&args.out, &args.name, &curves)?;
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(&steptrace::report::compare::table(&runs)).as_bytes())?;
    writeln!(out, "\nwrote {}", args.out.display())?;
    Ok(0)
}

/// A budget as `--budgets` takes it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wanted {
    Budget(Budget),
    /// The smallest whole percent of the peak measured without a plan that the search reaches
    /// (from the plan without a budget). The least predicted peak itself would leave a
    /// measurement no room at all: ResNet-18's came 0.1% (0.5 MiB) over it.
    Smallest,
    /// No budget: every instance of the repeated block class checkpointed, the plan users
    /// would otherwise write by hand; the budgets' plans are set against it.
    EveryBlock,
}

fn wanted(text: &str) -> Result<Wanted, steptrace::plan::Error> {
    match text.trim() {
        "smallest" => Ok(Wanted::Smallest),
        steptrace::plan::EVERY_BLOCK => Ok(Wanted::EveryBlock),
        t => t.parse().map(Wanted::Budget),
    }
}

/// `smallest`: the least predicted peak rounded up to a whole percent of the measured one.
fn smallest_budget(least: i64, peak: i64) -> Budget {
    if peak <= 0 {
        return Budget::Bytes(least);
    }
    let pct = (100.0 * least as f64 / peak as f64).ceil();
    if pct >= 100.0 {
        Budget::Bytes(least)
    } else {
        Budget::Fraction(pct / 100.0)
    }
}

/// A budget's text as a file name's part: `90%` → `90pct`.
fn slug(label: &str) -> String {
    label
        .trim()
        .replace('%', "pct")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn budgets(args: SweepArgs) -> anyhow::Result<u8> {
    // Every budget is read before anything runs: a typo costs no capture.
    let wanted: Vec<Wanted> = args
        .budgets
        .iter()
        .map(|b| wanted(b).map_err(steptrace::Error::Plan))
        .collect::<Result<_, _>>()?;
    let labels: Vec<String> = args.budgets.iter().map(|b| b.trim().to_owned()).collect();
    check_budget_inputs(&args, wanted.len())?;
    let base = match &args.base {
        Some(b) => b.clone(),
        None => {
            let out = args.out.join("base");
            if let Some(code) = capture(&args, "without a plan", args.program.clone(), &out, None)?
            {
                return Ok(code);
            }
            out
        }
    };
    let (trace, base_analysis, _) = steptrace::run_analysis(&props(&base))?;
    let options = |budget: Option<Budget>, modules: Option<Vec<String>>| Options {
        budget,
        policy: match args.policy {
            PolicyArg::Recompute => Policy::Recompute,
            PolicyArg::Swap => Policy::Swap,
            PolicyArg::Both => Policy::Both,
        },
        bandwidth_gbps: args.bandwidth,
        modules,
    };
    let curve = steptrace::plan::plan(&trace, &base_analysis, &options(None, None))?;
    steptrace::report::plan::write(&args.out.join("plan_curve"), &curve, true)
        .map_err(steptrace::Error::Output)?;
    let mut dirs = Vec::new();
    let mut measured_labels = Vec::new();
    let mut lost = Vec::new();
    for (i, (label, w)) in labels.iter().zip(&wanted).enumerate() {
        let opts = match *w {
            Wanted::Budget(b) => options(Some(b), None),
            Wanted::Smallest => options(
                Some(smallest_budget(
                    curve.smallest_feasible_bytes,
                    curve.measured_peak_bytes,
                )),
                None,
            ),
            Wanted::EveryBlock => options(None, Some(vec![steptrace::plan::EVERY_BLOCK.into()])),
        };
        let p = steptrace::plan::plan(&trace, &base_analysis, &opts)?;
        let plan_dir = args.out.join(format!("plan_{}", slug(label)));
        steptrace::report::plan::write(&plan_dir, &p, true).map_err(steptrace::Error::Output)?;
        match args.runs.get(i) {
            Some(run) => {
                dirs.push(run.clone());
                measured_labels.push(label.clone());
            }
            None => {
                let out = args.out.join(format!("budget_{}", slug(label)));
                match planned_capture(&args, label, &out, &plan_dir.join("plan.json"))? {
                    Err(code) => return Ok(code),
                    Ok(Some(dir)) => {
                        dirs.push(dir);
                        measured_labels.push(label.clone());
                    }
                    Ok(None) => lost.push(format!("{label} ({})", out.display())),
                }
            }
        }
    }
    steptrace::ingest::source::drop_aside(trace);
    let measured = measured_runs(&measured_labels, &dirs, &mut lost)?;
    let runs = measured
        .iter()
        .map(|m| {
            PlannedRun::from_plan_json(&m.label, &m.plan_json, &m.analysis.summary).ok_or_else(
                || anyhow::anyhow!("{}: not a plan with predictions", m.plan_path.display()),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    steptrace::report::plan::write_budget_sweep(&args.out, &curve, &base_analysis, &runs)
        .map_err(steptrace::Error::Output)?;
    let mut out = std::io::stdout().lock();
    out.write_all(
        terminal_safe(&steptrace::report::plan::budget_sweep_table(
            &base_analysis,
            &runs,
        ))
        .as_bytes(),
    )?;
    writeln!(out, "wrote {}", args.out.display())?;
    if lost.is_empty() {
        Ok(0)
    } else {
        eprintln!(
            "steptrace: sweep: not measured: {}; the table and curve hold the rest",
            lost.join(", ")
        );
        Ok(1)
    }
}

/// `--runs` (one per budget, with `--base`) or a program to capture: what `--budgets` needs.
fn check_budget_inputs(args: &SweepArgs, budgets: usize) -> anyhow::Result<()> {
    if !args.runs.is_empty() {
        if args.runs.len() != budgets {
            anyhow::bail!(
                "--runs: {} directories for {budgets} budgets",
                args.runs.len()
            );
        }
        if args.base.is_none() {
            anyhow::bail!("--runs with --budgets needs --base, the capture without a plan");
        }
    } else if args.program.is_empty() {
        anyhow::bail!("give the program after `--`, or --base and --runs");
    }
    Ok(())
}

/// A budget's run, analysed, with the plan.json its capture copied in (the prediction it
/// applied).
struct Measured {
    label: String,
    analysis: Analysis,
    plan_path: std::path::PathBuf,
    plan_json: String,
}

/// Each measured run, analysed, with its plan. A run that cannot be analysed is left out with
/// a line, as one without a trace is (added to `lost`): the sweep's table and curve hold every
/// budget measured.
fn measured_runs(
    labels: &[String],
    dirs: &[std::path::PathBuf],
    lost: &mut Vec<String>,
) -> anyhow::Result<Vec<Measured>> {
    let mut runs = Vec::new();
    for (label, dir) in labels.iter().zip(dirs) {
        let analysis = match analyze(dir) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("steptrace: sweep budget {label}: {e}; left out of the sweep");
                lost.push(format!("{label} ({})", dir.display()));
                continue;
            }
        };
        let plan_path = dir.join("plan.json");
        let plan_json = std::fs::read_to_string(&plan_path).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e} (a run of --budgets is one captured with --plan)",
                plan_path.display()
            )
        })?;
        runs.push(Measured {
            label: label.clone(),
            analysis,
            plan_path,
            plan_json,
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_read_before_anything_runs() {
        assert!(matches!(wanted(" smallest "), Ok(Wanted::Smallest)));
        assert!(matches!(wanted("every-block"), Ok(Wanted::EveryBlock)));
        assert!(matches!(wanted("90%"), Ok(Wanted::Budget(Budget::Fraction(f))) if f == 0.9));
        assert!(wanted("ninety").is_err());
        assert_eq!(slug("90%"), "90pct");
        assert_eq!(slug("9.5GiB"), "9.5GiB");
        assert_eq!(slug("../x"), ".._x");
    }

    #[test]
    fn issue20_smallest_is_the_least_reachable_peak_rounded_up_to_a_whole_percent() {
        // ResNet-18: 524.8 MiB reachable of 678.3 MiB measured (77.4%): 78%.
        let b = smallest_budget(550_326_272, 711_285_760);
        assert!(
            matches!(b, Budget::Fraction(f) if (f - 0.78).abs() < 1e-12),
            "{b:?}"
        );
        // Exactly a whole percent stays it; nothing to save, or no peak: the bytes themselves.
        assert!(
            matches!(smallest_budget(80, 100), Budget::Fraction(f) if (f - 0.80).abs() < 1e-12)
        );
        assert!(matches!(smallest_budget(100, 100), Budget::Bytes(100)));
        assert!(matches!(smallest_budget(5, 0), Budget::Bytes(5)));
    }
}
