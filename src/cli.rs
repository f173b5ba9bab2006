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
    /// Print the FLOP profile (GRAPH PROFILE) and compare it with a reference.
    Flops(FlopsArgs),
    /// Compare runs: peak memory, step time and their change against the first.
    Compare(CompareArgs),
    /// Run a program for each value of a parameter (e.g. the batch size), or take existing runs,
    /// and plot memory and latency against it.
    Sweep(SweepArgs),
    /// Build the cross-rank outputs (ranks.csv, ranks.json, the straggler) from ranks' results
    /// written by `analyze --rank-output`, without reading any trace.
    Merge(MergeArgs),
    /// Choose which modules to recompute (checkpoint) or swap so that a step fits a memory
    /// budget, predict the peak and step time, and write plan.json for `capture --plan`.
    Plan(PlanArgs),
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Memory budget for the peak: bytes, 10GiB, 9.5GB, 512MiB, or 80% (of the measured peak).
    /// Without it, only the budget curve and the reference points.
    #[arg(long)]
    pub(crate) budget: Option<String>,
    /// What the plan may do to a module.
    #[arg(long, value_enum, default_value_t = PolicyArg::Recompute)]
    pub(crate) policy: PolicyArg,
    /// Host↔device bandwidth for swaps, GB/s [default: --swap-bw, else measured, else by GPU].
    #[arg(long, value_name = "GB/s", value_parser = gb_per_s)]
    pub(crate) bandwidth: Option<f64>,
    /// Evaluate these modules instead of choosing: instance names as the trace names them
    /// (Block_3, or Block_3:swap) or qualified names as `model.named_modules()` gives them
    /// (transformer.h.3, where the capture recorded them), comma-separated; `every-block` for
    /// every instance of the repeated block class.
    #[arg(long, value_delimiter = ',')]
    pub(crate) modules: Vec<String>,
    /// Output directory [default: <input>.plan beside the input].
    #[arg(long, short)]
    pub(crate) out: Option<PathBuf>,
    /// No plots.
    #[arg(long)]
    pub(crate) no_plots: bool,
    /// Print nothing on success.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Print the plan as Python to paste into the training program (checkpoint and swap
    /// wrappers by qualified module name) instead of the table.
    #[arg(long)]
    pub(crate) print_policy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PolicyArg {
    /// Checkpoint modules (non-reentrant torch.utils.checkpoint).
    Recompute,
    /// Copy modules' saved activations to pinned host memory and back.
    Swap,
    /// Either, per module.
    Both,
}

#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    /// Directories holding `rank<N>.summary.parquet` and `rank<N>.nodes.parquet` files.
    #[arg(required = true, num_args = 1..)]
    pub(crate) dirs: Vec<PathBuf>,
    /// Output directory for ranks.csv and ranks.json.
    #[arg(long, short, default_value = "steptrace-ranks")]
    pub(crate) out: PathBuf,
    /// Nodes listed for the straggler.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Run directories, traces, or folders `analyze` wrote (their summary.json is read back,
    /// nothing analysed again); the first is the baseline.
    #[arg(required = true, num_args = 1..)]
    pub(crate) runs: Vec<PathBuf>,
    /// Labels, comma-separated [default: the run names].
    #[arg(long, value_delimiter = ',')]
    pub(crate) labels: Vec<String>,
    /// Output directory for compare.csv and the plots.
    #[arg(long, short, default_value = "steptrace-compare")]
    pub(crate) out: PathBuf,
}

/// The timing phase of a capture (capture and sweep).
#[derive(Debug, Args)]
pub(crate) struct TimingArgs {
    /// Fewest steps timed before the window with nothing recorded: the program's own step
    /// time, reported beside the instrumented one (0: no timing phase). Timing goes on until
    /// the median settles (within +-2.5%), up to --timing-max-steps and --timing-max-s.
    #[arg(long, default_value_t = 10)]
    pub(crate) timing_steps: u32,
    /// Most steps timed while the median has not settled (0: no cap).
    #[arg(long, default_value_t = 20)]
    pub(crate) timing_max_steps: u32,
    /// Most seconds timed while the median has not settled (0: no cap).
    #[arg(long, default_value_t = 10)]
    pub(crate) timing_max_s: u32,
    /// End the program (status 0) this many steps after the window's files are written, for
    /// a program that would run on for hours (Python programs) [default: it runs to its end].
    #[arg(long, value_name = "STEPS")]
    pub(crate) stop_after_window: Option<u32>,
}

