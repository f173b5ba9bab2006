//! `steptrace analyze`: one trace, a run directory, or every rank of a distributed run.

use crate::console::print_result;
use crate::process::{heap_pages, limit_threads, progress, timing};

use crate::cli;

pub(crate) fn run(args: cli::AnalyzeArgs) -> anyhow::Result<u8> {
    if let Some(n) = args.input.threads {
        limit_threads(n)?;
    }
    let mut props = args.input.props(args.out.clone(), args.top)?;
    props.report = args.report()?;
    props.rank_output = args.rank_output.clone();
    if args.timings {
        props.progress = Some(timing);
    } else if !args.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        props.progress = Some(progress);
    }
    // A distributed run: every rank, then the cross-rank outputs; a rank that
    // could not be analysed is a warning there, as a bad side file is.
    let outcome = match steptrace::distributed_run(&props) {
        _ if steptrace::is_snapshot_input(&props) => {
            steptrace::analyze_snapshot(&props).map(|o| (o.console, o.out_dir, Vec::new()))
        }
        Some(run) => {
            steptrace::analyze_ranks(&props, &run).map(|o| (o.console, o.out_dir, Vec::new()))
        }
        None => steptrace::analyze(&props).map(|o| (o.console, o.out_dir, o.output_times)),
    };
    if args.timings {
        timing("");
    } else if props.progress.is_some() {
        eprint!("\r\x1b[2K");
    }
    let (console, out_dir, output_times) = outcome?;
    if args.timings {
        for (name, at) in &output_times {
            eprintln!("steptrace:   {name}: done at +{at:.3} s");
        }
        eprintln!("steptrace: heap: {}", heap_pages());
    }
    if !args.quiet {
        print_result(&console, &out_dir)?;
    }
    Ok(0)
}
