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

mod assemble;
pub mod child;
pub mod env;
pub mod finalize;
mod host;
mod launch;
mod manifest;
mod props;
pub mod shim;
mod time;

pub use manifest::{Manifest, Outcome, RankFiles, Rerun};
pub use props::{parse_schedule, CaptureProps, Mode, Record, Schedule, TimingPhase};
pub use time::now_utc;

use std::path::{Path, PathBuf};

use launch::run_once;

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
    /// An option this kind of program cannot take.
    #[error("{0}")]
    Unsupported(String),
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

/// The end of an in-process capture (`steptrace.profile` in Python): every rank's shim has
/// stopped and written its files and status into `props.out`, where they are compressed and
/// manifest.json written, as after a launched program's exit. `started_at` is when the
/// profiled block began ([`now_utc`]); `raised`, what ended it if it raised (the manifest's
/// exit status is then 1); `more_notes` go to the manifest's notes.
pub fn finish_in_process(
    props: &CaptureProps,
    started_at: String,
    raised: Option<String>,
    more_notes: Vec<String>,
) -> Result<Outcome, Error> {
    let out = props.out.canonicalize().map_err(io_err(&props.out))?;
    let mut notes = vec![
        "captured in-process by steptrace.profile: the run is the profiled block, its steps those the program marked".to_owned(),
    ];
    let mut exit = child::Exit::default();
    if let Some(why) = raised {
        notes.push(format!("the profiled block raised {why}"));
        exit.code = 1;
    }
    notes.extend(more_notes);
    let ran = assemble::Ran {
        mode: Mode::Python,
        exit,
        started_at,
        ended_at: time::now_utc(),
        torch: None,
        notes,
    };
    let manifest = assemble::finish(props, &out, ran)?;
    write_manifest(Outcome {
        exit,
        manifest,
        out,
        manifest_error: None,
    })
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

#[cfg(test)]
mod tests;
