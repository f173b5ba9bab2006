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
    /// Run an unmodified training program under the profiler and write a run directory.
    Capture(CaptureArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CaptureArgs {
    /// Run directory [default: steptrace-<program>-<unix time>].
    #[arg(long, short)]
    pub(crate) out: Option<PathBuf>,
    /// Write into a non-empty run directory.
    #[arg(long)]
    pub(crate) force: bool,
    /// torch.profiler schedule.
    #[arg(long, default_value = "skip_first=1,wait=1,warmup=1,active=3,repeat=1")]
    pub(crate) schedule: String,
    /// Do not record the Kineto trace.
    #[arg(long)]
    pub(crate) no_trace: bool,
    /// Do not record CUDA memory history and snapshots.
    #[arg(long)]
    pub(crate) no_memory: bool,
    /// Do not record the Execution Trace.
    #[arg(long)]
    pub(crate) no_et: bool,
    /// Do not emit NVTX ranges.
    #[arg(long)]
    pub(crate) no_nvtx: bool,
    /// Instrument as this kind of program instead of detecting it.
    #[arg(long, value_parser = ["python", "native"])]
    pub(crate) mode: Option<String>,
    /// Python interpreter whose torch the C++ shim is built against.
    #[arg(long)]
    pub(crate) python: Option<PathBuf>,
    /// Allocator history entries kept (ring buffer).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_entries: u64,
    /// The program and its arguments, after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "PROGRAM"
    )]
    pub(crate) program: Vec<std::ffi::OsString>,
}

impl CaptureArgs {
    pub(crate) fn props(
        &self,
    ) -> Result<steptrace_capture::CaptureProps, steptrace_capture::Error> {
        let stem = std::path::Path::new(&self.program[0])
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "run".into());
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(steptrace_capture::CaptureProps {
            program: self.program.clone(),
            out: self
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("steptrace-{stem}-{secs}"))),
            force: self.force,
            schedule: self.schedule.parse()?,
            record: steptrace_capture::Record {
                trace: !self.no_trace,
                memory: !self.no_memory,
                exec_trace: !self.no_et,
                nvtx: !self.no_nvtx,
            },
            mode: self.mode.as_deref().map(|m| match m {
                "native" => steptrace_capture::Mode::Native,
                _ => steptrace_capture::Mode::Python,
            }),
            python: self.python.clone(),
            max_entries: self.max_entries,
            cache: None,
        })
    }
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
    /// Rank to analyse in a multi-rank run directory [default: the lowest].
    #[arg(long)]
    pub(crate) rank: Option<i64>,
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
            rank: self.rank,
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

    #[test]
    fn capture_passes_child_flags_through() {
        let cli = Cli::try_parse_from([
            "steptrace",
            "capture",
            "--out",
            "r",
            "--",
            "python",
            "train.py",
            "--out",
            "x",
            "-v",
        ])
        .unwrap();
        let Command::Capture(c) = cli.command else {
            panic!()
        };
        let args: Vec<_> = c
            .program
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args, ["python", "train.py", "--out", "x", "-v"]);
        assert_eq!(c.out.as_deref(), Some(std::path::Path::new("r")));
    }
}
