//! The step model: an iteration's launches replayed on one GPU queue, with a plan's work put
//! where it runs. A launch-bound step pays what a plan adds on the host and hides what it adds
//! on the GPU in the gaps between kernels; a GPU-bound one the reverse; and work that lands in
//! one phase stays there: the swap's device-to-host copies pile up behind the forward's kernels
//! and delay what comes after them, however idle the GPU is later in the step (one budget of
//! idle time for the whole step let the backward's gaps absorb the forward's copies: GPT, four
//! Blocks swapped, 4.9 ms predicted against 13.7 ms measured).

/// What a plan adds at one point of an iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Work {
    /// Where, on the trace's clock, ns: the work runs before every launch from this time on.
    pub ts: i64,
    /// Host time, s (at the program's own speed): every later launch comes this much later.
    pub host_s: f64,
    /// GPU time on the queue, s, launched as the host time begins and done no earlier than it
    /// ends (its kernels are launched throughout it).
    pub gpu_s: f64,
    /// Whether the host first waits for the GPU to finish everything queued: a synchronising
    /// call (`.item()`, `torch.equal`) in a forward that a recompute runs again inside the
    /// backward, where the queue is long, costs the host's whole lead over the GPU; the same
    /// call in the forward, with the queue short, cost microseconds.
    pub drain: bool,
}

/// One profiled iteration as the GPU queue sees it.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    /// The iteration's host span on the trace's clock, ns.
    start: i64,
    end: i64,
    /// Trace host time to the program's own: the profiler slows the host, not the GPU.
    scale: f64,
    /// Spans (start, end, ns; disjoint, by start) whose host time scales by their own figure
    /// instead: the forward and the backward where the program's own speed at each is known
    /// (the profiler slows a Python forward more than the autograd engine's backward).
    scaled: Vec<(i64, i64, f64)>,
    /// Each node's launch (its start, ns) and its GPU time, s, by start.
    slots: Vec<(i64, f64)>,
    /// The host's waits for the GPU (synchronising calls), ns, disjoint and by start, each
    /// with the waiting time before it: a wait is replayed as a drain of the queue, not as
    /// the host time the profiled GPU made it, so a lane whose forward waits (Lightning's
    /// `nn.Transformer` and its `torch.equal`) idles its GPU there as the program does.
    syncs: Vec<(i64, i64, i64)>,
    /// [`Lane::finish`] with nothing added.
    base: f64,
}

impl Lane {
    /// A lane of `slots`, the host waiting for the GPU over `syncs` (start, end; ns), its host
    /// time scaled by `scale` but over the `scaled` spans (start, end, scale).
    pub(super) fn new(
        start: i64,
        end: i64,
        (scale, mut scaled): (f64, Vec<(i64, i64, f64)>),
        mut slots: Vec<(i64, f64)>,
        syncs: Vec<(i64, i64)>,
    ) -> Lane {
        slots.sort_by_key(|s| s.0);
        scaled.sort_by_key(|s| s.0);
        let mut l = Lane {
            start,
            end,
            scale,
            scaled,
            slots,
            syncs: disjoint(syncs, start, end),
            base: 0.0,
        };
        l.base = l.finish(&[]);
        l
    }

    /// The host's waits from the iteration's start to `ts`, ns.
    fn waited(&self, ts: i64) -> i64 {
        let k = self.syncs.partition_point(|s| s.0 < ts);
        match k.checked_sub(1).map(|j| self.syncs[j]) {
            Some((s, e, before)) => before + (ts.min(e) - s),
            None => 0,
        }
    }

    /// The host's own time from the iteration's start to `ts` (its waits left out), at the
    /// program's speed, s.
    fn at(&self, ts: i64) -> f64 {
        let clamp = |x: i64| x.clamp(self.start, self.end.max(self.start));
        let ts = clamp(ts);
        let own = |a: i64, b: i64| ((b - a) - (self.waited(b) - self.waited(a))).max(0) as f64;
        let mut t = own(self.start, ts) * self.scale;
        for &(s, e, k) in &self.scaled {
            let (s, e) = (clamp(s), clamp(e).min(ts));
            if e > s {
                t += own(s, e) * (k - self.scale);
            }
        }
        t.max(0.0) * 1e-9
    }

    /// When the iteration is done with `work` (sorted by time) added, s from its start: the
    /// later of the host's last launch and the GPU's last kernel.
    pub(super) fn finish(&self, work: &[Work]) -> f64 {
        self.replay(work, |_, _| {})
    }

