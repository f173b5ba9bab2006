//! The passes [`super::plan`] runs, in order: the notes on what the run lacks, each profiled
//! iteration's measured allocator events, the rates that turn ops and bytes into time, the
//! budget curve of the rounds, and the chosen plan's decisions and timeline.

use super::*;
use crate::analysis::liveness::BandwidthSource;
use crate::model::step::{Iteration, Step};

/// What the run lacks that the prediction would use, said before anything is planned.
pub(super) fn first_notes(a: &Analysis) -> Vec<String> {
    let mut notes = Vec::new();
    if a.liveness.identities.is_none() {
        notes.push(
            "no Execution Trace: an activation is taken as freed when its module's forward ends, and as saved by the module whose backward node frees it; \
             the inputs a checkpoint keeps until the module's backward are not known, so a recompute's peak may come out low"
                .to_string(),
        );
    }
    // What the run already recomputes is named by `plan` itself (candidates::already_recomputed).
    notes
}

/// The measured events of each iteration that has allocator events, and where each profiled
/// iteration's are (by the iteration's index).
pub(super) fn measured_iterations(
    t: &Trace,
    a: &Analysis,
    rates: &Rates,
    spans: &[PhaseSpans],
) -> Result<(Vec<Iter>, BTreeMap<u32, usize>), Error> {
    let mem = &a.memory;
    let mut iters: Vec<Iter> = Vec::new();
    let mut iter_index: BTreeMap<u32, usize> = BTreeMap::new();
    let waits = t.host_sync_spans();
    for (it, &phases) in a.step.iterations.iter().zip(spans) {
        let lo = t.memory.partition_point(|m| m.ts < it.start);
        let hi = t.memory.partition_point(|m| m.ts <= it.end);
        if lo >= hi {
            continue;
        }
        let first = &t.memory[lo];
        let before = first.total_allocated - first.bytes;
        let mut m = Measured {
            before,
            before_by_category: mem.breakdown_at(first.ts - 1, before),
            ..Measured::default()
        };
        for (ei, e) in t.memory[lo..hi].iter().enumerate() {
            m.events.push((e.ts, e.total_allocated));
            // The block's own bytes in its category; `simulate` puts the rest of the event's
            // move into OTHER.
            m.deltas.push(match mem.event_block(lo + ei) {
                Some(b) => {
                    let b = &mem.blocks[b];
                    (b.category, if e.bytes > 0 { b.size } else { -b.size })
                }
                None => (Category::Other, e.bytes),
            });
        }
        let slots = a.step.nodes[it.nodes.clone()]
            .iter()
            .map(|n| (t.op(n.op).start, n.gpu_time as f64 * 1e-9))
            .collect();
        // The spans starting inside the iteration and those before it still running at its
        // start; the lane clips them to it.
        let hi = waits.partition_point(|w| w.0 < it.end);
        let mut lo = waits[..hi].partition_point(|w| w.0 < it.start);
        while lo > 0 && waits[lo - 1].1 > it.start {
            lo -= 1;
        }
        let syncs = waits[lo..hi].to_vec();
        // The forward and the backward at their own speeds, where capture timed both.
        let scaled = match (rates.phases, phases) {
            (Some((f, b)), Some((fs, bs))) => vec![(fs.0, fs.1, f), (bs.0, bs.1, b)],
            _ => Vec::new(),
        };
        iter_index.insert(it.index, iters.len());
        iters.push(Iter {
            label: it.label.clone(),
            start: it.start,
            measured: m,
            lane: Lane::new(it.start, it.end, (rates.cpu_scale, scaled), slots, syncs),
            phases,
        });
    }
    if iters.is_empty() {
        return Err(Error::NothingToPlan(
            "no allocator event falls inside an iteration".into(),
        ));
    }
    Ok((iters, iter_index))
}

