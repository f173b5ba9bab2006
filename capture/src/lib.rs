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
//! The library never prints: notes for the user come back in [`Outcome::notes`].
#![deny(missing_docs)]

pub mod child;
pub mod env;
pub mod finalize;
pub mod shim;
mod time;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

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
        /// argv[0].
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

/// torch.profiler's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Schedule {
    /// Steps ignored at the start.
    pub skip_first: u32,
    /// Steps waited.
    pub wait: u32,
    /// Steps recorded and discarded.
    pub warmup: u32,
    /// Steps recorded.
    pub active: u32,
    /// Cycles.
    pub repeat: u32,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            skip_first: 1,
            wait: 1,
            warmup: 1,
            active: 3,
            repeat: 1,
        }
    }
}

impl std::str::FromStr for Schedule {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let mut out = Schedule::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::Schedule(s.into()))?;
            let v: u32 = v.trim().parse().map_err(|_| Error::Schedule(s.into()))?;
            match k.trim() {
                "skip_first" => out.skip_first = v,
                "wait" => out.wait = v,
                "warmup" => out.warmup = v,
                "active" => out.active = v,
                "repeat" => out.repeat = v,
                _ => return Err(Error::Schedule(s.into())),
            }
        }
        if out.active == 0 {
            return Err(Error::Schedule(s.into()));
        }
        Ok(out)
    }
}

impl Schedule {
    /// Step boundaries a program must reach for the (last) active window to close.
    pub fn steps_to_window_end(&self) -> u32 {
        self.skip_first + (self.wait + self.warmup + self.active) * self.repeat.max(1)
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skip_first={},wait={},warmup={},active={},repeat={}",
            self.skip_first, self.wait, self.warmup, self.active, self.repeat
        )
    }
}

/// What to record (all on by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Kineto trace.
    pub trace: bool,
    /// CUDA memory history and snapshots.
    pub memory: bool,
    /// Execution Trace.
    pub exec_trace: bool,
    /// NVTX ranges.
    pub nvtx: bool,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            trace: true,
            memory: true,
            exec_trace: true,
            nvtx: true,
        }
    }
}

impl Record {
    fn env_value(&self) -> String {
        let mut v = Vec::new();
        for (on, name) in [
            (self.trace, "trace"),
            (self.memory, "memory"),
            (self.exec_trace, "et"),
            (self.nvtx, "nvtx"),
        ] {
            if on {
                v.push(name);
            }
        }
        v.join(",")
    }
}

/// How the program is instrumented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Python (or torchrun, or a script that starts Python): the sitecustomize shim.
    Python,
    /// A native libtorch binary: the C++ shim through LD_PRELOAD.
    Native,
}

/// Everything `capture` needs.
#[derive(Debug, Clone)]
pub struct CaptureProps {
    /// The program and its arguments.
    pub program: Vec<OsString>,
    /// Run directory.
    pub out: PathBuf,
    /// Write into a non-empty directory.
    pub force: bool,
    /// Profiler schedule.
    pub schedule: Schedule,
    /// What to record.
    pub record: Record,
    /// Force a mode instead of detecting it.
    pub mode: Option<Mode>,
    /// Interpreter used to find torch (default: the program if it is Python, else `python3`).
    pub python: Option<PathBuf>,
    /// Allocator history entries kept.
    pub max_entries: u64,
    /// Shim cache directory (default [`shim::cache_root`]).
    pub cache: Option<PathBuf>,
    /// The timing phase before the window (the program's own step time).
    pub timing: TimingPhase,
    /// A plan from `steptrace plan` to apply to the program (issue 20): its modules are
    /// recomputed or swapped from their second call on.
    pub plan: Option<PathBuf>,
    /// With `plan`: the timing phase alternates steps with and without it, each its own median
    /// (`step_time_unplanned_s`), so that what the plan adds is measured in one process, free
    /// of the drift between two runs. The steps without the plan need its memory.
    pub plan_ab: bool,
}

/// The timing phase: steps run before the window with nothing recorded but the boundary
/// hooks. It times at least `steps` steps and goes on until the median of the later half is
/// settled (the rule in both shims, docs/capture.md), up to `max_steps` or `max_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingPhase {
    /// Fewest steps timed (0: no timing phase).
    pub steps: u32,
    /// Most steps timed while the median has not settled (0: no cap).
    pub max_steps: u32,
    /// Most seconds timed while the median has not settled (0: no cap).
    pub max_s: u32,
}

