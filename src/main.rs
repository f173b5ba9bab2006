//! The `steptrace` binary: parse arguments, run, map errors to exit codes.
//!
//! Exit codes: 0 success; 1 analysis failure (nothing to analyse, output not writable);
//! 2 bad usage or unreadable input. A closed stdout pipe exits 0 quietly.

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if reads_traces(&cli.command) {
        huge_pages_for_the_heap();
    }
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
            eprintln!("steptrace: error: {}", terminal_safe(&message(&err)));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Lets glibc's malloc reuse freed memory instead of unmapping it: by default an allocation of
/// more than 128 KiB (a threshold that rises up to 32 MiB, the most it can be set to) is its
/// own mapping, returned to the kernel when freed, so the parse's per-piece buffers and the
/// tables after them fault their pages in again. On the 255 MB benchmark trace, default
/// command, `perf stat -r 10`, the same two settings given through `GLIBC_TUNABLES` to the
/// build before them (this change alone): 68.6k → 52.1k page faults, CPU time 521 → 478 ms.
/// Peak RSS unchanged (302 → 304 MB): the memory freed is reused, not added to.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Whether the command reads traces in this process (and runs no program: `capture` and
/// `sweep` start the user's, which must get the environment it was given).
fn reads_traces(command: &cli::Command) -> bool {
    use cli::Command as C;
    match command {
        C::Analyze(_) | C::Flops(_) | C::Compare(_) | C::Merge(_) | C::Plan(_) => true,
        C::Capture(_) | C::Sweep(_) => false,
    }
}

/// What [`huge_pages_for_the_heap`] gives glibc: back the heap with transparent huge pages
/// (`madvise`) and grow it 64 MiB at a time, so that its pieces are whole huge pages.
const HUGE_PAGE_TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864";

/// Runs this program again, at once, with glibc's malloc told to back its heap with transparent
/// huge pages. glibc reads `GLIBC_TUNABLES` only as a process starts, and setting the same
/// from inside (advising the heap from a global allocator) needs a single arena, which on 16
/// cores doubled the analysis stage on lock contention. On the 255 MB benchmark trace, default
/// command, 20 alternating runs on the 2-core machine: page faults 41k → 5k, wall 0.680 →
/// 0.615 s (median), peak RSS 163 → 183 MB (huge pages are backed whole).
///
/// Nothing happens where the user's `GLIBC_TUNABLES` names `glibc.malloc.hugetlb` already (set
/// `glibc.malloc.hugetlb=0` to opt out; it also keeps this from looping), where the kernel has
/// transparent huge pages off, or where the exec fails: the run goes on as it is.
fn huge_pages_for_the_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::ffi::OsString;
        use std::os::unix::process::CommandExt;
        let current = std::env::var_os("GLIBC_TUNABLES");
        let named = current
            .as_ref()
            .is_some_and(|v| v.to_string_lossy().contains("glibc.malloc.hugetlb"));
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|mode| !mode.contains("[never]"));
        if named || !thp {
            return;
        }
        let tunables = match current {
            Some(mut v) if !v.is_empty() => {
                v.push(":");
                v.push(HUGE_PAGE_TUNABLES);
                v
            }
            _ => OsString::from(HUGE_PAGE_TUNABLES),
        };
        let mut args = std::env::args_os();
        let Some(arg0) = args.next() else {
            return;
        };
        // Returns only if the exec failed; the run then goes on without huge pages.
        let _ = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .exec();
    }
}

/// Which pages the heap is on, for `--timings`: whether [`huge_pages_for_the_heap`] ran this
/// process again (its own `GLIBC_TUNABLES`), and what the kernel says it maps in huge pages
/// now (`AnonHugePages` of `/proc/self/smaps_rollup`), so the setting is seen to take.
fn heap_pages() -> String {
    let on = std::env::var_os("GLIBC_TUNABLES")
        .is_some_and(|v| v.to_string_lossy().contains(HUGE_PAGE_TUNABLES));
    let asked = if on {
        "transparent huge pages asked for (GLIBC_TUNABLES)"
    } else {
        "the allocator's default pages"
    };
    let mapped = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("AnonHugePages:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
    let advised = advised_kib().map_or_else(|| "unknown".to_owned(), |k| format!("{k} KiB"));
    match mapped {
        Some(kib) => {
            format!("{asked}; advised for huge pages: {advised}; huge pages mapped: {kib} KiB")
        }
        None => format!("{asked}; advised for huge pages: {advised}; huge pages mapped: unknown"),
    }
}

/// KiB of this process's mappings advised for huge pages (`MADV_HUGEPAGE`: the `hg` flag of
/// `/proc/self/smaps`): what glibc asked the kernel for, whether or not the kernel had huge
/// pages at hand to give.
fn advised_kib() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let (mut total, mut size) = (0u64, 0u64);
    for l in t.lines() {
        if let Some(v) = l.strip_prefix("Size:") {
            size = v.split_whitespace().next()?.parse().ok()?;
        } else if let Some(flags) = l.strip_prefix("VmFlags:") {
            if flags.split_whitespace().any(|f| f == "hg") {
                total += size;
            }
        }
    }
    Some(total)
}

