use super::*;

#[test]
fn timing_leaves_out_the_first_interval_and_takes_the_median() {
    // The program's own step time from the timing phase.
    let ns = [0, 50_000_000, 60_000_000, 71_000_000, 80_000_000];
    let t = timing_phase(
        &ns,
        &[50.0, 10.0, 11.0, 9.0],
        1,
        Some(PhaseStop::Settled),
        &[],
    )
    .unwrap();
    assert_eq!(
        (t.steps, t.settle, t.stop),
        (3, 1, Some(PhaseStop::Settled))
    );
    assert!((t.step_time_s - 0.010).abs() < 1e-12, "{t:?}");
    assert!((t.step_time_cuda_s.unwrap() - 0.010).abs() < 1e-12);
    assert_eq!(t.intervals_s.len(), 4);
    // Two readings: one interval, kept.
    let t = timing_phase(&[0, 20_000_000], &[], 5, None, &[]).unwrap();
    assert!((t.step_time_s - 0.02).abs() < 1e-12);
    assert_eq!(t.step_time_cuda_s, None);
    assert!(timing_phase(&[5], &[], 0, None, &[]).is_none());
}

#[test]
fn the_timing_phase_reports_its_cuda_event_figure_where_it_has_one() {
    // A rank of a lockstep run whose host reaches some boundaries early (a collective it
    // need not wait for yet) and others late: its host intervals swing, the GPU finishes
    // a step every 68 ms, which is what the program's own synchronised timer prints.
    let ns = [
        0,
        100_000_000,
        150_000_000,
        230_000_000,
        280_000_000,
        360_000_000,
    ];
    let cuda = [100.0, 68.0, 68.0, 68.0, 68.0];
    let p = timing_phase(&ns, &cuda, 1, None, &[]).unwrap();
    assert!((p.step_time_s - 0.065).abs() < 1e-12, "{p:?}");
    let t = choose(None, Some(p)).unwrap();
    assert_eq!(t.source, TimingSource::TimingPhase);
    assert!((t.step_time_s - 0.068).abs() < 1e-12, "{t:?}");
    // No events (a CPU-only or native program): the host clock's figure.
    let p = timing_phase(&ns, &[], 1, None, &[]).unwrap();
    assert!((choose(None, Some(p)).unwrap().step_time_s - 0.065).abs() < 1e-12);
}

#[test]
fn issue20_the_host_lead_is_how_far_the_host_was_ahead_at_each_timed_boundary() {
    // A GPU-bound program whose host gets further ahead each step: the host reaches a
    // boundary every 10 ms, the GPU 1, 3, 6, 10 and 15 ms after it (its steps take 11 to
    // 15 ms); the first interval settles. Timed boundaries 2 to 5: median of 3, 6, 10, 15.
    let ms = 1_000_000i64;
    let ns: Vec<i64> = (0..6).map(|i| i * 10 * ms).collect();
    let cuda = [11.0, 12.0, 13.0, 14.0, 15.0];
    let done = ns[5] + 15 * ms;
    let lead = host_lead(&ns, &cuda, done, 1).unwrap();
    assert!((lead - 0.008).abs() < 1e-9, "{lead}");
    // A host-bound program: the GPU finishes each step before the host's boundary, so
    // its interval is the host's and the last event is done at once.
    let lead = host_lead(&ns, &[10.0; 5], ns[5] + 5_000, 1).unwrap();
    assert!(lead < 1e-4, "{lead}");
    // One boundary whose GPU interval ran longer (it fell behind by 3 ms, then caught
    // up): the median of the timed boundaries is unmoved, and none is below 0.
    let lead = host_lead(&ns, &[10.0, 10.0, 13.0, 7.0, 10.0], ns[5], 1).unwrap();
    assert!(lead.abs() < 1e-9, "{lead}");
    // Without an event per interval there is nothing to say.
    assert_eq!(host_lead(&ns, &[10.0; 4], done, 1), None);
}