impl TimingArgs {
    pub(crate) fn phase(&self) -> steptrace_capture::TimingPhase {
        steptrace_capture::TimingPhase {
            steps: self.timing_steps,
            max_steps: self.timing_max_steps,
            max_s: self.timing_max_s,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Values to sweep, comma-separated; `{value}` in the program's arguments is replaced by each.
    #[arg(long, value_delimiter = ',', required_unless_present = "budgets", value_parser = sweep_value)]
    pub(crate) values: Vec<String>,
    /// Memory budgets instead of values, comma-separated (10GiB, 80% of the peak without a
    /// plan, `smallest`: the least the plan can reach, or `every-block`: every instance of the
    /// repeated block checkpointed, which the budgets' plans are set against): each is planned
    /// from a capture of the program without a plan, applied to it with `capture --plan`, and
    /// measured, and the measured budget curve is drawn against the predicted one.
    #[arg(long, value_delimiter = ',', conflicts_with = "values")]
    pub(crate) budgets: Vec<String>,
    /// With --budgets: what a plan may do to a module.
    #[arg(long, value_enum, default_value_t = PolicyArg::Recompute)]
    pub(crate) policy: PolicyArg,
    /// With --budgets: host↔device bandwidth for swaps, GB/s [default: measured, else by GPU].
    #[arg(long, value_name = "GB/s", value_parser = gb_per_s)]
    pub(crate) bandwidth: Option<f64>,
    /// With --budgets: a capture of the program without a plan, instead of capturing one.
    #[arg(long)]
    pub(crate) base: Option<PathBuf>,
    /// With --budgets: each planned run's timing phase alternates steps with and without its
    /// plan, so that what the plan adds is also measured in one process (a secondary figure:
    /// the steps without the plan need the memory it saves, and leave the run fewer steps
    /// timed with it).
    #[arg(long, requires = "budgets")]
    pub(crate) plan_ab: bool,
    /// What the value is (axis label and file column).
    #[arg(long, default_value = "batch_size")]
    pub(crate) name: String,
    /// Existing run directories, one per value (with --budgets: one per budget, each captured
    /// with its plan, and --base), instead of running the program.
    #[arg(long, num_args = 1..)]
    pub(crate) runs: Vec<PathBuf>,
    /// Output directory: captures (when running), plans, sweep.csv and the plots.
    #[arg(long, short, default_value = "steptrace-sweep")]
    pub(crate) out: PathBuf,
    /// torch.profiler schedule for the captures.
    #[arg(long, default_value = "skip_first=1,wait=1,warmup=1,active=3,repeat=1")]
    pub(crate) schedule: String,
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
    /// The program and its arguments, after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub(crate) program: Vec<std::ffi::OsString>,
}

impl SweepArgs {
    /// A capture of `program` into `out`, with `plan` applied when given.
    pub(crate) fn capture_props(
        &self,
        program: Vec<std::ffi::OsString>,
        out: PathBuf,
        plan: Option<PathBuf>,
    ) -> anyhow::Result<steptrace_capture::CaptureProps> {
        Ok(steptrace_capture::CaptureProps {
            program,
            out,
            force: true,
            schedule: steptrace_capture::parse_schedule(&self.schedule)?,
            record: steptrace_capture::Record::default(),
            mode: None,
            python: None,
            max_entries: 1_000_000,
            cache: None,
            timing: self.timing.phase(),
            // Every step runs with the plan unless asked: the step time and the whole run's
            // peak are then the plan's, as the user will run it.
            plan_ab: plan.is_some() && self.plan_ab,
            plan,
            rerun_short: true,
            stop_after_window: self.timing.stop_after_window,
            progress: Some(say),
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct FlopsArgs {
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Reference to compare with: FlopCounterMode's ({"flop_counter": {"total", "per_op"}}), or
    /// {"total_flops": N}. Repeatable.
    #[arg(long, value_name = "REF.json")]
    pub(crate) compare: Vec<PathBuf>,
    /// Rows in the layer table.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
}

/// Inputs and analysis options shared by analyze and flops.
#[derive(Debug, Args)]
pub(crate) struct InputArgs {
    /// Kineto trace (.json or .json.gz) or a run directory holding one.
    pub(crate) input: PathBuf,
    /// CUDA memory snapshot pickle (.pickle or .pickle.gz).
    pub(crate) snapshot: Option<PathBuf>,
    /// Execution Trace JSON.
    #[arg(long = "et", value_name = "FILE")]
    pub(crate) exec_trace: Option<PathBuf>,
    /// Rank to analyse in a multi-rank run directory [default: the lowest].
    #[arg(long)]
    pub(crate) rank: Option<i64>,
    /// Peak TFLOP/s for the roofline, per dtype (e.g. bf16=989,fp32=67), replacing the table.
    #[arg(long, value_name = "DTYPE=TFLOPS,...", value_parser = peak_tflops)]
    pub(crate) peak_tflops: Option<PeakTflops>,
    /// Peak memory bandwidth for the roofline, GB/s.
    #[arg(long, value_name = "GB/s", value_parser = gb_per_s)]
    pub(crate) peak_bw: Option<f64>,
    /// Host↔device bandwidth for activation swap times, GB/s [default: measured from the
    /// trace's copies].
    #[arg(long, value_name = "GB/s", value_parser = gb_per_s)]
    pub(crate) swap_bw: Option<f64>,
    /// Worker threads [default: all cores].
    #[arg(long, short = 'j')]
    pub(crate) threads: Option<usize>,
}

impl InputArgs {
    pub(crate) fn props(
        &self,
        out: Option<PathBuf>,
        top: usize,
    ) -> anyhow::Result<steptrace::AnalyzeProps> {
        let mut options = steptrace::analysis::Options::default();
        if let Some(p) = &self.peak_tflops {
            options.peak_tflops = p.0.clone();
        }
        options.peak_bandwidth_gbps = self.peak_bw;
        options.swap_bandwidth_gbps = self.swap_bw;
        Ok(steptrace::AnalyzeProps {
            input: self.input.clone(),
            snapshot: self.snapshot.clone(),
            exec_trace: self.exec_trace.clone(),
            out,
            top,
            rank: self.rank,
            rank_output: None,
            options,
            report: Default::default(),
            progress: None,
        })
    }
}

/// What capture says while it works (the binary prints; the library does not).
fn say(what: &str) {
    eprintln!("steptrace: {what}");
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
    #[command(flatten)]
    pub(crate) timing: TimingArgs,
    /// Apply a plan written by `steptrace plan` (plan.json): its modules are recomputed or
    /// swapped, then the run is captured as usual (Python programs).
    #[arg(long, value_name = "PLAN.json")]
    pub(crate) plan: Option<PathBuf>,
    /// With --plan: the timing phase alternates steps with and without the plan, so that what
    /// it adds is measured in one process (the steps without it need the memory it saves).
    #[arg(long, requires = "plan")]
    pub(crate) plan_ab: bool,
    /// A program that ends before the window (shorter than the timing phase and the
    /// schedule) is run a second time with a window fitted to its steps; this turns that off.
    #[arg(long)]
    pub(crate) no_rerun: bool,
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
            schedule: steptrace_capture::parse_schedule(&self.schedule)?,
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
            plan: self.plan.clone(),
            plan_ab: self.plan_ab,
            rerun_short: !self.no_rerun,
            stop_after_window: self.timing.stop_after_window,
            progress: Some(say),
            timing: self.timing.phase(),
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct AnalyzeArgs {
    #[command(flatten)]
    pub(crate) input: InputArgs,
    /// Output directory [default: <input>.steptrace beside the input].
    #[arg(long, short)]
    pub(crate) out: Option<PathBuf>,
    /// Rows in the console's top tables.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// Also write this rank's results as Parquet into DIR, for `steptrace merge` (so each
    /// rank can be analysed where it was produced).
    #[arg(long, value_name = "DIR")]
    pub(crate) rank_output: Option<PathBuf>,
    /// Print the wall time of each stage (parse, rebuild, analyse, write) to stderr, with the
    /// CPU time of all threads in it and how many cores that kept busy.
    #[arg(long)]
    pub(crate) timings: bool,
    /// Plots to draw, comma-separated (time_by_phase, memory_vs_rank, memory_over_time,
    /// node_runtime, activations, peak_breakdown, roofline) [default: all].
    #[arg(long, value_delimiter = ',')]
    pub(crate) plots: Vec<String>,
    /// Draw no plots and no HTML report.
    #[arg(long)]
    pub(crate) no_plots: bool,
    /// GPU memory for the memory-vs-rank line, GiB [default: the trace's device].
    #[arg(long, value_name = "GiB")]
    pub(crate) gpu_mem: Option<f64>,
    /// Do not write the annotated trace (annotated.pt.trace.json.gz).
    #[arg(long)]
    pub(crate) no_annotated_trace: bool,
    /// Keep only operator, kernel and annotation events in the annotated trace.
    #[arg(long)]
    pub(crate) compact: bool,
}

impl AnalyzeArgs {
    pub(crate) fn report(&self) -> anyhow::Result<steptrace::report::ReportOptions> {
        use steptrace::report::plot::{Plot, PLOTS};
        let mut r = steptrace::report::ReportOptions::default();
        for p in &self.plots {
            let Some(plot) = Plot::from_name(p) else {
                let names: Vec<&str> = PLOTS.iter().map(|p| p.name()).collect();
                anyhow::bail!("--plots: unknown plot '{p}' (one of {})", names.join(", "));
            };
            r.plots.push(plot);
        }
        r.no_plots = self.no_plots;
        r.gpu_mem_bytes = self.gpu_mem.map(|g| (g * 1024.0 * 1024.0 * 1024.0) as i64);
        r.annotated_trace = !self.no_annotated_trace;
        r.compact = self.compact;
        Ok(r)
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

/// The most a rate option takes: 10^6 GB/s or TFLOP/s is far past any device, and bounds the
/// arithmetic and the plots' axes (`inf` or `1e308` hung the plot's tick loop).
const MAX_RATE: f64 = 1e6;

/// A rate given on the command line: a finite number above 0 and at most [`MAX_RATE`]
/// (`NaN` made every swap free, 0 wrote null step times, a negative one was taken).
fn rate(v: &str) -> Result<f64, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("'{v}' is not a number"))?;
    if !(x.is_finite() && x > 0.0 && x <= MAX_RATE) {
        return Err(format!("{v}: must be above 0 and at most {MAX_RATE:e}"));
    }
    Ok(x)
}

/// `--bandwidth`, `--swap-bw`, `--peak-bw`: GB/s.
fn gb_per_s(v: &str) -> Result<f64, String> {
    rate(v)
}

/// A `sweep --values` value: a finite number of at most 10^15 in size (the plots' axes are
/// drawn over them: `inf` hung the tick loop), kept as written for the program's arguments.
fn sweep_value(v: &str) -> Result<String, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("'{v}' is not a number"))?;
    if !(x.is_finite() && x.abs() <= 1e15) {
        return Err(format!(
            "{v}: must be a finite number of at most 1e15 in size"
        ));
    }
    Ok(v.to_owned())
}

/// `--peak-tflops` as given: (dtype, TFLOP/s) pairs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PeakTflops(pub(crate) Vec<(steptrace::analysis::flops::Dtype, f64)>);

fn peak_tflops(spec: &str) -> Result<PeakTflops, String> {
    use steptrace::analysis::flops::Dtype;
    let mut out = Vec::new();
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("expected DTYPE=TFLOPS, got '{part}'"))?;
        let d = match k.trim() {
            "fp64" => Dtype::Fp64,
            "fp32" => Dtype::Fp32,
            "tf32" => Dtype::Tf32,
            "bf16" => Dtype::Bf16,
            "fp16" => Dtype::Fp16,
            "fp8" => Dtype::Fp8,
            other => {
                return Err(format!(
                    "unknown dtype '{other}' (fp64, fp32, tf32, bf16, fp16, fp8)"
                ))
            }
        };
        out.push((d, rate(v)?));
    }
    Ok(PeakTflops(out))
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn rates_that_are_not_finite_positive_and_bounded_are_refused() {
        for bad in ["inf", "-inf", "NaN", "0", "-3", "1e308", "x"] {
            assert!(gb_per_s(bad).is_err(), "{bad}");
            assert!(peak_tflops(&format!("fp32={bad}")).is_err(), "{bad}");
        }
        assert_eq!(gb_per_s("12.5"), Ok(12.5));
        let p = peak_tflops("bf16=989,fp32=67").unwrap();
        assert_eq!(p.0.len(), 2);
        assert!(peak_tflops("int4=3").unwrap_err().contains("unknown dtype"));
    }

    #[test]
    fn rate_options_parse_through_clap_and_bad_ones_are_usage_errors() {
        use clap::Parser;
        let bad = Cli::try_parse_from([
            "steptrace",
            "analyze",
            "t.json",
            "--peak-tflops",
            "fp32=inf",
        ]);
        assert_eq!(bad.unwrap_err().exit_code(), 2);
        let bad = Cli::try_parse_from(["steptrace", "plan", "run", "--bandwidth", "NaN"]);
        assert_eq!(bad.unwrap_err().exit_code(), 2);
        assert!(Cli::try_parse_from(["steptrace", "analyze", "t.json", "--swap-bw", "24"]).is_ok());
        let bad = Cli::try_parse_from(["steptrace", "sweep", "--values", "1,inf", "--", "x"]);
        assert_eq!(bad.unwrap_err().exit_code(), 2);
        assert!(Cli::try_parse_from(["steptrace", "sweep", "--values", "1,16", "--", "x"]).is_ok());
    }
}