/// The error and its causes on one line, each cause once: the library's errors already end
/// with the OS error they wrap, which is also their `source` ("x: File exists: File exists").
fn message(err: &anyhow::Error) -> String {
    let mut msg = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !msg.ends_with(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg.replace('\n', " ")
}

/// The console summary and where the files went, on stdout.
fn print_result(console: &str, out_dir: &std::path::Path) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(terminal_safe(console).as_bytes())?;
    writeln!(
        out,
        "\nwrote {}",
        terminal_safe(&out_dir.display().to_string())
    )?;
    out.flush()
}

/// `-j N` within `1..=cores`: more threads than cores only cost memory and start-up (issue 22:
/// `-j 10000` was still starting threads after 32 s), with a warning when clamped.
fn clamp_threads(n: usize, cores: usize) -> (usize, Option<String>) {
    let cores = cores.max(1);
    if n > cores {
        (
            cores,
            Some(format!(
                "-j {n} is more than the {cores} cores here: using {cores}"
            )),
        )
    } else {
        (n.max(1), None)
    }
}

/// Longest line printed, in characters.
const MAX_LINE: usize = 300;

/// Text from the input made safe for a terminal (issue 22): control characters other than
/// tab and newline are dropped (an op name holding ESC sequences could clear the screen or
/// set the window title), and a line longer than [`MAX_LINE`] characters is cut with `…`
/// (a 1 MB op name printed whole).
fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (n, c) in line
            .chars()
            .filter(|&c| c == '\t' || !c.is_control())
            .enumerate()
        {
            if n == MAX_LINE - 1 {
                out.push('…');
                break;
            }
            out.push(c);
        }
    }
    out
}