#[test]
fn issue20_a_plan_timed_both_ways_gives_each_its_own_median() {
    // As the shim runs it: after a settling interval, steps in pairs with (10 ms) and
    // without (8 ms) the plan (on, on, off, off, ...), the first of each pair carrying what
    // the step before left queued (13 ms after a step without the plan, 5 after one with
    // it). Only the second of each pair counts: the plan's figure is only the steps with
    // it, the unplanned only those without.
    let ms = 1_000_000i64;
    let steps = [50, 10, 5, 8, 13, 10, 5, 8, 13, 10, 5, 8];
    let mut ns = vec![0i64];
    for d in steps {
        ns.push(ns.last().unwrap() + d * ms);
    }
    let on: Vec<bool> = (0..=steps.len()).map(|i| (i / 2) % 2 == 0).collect();
    let cuda: Vec<f64> = steps.iter().map(|&d| d as f64).collect();
    let t = timing_phase(&ns, &cuda, 1, Some(PhaseStop::Settled), &on).unwrap();
    assert_eq!(t.steps, 3, "{t:?}");
    assert!((t.step_time_s - 0.010).abs() < 1e-9, "{t:?}");
    assert_eq!(t.step_time_cuda_s, Some(0.010));
    let u = t.unplanned.unwrap();
    assert_eq!((u.steps, u.step_time_cuda_s), (3, Some(0.008)), "{u:?}");
    assert!((u.step_time_s - 0.008).abs() < 1e-9, "{u:?}");
    assert_eq!(u.plan_on.len(), steps.len());
    // Timed one way only: every interval counts, and there is no unplanned figure.
    let t = timing_phase(&ns, &cuda, 1, None, &[]).unwrap();
    assert_eq!((t.steps, t.unplanned), (11, None));
}

/// A status whose timing phase took `phase_ms` steps and whose run went on after the
/// window at `after_ms` steps, each step holding `passes` backward passes.
fn status(phase_ms: i64, after_ms: i64, steps_after: i64, passes: i64) -> ShimStatus {
    let ms = 1_000_000;
    let timing_ns: Vec<i64> = (0..12).map(|i| i * phase_ms * ms).collect();
    let start = 1_000 * ms;
    let mut pass_ns: Vec<i64> = (0..11 * passes)
        .map(|i| i * phase_ms * ms / passes + ms)
        .collect();
    pass_ns.extend((0..steps_after * passes).map(|i| start + 5 * ms + i * after_ms * ms / passes));
    ShimStatus {
        timing_ns,
        timing_settle: 1,
        timing_stop: Some(PhaseStop::Settled),
        backward_pass_ns: pass_ns,
        after_window_start_ns: Some(start),
        ..ShimStatus::default()
    }
}

#[test]
fn issue17_the_steps_after_the_window_give_the_step_time_when_there_are_enough() {
    // A step time that drifts through the run is the run's, not the first
    // steps'. Three backward passes per step (a GAN), counted in the timing phase.
    let st = status(10, 13, 100, 3);
    assert_eq!(
        passes_per_step(&st.timing_ns, &st.backward_pass_ns),
        Some(3)
    );
    let t = program_timing(&st).unwrap();
    assert_eq!(t.source, TimingSource::AfterWindow);
    assert!((t.step_time_s - 0.013).abs() < 1e-9, "{t:?}");
    let a = t.after_window.unwrap();
    assert_eq!(
        (a.marker, a.passes_per_step),
        (StepMarker::BackwardPasses, Some(3))
    );
    assert_eq!(a.steps, 99 - AFTER_WINDOW_SETTLE);
    assert!((t.timing_phase.unwrap().step_time_s - 0.010).abs() < 1e-9);
    // Too few steps after the window: the timing phase's figure, the few steps shown.
    let t = program_timing(&status(10, 13, 30, 1)).unwrap();
    assert_eq!(t.source, TimingSource::TimingPhase);
    assert!((t.step_time_s - 0.010).abs() < 1e-9);
    assert_eq!(t.after_window.unwrap().steps, 29 - AFTER_WINDOW_SETTLE);
    // A phase capped before it settled, over fewer steps than ran after the
    // window, gives way to them.
    let mut st = status(10, 13, 30, 1);
    st.timing_stop = Some(PhaseStop::StepCap);
    let t = program_timing(&st).unwrap();
    assert_eq!(t.source, TimingSource::AfterWindow);
    assert!((t.step_time_s - 0.013).abs() < 1e-9);
    let mut st = status(10, 13, 8, 1);
    st.timing_stop = Some(PhaseStop::StepCap);
    let t = program_timing(&st).unwrap();
    assert!(t.after_window.unwrap().steps < t.timing_phase.unwrap().steps);
    assert_eq!(t.source, TimingSource::TimingPhase);
    // Work that changed after the window (LBFGS converged: 0.35 s steps after a phase
    // of 2.3 s ones): the capped phase, next to the window, stays the figure.
    let mut st = status(10, 13, 30, 1);
    st.timing_stop = Some(PhaseStop::TimeCap);
    st.after_window_ns = (0..30).map(|i| 1_001_000_000 + i * 4_000_000).collect();
    let t = program_timing(&st).unwrap();
    assert_eq!(
        t.after_window.as_ref().unwrap().steps,
        29 - AFTER_WINDOW_SETTLE
    );
    assert_eq!(t.source, TimingSource::TimingPhase);
    // A distributed run's phase is a fixed number of steps on every rank: kept.
    let mut st = status(10, 13, 30, 1);
    st.timing_stop = Some(PhaseStop::Lockstep);
    assert_eq!(
        program_timing(&st).unwrap().source,
        TimingSource::TimingPhase
    );
    // The step hooks' own boundaries win over backward passes where the shim has them.
    let mut st = status(10, 13, 100, 1);
    st.after_window_ns = (0..80).map(|i| 1_001_000_000 + i * 7_000_000).collect();
    let t = program_timing(&st).unwrap();
    assert_eq!(
        t.after_window.as_ref().unwrap().marker,
        StepMarker::StepHooks
    );
    assert!((t.step_time_s - 0.007).abs() < 1e-9);
}

