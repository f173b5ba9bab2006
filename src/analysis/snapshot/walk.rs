//! The replay of one device's history: the state at the snapshot's end, walked back to before
//! the first entry and forward again to every entry, with the peak, what is alive at it, and
//! the largest allocations kept one by one.

use rustc_hash::FxHashMap;

use super::*;

/// A block alive during the replay: size, stream, stack, the entry that made it.
type Live = (u64, i64, StackId, Option<usize>);

/// Blocks alive by address.
type LiveMap = FxHashMap<u64, Live>;

pub(super) fn device_memory(s: &Snapshot, device: i64, phases: &[AnnotatedRange]) -> DeviceMemory {
    let empty = Vec::new();
    let trace = usize::try_from(device)
        .ok()
        .and_then(|d| s.device_traces.get(d))
        .unwrap_or(&empty);
    let (end, end_reserved) = end_state(s, device);
    let end_allocated: u64 = end.values().map(|l| l.0).sum();
    let (start, start_reserved) = walk_back(trace, &end, end_reserved);
    let start_allocated: u64 = start.values().map(|l| l.0).sum();
    let fwd = walk_forward(trace, start.clone(), start_allocated, start_reserved);
    let alive = alive_at_peak(s, trace, start, fwd.peak_at);
    let time_us = fwd.peak_at.and_then(|i| trace[i].time_us);
    let peak = Peak {
        allocated_bytes: fwd.peak,
        entry: fwd.peak_at,
        time_us,
        phase: time_us.and_then(|t| innermost_phase(phases, device, t)),
        by_kind: by_kind(&alive),
        by_python_frame: sites::top_sites(s, &alive, sites::python_site),
        by_cpp_frame: sites::top_sites(s, &alive, sites::cpp_site),
        stacks: sites::collapsed(s, alive.iter().map(|b| (b.stream, b.stack, b.size))),
        alive,
    };
    DeviceMemory {
        device,
        entries: trace.len(),
        timeline: fwd.timeline,
        start_allocated_bytes: start_allocated,
        end_allocated_bytes: end_allocated,
        end_reserved_bytes: end_reserved,
        peak_reserved_bytes: fwd.peak_reserved,
        peak,
        never_freed: never_freed(s, &fwd.never_freed_made),
        intervals: fwd.intervals,
        allocations: fwd.allocations,
        largest_not_kept: fwd.largest_not_kept,
    }
}

/// The state the snapshot was taken in: the active blocks of `device`'s segments, and the
/// bytes those segments reserve.
fn end_state(s: &Snapshot, device: i64) -> (LiveMap, u64) {
    let mut end = LiveMap::default();
    let mut reserved = 0u64;
    for g in s.segments.iter().filter(|g| g.device == device) {
        reserved += g.total_size;
        for b in &g.blocks {
            if s.str(b.state) == "active_allocated" {
                end.insert(b.address, (b.size, g.stream, b.stack, None));
            }
        }
    }
    (end, reserved)
}

/// The state before the history's first entry: the end state with the history undone, last
/// entry first (an allocation removed, a free put back, segments given back or taken).
fn walk_back(trace: &[TraceEntry], end: &LiveMap, end_reserved: u64) -> (LiveMap, u64) {
    let mut start = end.clone();
    let mut reserved = end_reserved;
    for e in trace.iter().rev() {
        match e.action {
            Action::Alloc => {
                start.remove(&e.addr);
            }
            Action::FreeCompleted => {
                start.insert(e.addr, (e.size, e.stream, e.stack, None));
            }
            Action::SegmentAlloc | Action::SegmentMap => reserved = reserved.saturating_sub(e.size),
            Action::SegmentFree | Action::SegmentUnmap => reserved += e.size,
            _ => {}
        }
    }
    (start, reserved)
}

/// What the history shows played forward from its start state.
struct Forward {
    /// Allocated bytes at the peak, and the entry after which they were reached (`None`:
    /// before the first).
    peak: u64,
    peak_at: Option<usize>,
    peak_reserved: u64,
    /// The bucket maxima of the allocated bytes.
    timeline: Vec<TimelinePoint>,
    /// The largest allocations' lives, in order made.
    intervals: Vec<Interval>,
    /// Blocks the history made and never freed, in order made.
    never_freed_made: Vec<Interval>,
    /// Every allocation seen, and the largest left out of `intervals`.
    allocations: usize,
    largest_not_kept: u64,
}

