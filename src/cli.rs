//! Command-line interface (clap derive). Args are turned into the library's plain Props here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Rebuild one PyTorch training step from profiler output.
#[derive(Debug, Parser)]
#[command(name = "steptrace", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Analyse a Kineto trace (or a run directory): iterations, phases, nodes, memory.
    Analyze(AnalyzeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AnalyzeArgs {
    /// Kineto trace (.json or .json.gz) or a run directory holding one.
    pub(crate) input: PathBuf,
    /// CUDA memory snapshot pickle (.pickle or .pickle.gz).
    pub(crate) snapshot: Option<PathBuf>,
    /// Execution Trace JSON.
    #[arg(long = "et", value_name = "FILE")]
    pub(crate) exec_trace: Option<PathBuf>,
    /// Output directory [default: <input>.steptrace beside the input].
    #[arg(long, short)]
    pub(crate) out: Option<PathBuf>,
    /// Worker threads [default: all cores].
    #[arg(long, short = 'j')]
    pub(crate) threads: Option<usize>,
    /// Rows in the console's top tables.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

impl AnalyzeArgs {
    pub(crate) fn props(&self) -> steptrace::AnalyzeProps {
        steptrace::AnalyzeProps {
            input: self.input.clone(),
            snapshot: self.snapshot.clone(),
            exec_trace: self.exec_trace.clone(),
            out: self.out.clone(),
            top: self.top,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
