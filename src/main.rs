//! The `steptrace` binary: parse arguments, run, map errors to exit codes.
//!
//! Exit codes: 0 success; 1 analysis failure (nothing to analyse, output not writable);
//! 2 bad usage or unreadable input. A closed stdout pipe exits 0 quietly.

mod cli;
mod commands;
mod console;
mod process;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    process::keep_freed_memory();
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
            eprintln!(
                "steptrace: error: {}",
                console::terminal_safe(&console::message(&err))
            );
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
        // A budget that is not a size, or a module the run does not have: bad usage.
        Some(steptrace::Error::Plan(
            steptrace::plan::Error::BadBudget(_)
            | steptrace::plan::Error::UnknownModule { .. }
            | steptrace::plan::Error::AmbiguousModule { .. },
        )) => 2,
        // `--out` naming a file, a folder that is a link, or holding a folder where an output
        // goes: bad usage, as README says.
        Some(steptrace::Error::Output(
            steptrace::report::Error::NotADirectory { .. }
            | steptrace::report::Error::SymlinkedFolder { .. }
            | steptrace::report::Error::InTheWay { .. },
        )) => 2,
        Some(_) => 1,
        None => 1,
    }
}

/// The command's body (`commands`), its exit code on success.
fn run(cli: cli::Cli) -> anyhow::Result<u8> {
    use cli::Command as C;
    match cli.command {
        C::Capture(args) => commands::capture::run(args),
        C::Analyze(args) => commands::analyze::run(args),
        C::Merge(args) => commands::merge::run(args),
        C::Compare(args) => commands::compare::run(args),
        C::Plan(args) => commands::plan::run(args),
        C::Sweep(args) => commands::sweep::run(args),
        C::Flops(args) => commands::flops::run(args),
    }
}