/// The CPU-time scale, the swap bandwidth each way (and where it came from) and the wrappers'
/// own host work; a note when the run has no probe of the latter.
pub(super) fn rates(
    spans: &[PhaseSpans],
    a: &Analysis,
    opts: &Options,
    notes: &mut Vec<String>,
) -> (Rates, BandwidthSource) {
    let s = &a.summary;
    let own_step = s
        .step_time_source
        .is_programs_own()
        .then_some(s.step_time_s);
    let (host_lead_s, mut cpu_scale) =
        host_clock(own_step, s.step_time_instrumented_s, s.host_lead_s);
    let phases = own_step.and_then(|step| {
        let (f, b, rest) = phase_scales(spans, a, step - host_lead_s)?;
        cpu_scale = rest;
        Some((f, b))
    });
    // The swap's own copies are pinned ones, which the probe timed on the capture's machine.
    let bw = &a.liveness.bandwidth;
    let probe = s.plan_probe.as_ref();
    let (htod, dtoh, bw_source) = match (opts.bandwidth_gbps, probe) {
        (Some(b), _) => (b, b, BandwidthSource::Override),
        (None, Some(p)) if p.htod_gbps > 0.0 && p.dtoh_gbps > 0.0 => {
            (p.htod_gbps, p.dtoh_gbps, BandwidthSource::CaptureProbe)
        }
        _ => (bw.htod_gbps, bw.dtoh_gbps, bw.source),
    };
    if probe.is_none() {
        notes.push(
            "the run has no measure of what a checkpoint or a swap costs on the host (capture's probe: a capture by an older steptrace, or without CUDA): the predicted step times count the recomputed ops and the copies only, and come out low where the host sets the pace"
                .into(),
        );
    }
    let rates = Rates {
        cpu_scale,
        phases,
        host_lead_s,
        htod_gbps: htod,
        dtoh_gbps: dtoh,
        overheads: cost::overheads_of(probe),
    };
    (rates, bw_source)
}

/// The host's lead over the GPU at a step's end, s, and the scale from profiled host time to the
/// program's own: its host time per step (the step less the lead: nanoGPT's bench.py, 37.6 ms,
/// 16.4 ms of it waiting for the GPU) over the profiled step. `step_s` is the step measured
/// without the profiler (`None` where only the profiled step is known: then nothing is scaled
/// and no lead is counted). A lead past the step (corrupt data) scales host time to 0, never
/// below.
fn host_clock(step_s: Option<f64>, instrumented_s: f64, lead_s: Option<f64>) -> (f64, f64) {
    let Some(step) = step_s else {
        return (0.0, 1.0);
    };
    let lead = lead_s.unwrap_or(0.0).max(0.0);
    (
        lead,
        crate::analysis::host_scale(step, instrumented_s, lead_s),
    )
}

/// An iteration's forward and backward spans (trace clock, ns), where it has one of each.
pub(super) type PhaseSpans = Option<((i64, i64), (i64, i64))>;

/// [`phase_spans`] of each iteration, in order.
pub(super) fn all_phase_spans(t: &Trace, step: &Step) -> Vec<PhaseSpans> {
    step.iterations
        .iter()
        .map(|it| phase_spans(t, step, it))
        .collect()
}

/// The iteration's forward (its first forward node's start to the last one's end before the
/// backward) and backward spans, ns; none where it has no backward or several passes (a
/// micro-batch's forward inside the backward's span).
fn phase_spans(t: &Trace, step: &Step, it: &Iteration) -> PhaseSpans {
    let bw = it.backward.filter(|_| it.backward_passes <= 1)?;
    let fwd = step.nodes[it.nodes.clone()]
        .iter()
        .filter(|n| n.phase == Phase::Forward)
        .map(|n| t.op(n.op))
        .filter(|o| o.end() <= bw.0);
    let (lo, hi) = fwd.fold((i64::MAX, i64::MIN), |(lo, hi), o| {
        (lo.min(o.start), hi.max(o.end()))
    });
    (lo < hi && bw.0 < bw.1).then_some(((lo, hi), bw))
}

