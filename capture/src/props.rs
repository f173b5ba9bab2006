//! What a capture is asked for: the program, the schedule, what to record, the timing phase
//! and the plan to apply.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::Error;
pub use steptrace_formats::manifest::{Mode, Record, Schedule};

/// A schedule as `--schedule` gives it (`skip_first=1,wait=1,warmup=1,active=3,repeat=1`,
/// any of them; the rest keep their defaults).
pub fn parse_schedule(s: &str) -> Result<Schedule, Error> {
    {
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

/// What to record as the shims' `STEPTRACE_RECORD` names it.
pub(crate) fn record_env_value(r: &Record) -> String {
    {
        let mut v = Vec::new();
        for (on, name) in [
            (r.trace, "trace"),
            (r.memory, "memory"),
            (r.exec_trace, "et"),
            (r.nvtx, "nvtx"),
        ] {
            if on {
                v.push(name);
            }
        }
        v.join(",")
    }
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
    /// Shim cache directory (default [`crate::shim::cache_root`]).
    pub cache: Option<PathBuf>,
    /// The timing phase before the window (the program's own step time).
    pub timing: TimingPhase,
    /// A plan from `steptrace plan` to apply to the program: its modules are
    /// recomputed or swapped from their second call on.
    pub plan: Option<PathBuf>,
    /// With `plan`: the timing phase alternates steps with and without it, each its own median
    /// (`step_time_unplanned_s`), so that what the plan adds is measured in one process, free
    /// of the drift between two runs. The steps without the plan need its memory.
    pub plan_ab: bool,
    /// A program that ran steps but ended before the window (a short program) is run once
    /// more with a window fitted to the steps it has ([`crate::run`]).
    pub rerun_short: bool,
    /// End the program (Python) this many steps after the window's files are written, for a
    /// program that would run on for hours; `None`: it runs to its own end.
    pub stop_after_window: Option<u32>,
    /// Told what capture is doing before a long wait of its own (building the C++ shim).
    pub progress: Option<fn(&str)>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_parses_and_prints() {
        let s = parse_schedule("skip_first=2,wait=0,warmup=1,active=5,repeat=1").unwrap();
        assert_eq!(s.skip_first, 2);
        assert_eq!(s.active, 5);
        assert_eq!(
            s.to_string(),
            "skip_first=2,wait=0,warmup=1,active=5,repeat=1"
        );
        assert!(parse_schedule("active=0").is_err());
        assert!(parse_schedule("bogus=1").is_err());
        assert!(parse_schedule("wait").is_err());
        assert_eq!(parse_schedule("").unwrap(), Schedule::default());
    }
}