/// Plays the history forward from `live` (holding `allocated` bytes, `reserved` reserved):
/// the memory after each entry, the peak, and every allocation's interval.
fn walk_forward(
    trace: &[TraceEntry],
    mut live: LiveMap,
    mut allocated: u64,
    mut reserved: u64,
) -> Forward {
    let mut intervals = Largest::new(KEPT_INTERVALS);
    let (mut peak, mut peak_at) = (allocated, None);
    let mut peak_reserved = reserved;
    let bucket = trace.len().div_ceil(TIMELINE_POINTS).max(1);
    let mut timeline = Vec::with_capacity(trace.len().min(TIMELINE_POINTS) + 1);
    let mut best_in_bucket: Option<TimelinePoint> = None;
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                // Made again without a free in between (a history that dropped entries):
                // the older block is gone.
                let older = live.insert(e.addr, (e.size, e.stream, e.stack, Some(i)));
                allocated += e.size;
                ended(&mut intervals, &mut allocated, e.addr, older, i);
            }
            Action::FreeCompleted => {
                let old = live.remove(&e.addr);
                ended(&mut intervals, &mut allocated, e.addr, old, i);
            }
            Action::SegmentAlloc | Action::SegmentMap => reserved += e.size,
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved = reserved.saturating_sub(e.size)
            }
            _ => {}
        }
        if allocated > peak {
            peak = allocated;
            peak_at = Some(i);
        }
        peak_reserved = peak_reserved.max(reserved);
        let p = TimelinePoint {
            entry: i,
            time_us: e.time_us,
            allocated_bytes: allocated,
            reserved_bytes: reserved,
        };
        if best_in_bucket.is_none_or(|b| p.allocated_bytes > b.allocated_bytes) {
            best_in_bucket = Some(p);
        }
        if (i + 1) % bucket == 0 || i + 1 == trace.len() {
            timeline.extend(best_in_bucket.take());
        }
    }
    let mut never_freed_made: Vec<Interval> = Vec::new();
    for (addr, (size, _, st, m)) in live {
        let v = Interval {
            addr,
            size,
            made: m.map(|m| m as u32),
            freed: None,
            stack: st,
        };
        if m.is_some() {
            never_freed_made.push(v);
        }
        intervals.push(v);
    }
    let (allocations, largest_not_kept) = (intervals.seen, intervals.largest_dropped);
    let mut intervals = intervals.into_vec();
    intervals.sort_unstable_by_key(|v| (v.made, v.addr, v.freed));
    never_freed_made.sort_unstable_by_key(|v| (v.made, v.addr));
    Forward {
        peak,
        peak_at,
        peak_reserved,
        timeline,
        intervals,
        never_freed_made,
        allocations,
        largest_not_kept,
    }
}

/// The blocks alive at the peak (the start state walked forward to entry `peak_at`), largest
/// first, each with the entry that frees it: the first free (or new block) at its address
/// after the peak.
fn alive_at_peak(
    s: &Snapshot,
    trace: &[TraceEntry],
    mut at_peak: LiveMap,
    peak_at: Option<usize>,
) -> Vec<AliveBlock> {
    let mut freed_at: FxHashMap<u64, usize> = FxHashMap::default();
    if let Some(p) = peak_at {
        for (i, e) in trace[..=p].iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    at_peak.insert(e.addr, (e.size, e.stream, e.stack, Some(i)));
                }
                Action::FreeCompleted => {
                    at_peak.remove(&e.addr);
                }
                _ => {}
            }
        }
        for (i, e) in trace.iter().enumerate().skip(p + 1) {
            if matches!(e.action, Action::Alloc | Action::FreeCompleted)
                && at_peak.contains_key(&e.addr)
            {
                freed_at.entry(e.addr).or_insert(i);
            }
        }
    }
    let mut alive: Vec<AliveBlock> = at_peak
        .into_iter()
        .map(|(addr, (size, stream, stack, made_at))| AliveBlock {
            addr,
            size,
            stream,
            stack,
            made_at,
            freed_at: freed_at.get(&addr).copied(),
            kind: sites::kind(s, s.stack(stack)),
        })
        .collect();
    alive.sort_unstable_by_key(|b| (std::cmp::Reverse(b.size), b.addr));
    alive
}

/// The block that was alive at `addr`, if one was, ended at entry `at`: its bytes leave the
/// allocated total and its life is offered to the kept intervals.
fn ended(intervals: &mut Largest, allocated: &mut u64, addr: u64, block: Option<Live>, at: usize) {
    if let Some((size, _, stack, made)) = block {
        *allocated -= size;
        intervals.push(Interval {
            addr,
            size,
            made: made.map(|m| m as u32),
            freed: Some(at as u32),
            stack,
        });
    }
}

/// The `k` largest of the intervals pushed (ties: the earliest made, then the lowest address),
/// in a heap whose top is the least of them; with how many were pushed and the largest left out.
struct Largest {
    k: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Ranked>>,
    seen: usize,
    largest_dropped: u64,
}

/// An interval ordered by how much it is wanted: larger, then made earlier, then lower.
#[derive(PartialEq, Eq)]
struct Ranked(Interval);

impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        let key = |v: &Interval| {
            (
                v.size,
                std::cmp::Reverse(v.made),
                std::cmp::Reverse(v.addr),
                std::cmp::Reverse(v.freed),
                std::cmp::Reverse(v.stack),
            )
        };
        key(&self.0).cmp(&key(&o.0))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Largest {
    fn new(k: usize) -> Self {
        Largest {
            k,
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
            seen: 0,
            largest_dropped: 0,
        }
    }

    fn push(&mut self, v: Interval) {
        self.seen += 1;
        if self.heap.len() < self.k {
            self.heap.push(std::cmp::Reverse(Ranked(v)));
            return;
        }
        // Full: the least of the kept and `v` goes, without a push and a pop for each of
        // millions of intervals (a tenth of a GB snapshot's analysis was that sifting).
        let v = Ranked(v);
        match self.heap.peek_mut() {
            Some(mut least) if v > least.0 => {
                let out = std::mem::replace(&mut least.0, v);
                self.largest_dropped = self.largest_dropped.max(out.0.size);
            }
            _ => self.largest_dropped = self.largest_dropped.max(v.0.size),
        }
    }

    fn into_vec(self) -> Vec<Interval> {
        self.heap.into_iter().map(|r| r.0 .0).collect()
    }
}
