//! Which steps a program's step time was timed over: a closed set that `summary.json` and
//! `plan.json` both carry, written as the snake-case names below.

use std::fmt;

/// Where a step time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepTimeSource {
    /// The profiled iterations, under the profiler: no step was timed without it.
    #[default]
    Instrumented,
    /// The steps after capture's window, with nothing recorded.
    AfterWindow,
    /// Capture's timing phase before the window, with nothing recorded.
    TimingPhase,
}

impl StepTimeSource {
    /// As written in the files.
    pub fn as_str(self) -> &'static str {
        match self {
            StepTimeSource::Instrumented => "instrumented",
            StepTimeSource::AfterWindow => "after_window",
            StepTimeSource::TimingPhase => "timing_phase",
        }
    }

    /// Whether it is the program's own step time (timed with nothing recorded).
    pub fn is_programs_own(self) -> bool {
        self != StepTimeSource::Instrumented
    }
}

impl fmt::Display for StepTimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_as_the_files_write_them() {
        for s in [
            StepTimeSource::Instrumented,
            StepTimeSource::AfterWindow,
            StepTimeSource::TimingPhase,
        ] {
            let text = serde_json::to_string(&s).unwrap();
            assert_eq!(text, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<StepTimeSource>(&text).unwrap(), s);
        }
        assert!(serde_json::from_str::<StepTimeSource>("\"later\"").is_err());
    }
}
