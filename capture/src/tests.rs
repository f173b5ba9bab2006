use super::*;
use steptrace_formats::manifest::PhaseStop;

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
            stop: Some(PhaseStop::TimeCap),
            step_time_s: 0.3,
            step_time_cuda_s: Some(0.29),
            intervals_s: vec![0.31, 0.3, 0.3],
            unplanned: None,
            first_step: Some(1),
            host_lead_s: None,
            optimizer_step_s: Some(0.01),
            forward_host_s: Some(0.004),
            backward_host_s: Some(0.006),
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
        (p.steps, p.step_time_s, p.stop),
        (8, 0.02, Some(PhaseStop::Settled))
    );
    assert_eq!(p.intervals_s, vec![0.02, 0.021]);
}

/// A finished run's manifest: `ranks` of (steps, whether a trace was written), exiting
/// with `code`.
fn finished(ranks: &[(i64, bool)], code: i32) -> Manifest {
    Manifest {
        format_version: 1,
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
                run_max_memory_allocated: None,
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
        stop_after_window: None,
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
    assert_eq!(
        crate::props::record_env_value(&Record::default()),
        "trace,memory,et,nvtx"
    );
}