    /// How long the host spends in each of `spans` (from, to; trace clock, ns) with `work`
    /// added, s: its own time there at the program's speed, the plan's host work and the
    /// waits for the GPU (a drain's included). What capture's `forward_host_s` and
    /// `backward_host_s` time in a run, for a phase's span.
    pub(super) fn host_spans(&self, work: &[Work], spans: &[(i64, i64)]) -> Vec<f64> {
        let mut moves = Vec::new();
        self.replay(work, |ts, shift| moves.push((ts, shift)));
        // The host's delay at a point: every move before it (and at it, for a span's end).
        let shift = |ts: i64, closed: bool| {
            let k = moves.partition_point(|m| m.0 < ts || (closed && m.0 == ts));
            k.checked_sub(1).map_or(0.0, |j| moves[j].1)
        };
        spans
            .iter()
            .map(|&(from, to)| {
                (self.at(to) + shift(to, true) - self.at(from) - shift(from, false)).max(0.0)
            })
            .collect()
    }

    /// [`Lane::finish`], with every move of the host's delay (where, its new value) handed to
    /// `moved`, in time order (a no-op in the search's hot path: nothing is kept there).
    fn replay(&self, work: &[Work], mut moved: impl FnMut(i64, f64)) -> f64 {
        let (mut shift, mut gpu) = (0.0f64, 0.0f64);
        // The host waits for everything queued at a sync (the program's own or a replayed one).
        let drain = |t: f64, shift: &mut f64, gpu: f64| *shift += (gpu - (t + *shift)).max(0.0);
        let add = |x: &Work, shift: &mut f64, gpu: &mut f64| {
            if x.drain {
                drain(self.at(x.ts), shift, *gpu);
            }
            let t = self.at(x.ts) + *shift;
            *gpu = (gpu.max(t) + x.gpu_s).max(t + x.host_s);
            *shift += x.host_s;
        };
        let (mut w, mut y) = (0usize, 0usize);
        for &(ts, g) in &self.slots {
            // Work and waits before this launch, in time order (work first at a tie).
            loop {
                let wt = work.get(w).map_or(i64::MAX, |x| x.ts);
                let st = self.syncs.get(y).map_or(i64::MAX, |s| s.0);
                if wt <= ts && wt <= st {
                    add(&work[w], &mut shift, &mut gpu);
                    moved(wt, shift);
                    w += 1;
                } else if st <= ts {
                    drain(self.at(st), &mut shift, gpu);
                    moved(st, shift);
                    y += 1;
                } else {
                    break;
                }
            }
            gpu = gpu.max(self.at(ts) + shift) + g;
        }
        // Work past the last launch (or the iteration's end) runs at its end.
        for x in &work[w..] {
            add(x, &mut shift, &mut gpu);
            moved(x.ts, shift);
        }
        (self.at(self.end) + shift).max(gpu)
    }

    /// What `work` adds to the iteration, s.
    pub(super) fn added(&self, work: &[Work]) -> f64 {
        if work.is_empty() {
            return 0.0;
        }
        (self.finish(work) - self.base).max(0.0)
    }
}

