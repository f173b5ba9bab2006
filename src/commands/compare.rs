//! `steptrace compare`: runs side by side, and a planned run's prediction against what it measured.

use std::io::Write;

use crate::console::terminal_safe;

use crate::cli;

pub(crate) fn run(args: cli::CompareArgs) -> anyhow::Result<u8> {
    let mut analyses = Vec::new();
    for r in &args.runs {
        let props = steptrace::AnalyzeProps {
            input: r.clone(),
            top: 10,
            ..Default::default()
        };
        analyses.push(steptrace::run_analysis(&props)?.1);
    }
    let runs: Vec<steptrace::report::compare::Run<'_>> = analyses
        .iter()
        .enumerate()
        .map(|(i, a)| steptrace::report::compare::Run {
            label: args
                .labels
                .get(i)
                .cloned()
                .unwrap_or_else(|| a.summary.name.clone()),
            analysis: a,
        })
        .collect();
    steptrace::report::compare::write(&args.out, "compare", "configuration", &runs)?;
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(&steptrace::report::compare::table(&runs)).as_bytes())?;
    // A run captured with --plan: the plan's prediction against what it measured.
    for (r, run) in args.runs.iter().zip(&runs) {
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
            steptrace::report::plan::predicted_vs_measured(&run.label, &text, run.analysis)
        {
            out.write_all(terminal_safe(&line).as_bytes())?;
        }
    }
    writeln!(out, "\nwrote {}", args.out.display())?;
    Ok(0)
}
