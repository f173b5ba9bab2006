//! `steptrace compare`: runs side by side, and a planned run's prediction against what it measured.

use std::io::Write;

use crate::console::terminal_safe;

use crate::cli;

pub(crate) fn run(args: cli::CompareArgs) -> anyhow::Result<u8> {
    if args.runs.iter().any(|r| steptrace::is_snapshot_file(r)) {
        return snapshots(args);
    }
    // A folder `analyze` wrote is read back (its summary.json and node_stats.csv); a trace or
    // a capture's run directory is analysed here.
    let runs = steptrace::compare_runs(&args.runs, &args.labels)?;
    steptrace::report::compare::write(&args.out, "compare", "configuration", &runs)?;
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(&steptrace::report::compare::table(&runs)).as_bytes())?;
    out.write_all(terminal_safe(&steptrace::report::compare::ops_lines(&runs, 10)).as_bytes())?;
    // A run captured with --plan: the plan's prediction against what it measured.
    for (r, run) in args.runs.iter().zip(&runs) {
        if !r.is_dir() {
            continue;
        }
        let path = r.join("plan.json");
        let text = match steptrace::file_error::read_side_file(
            &path,
            steptrace::file_error::MAX_PLAN_BYTES,
        ) {
            Ok(Some(t)) => String::from_utf8_lossy(&t).into_owned(),
            Ok(None) => continue,
            Err(e) => {
                eprintln!("steptrace: warning: {e}: the plan's prediction is left out");
                continue;
            }
        };
        if let Some(line) =
            steptrace::report::plan::predicted_vs_measured(&run.label, &text, &run.summary)
        {
            out.write_all(terminal_safe(&line).as_bytes())?;
        }
    }
    writeln!(out, "\nwrote {}", args.out.display())?;
    Ok(0)
}

/// Memory snapshots side by side: what grew at the peak (memory_viz's `compare`).
fn snapshots(args: cli::CompareArgs) -> anyhow::Result<u8> {
    if let Some(r) = args.runs.iter().find(|r| !steptrace::is_snapshot_file(r)) {
        anyhow::bail!(
            "{}: not a memory snapshot: compare snapshots with snapshots, runs with runs",
            r.display()
        );
    }
    if args.runs.len() < 2 {
        anyhow::bail!("compare needs two snapshots or more");
    }
    let mut analyses = Vec::new();
    let mut warnings = Vec::new();
    for r in &args.runs {
        let mut diag = steptrace::diagnostics::Diagnostics::default();
        let (_, a) = steptrace::load_snapshot(r, &mut diag)?;
        analyses.push(a);
        warnings.extend(diag.lines());
    }
    let labels: Vec<String> = args
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            args.labels.get(i).cloned().unwrap_or_else(|| {
                r.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
        })
        .collect();
    let text = steptrace::report::snapshot::write_compare(&args.out, &labels, &analyses, 10)?;
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(&text).as_bytes())?;
    for w in warnings {
        eprintln!("steptrace: warning: {w}");
    }
    writeln!(out, "\nwrote {}", args.out.display())?;
    Ok(0)
}
