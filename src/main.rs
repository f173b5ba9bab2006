//! The `steptrace` binary: parse arguments, run, map errors to exit codes.
//!
//! Exit codes: 0 success; 1 analysis failure (nothing to analyse, output not writable);
//! 2 bad usage or unreadable input. A closed stdout pipe exits 0 quietly.

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            for cause in err.chain() {
                if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                    if io.kind() == std::io::ErrorKind::BrokenPipe {
                        return ExitCode::SUCCESS;
                    }
                }
            }
            eprintln!("steptrace: error: {err:#}");
            ExitCode::from(exit_code(&err))
        }
    }
}

fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(e) = err.downcast_ref::<steptrace_capture::Error>() {
        return match e {
            // As shells do for a command that cannot be run.
            steptrace_capture::Error::Spawn { .. } => 127,
            _ => 2,
        };
    }
    match err.downcast_ref::<steptrace::Error>() {
        Some(steptrace::Error::Input(_)) => 2,
        Some(_) => 1,
        None => 1,
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<u8> {
    match cli.command {
        cli::Command::Capture(args) => {
            let outcome = steptrace_capture::run(&args.props()?)?;
            let m = &outcome.manifest;
            for n in &m.notes {
                eprintln!("steptrace: {n}");
            }
            for r in &m.incomplete_reasons {
                eprintln!("steptrace: incomplete: {r}");
            }
            eprintln!(
                "steptrace: wrote {} (analyze it with `steptrace analyze {}`)",
                outcome.out.display(),
                outcome.out.display()
            );
            // The child's own status, clamped to what an exit code can carry.
            Ok(outcome.exit.code.clamp(0, 255) as u8)
        }
        cli::Command::Analyze(args) => {
            if let Some(n) = args.input.threads {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n.max(1))
                    .build_global()?;
            }
            let outcome = steptrace::analyze(&args.input.props(args.out.clone(), args.top)?)?;
            if !args.quiet {
                let mut out = std::io::stdout().lock();
                out.write_all(outcome.console.as_bytes())?;
                writeln!(out, "\nwrote {}", outcome.out_dir.display())?;
                out.flush()?;
            }
            Ok(0)
        }
        cli::Command::Flops(args) => {
            if let Some(n) = args.input.threads {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n.max(1))
                    .build_global()?;
            }
            let (_trace, analysis, _diag) =
                steptrace::run_analysis(&args.input.props(None, args.top)?)?;
            let mut text =
                steptrace::report::flops::graph_profile_block(&analysis, args.top.max(1));
            for path in &args.compare {
                let bytes = std::fs::read(path).map_err(|e| {
                    steptrace::Error::Input(steptrace::ingest::Error::Io {
                        path: path.clone(),
                        source: e,
                    })
                })?;
                let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                    steptrace::Error::Input(steptrace::ingest::Error::Format {
                        path: path.clone(),
                        what: format!("not JSON: {e}"),
                    })
                })?;
                let label = path.display().to_string();
                let r = steptrace::report::flops::Reference::from_json(&label, &v).ok_or_else(
                    || {
                        steptrace::Error::Input(steptrace::ingest::Error::Format {
                            path: path.clone(),
                            what: "no FLOP total (flop_counter.total, total_flops or total)".into(),
                        })
                    },
                )?;
                text.push('\n');
                text += &steptrace::report::flops::comparison_table(&analysis, &r);
            }
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(0)
        }
    }
}