impl Default for TimingPhase {
    fn default() -> Self {
        TimingPhase {
            steps: 10,
            max_steps: 20,
            max_s: 10,
        }
    }
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// steptrace version.
    pub steptrace_version: &'static str,
    /// The command line run.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// How the program was instrumented.
    pub mode: Mode,
    /// How it ended.
    pub exit: child::Exit,
    /// UTC start.
    pub started_at: String,
    /// UTC end.
    pub ended_at: String,
    /// Host name.
    pub host: String,
    /// torch version (from the shim, else the probe).
    pub torch: Option<String>,
    /// CUDA version torch was built with.
    pub cuda: Option<String>,
    /// NVIDIA driver version.
    pub driver: Option<String>,
    /// GPU name.
    pub gpu: Option<String>,
    /// GPU memory, bytes.
    pub gpu_memory_bytes: Option<i64>,
    /// Schedule.
    pub schedule: Schedule,
    /// What was asked for.
    pub record: Record,
    /// Rank of the files in `files`.
    pub rank: i64,
    /// World size.
    pub world_size: i64,
    /// Whether the program exited 0 and every rank recorded its whole window.
    pub completed: bool,
    /// Why not, when not.
    pub incomplete_reasons: Vec<String>,
    /// The program's own median step time, seconds (rank 0, or the lowest rank), timed before
    /// the window with nothing recorded; `analyze` reports it beside the instrumented one.
    pub step_time_s: Option<f64>,
    /// Files for analyze (rank 0, or the lowest rank), relative to the run directory.
    pub files: std::collections::BTreeMap<String, String>,
    /// Every rank's files and shim status.
    pub ranks: Vec<RankFiles>,
    /// Notes: shim build, NVTX, missing torch.
    pub notes: Vec<String>,
}

/// One rank's files.
#[derive(Debug, Clone, Serialize)]
pub struct RankFiles {
    /// Rank.
    pub rank: i64,
    /// Files by role, relative paths.
    pub files: std::collections::BTreeMap<String, String>,
    /// Step boundaries the shim saw.
    pub steps: i64,
    /// How they were found.
    pub boundary: Option<String>,
    /// Shim errors.
    pub errors: Vec<String>,
    /// The program's own step time: over the steps after the window, and in the timing phase
    /// before it.
    pub timing: Option<finalize::Timing>,
    /// Validation references the shim measured (STEPTRACE_REFERENCE=1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<serde_json::Value>,
    /// What capture's own work cost, ms by piece: the shim's (inside the program's run) and
    /// `compress` (the launcher's, after it).
    pub costs_ms: std::collections::BTreeMap<String, f64>,
}

/// What a capture produced.
#[derive(Debug)]
pub struct Outcome {
    /// How the child ended; the CLI exits with `exit.code`.
    pub exit: child::Exit,
    /// The manifest written.
    pub manifest: Manifest,
    /// Where.
    pub out: PathBuf,
    /// Why manifest.json could not be written (a full disk), if it could not.
    pub manifest_error: Option<String>,
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

/// Native when argv[0] is an ELF binary that links libtorch; Python otherwise (interpreters,
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

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The NVIDIA driver's version, from the kernel module's own file (instant), else nvidia-smi
/// (a process start, 0.1-0.3 s of every capture).
fn driver_version() -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        if let Some(v) = driver_from_proc(&text) {
            return Some(v);
        }
    }
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=driver_version", "--format=csv,noheader"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

/// Reads a plan file: JSON whose `decisions` each name an `instance` (`Block_3`) and an
/// `action` (`recompute` or `swap`). Returns its text and the number of decisions.
fn read_plan(path: &Path) -> Result<(String, usize), Error> {
    let bad = |what: String| Error::Plan {
        path: path.to_path_buf(),
        what,
    };
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let decisions = v["decisions"]
        .as_array()
        .ok_or_else(|| bad("no `decisions` list".into()))?;
    for (i, d) in decisions.iter().enumerate() {
        let inst = d["instance"].as_str().unwrap_or("");
        let ok_name =
            !inst.is_empty() && inst.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_name {
            return Err(bad(format!(
                "decision {} names no module instance (`instance`: e.g. \"Block_3\")",
                i + 1
            )));
        }
        if !matches!(d["action"].as_str(), Some("recompute" | "swap")) {
            return Err(bad(format!(
                "decision {} ({inst}): `action` must be \"recompute\" or \"swap\"",
                i + 1
            )));
        }
    }
    Ok((text, decisions.len()))
}

