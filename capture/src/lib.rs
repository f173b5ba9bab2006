//! `steptrace capture`: run an unmodified training program (Python, torchrun, or a libtorch C++
//! binary) under the profiler shims and write a run directory `steptrace analyze` reads as is.
//!
//! ```text
//!  steptrace capture -- python train.py
//!    ├─ writes shim_py/sitecustomize.py to a session dir, first on PYTHONPATH
//!    ├─ builds (once, cached) the C++ shim against the program's torch: per-op NVTX ranges,
//!    │  and for C++ programs (LD_PRELOAD) the capture itself
//!    ├─ runs the program, forwarding SIGINT/SIGTERM, returning its exit code
//!    └─ gzips the files, trims native traces to the active window, writes manifest.json
//! ```
//! The library never prints: notes for the user come back in the manifest's notes ([`Manifest`] in [`Outcome::manifest`]).
#![deny(missing_docs)]

pub mod child;
pub mod env;
pub mod finalize;
mod host;
mod manifest;
mod props;
pub mod shim;
mod time;

pub use manifest::{Manifest, Outcome, RankFiles, Rerun};
pub use props::{CaptureProps, Mode, Record, Schedule, TimingPhase};

use std::path::{Path, PathBuf};

/// Why a capture could not be run (the child's own failure is not an error: see
/// [`Outcome::exit`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The output directory holds files and `--force` was not given.
    #[error("{}: output directory is not empty (use --force to write into it)", .0.display())]
    OutDirNotEmpty(PathBuf),
    /// The output directory cannot be created or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No program was given.
    #[error("no program to run: give it after `--`, e.g. `steptrace capture -- python train.py`")]
    NoProgram,
    /// The program could not be started.
    #[error("{program}: could not start: {source}")]
    Spawn {
        /// `argv[0]`.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A bad `--schedule`.
    #[error("bad schedule '{0}': expected e.g. skip_first=1,wait=1,warmup=1,active=3,repeat=1")]
    Schedule(String),
    /// A `--plan` file that is not a plan `steptrace plan` wrote.
    #[error("{}: not a steptrace plan: {what}", path.display())]
    Plan {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn is_python_name(p: &Path) -> bool {
    let n = p.file_name().unwrap_or_default().to_string_lossy();
    n.starts_with("python") || n == "torchrun" || n.starts_with("pypy")
}

fn resolve(prog: &Path) -> Option<PathBuf> {
    if prog.components().count() > 1 {
        return prog.is_file().then(|| prog.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Native when `argv[0]` is an ELF binary that links libtorch; Python otherwise (interpreters,
/// torchrun, shell scripts that start Python: the shim reaches them through PYTHONPATH).
pub fn detect_mode(argv0: &Path) -> Mode {
    if is_python_name(argv0) {
        return Mode::Python;
    }
    let Some(p) = resolve(argv0) else {
        return Mode::Python;
    };
    let Ok(bytes) = std::fs::read(&p) else {
        return Mode::Python;
    };
    let links_torch = bytes.starts_with(b"\x7fELF")
        && [&b"libtorch_cpu.so"[..], b"libtorch.so", b"libc10.so"]
            .iter()
            .any(|needle| memchr::memmem::find(&bytes, needle).is_some());
    if links_torch {
        Mode::Native
    } else {
        Mode::Python
    }
}

fn prepare_out(out: &Path, force: bool) -> Result<PathBuf, Error> {
    if out.exists() {
        let non_empty = std::fs::read_dir(out)
            .map_err(io_err(out))?
            .next()
            .is_some();
        if non_empty && !force {
            return Err(Error::OutDirNotEmpty(out.to_path_buf()));
        }
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let probe = out.join(".steptrace_write_test");
    std::fs::write(&probe, b"").map_err(io_err(out))?;
    let _ = std::fs::remove_file(&probe);
    out.canonicalize().map_err(io_err(out))
}

/// A temporary directory removed on drop.
struct SessionDir(PathBuf);

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn session_dir() -> std::io::Result<SessionDir> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("steptrace-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(d.join("py"))?;
    Ok(SessionDir(d))
}

/// Reads a plan file (`steptrace_formats::plan::Plan`, the type `steptrace plan` writes): its
/// `decisions` each name an `instance` (`Block_3`) and an `action`. Returns its text and the
/// number of decisions.
fn read_plan(path: &Path) -> Result<(String, usize), Error> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let plan = steptrace_formats::plan::Plan::from_json(&text).map_err(|e| Error::Plan {
        path: path.to_path_buf(),
        what: e.to_string(),
    })?;
    Ok((text, plan.decisions.len()))
}

/// Runs the capture. A program that ran steps but ended before the window (a program shorter
/// than the timing phase and the schedule: pytorch/examples' FSDP2 `example.py` runs 10 steps)
/// is run once more with a window fitted to the steps it has and no timing phase; its step
/// time is then the first run's timing phase, and the manifest says so (`rerun`).
pub fn run(props: &CaptureProps) -> Result<Outcome, Error> {
    let first = run_once(props)?;
    let Some(fit) = short_run_schedule(props, &first.manifest) else {
        return write_manifest(first);
    };
    // The second run writes the same names; the first run's files go first, so none of them
    // can stand in for a file the second did not write.
    clear_run_files(&first.out, &first.manifest);
    let mut again = props.clone();
    again.schedule = fit;
    again.timing.steps = 0;
    again.force = true;
    let mut second = run_once(&again)?;
    let m1 = &first.manifest;
    let steps = m1.ranks.iter().map(|r| r.steps).min().unwrap_or(0);
    let timed = m1
        .ranks
        .iter()
        .filter_map(|r| r.timing.as_ref()?.timing_phase.as_ref())
        .map(|p| p.steps + p.settle)
        .min()
        .unwrap_or(0);
    let why = format!(
        "the program ran {steps} steps, fewer than this schedule needs ({}: {} skipped, {}the window's {} wait, {} warm-up and {} active): it was run again with the window on steps {}-{} ({fit}) and no timing phase; its own step time is the first run's timing phase",
        props.schedule.skip_first + props.schedule.wait + props.schedule.warmup + props.schedule.active + timed as u32,
        props.schedule.skip_first,
        if timed > 0 { format!("{timed} timed with nothing recorded, ") } else { String::new() },
        props.schedule.wait,
        props.schedule.warmup,
        props.schedule.active,
        fit.skip_first + fit.wait + fit.warmup + 1,
        fit.steps_to_window_end(),
    );
    for r in &mut second.manifest.ranks {
        let earlier = m1.ranks.iter().find(|f| f.rank == r.rank);
        let phase = earlier.and_then(|f| f.timing.as_ref()?.timing_phase.clone());
        let after = r.timing.take().and_then(|t| t.after_window);
        r.timing = finalize::choose(after, phase);
    }
    second.manifest.step_time_s = second
        .manifest
        .ranks
        .first()
        .and_then(|r| r.timing.as_ref())
        .map(|t| t.step_time_s);
    second.manifest.notes.insert(0, why.clone());
    second.manifest.rerun = Some(Rerun {
        first_run_steps: steps,
        first_run_schedule: props.schedule,
        first_run_timing_steps: timed,
        why,
    });
    write_manifest(second)
}

/// The schedule a second run of a short program uses, or `None` when the first run needs no
/// second: it recorded its window, asked for no trace, failed, or ran fewer than 2 steps
/// (a window needs a warm-up step and an active one). The window keeps one skipped step where
/// the program has 5 or more, one warm-up step, and as many active steps as asked for and as
/// are left.
fn short_run_schedule(props: &CaptureProps, m: &Manifest) -> Option<Schedule> {
    let clean = m.exit.code == 0 || m.exit.ended_lingering_s.is_some();
    let no_window = !m.ranks.is_empty() && m.ranks.iter().all(|r| !r.files.contains_key("trace"));
    let steps = m.ranks.iter().map(|r| r.steps).min()?;
    if !props.rerun_short || !props.record.trace || !clean || !no_window || steps < 2 {
        return None;
    }
    let steps = u32::try_from(steps).ok()?;
    let skip_first = u32::from(steps >= 5);
    Some(Schedule {
        skip_first,
        wait: 0,
        warmup: 1,
        active: props.schedule.active.min(steps - skip_first - 1).max(1),
        repeat: 1,
    })
}

/// Removes what a run wrote into `out`: every rank's files, the shims' status files and the
/// manifest.
fn clear_run_files(out: &Path, m: &Manifest) {
    let mut names: Vec<String> = m
        .ranks
        .iter()
        .flat_map(|r| r.files.values().cloned())
        .collect();
    names.push("manifest.json".into());
    for (name, _) in finalize::read_statuses(out) {
        names.push(name);
    }
    for n in names {
        // Names come from our own status files; only plain names directly in `out`.
        if !n.contains('/') && !n.starts_with('.') {
            let _ = std::fs::remove_file(out.join(n));
        }
    }
}

/// Writes `manifest.json` for a finished run.
fn write_manifest(mut o: Outcome) -> Result<Outcome, Error> {
    let path = o.out.join("manifest.json");
    let text = serde_json::to_vec_pretty(&o.manifest).expect("manifest serialises");
    o.manifest_error = std::fs::write(&path, text).err().map(|e| {
        let _ = std::fs::remove_file(&path); // a partial manifest would read as complete
        format!("{}: {e}", path.display())
    });
    Ok(o)
}

/// One run of the program under the shims, its files finalised; the manifest is not written.
fn run_once(props: &CaptureProps) -> Result<Outcome, Error> {
    if props.program.is_empty() {
        return Err(Error::NoProgram);
    }
    // The plan is checked before anything runs, and kept with the run it shaped.
    let plan = match &props.plan {
        Some(p) => Some(read_plan(p)?),
        None => None,
    };
    let out = prepare_out(&props.out, props.force)?;
    let session = session_dir().map_err(io_err(&std::env::temp_dir()))?;
    let py_dir = session.0.join("py");
    std::fs::write(py_dir.join("sitecustomize.py"), shim::SITECUSTOMIZE_PY)
        .map_err(io_err(&py_dir))?;

    let argv0 = PathBuf::from(&props.program[0]);
    let mode = props.mode.unwrap_or_else(|| detect_mode(&argv0));
    let mut notes = Vec::new();
    let python = props.python.clone().unwrap_or_else(|| {
        if mode == Mode::Python
            && is_python_name(&argv0)
            && argv0.file_name().is_some_and(|n| n != "torchrun")
        {
            argv0.clone()
        } else {
            PathBuf::from("python3")
        }
    });

    nvtx::range_push!("steptrace.capture.prepare");
    let (torch, cpp_shim) = cpp_shim(props, mode, &python, &mut notes);
    nvtx::range_pop!();

    let mut envs = child_env(props, &out, &py_dir, mode, cpp_shim.as_deref(), &argv0);
    if let Some((text, n)) = &plan {
        let dst = out.join("plan.json");
        std::fs::write(&dst, text).map_err(io_err(&dst))?;
        envs.push((env::PLAN.into(), dst.to_string_lossy().into_owned()));
        if props.plan_ab {
            envs.push((env::PLAN_AB.into(), "1".into()));
        }
        notes.push(format!(
            "plan applied: {n} module decision(s) from {}",
            props.plan.as_deref().unwrap_or(Path::new("")).display()
        ));
    }

    let started_at = time::now_utc();
    nvtx::range_push!("steptrace.capture.child");
    let exit = run_child(props, &out, &envs, &argv0)?;
    nvtx::range_pop!();
    let ended_at = time::now_utc();

    // From here on the child has run: its exit status must come back whatever fails.
    let ran = Ran {
        mode,
        exit,
        started_at,
        ended_at,
        torch,
        notes,
    };
    let manifest = finish(props, &out, ran)?;
    Ok(Outcome {
        exit,
        manifest,
        out,
        manifest_error: None,
    })
}

/// The torch the C++ shim is built against and the shim itself, where the run needs it: it
/// serves native programs, and per-op NVTX ranges when an NVTX tool (Nsight Systems) is
/// attached to record them; otherwise a Python program needs neither it nor the probe of its
/// torch (an `import torch`, seconds). What went wrong goes to `notes`.
fn cpp_shim(
    props: &CaptureProps,
    mode: Mode,
    python: &Path,
    notes: &mut Vec<String>,
) -> (Option<shim::TorchInfo>, Option<PathBuf>) {
    let nvtx_tool = std::env::var_os("NVTX_INJECTION64_PATH").is_some_and(|v| !v.is_empty());
    let need_cpp = mode == Mode::Native || (props.record.nvtx && nvtx_tool);
    let torch = if need_cpp {
        let cache = props.cache.clone().unwrap_or_else(shim::cache_root);
        match shim::probe_torch_cached(python, &cache) {
            Ok(t) => Some(t),
            Err(why) => {
                notes.push(format!(
                    "{why}: the program runs without instrumentation unless it imports torch itself"
                ));
                None
            }
        }
    } else {
        None
    };
    let mut cpp_shim = None;
    if let (Some(t), true) = (&torch, need_cpp) {
        let cache = props.cache.clone().unwrap_or_else(shim::cache_root);
        // The first capture against a torch builds the shim (CMake, about 20 s): said before
        // the wait, and after it how long it took.
        let cached = shim::cached_path(&cache, t);
        let fresh = !cached.is_file();
        if fresh {
            if let Some(say) = props.progress {
                say(&format!(
                    "building the C++ shim against torch {} (once per torch: it is cached in {})",
                    t.version,
                    cached.parent().unwrap_or(&cache).display()
                ));
            }
        }
        let t0 = std::time::Instant::now();
        let built = shim::build(&cache, t);
        if fresh && built.is_ok() {
            notes.push(format!(
                "built the C++ shim in {:.1} s (once: later captures against torch {} reuse it)",
                t0.elapsed().as_secs_f64(),
                t.version
            ));
        }
        match built {
            Ok(lib) => cpp_shim = Some(lib),
            Err(why) => notes.push(match mode {
                Mode::Native => format!("{why}: the C++ program runs without capture"),
                Mode::Python => format!("{why}: no per-op NVTX ranges"),
            }),
        }
    }
    (torch, cpp_shim)
}

/// The environment the program runs in: where the shims write, what they record and when,
/// the Python shim first on PYTHONPATH, and a native program's preloaded C++ shim.
fn child_env(
    props: &CaptureProps,
    out: &Path,
    py_dir: &Path,
    mode: Mode,
    cpp_shim: Option<&Path>,
    argv0: &Path,
) -> Vec<(String, String)> {
    let mut envs: Vec<(String, String)> = vec![
        (env::OUT.into(), out.to_string_lossy().into_owned()),
        (env::SCHEDULE.into(), props.schedule.to_string()),
        (env::RECORD.into(), props.record.env_value()),
        (env::MAX_ENTRIES.into(), props.max_entries.to_string()),
        (env::TIMING_STEPS.into(), props.timing.steps.to_string()),
        (
            env::TIMING_MAX_STEPS.into(),
            props.timing.max_steps.to_string(),
        ),
        (env::TIMING_MAX_S.into(), props.timing.max_s.to_string()),
        (
            env::PYTHONPATH.into(),
            env::chain(
                &py_dir.to_string_lossy(),
                std::env::var(env::PYTHONPATH).ok().as_deref(),
                ':',
            ),
        ),
    ];
    if std::env::var_os(env::TEARDOWN_CUPTI).is_none() {
        envs.push((env::TEARDOWN_CUPTI.into(), "1".into()));
        // The shims take it back in a program that never used the GPU (it hangs at exit).
        envs.push((env::TEARDOWN_SET.into(), "1".into()));
    }
    match (mode, cpp_shim) {
        (Mode::Native, Some(lib)) => {
            envs.push((env::NATIVE.into(), "1".into()));
            if std::env::var_os(env::SYMBOLIZE_MODE).is_none() {
                envs.push((env::SYMBOLIZE_MODE.into(), "fast".into()));
            }
            if let Some(exe) = resolve(argv0).and_then(|p| p.canonicalize().ok()) {
                envs.push((env::NATIVE_EXE.into(), exe.to_string_lossy().into_owned()));
            }
            envs.push((
                env::LD_PRELOAD.into(),
                env::chain(
                    &lib.to_string_lossy(),
                    std::env::var(env::LD_PRELOAD).ok().as_deref(),
                    ':',
                ),
            ));
        }
        (Mode::Python, Some(lib)) if props.record.nvtx => {
            envs.push((env::NVTX_LIB.into(), lib.to_string_lossy().into_owned()));
        }
        _ => {}
    }
    envs
}

/// Runs the program to its end. A program whose shims have all written their clean exit and
/// that still runs 30 s later (`STEPTRACE_LINGER_S`) is ended: its files are complete, and a
/// capture must not wait on it for ever.
fn run_child(
    props: &CaptureProps,
    out: &Path,
    envs: &[(String, String)],
    argv0: &Path,
) -> Result<child::Exit, Error> {
    let grace_s: u64 = std::env::var(env::LINGER_S)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(30);
    let finished = || {
        let statuses = finalize::read_statuses(out);
        let ranks = statuses
            .iter()
            .map(|(_, s)| s.world_size)
            .max()
            .unwrap_or(1);
        !statuses.is_empty()
            && statuses.len() as i64 >= ranks
            && statuses.iter().all(|(_, s)| s.exited_cleanly)
    };
    let linger = (grace_s > 0).then(|| child::Linger {
        finished: &finished,
        grace: std::time::Duration::from_secs(grace_s),
    });
    child::run(&props.program, envs, linger).map_err(|source| Error::Spawn {
        program: argv0.display().to_string(),
        source,
    })
}

/// Why a rank's window was not recorded whole when the program simply ended: which steps went
/// where, counting the timing phase's (its length is not fixed: it ends when its median
/// settles).
fn short_window(props: &CaptureProps, st: &finalize::ShimStatus) -> String {
    let steps = st.steps.max(st.boundaries_epoch_ns.len() as i64);
    let s = &props.schedule;
    // The phase's readings are at step boundaries, its first at the end of the last skipped
    // step: n readings time the n-1 steps after it.
    let readings = st.timing_ns.len() as i64;
    let window = i64::from(s.wait + s.warmup + s.active);
    let first = i64::from(s.skip_first.max(1)) + 1;
    let last = (first + readings - 2).min(steps);
    format!(
        "the program ended after {steps} steps, before the active window closed: {} skipped, {}and the window (wait {}, warm-up {}, active {}) needed {window} more",
        s.skip_first,
        if readings > 1 {
            format!("steps {first}-{last} timed with nothing recorded (the timing phase), ")
        } else {
            String::new()
        },
        s.wait,
        s.warmup,
        s.active,
    )
}

/// What the launcher knows of a run once the program has ended.
struct Ran {
    mode: Mode,
    exit: child::Exit,
    started_at: String,
    ended_at: String,
    /// The torch probed for the C++ shim, where one was.
    torch: Option<shim::TorchInfo>,
    notes: Vec<String>,
}

/// The manifest of a run: every rank's files (compressed here, all ranks at once), what the
/// run lacks and why, and the program's step time.
fn finish(props: &CaptureProps, out: &Path, ran: Ran) -> Result<Manifest, Error> {
    let Ran {
        mode,
        exit,
        started_at,
        ended_at,
        torch,
        mut notes,
    } = ran;
    nvtx::range_push!("steptrace.capture.finalize");
    let statuses = finalize::read_statuses(out);
    let mut reasons = Vec::new();
    if let Some(s) = exit.ended_lingering_s {
        notes.push(format!(
            "every shim reported the program's clean exit, but the process was still running {s} s later: steptrace ended it ({} to keep it running longer); its files are complete",
            env::LINGER_S
        ));
    } else if exit.code != 0 {
        reasons.push(match exit.signal {
            Some(s) => format!("the program was killed by signal {s}"),
            None => format!("the program exited with status {}", exit.code),
        });
    }
    if statuses.is_empty() {
        reasons.push(
            "no shim reported: the program never loaded the capture shim (did it import torch?)"
                .into(),
        );
    }
    let mut ranks: Vec<RankFiles> = Vec::new();
    // (index in `ranks`, role, file name) of each file to gzip.
    let mut to_compress = Vec::new();
    for (_name, st) in &statuses {
        let r = rank_files(
            props,
            out,
            st,
            ranks.len(),
            &mut to_compress,
            &mut reasons,
            &mut notes,
        );
        ranks.push(r);
    }
    let t0 = std::time::Instant::now();
    let paths: Vec<PathBuf> = to_compress.iter().map(|(_, _, n)| out.join(n)).collect();
    let results = finalize::gzip_files(&paths);
    let compress_ms = t0.elapsed().as_secs_f64() * 1e3;
    for ((rank_index, role, name), result) in to_compress.into_iter().zip(results) {
        let rank = &mut ranks[rank_index];
        match result {
            Ok(gz) => {
                let gz = gz
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                rank.files.insert(role, gz);
            }
            Err(e) => notes.push(format!("could not compress {name}: {e}")),
        }
    }
    for rank in &mut ranks {
        // Wall time of the whole run's compression, the same on every rank's line.
        rank.costs_ms
            .insert("compress".into(), (compress_ms * 1e3).round() / 1e3);
    }
    nvtx::range_pop!();
    let first = statuses.first().map(|(_, s)| s.clone()).unwrap_or_default();
    let files = ranks.first().map(|r| r.files.clone()).unwrap_or_default();
    if !files.contains_key("trace") && props.record.trace {
        reasons.push("no trace was written".into());
    }
    Ok(Manifest {
        steptrace_version: env!("CARGO_PKG_VERSION").into(),
        command: props
            .program
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cwd: std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        mode,
        exit,
        started_at,
        ended_at,
        host: host::host_name(),
        torch: first
            .torch
            .clone()
            .or_else(|| torch.as_ref().map(|t| t.version.clone())),
        cuda: first
            .cuda
            .clone()
            .or_else(|| torch.as_ref().and_then(|t| t.cuda.clone())),
        driver: host::driver_version(),
        gpu: first.gpu.clone(),
        gpu_memory_bytes: first.gpu_memory_bytes,
        schedule: props.schedule,
        record: props.record,
        rank: first.rank,
        world_size: statuses
            .iter()
            .map(|(_, s)| s.world_size)
            .max()
            .unwrap_or(1),
        step_time_s: ranks
            .first()
            .and_then(|r| r.timing.as_ref())
            .map(|t| t.step_time_s),
        completed: reasons.is_empty(),
        incomplete_reasons: reasons,
        files,
        ranks,
        notes,
        rerun: None,
    })
}

/// One rank's files as the manifest lists them (the missing ones noted and left out), with
/// the files to compress pushed to `to_compress` under the rank's `index`, and what the rank's
/// shim reported as missing or noted.
fn rank_files(
    props: &CaptureProps,
    out: &Path,
    st: &finalize::ShimStatus,
    index: usize,
    to_compress: &mut Vec<(usize, String, String)>,
    reasons: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> RankFiles {
    let mut files = st.files.clone();
    if st.native {
        // The C++ shim records the window itself (trace, Execution Trace, snapshot at
        // the window's end); without a window, the exit snapshot is what there is.
        if !files.contains_key("snapshot") {
            if let Some(s) = files.get("snapshot_exit").cloned() {
                files.insert("snapshot".into(), s);
            }
        }
    }
    if !st.window_complete && st.no_trace_reason.is_none() {
        let why = st
            .window_incomplete_reason
            .clone()
            .unwrap_or_else(|| short_window(props, st));
        reasons.push(format!("rank {}: {why}", st.rank));
    }
    if let Some(r) = &st.no_trace_reason {
        reasons.push(format!("rank {}: {r}", st.rank));
    }
    if let Some(r) = &st.no_snapshot_reason {
        notes.push(format!("rank {}: no memory snapshot: {r}", st.rank));
    }
    for n in &st.notes {
        notes.push(format!("rank {}: {n}", st.rank));
    }
    // Compress what is there (below, every rank's files at once); drop roles whose file
    // is missing.
    let mut present = std::collections::BTreeMap::new();
    for (role, name) in files {
        let p = out.join(&name);
        if !p.is_file() {
            if Path::new(&format!("{}.gz", p.display())).is_file() {
                present.insert(role, format!("{name}.gz"));
            } else {
                notes.push(format!(
                    "rank {}: {role} file {name} was not written",
                    st.rank
                ));
            }
            continue;
        }
        to_compress.push((index, role.clone(), name.clone()));
        present.insert(role, name);
    }
    let timing = finalize::program_timing(st);
    if timing.is_none() && st.window_complete && props.timing.steps > 0 {
        notes.push(format!(
            "rank {}: the program ended inside the timing phase before the window: its own step time is unknown",
            st.rank
        ));
    }
    RankFiles {
        rank: st.rank,
        files: present,
        steps: st.steps.max(st.boundaries_epoch_ns.len() as i64),
        boundary: st.boundary.clone(),
        errors: st.errors.clone(),
        timing,
        reference: st.reference.clone(),
        plan_probe: st.plan_probe.clone(),
        module_fqns: st.module_fqns.clone(),
        costs_ms: st.costs_ms.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python shim refuses plans newer than it knows by the same version number the
    /// planner writes into plan.json.
    #[test]
    fn the_python_shim_applies_the_plan_format_version_the_planner_writes() {
        let shim = include_str!("../shim_py/sitecustomize.py");
        let line = format!(
            "\n_PLAN_FORMAT_VERSION = {}\n",
            steptrace_formats::plan::FORMAT_VERSION
        );
        assert!(shim.contains(&line), "the shim lacks {line:?}");
    }

    /// manifest.json has one definition: what capture writes reads back through the same type
    /// unchanged (analysis reads it with these types), and a rank's timing as older builds
    /// wrote it (the phase's fields beside `step_time_s`) reads into the nested phase.
    #[test]
    fn the_manifest_written_reads_back_through_the_same_type() {
        let mut m = finished(&[(40, true), (40, true)], 0);
        m.ranks[0].timing = Some(finalize::Timing {
            step_time_s: 0.25,
            source: finalize::TimingSource::AfterWindow,
            timing_phase: Some(finalize::PhaseTiming {
                steps: 5,
                settle: 1,
                stop: Some("time_cap".into()),
                step_time_s: 0.3,
                step_time_cuda_s: Some(0.29),
                intervals_s: vec![0.31, 0.3, 0.3],
                unplanned: None,
                first_step: Some(1),
                host_lead_s: None,
                optimizer_step_s: Some(0.01),
            }),
            after_window: Some(finalize::AfterWindow {
                steps: 60,
                step_time_s: 0.25,
                median_s: 0.25,
                outliers: 0,
                p10_s: 0.24,
                p90_s: 0.26,
                marker: finalize::StepMarker::BackwardPasses,
                passes_per_step: Some(3),
                start_epoch_ns: None,
            }),
        });
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains(r#""source":"after_window""#), "{text}");
        assert!(text.contains(r#""marker":"backward_passes""#), "{text}");
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);

        let flat = r#"{"ranks": [{"rank": 1, "timing": {"step_time_s": 0.02, "steps": 8,
            "stop": "settled", "intervals_s": [0.02, 0.021]}}]}"#;
        let m: Manifest = serde_json::from_str(flat).unwrap();
        let t = m.ranks[0].timing.as_ref().unwrap();
        assert_eq!(t.source, finalize::TimingSource::TimingPhase);
        let p = t.timing_phase.as_ref().unwrap();
        assert_eq!(
            (p.steps, p.step_time_s, p.stop.as_deref()),
            (8, 0.02, Some("settled"))
        );
        assert_eq!(p.intervals_s, vec![0.02, 0.021]);
    }

    /// A finished run's manifest: `ranks` of (steps, whether a trace was written), exiting
    /// with `code`.
    fn finished(ranks: &[(i64, bool)], code: i32) -> Manifest {
        Manifest {
            steptrace_version: "test".into(),
            command: vec!["python3".into(), "train.py".into()],
            cwd: String::new(),
            mode: Mode::Python,
            exit: child::Exit {
                code,
                signal: None,
                forwarded_signal: None,
                ended_lingering_s: None,
            },
            started_at: String::new(),
            ended_at: String::new(),
            host: String::new(),
            torch: None,
            cuda: None,
            driver: None,
            gpu: None,
            gpu_memory_bytes: None,
            schedule: Schedule::default(),
            record: Record::default(),
            rank: 0,
            world_size: ranks.len() as i64,
            completed: false,
            incomplete_reasons: Vec::new(),
            step_time_s: None,
            files: Default::default(),
            ranks: ranks
                .iter()
                .enumerate()
                .map(|(r, &(steps, trace))| RankFiles {
                    rank: r as i64,
                    files: if trace {
                        [("trace".to_owned(), format!("trace_rank{r}.json.gz"))].into()
                    } else {
                        Default::default()
                    },
                    steps,
                    boundary: Some("optimizer_step".into()),
                    errors: Vec::new(),
                    timing: None,
                    reference: None,
                    plan_probe: None,
                    module_fqns: Default::default(),
                    costs_ms: Default::default(),
                })
                .collect(),
            notes: Vec::new(),
            rerun: None,
        }
    }

    fn props() -> CaptureProps {
        CaptureProps {
            program: vec!["python3".into()],
            out: PathBuf::from("run"),
            force: false,
            schedule: Schedule::default(),
            record: Record::default(),
            mode: None,
            python: None,
            max_entries: 1,
            cache: None,
            timing: TimingPhase::default(),
            plan: None,
            plan_ab: false,
            rerun_short: true,
            progress: None,
        }
    }

    /// The frameworks issue: a program that ran steps but left no trace (pytorch/examples'
    /// FSDP2 example: 10 steps, all skipped or timed) is run again with a window fitted to its
    /// steps; one that recorded its window, failed, ran under 2 steps, or asked for no trace or
    /// no rerun is not.
    #[test]
    fn a_short_program_is_run_again_with_a_window_that_fits_its_steps() {
        let p = props();
        let fit = |ranks: &[(i64, bool)], code| short_run_schedule(&p, &finished(ranks, code));
        let ten = fit(&[(10, false), (10, false)], 0).expect("a second run");
        assert_eq!(
            ten.to_string(),
            "skip_first=1,wait=0,warmup=1,active=3,repeat=1"
        );
        assert_eq!(ten.steps_to_window_end(), 5);
        // The window fits the fewest steps of any rank.
        let three = fit(&[(10, false), (3, false)], 0).unwrap();
        assert_eq!(
            three.to_string(),
            "skip_first=0,wait=0,warmup=1,active=2,repeat=1"
        );
        assert_eq!(fit(&[(2, false)], 0).unwrap().steps_to_window_end(), 2);
        assert_eq!(fit(&[(1, false)], 0), None, "a window needs two steps");
        assert_eq!(
            fit(&[(10, true), (10, false)], 0),
            None,
            "a trace was written"
        );
        assert_eq!(fit(&[(10, false)], 1), None, "the program failed");
        assert_eq!(short_run_schedule(&p, &finished(&[], 0)), None);
        let mut off = props();
        off.rerun_short = false;
        assert_eq!(short_run_schedule(&off, &finished(&[(10, false)], 0)), None);
        off = props();
        off.record.trace = false;
        assert_eq!(short_run_schedule(&off, &finished(&[(10, false)], 0)), None);
    }

    #[test]
    fn modes() {
        assert_eq!(detect_mode(Path::new("python3")), Mode::Python);
        assert_eq!(detect_mode(Path::new("/usr/bin/torchrun")), Mode::Python);
        // An ELF that does not link libtorch (a shell starting Python) is not instrumented natively.
        assert_eq!(detect_mode(Path::new("/bin/sh")), Mode::Python);
        assert_eq!(Record::default().env_value(), "trace,memory,et,nvtx");
    }
}