#[test]
fn after_the_window_epoch_ends_are_left_out_and_bimodal_steps_averaged() {
    // Every 20th interval is an epoch's end (200 ms: the DataLoader's workers restart);
    // within an epoch, every fourth step waits 21 ms for its batch and the others take
    // 5 ms. The program's throughput (and what it prints as ms/batch) is the mean of the
    // steps, 9 ms; the median step is 5 ms.
    let ms = 1_000_000;
    let mut t = 0;
    let marks: Vec<i64> = (0..243)
        .map(|i| {
            t += match i {
                i if i % 20 == 0 => 200 * ms,
                i if i % 4 == 3 => 21 * ms,
                _ => 5 * ms,
            };
            t
        })
        .collect();
    let a = after_window(&marks, 0, 1, StepMarker::StepHooks).unwrap();
    assert!((a.median_s - 0.005).abs() < 1e-9, "{a:?}");
    assert_eq!(a.outliers, 12, "{a:?}");
    assert!((a.step_time_s - 0.009).abs() < 0.0003, "{a:?}");
}

#[test]
fn passes_that_do_not_repeat_per_step_give_no_count() {
    // Two passes in some steps, one in others: no count most steps share.
    let b = [0, 10, 20, 30, 40];
    let p = [1, 6, 11, 21, 26, 31];
    assert_eq!(passes_per_step(&b, &p), None);
    // pytorch/examples cpp/dcgan: three passes a step (D real, D fake, G), and eight in
    // the timing phase's first interval, which the boundary rule settled in.
    let b: Vec<i64> = (0..26).map(|i| i * 10).collect();
    let mut p: Vec<i64> = (0..8).map(|i| i + 1).collect();
    p.extend((10..250).step_by(10).flat_map(|t| [t + 1, t + 4, t + 7]));
    assert_eq!(passes_per_step(&b, &p), Some(3));
    assert_eq!(passes_per_step(&b, &[]), None);
    assert_eq!(passes_per_step(&[0], &p), None);
    let mut st = status(10, 13, 100, 1);
    st.backward_pass_ns = p.to_vec();
    st.after_window_start_ns = Some(0);
    let t = program_timing(&st).unwrap();
    assert_eq!(
        (t.source, t.after_window),
        (TimingSource::TimingPhase, None)
    );
}

#[test]
fn issue75_the_forward_and_backward_calls_are_timed_by_their_medians() {
    let mut st = status(10, 13, 100, 1);
    st.timing_forward_ns = vec![7_000_000, 9_000_000, 6_000_000];
    st.timing_backward_ns = vec![0, 12_000_000, 10_000_000];
    let p = program_timing(&st).unwrap().timing_phase.unwrap();
    assert_eq!(p.forward_host_s, Some(0.007));
    // A reading of 0 (a clock that did not move) is no time.
    assert_eq!(p.backward_host_s, Some(0.011));
    // A shim that did not time them (an older one, or C++ programs): none.
    let p = program_timing(&status(10, 13, 100, 1))
        .unwrap()
        .timing_phase
        .unwrap();
    assert_eq!((p.forward_host_s, p.backward_host_s), (None, None));
}