/// Runs the capture.
pub fn run(props: &CaptureProps) -> Result<Outcome, Error> {
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
    // The C++ shim serves native programs, and per-op NVTX ranges when an NVTX tool (Nsight
    // Systems) is attached to record them: otherwise a Python program needs neither it nor
    // the probe of its torch (an `import torch`, seconds).
    let nvtx_tool = std::env::var_os("NVTX_INJECTION64_PATH").is_some_and(|v| !v.is_empty());
    let need_cpp = mode == Mode::Native || (props.record.nvtx && nvtx_tool);
    let torch = if need_cpp {
        let cache = props.cache.clone().unwrap_or_else(shim::cache_root);
        match shim::probe_torch_cached(&python, &cache) {
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
        match shim::build(&cache, t) {
            Ok(lib) => cpp_shim = Some(lib),
            Err(why) => notes.push(match mode {
                Mode::Native => format!("{why}: the C++ program runs without capture"),
                Mode::Python => format!("{why}: no per-op NVTX ranges"),
            }),
        }
    }
    nvtx::range_pop!();

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
    if std::env::var_os(env::TEARDOWN_CUPTI).is_none() {
        envs.push((env::TEARDOWN_CUPTI.into(), "1".into()));
        // The shims take it back in a program that never used the GPU (it hangs at exit).
        envs.push((env::TEARDOWN_SET.into(), "1".into()));
    }
    match (mode, &cpp_shim) {
        (Mode::Native, Some(lib)) => {
            envs.push((env::NATIVE.into(), "1".into()));
            if std::env::var_os(env::SYMBOLIZE_MODE).is_none() {
                envs.push((env::SYMBOLIZE_MODE.into(), "fast".into()));
            }
            if let Some(exe) = resolve(&argv0).and_then(|p| p.canonicalize().ok()) {
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

    let started_at = time::now_utc();
    nvtx::range_push!("steptrace.capture.child");
    // A program whose shims have all written their clean exit and that still runs 30 s later
    // is ended: its files are complete, and a capture must not wait on it for ever.
    let grace_s: u64 = std::env::var(env::LINGER_S)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(30);
    let finished = || {
        let statuses = finalize::read_statuses(&out);
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
    let exit = child::run(&props.program, &envs, linger).map_err(|source| Error::Spawn {
        program: argv0.display().to_string(),
        source,
    })?;
    nvtx::range_pop!();
    let ended_at = time::now_utc();

    // From here on the child has run: its exit status must come back whatever fails.
    let manifest = finish(props, &out, mode, exit, started_at, ended_at, torch, notes)?;
    let path = out.join("manifest.json");
    let text = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    let manifest_error = std::fs::write(&path, text).err().map(|e| {
        let _ = std::fs::remove_file(&path); // a partial manifest would read as complete
        format!("{}: {e}", path.display())
    });
    Ok(Outcome {
        exit,
        manifest,
        out,
        manifest_error,
    })
}

#[allow(clippy::too_many_arguments)]
fn finish(
    props: &CaptureProps,
    out: &Path,
    mode: Mode,
    exit: child::Exit,
    started_at: String,
    ended_at: String,
    torch: Option<shim::TorchInfo>,
    mut notes: Vec<String>,
) -> Result<Manifest, Error> {
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
            let why = st.window_incomplete_reason.clone().unwrap_or_else(|| {
                format!(
                    "the active window was not recorded whole ({} steps seen, {} needed)",
                    st.steps.max(st.boundaries_epoch_ns.len() as i64),
                    props.schedule.steps_to_window_end()
                )
            });
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
            to_compress.push((ranks.len(), role.clone(), name.clone()));
            present.insert(role, name);
        }
        let timing = finalize::program_timing(st);
        if timing.is_none() && st.window_complete && props.timing.steps > 0 {
            notes.push(format!(
                "rank {}: the program ended inside the timing phase before the window: its own step time is unknown",
                st.rank
            ));
        }
        ranks.push(RankFiles {
            rank: st.rank,
            files: present,
            steps: st.steps.max(st.boundaries_epoch_ns.len() as i64),
            boundary: st.boundary.clone(),
            errors: st.errors.clone(),
            timing,
            reference: st.reference.clone(),
            costs_ms: st.costs_ms.clone(),
        });
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
        steptrace_version: env!("CARGO_PKG_VERSION"),
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
        host: host_name(),
        torch: first
            .torch
            .clone()
            .or_else(|| torch.as_ref().map(|t| t.version.clone())),
        cuda: first
            .cuda
            .clone()
            .or_else(|| torch.as_ref().and_then(|t| t.cuda.clone())),
        driver: driver_version(),
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
    })
}

/// The version in `/proc/driver/nvidia/version`'s first line ("NVRM version: NVIDIA UNIX
/// Open Kernel Module for x86_64  580.95.05  Release Build ...").
fn driver_from_proc(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_is_read_from_the_kernel_modules_file() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22)  Tue Sep 23 2025\nGCC version:  gcc version 12.3.0\n";
        assert_eq!(driver_from_proc(text).as_deref(), Some("580.95.05"));
        assert_eq!(driver_from_proc("GCC version: 12.3.0\n"), None);
    }

    #[test]
    fn schedule_parses_and_prints() {
        let s: Schedule = "skip_first=2,wait=0,warmup=1,active=5,repeat=1"
            .parse()
            .unwrap();
        assert_eq!(s.skip_first, 2);
        assert_eq!(s.active, 5);
        assert_eq!(
            s.to_string(),
            "skip_first=2,wait=0,warmup=1,active=5,repeat=1"
        );
        assert!("active=0".parse::<Schedule>().is_err());
        assert!("bogus=1".parse::<Schedule>().is_err());
        assert!("wait".parse::<Schedule>().is_err());
        assert_eq!("".parse::<Schedule>().unwrap(), Schedule::default());
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
