//! Every environment variable the launcher sets for the shims (the contract between the Rust
//! launcher, `shim_py/sitecustomize.py` and `shim_cpp/steptrace_shim.cpp`).

/// Absolute path of the run directory; the shims write their files there. Its presence is
/// what turns the Python shim on.
pub const OUT: &str = "STEPTRACE_OUT";
/// `skip_first=1,wait=1,warmup=1,active=3,repeat=1`.
pub const SCHEDULE: &str = "STEPTRACE_SCHEDULE";
/// Comma list of what to record: `trace,memory,et,nvtx`.
pub const RECORD: &str = "STEPTRACE_RECORD";
/// Ring-buffer size of the allocator history.
pub const MAX_ENTRIES: &str = "STEPTRACE_MAX_ENTRIES";
/// Path of the built C++ shim, for the Python shim to load (per-op NVTX ranges).
pub const NVTX_LIB: &str = "STEPTRACE_NVTX_LIB";
/// `1` when the C++ shim, preloaded into a libtorch program, must do the capturing itself.
pub const NATIVE: &str = "STEPTRACE_NATIVE";
/// Canonical path of the native program: only that process captures, not others that inherit
/// LD_PRELOAD from it.
pub const NATIVE_EXE: &str = "STEPTRACE_NATIVE_EXE";
/// Path of the plan (`steptrace plan`'s plan.json, copied into the run directory) the Python
/// shim applies: modules recomputed or swapped.
pub const PLAN: &str = "STEPTRACE_PLAN";
/// `1`: the timing phase alternates steps with and without the plan, so that the plan's cost
/// is measured against the same process's steps.
pub const PLAN_AB: &str = "STEPTRACE_PLAN_AB";
/// Steps timed before the active window with nothing recorded (the program's own step time).
pub const TIMING_STEPS: &str = "STEPTRACE_TIMING_STEPS";
/// Most steps the timing phase takes while its median has not settled.
pub const TIMING_MAX_STEPS: &str = "STEPTRACE_TIMING_MAX_STEPS";
/// Most seconds the timing phase takes while its median has not settled.
pub const TIMING_MAX_S: &str = "STEPTRACE_TIMING_MAX_S";
/// Steps the program runs after the window before the Python shim ends it (status 0).
pub const STOP_AFTER_WINDOW: &str = "STEPTRACE_STOP_AFTER_WINDOW";
/// Native programs with no step boundary: seconds after start before a time window opens.
pub const FALLBACK_S: &str = "STEPTRACE_FALLBACK_S";
/// Seconds a program may keep running after every shim reported its clean exit, before the
/// launcher ends it (default 30; 0: never).
pub const LINGER_S: &str = "STEPTRACE_LINGER_S";
/// Native programs with no step boundary: how long that time window records, seconds.
pub const FALLBACK_WINDOW_S: &str = "STEPTRACE_FALLBACK_WINDOW_S";
/// Kineto keeps CUPTI subscribed after the profiler stops unless this is `1`: measured on an
/// H100, a launch-bound step ran 30-40% slower for the rest of the run without it. Set by
/// capture unless the user set it.
pub const TEARDOWN_CUPTI: &str = "TEARDOWN_CUPTI";
/// `1` when capture set [`TEARDOWN_CUPTI`] (the user had not): the shims unset it in a
/// program that has not used the GPU when its window opens, where Kineto's CUPTI teardown
/// hung a CPU-only libtorch program at exit.
pub const TEARDOWN_SET: &str = "STEPTRACE_SET_TEARDOWN_CUPTI";
/// How torch names the C++ frames of a memory snapshot (torch's; `addr2line`, `fast`,
/// `dladdr`). A native capture sets `fast` unless the user chose: the default, an `addr2line`
/// process per library, made writing cpp/dcgan's window snapshot take 2.1 s against 0.21 s,
/// with the same categories.
pub const SYMBOLIZE_MODE: &str = "TORCH_SYMBOLIZE_MODE";
/// Python's module search path: the shim directory goes first, the user's value is kept after.
pub const PYTHONPATH: &str = "PYTHONPATH";
/// Libraries the loader preloads: the C++ shim goes first, the user's value is kept after.
pub const LD_PRELOAD: &str = "LD_PRELOAD";

/// Prepends `first` to a `sep`-separated list, keeping what was there.
pub fn chain(first: &str, existing: Option<&str>, sep: char) -> String {
    match existing {
        Some(e) if !e.is_empty() => format!("{first}{sep}{e}"),
        _ => first.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_existing_values() {
        assert_eq!(chain("/a", Some("/b:/c"), ':'), "/a:/b:/c");
        assert_eq!(chain("/a", Some(""), ':'), "/a");
        assert_eq!(chain("x.so", None, ' '), "x.so");
    }
}