/// The forward's, the backward's and the rest's scales from profiled host time to the
/// program's own, where capture timed the program's forward and backward (`host_s`: its host
/// time per step, the step less the lead): each phase's own time over its profiled span
/// (median over the iterations), the rest of `host_s` over the rest of the profiled step. The
/// profiler slows the parts of a step unequally (Lightning's demo at batch 512: the forward
/// 8.3 times, the backward 7.2, a DataLoader collating 512 samples op by op 9.5), and a plan
/// whose recompute drains the queue runs the rest of the backward at the host's pace, at the
/// backward's own. None where a figure is missing or the rest would not be positive.
fn phase_scales(spans: &[PhaseSpans], a: &Analysis, host_s: f64) -> Option<(f64, f64, f64)> {
    let s = &a.summary;
    let (fwd_s, bwd_s) = (s.forward_host_s?, s.backward_host_s?);
    let (mut fp, mut bp): (Vec<f64>, Vec<f64>) = spans
        .iter()
        .flatten()
        .map(|(f, b)| ((f.1 - f.0) as f64 * 1e-9, (b.1 - b.0) as f64 * 1e-9))
        .unzip();
    split_scales(
        (fwd_s, bwd_s, host_s),
        (
            median(&mut fp)?,
            median(&mut bp)?,
            s.step_time_instrumented_s,
        ),
    )
}

/// [`phase_scales`]' arithmetic: the program's own forward, backward and host time per step
/// against the profiled forward, backward and step, s; never scaled up (a phase faster under
/// the profiler is noise).
fn split_scales(own: (f64, f64, f64), profiled: (f64, f64, f64)) -> Option<(f64, f64, f64)> {
    let ((f, b, host), (fp, bp, step)) = (own, profiled);
    let rest = (host - f - b) / (step - fp - bp);
    (rest.is_finite() && rest > 0.0 && fp > 0.0 && bp > 0.0)
        .then(|| ((f / fp).min(1.0), (b / bp).min(1.0), rest.min(1.0)))
}

/// The host's time in the forward and in the backward as the replay has them, without the
/// plan and with `chosen`.
pub(super) fn host_phases(
    ev: &Evaluator<'_>,
    chosen: &[Choice],
) -> Option<steptrace_formats::plan::HostPhases> {
    let ((forward_s, backward_s), (planned_forward_s, planned_backward_s)) =
        ev.phase_times(&[]).zip(ev.phase_times(chosen))?;
    Some(steptrace_formats::plan::HostPhases {
        forward_s,
        backward_s,
        planned_forward_s,
        planned_backward_s,
    })
}

/// The scales from profiled host time to the program's own that the rates hold.
pub(super) fn host_scale(rates: &Rates) -> steptrace_formats::plan::HostScale {
    steptrace_formats::plan::HostScale {
        rest: rates.cpu_scale,
        forward: rates.phases.map(|p| p.0),
        backward: rates.phases.map(|p| p.1),
    }
}

/// The budget curve: no plan, then the prediction after each round.
pub(super) fn curve(
    ev: &Evaluator<'_>,
    rounds: &[Vec<Choice>],
    measured_peak: i64,
    given: bool,
) -> Vec<CurvePoint> {
    let mut curve = vec![CurvePoint {
        label: "none".into(),
        decisions: 0,
        peak_bytes: measured_peak,
        step_time_s: ev.base_step,
    }];
    for (k, r) in rounds.iter().enumerate() {
        curve.push(CurvePoint {
            label: format!("{} {}", if given { "given" } else { "round" }, k + 1),
            decisions: r.len(),
            peak_bytes: ev.peak(r).0.bytes,
            step_time_s: ev.step(r),
        });
    }
    curve
}

/// The plan's decisions in the order they were taken, each with the prediction up to it.
pub(super) fn decisions(
    ev: &Evaluator<'_>,
    chosen: &[Choice],
    measured_peak: i64,
) -> Vec<Decision> {
    let mut decisions = Vec::new();
    let (mut prev_peak, mut prev_step) = (measured_peak, ev.step(&[]));
    for k in 0..chosen.len() {
        let (c, act) = chosen[k];
        let cand = &ev.cands[c];
        let peak = ev.peak(&chosen[..=k]).0.bytes;
        let step = ev.step(&chosen[..=k]);
        decisions.push(Decision {
            module: cand.path.clone(),
            instance: cand.instance.clone(),
            fqn: cand.fqn.clone(),
            class: cand.class.clone(),
            action: act,
            activation_bytes: cand.dropped_bytes,
            peak_saved_bytes: prev_peak - peak,
            time_added_s: step - prev_step,
            predicted_peak_bytes: peak,
            predicted_step_time_s: step,
        });
        (prev_peak, prev_step) = (peak, step);
    }
    decisions
}