/// `spans` clipped to `[start, end]`, overlaps merged, by start, each with the total length of
/// those before it.
fn disjoint(mut spans: Vec<(i64, i64)>, start: i64, end: i64) -> Vec<(i64, i64, i64)> {
    spans.sort_unstable();
    let mut out: Vec<(i64, i64, i64)> = Vec::new();
    for (s, e) in spans {
        let (s, e) = (s.max(start), e.min(end));
        if e <= s {
            continue;
        }
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => {
                let before = out.last().map_or(0, |l| l.2 + (l.1 - l.0));
                out.push((s, e, before));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Ten kernels of `kernel_ms`, one launched every `every_ms`, in a host span of `end_ms`.
    fn lane(every_ms: i64, kernel_ms: f64, end_ms: i64, scale: f64) -> Lane {
        let slots = (0..10)
            .map(|i| (i * every_ms * MS, kernel_ms * 1e-3))
            .collect();
        Lane::new(0, end_ms * MS, (scale, Vec::new()), slots, Vec::new())
    }

    fn w(ms: i64, host_ms: f64, gpu_ms: f64) -> Work {
        Work {
            ts: ms * MS,
            host_s: host_ms * 1e-3,
            gpu_s: gpu_ms * 1e-3,
            drain: false,
        }
    }

    // The queue replay is hand-computed on small lanes.
    #[test]
    fn issue20_launch_bound_lanes_pay_host_time_and_hide_gpu_time_in_their_gaps() {
        // 20 ms of host, a 1 ms kernel launched every 2 ms: the host sets the pace.
        let l = lane(2, 1.0, 20, 1.0);
        assert!(close(l.base, 0.020));
        // 3 ms of host work in the middle: everything after comes 3 ms later.
        assert!(close(l.added(&[w(9, 3.0, 0.0)]), 0.003));
        // 0.9 ms of GPU work fits the gap after a kernel: nothing added.
        assert!(close(l.added(&[w(9, 0.0, 0.9)]), 0.0));
        // 5 ms of copies at 9 ms queue the kernels of 10-18 ms behind them: the GPU ends at
        // 19 ms, still inside the host's span.
        assert!(close(l.added(&[w(9, 0.0, 5.0)]), 0.0));
        // 12 ms of copies at 9 ms: the queue runs past the host's end: 21 + 5 kernels = 26 ms.
        assert!(close(l.added(&[w(9, 0.0, 12.0)]), 0.006));
        // The same 12 ms spread over the step in 1 ms pieces fills the gaps instead.
        let spread: Vec<Work> = (0..10).map(|i| w(i * 2 + 1, 0.0, 1.0)).collect();
        assert!(close(l.added(&spread), 0.0));
        // Work past the iteration's end runs at its end.
        assert!(close(l.added(&[w(25, 1.0, 0.5)]), 0.001));
    }

    #[test]
    fn issue20_gpu_bound_lanes_hide_host_time_up_to_the_queue() {
        // 10 ms of host launching 30 ms of kernels (3 ms each, one per ms).
        let l = lane(1, 3.0, 10, 1.0);
        assert!(close(l.base, 0.030));
        // Host work while the queue is long: absorbed.
        assert!(close(l.added(&[w(5, 4.0, 0.0)]), 0.0));
        // GPU work: paid in full.
        assert!(close(l.added(&[w(5, 0.0, 2.0)]), 0.002));
        // Host work past the queue's lead: 25 ms of it at 5 ms, when the queue is 10 ms
        // ahead, launches the last five kernels (15 ms) from 30 ms: 45 ms.
        assert!(close(l.added(&[w(5, 25.0, 0.0)]), 0.015));
    }

    #[test]
    fn issue75_a_sync_in_recomputed_work_costs_the_hosts_lead() {
        let drain = |ms: i64, gpu_ms: f64| Work {
            drain: true,
            ..w(ms, 0.0, gpu_ms)
        };
        // Five 3 ms kernels launched one per ms, then five 0.1 ms ones: at 5 ms the queue is
        // 10 ms ahead of the host, and the GPU ends at 15.5 ms.
        let slots = (0..10)
            .map(|i| (i * MS, if i < 5 { 3e-3 } else { 1e-4 }))
            .collect();
        let l = Lane::new(0, 10 * MS, (1.0, Vec::new()), slots, Vec::new());
        assert!(close(l.base, 0.0155));
        // A sync at 5 ms: the host waits until 15 ms, then launches the last five, one per
        // ms: the step ends with the host at 20 ms.
        assert!(close(l.added(&[drain(5, 0.0)]), 0.0045));
        // The same sync in a lane whose host stays ahead to the end (3 ms kernels, one per
        // ms): the host refills the queue at once; nothing lost.
        let gpu_bound = lane(1, 3.0, 10, 1.0);
        assert!(close(gpu_bound.added(&[drain(5, 0.0)]), 0.0));
        // GPU work behind the sync is paid, and no more.
        assert!(close(gpu_bound.added(&[drain(5, 2.0)]), 0.002));
        // A launch-bound lane (1 ms kernels every 2 ms) has no lead: a sync costs nothing.
        assert!(close(lane(2, 1.0, 20, 1.0).added(&[drain(9, 0.0)]), 0.0));
    }

    #[test]
    fn issue75_the_hosts_own_waits_are_replayed_as_drains_not_as_host_time() {
        // Five 3 ms kernels launched one per ms, the host waiting 5-12 ms under the profiler,
        // then five 0.1 ms kernels launched 12-16 ms, the iteration ending at 17 ms.
        let slots = (0..10)
            .map(|i| {
                if i < 5 {
                    (i * MS, 3e-3)
                } else {
                    ((i + 7) * MS, 1e-4)
                }
            })
            .collect::<Vec<_>>();
        let waits = vec![(5 * MS, 12 * MS)];
        let l = Lane::new(0, 17 * MS, (1.0, Vec::new()), slots.clone(), waits.clone());
        // The wait lasts until the queue is empty, at 15 ms (not the profiled 7 ms): the
        // host's 5 ms after it end at 20 ms.
        assert!(close(l.base, 0.020));
        // At half the host's speed: the same wait ends at 15 ms, the 2.5 ms after it at 17.5.
        assert!(close(
            Lane::new(0, 17 * MS, (0.5, Vec::new()), slots.clone(), waits).base,
            0.0175
        ));
        // Without the wait known, the replay took the profiled 7 ms as host time: 17 ms.
        assert!(close(
            Lane::new(0, 17 * MS, (1.0, Vec::new()), slots, Vec::new()).base,
            0.017
        ));
        // Host work after the wait is paid in full; before it, hidden by the drain.
        assert!(close(l.added(&[w(14, 1.0, 0.0)]), 0.001));
        assert!(close(l.added(&[w(3, 1.0, 0.0)]), 0.0));
    }

    #[test]
    fn issue75_overlapping_waits_count_once_and_are_clipped_to_the_iteration() {
        let d = disjoint(vec![(8, 12), (-5, 2), (10, 15), (20, 40)], 0, 30);
        assert_eq!(d, vec![(0, 2, 0), (8, 15, 2), (20, 30, 9)]);
    }

    #[test]
    fn issue75_a_span_of_its_own_scale_paces_the_host_there() {
        // 10 ms of host time at 0.5, but 4-8 ms at 1.0: a launch at 8 ms comes at 6 ms.
        let l = Lane::new(
            0,
            10 * MS,
            (0.5, vec![(4 * MS, 8 * MS, 1.0)]),
            Vec::new(),
            Vec::new(),
        );
        assert!(close(l.at(8 * MS), 0.006));
        assert!(close(l.at(6 * MS), 0.004));
        assert!(close(l.at(3 * MS), 0.0015));
        assert!(close(l.finish(&[]), 0.007));
        // A wait inside the span is no host time at either scale.
        let l = Lane::new(
            0,
            10 * MS,
            (0.5, vec![(4 * MS, 8 * MS, 1.0)]),
            Vec::new(),
            vec![(5 * MS, 6 * MS)],
        );
        assert!(close(l.at(8 * MS), 0.0055 - 0.0005));
        // The launch paced by the span: GPU work queued after the slow backward.
        let slots = vec![(8 * MS, 0.002)];
        let l = Lane::new(
            0,
            10 * MS,
            (0.5, vec![(4 * MS, 8 * MS, 1.0)]),
            slots,
            Vec::new(),
        );
        assert!(close(l.finish(&[]), 0.008));
    }

    #[test]
    fn issue75_a_phase_spans_its_own_time_the_plans_work_and_its_waits() {
        // A 5 ms kernel launched at 2 ms; at 4 ms the plan drains the queue (3 ms of waiting)
        // and works 1 ms on the host.
        let l = Lane::new(
            0,
            10 * MS,
            (1.0, Vec::new()),
            vec![(2 * MS, 0.005)],
            Vec::new(),
        );
        let work = [Work {
            ts: 4 * MS,
            host_s: 0.001,
            gpu_s: 0.0,
            drain: true,
        }];
        // A span that starts where the work is holds it; one after it does not.
        let spans = [(3 * MS, 6 * MS), (4 * MS, 6 * MS), (5 * MS, 6 * MS)];
        let got = l.host_spans(&work, &spans);
        for (g, want) in got.iter().zip([0.007, 0.006, 0.001]) {
            assert!(close(*g, want), "{got:?}");
        }
        assert!(close(l.host_spans(&[], &spans[..1])[0], 0.003));
    }

    #[test]
    fn issue20_the_lane_scales_the_hosts_clock_not_the_gpus() {
        // Under the profiler the host took 40 ms; the program's own host is half as slow.
        let l = lane(4, 1.0, 40, 0.5);
        assert!(close(l.base, 0.020));
        // 1.5 ms of GPU work after the last kernel (done at 19 ms) ends 0.5 ms past the host.
        assert!(close(l.added(&[w(37, 0.0, 1.5)]), 0.0005));
    }
}