fn plan(args: cli::PlanArgs) -> anyhow::Result<u8> {
    use steptrace::plan::{Budget, Options, Policy};
    if let Some(n) = args.input.threads {
        limit_threads(n)?;
    }
    let props = args.input.props(None, 10)?;
    let budget = match &args.budget {
        Some(b) => Some(b.parse::<Budget>().map_err(steptrace::Error::Plan)?),
        None => None,
    };
    let opts = Options {
        budget,
        policy: match args.policy {
            cli::PolicyArg::Recompute => Policy::Recompute,
            cli::PolicyArg::Swap => Policy::Swap,
            cli::PolicyArg::Both => Policy::Both,
        },
        bandwidth_gbps: args.bandwidth.or(args.input.swap_bw),
        modules: (!args.modules.is_empty()).then(|| args.modules.clone()),
    };
    let (p, _analysis) = steptrace::plan_run(&props, &opts)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let d = steptrace::default_out_dir(&props.input);
        d.with_extension("plan")
    });
    steptrace::report::plan::write(&out, &p, !args.no_plots).map_err(steptrace::Error::Output)?;
    if !args.quiet {
        let mut o = std::io::stdout().lock();
        o.write_all(terminal_safe(&steptrace::report::plan::table(&p)).as_bytes())?;
        writeln!(o, "wrote {}", terminal_safe(&out.display().to_string()))?;
    }
    Ok(0)
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
            steptrace::plan::Error::BadBudget(_) | steptrace::plan::Error::UnknownModule { .. },
        )) => 2,
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
            match &outcome.manifest_error {
                Some(e) => eprintln!("steptrace: error: could not write the manifest ({e}); the files recorded are kept"),
                None => eprintln!(
                    "steptrace: wrote {} (analyze it with `steptrace analyze {}`)",
                    outcome.out.display(),
                    outcome.out.display()
                ),
            }
            // The child's own status, clamped to what an exit code can carry.
            Ok(outcome.exit.code.clamp(0, 255) as u8)
        }
        cli::Command::Analyze(args) => {
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
            // A distributed run: every rank, then the cross-rank outputs (issue 18); a rank that
            // could not be analysed is a warning there, as a bad side file is.
            let outcome = match steptrace::distributed_run(&props) {
                Some(run) => steptrace::analyze_ranks(&props, &run)
                    .map(|o| (o.console, o.out_dir, Vec::new())),
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
        cli::Command::Merge(args) => {
            #[cfg(feature = "parquet")]
            {
                let o = steptrace::merge(&args.dirs, &args.out, args.top)?;
                print_result(&o.console, &o.out_dir)?;
                Ok(0)
            }
            #[cfg(not(feature = "parquet"))]
            {
                let _ = args;
                anyhow::bail!("merge needs the `parquet` feature (built without it)")
            }
        }
        cli::Command::Compare(args) => {
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
                let Ok(text) = std::fs::read_to_string(r.join("plan.json")) else {
                    continue;
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
        cli::Command::Plan(args) => plan(args),
        cli::Command::Sweep(args) => cli::sweep::run(args),
        cli::Command::Flops(args) => {
            if let Some(n) = args.input.threads {
                limit_threads(n)?;
            }
            let (_trace, analysis, _diag) =
                steptrace::run_analysis(&args.input.props(None, args.top)?)?;
            let mut text =
                steptrace::report::flops::graph_profile_block(&analysis, args.top.max(1));
            for path in &args.compare {
                let bytes = std::fs::read(path).map_err(|e| {
                    steptrace::Error::Input(steptrace::ingest::Error::from(
                        steptrace::file_error::FileError::new(path, e),
                    ))
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
            out.write_all(terminal_safe(&text).as_bytes())?;
            out.flush()?;
            Ok(0)
        }
    }
}

/// Stage progress on a terminal: the stage and the time since the first one, on one line.
fn progress(stage: &str) {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let t0 = START.get_or_init(std::time::Instant::now);
    eprint!(
        "\r\x1b[2Ksteptrace: {stage}... ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
}

/// `--threads N`: rayon's pool, and the pool polars starts for the Parquet copies, which would
/// otherwise take every core. Called before any other thread exists (polars reads its variable
/// when it first starts its pool); a limit the user set for polars is kept.
fn limit_threads(n: usize) -> anyhow::Result<()> {
    let n = clamp_threads(
        n,
        std::thread::available_parallelism().map_or(1, |c| c.get()),
    );
    if let Some(warning) = n.1 {
        eprintln!("steptrace: warning: {warning}");
    }
    let n = n.0;
    if std::env::var_os("POLARS_MAX_THREADS").is_none() {
        std::env::set_var("POLARS_MAX_THREADS", n.to_string());
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()?;
    Ok(())
}

/// `--timings`: each stage's wall time, printed when the next one starts (an empty name ends
/// the last).
fn timing(stage: &str) {
    use std::sync::Mutex;
    static LAST: Mutex<Option<(String, std::time::Instant, f64)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    let cpu = process_cpu_seconds();
    if let Some((name, t, c)) = last.take() {
        let wall = (now - t).as_secs_f64();
        // CPU time over wall time: how many cores the stage kept busy.
        eprintln!(
            "steptrace: {name}: {wall:.3} s ({:.3} s CPU, {:.2} cores)",
            cpu - c,
            (cpu - c) / wall.max(1e-9)
        );
    }
    if !stage.is_empty() {
        *last = Some((stage.to_owned(), now, cpu));
    }
}

/// CPU time of the whole process (all threads, user and system) so far.
#[cfg(unix)]
fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the C library
    // knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(not(unix))]
fn process_cpu_seconds() -> f64 {
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue22_threads_are_clamped_to_the_cores() {
        assert_eq!(clamp_threads(10_000, 2).0, 2);
        assert!(clamp_threads(10_000, 2).1.unwrap().contains("-j 10000"));
        assert_eq!(clamp_threads(0, 8), (1, None));
        assert_eq!(clamp_threads(4, 8), (4, None));
    }

    #[test]
    fn issue22_console_text_loses_control_characters_and_long_lines_are_cut() {
        let hostile = "peak at \x1b[2J\x1b]0;owned\x07aten::mm\tx\r\nnext";
        assert_eq!(
            terminal_safe(hostile),
            "peak at [2J]0;ownedaten::mm\tx\nnext"
        );
        let long = format!("peak allocated at {}", "a".repeat(1 << 20));
        let cut = terminal_safe(&format!("{long}\nend"));
        let first = cut.lines().next().unwrap();
        assert_eq!(first.chars().count(), MAX_LINE);
        assert!(first.ends_with('…'));
        assert!(cut.ends_with("\nend"));
    }
}
