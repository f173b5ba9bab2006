//! One run of the program under the shims: the C++ shim where it is needed, the child's
//! environment, the child itself.

use std::path::{Path, PathBuf};

use crate::assemble::{finish, Ran};
use crate::{
    child, detect_mode, env, finalize, io_err, is_python_name, prepare_out, read_plan, resolve,
    session_dir, shim, time, CaptureProps, Error, Mode, Outcome,
};

/// One run of the program under the shims, its files finalised; the manifest is not written.
pub(crate) fn run_once(props: &CaptureProps) -> Result<Outcome, Error> {
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
    if mode == Mode::Native && props.stop_after_window.is_some() {
        // The C++ shim has no safe way to end a program from inside its step: exit() there
        // would skip the program's own destructors with CUDA work in flight.
        return Err(Error::Unsupported(
            "--stop-after-window: Python programs only (a libtorch program runs to its end)".into(),
        ));
    }
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
        (
            env::RECORD.into(),
            crate::props::record_env_value(&props.record),
        ),
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
    if let Some(n) = props.stop_after_window {
        envs.push((env::STOP_AFTER_WINDOW.into(), n.to_string()));
    }
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
