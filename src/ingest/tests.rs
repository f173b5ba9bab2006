use super::discover::*;
use super::*;
use steptrace_formats::summary::{TimingClock, TimingStop};
use steptrace_formats::StepTimeSource;

#[test]
fn classifies_file_names() {
    assert_eq!(classify("trace.json.gz"), Kind::Trace);
    assert_eq!(classify("host_123.1700000000.pt.trace.json"), Kind::Trace);
    assert_eq!(classify("exec_trace.json.gz"), Kind::ExecTrace);
    assert_eq!(classify("snapshot.pickle.gz"), Kind::Snapshot);
    assert_eq!(classify("memory_timeline_torch.json.gz"), Kind::Other);
    assert_eq!(classify("reference.json"), Kind::Other);
    assert_eq!(classify("notes.txt"), Kind::Other);
}

/// The frameworks issue: a `.json[.gz]` whose name says nothing is a trace when its head
/// holds `traceEvents` (HolisticTraceAnalysis's `sampled_rank-0.json.gz`); other JSON is
/// not; a directory with no trace lists what it holds.
#[test]
fn unnamed_json_with_trace_events_is_a_trace_and_a_dir_without_one_lists_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::write(
        p.join("sampled_rank-0.json"),
        r#"{"schemaVersion":1,"traceEvents":[]}"#,
    )
    .unwrap();
    std::fs::write(p.join("config.json"), r#"{"lr":0.1}"#).unwrap();
    std::fs::write(p.join("notes.txt"), "x").unwrap();
    assert_eq!(
        classify_path("sampled_rank-0.json", &p.join("sampled_rank-0.json")),
        Kind::Trace
    );
    assert_eq!(
        classify_path("config.json", &p.join("config.json")),
        Kind::Other
    );
    let found = discover(p, None, None, None).unwrap();
    assert_eq!(found.trace, p.join("sampled_rank-0.json"));
    std::fs::remove_file(p.join("sampled_rank-0.json")).unwrap();
    let err = discover(p, None, None, None).unwrap_err().to_string();
    assert!(
            err.ends_with("no Kineto trace (a .json or .json.gz holding traceEvents) among its 2 file(s): config.json, notes.txt"),
            "{err}"
        );
}

/// A run directory whose manifest carries `timing` as given, beside an empty trace.
fn run_dir(timing: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trace.json"), "{}").unwrap();
    let manifest = format!(
        r#"{{"files": {{"trace": "trace.json"}}, "step_time_s": 0.01,
                 "ranks": [{{"rank": 0, "files": {{"trace": "trace.json"}}, "timing": {timing}}}]}}"#
    );
    std::fs::write(dir.path().join("manifest.json"), manifest).unwrap();
    dir
}

#[test]
fn issue17_manifest_step_time_names_its_source_and_only_a_timing_phase_is_unsettled() {
    // Capture's figure from the steps after the window is the run's; a timing
    // phase that stopped at its cap is still said to be rough, but only where it is the
    // figure reported.
    let phase = r#"{"steps": 20, "stop": "step_cap", "step_time_s": 0.012}"#;
    let after =
        format!(r#"{{"step_time_s": 0.011, "source": "after_window", "timing_phase": {phase}}}"#);
    let dir = run_dir(&after);
    let t = discover(dir.path(), None, None, None)
        .unwrap()
        .program_step_time
        .unwrap();
    assert_eq!(
        (t.ns, t.source, t.unsettled),
        (11_000_000, StepTimeSource::AfterWindow, None)
    );
    // The same phase reported as the figure.
    let dir = run_dir(&format!(
        r#"{{"step_time_s": 0.012, "source": "timing_phase", "timing_phase": {phase}}}"#
    ));
    let t = discover(dir.path(), Some(Path::new("x")), None, Some(0))
        .unwrap()
        .program_step_time
        .unwrap();
    assert_eq!(t.source, StepTimeSource::TimingPhase);
    assert_eq!(t.unsettled, Some((TimingStop::StepCap, 20)));
    // Manifests written before the after-window timing: the phase's fields at the top.
    let dir = run_dir(phase);
    let t = discover(dir.path(), None, None, None)
        .unwrap()
        .program_step_time
        .unwrap();
    assert_eq!(
        (t.ns, t.source, t.unsettled),
        (
            12_000_000,
            StepTimeSource::TimingPhase,
            Some((TimingStop::StepCap, 20))
        )
    );
}

#[test]
fn issue20_a_plan_timed_both_ways_is_read_on_the_streams_clock_where_there_is_one() {
    let phase = |cuda: &str| {
        format!(
            r#"{{"step_time_s": 0.0497, "source": "timing_phase", "timing_phase": {{"steps": 8, "stop": "settled", "step_time_s": 0.0497{cuda},
                     "unplanned": {{"steps": 8, "step_time_s": 0.0307{cuda_off}, "plan_on": [true, false]}}}}}}"#,
            cuda_off = cuda.replace("0.0428", "0.0366")
        )
    };
    let read = |timing: &str| {
        let dir = run_dir(timing);
        discover(dir.path(), None, None, None)
            .unwrap()
            .program_step_time
            .unwrap()
            .plan_ab
    };
    let ab = read(&phase(r#", "step_time_cuda_s": 0.0428"#)).unwrap();
    assert_eq!(
        (ab.clock, ab.step_time_with_s, ab.step_time_without_s),
        (TimingClock::CudaEvents, 0.0428, 0.0366)
    );
    assert_eq!((ab.steps_with, ab.steps_without), (8, 8));
    assert_eq!(ab.stopped_at, None);
    let capped = read(&phase("").replace("settled", "step_cap")).unwrap();
    assert_eq!(capped.stopped_at, Some(TimingStop::StepCap));
    let ab = read(&phase("")).unwrap();
    assert_eq!(
        (ab.clock, ab.step_time_with_s, ab.step_time_without_s),
        (TimingClock::Host, 0.0497, 0.0307)
    );
    // Timed one way only: none.
    assert_eq!(
        read(
            r#"{"step_time_s": 0.012, "source": "timing_phase", "timing_phase": {"steps": 20, "step_time_s": 0.012}}"#
        ),
        None
    );
}