/// Timeline of iteration `worst` (the one that sets the predicted peak), before and after.
pub(super) fn timeline(ev: &Evaluator<'_>, chosen: &[Choice], worst: usize) -> Timeline {
    let it = &ev.iters[worst];
    let added = ev.added(chosen, worst);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    sim::simulate(&it.measured, &[], Some(&mut before));
    sim::simulate(&it.measured, &added, Some(&mut after));
    let f = |v: Vec<(i64, i64)>| -> Vec<(f64, f64)> {
        v.into_iter()
            .map(|(ts, b)| ((ts - it.start) as f64 * 1e-6, b as f64 / (1 << 20) as f64))
            .collect()
    };
    Timeline {
        iteration: it.label.clone(),
        measured: f(before),
        planned: f(after),
    }
}

#[cfg(test)]
mod tests {
    use super::{host_clock, split_scales};

    fn near(a: (f64, f64, f64), b: (f64, f64, f64)) -> bool {
        (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9 && (a.2 - b.2).abs() < 1e-9
    }

    #[test]
    fn issue75_forward_backward_and_the_rest_each_scale_by_their_own_time() {
        // 16 ms of host time a step, 4 of it forward and 8 backward; profiled: 120 ms, 30 of
        // them forward and 40 backward. The rest: 4 ms of 50.
        let s = split_scales((0.004, 0.008, 0.016), (0.030, 0.040, 0.120)).unwrap();
        assert!(near(s, (0.004 / 0.030, 0.2, 0.004 / 0.050)));
        // A phase faster under the profiler than without it is not scaled up.
        let s = split_scales((0.004, 0.050, 0.070), (0.030, 0.040, 0.120)).unwrap();
        assert_eq!(s.1, 1.0);
        // The two phases take the whole host time or more (a backward that waited for the GPU
        // without the profiler): no split, the caller keeps one scale.
        assert!(split_scales((0.006, 0.010, 0.016), (0.030, 0.040, 0.120)).is_none());
        assert!(split_scales((0.004, 0.008, 0.016), (0.060, 0.060, 0.120)).is_none());
        assert!(split_scales((0.004, 0.008, 0.016), (0.0, 0.040, 0.120)).is_none());
    }

    fn close(a: (f64, f64), b: (f64, f64)) -> bool {
        (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12
    }

    // The host's clock of the step model, including the cases no capture drives.
    #[test]
    fn issue20_host_clock_is_the_step_less_the_lead_over_the_profiled_step() {
        // nanoGPT's bench.py: 37.6 ms, 16.4 ms of it waiting, 42.4 ms profiled.
        assert!(close(
            host_clock(Some(0.0376), 0.0424, Some(0.0164)),
            (0.0164, 0.0212 / 0.0424)
        ));
        // No lead measured: the whole step.
        assert!(close(host_clock(Some(0.02), 0.04, None), (0.0, 0.5)));
        // Only the profiled step known: nothing scaled, no lead, whatever the summary holds.
        assert!(close(host_clock(None, 0.04, Some(0.01)), (0.0, 1.0)));
        // Faster under the profiler than without it (noise): never scaled up.
        assert!(close(host_clock(Some(0.05), 0.04, Some(0.0)), (0.0, 1.0)));
        // A lead past the step or below 0 (corrupt data): 0, never negative.
        assert!(close(host_clock(Some(0.02), 0.04, Some(0.03)), (0.03, 0.0)));
        assert!(close(host_clock(Some(0.02), 0.04, Some(-0.01)), (0.0, 0.5)));
        // No profiled step: nothing to scale by.
        assert!(close(
            host_clock(Some(0.02), 0.0, Some(0.001)),
            (0.001, 1.0)
        ));
    }
}
