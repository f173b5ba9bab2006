//! The replay of one device's history, streamed: each entry is played forward once, as the
//! read hands it over ([`Replay`] is a [`HistorySink`]), and nothing of the history is kept
//! but what the analysis reports. The state at the snapshot's end (its segments) is only
//! needed at the finish: memory before the first entry is what the end holds at addresses
//! the history never touched, plus the blocks whose first event is a free; every figure
//! during the history is that start plus the history's own running total, so the peak's
//! entry, the timeline's shape and the allocations' lives are all known before the start is.
//! What was alive at the peak comes from each touched address's state as of the latest
//! running maximum ([`Addr`]), with the end state for the addresses never touched after it.

use std::sync::mpsc;

use rustc_hash::FxHashMap;

use super::*;
use crate::model::snapshot::HistorySink;

/// A block alive during the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    size: u64,
    stream: i64,
    stack: StackId,
    /// The entry that made it (`None`: before the history).
    made: Option<u32>,
}

/// What the replay knows of one address the history touched.
#[derive(Debug, Clone, Copy)]
struct Addr {
    /// The block there now, if any.
    now: Option<Live>,
    /// The block there at the running maximum of epoch `epoch`, and the entry after it that
    /// touched the address first (which freed the block, or made another over it).
    at_peak: Option<(Live, u32)>,
    epoch: u32,
}

/// Most entry times kept for placing annotated ranges: beyond this, every other is dropped
/// and the stride doubles (the ranges are then placed within a stride of entries).
const MAX_TIMES: usize = 1 << 20;

/// One history list's replay, entry by entry.
#[derive(Debug)]
pub(super) struct Walk {
    entries: usize,
    addrs: FxHashMap<u64, Addr>,
    /// Bytes of blocks from before the history that it frees (their first event a free).
    pre_freed: u64,
    /// Allocated and reserved bytes less those before the first entry.
    rel: i128,
    rel_reserved: i128,
    max_reserved: i128,
    /// The running maximum of `rel`, the entry after which it was reached (`None`: before
    /// the first), its time, and its epoch (one more each time it rises).
    peak: i128,
    peak_at: Option<usize>,
    peak_time: Option<i64>,
    epoch: u32,
    timeline: Buckets,
    intervals: Largest,
    t_min: Option<i64>,
    times: TimeIndex,
}

/// The timeline's points, each bucket of entries keeping its highest (the first of equal
/// ones); the buckets double in width as the points reach [`TIMELINE_POINTS`], so the
/// history's length need not be known.
#[derive(Debug)]
struct Buckets {
    width: usize,
    points: Vec<RelPoint>,
    best: Option<RelPoint>,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            width: 1,
            points: Vec::new(),
            best: None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct RelPoint {
    entry: usize,
    time_us: Option<i64>,
    rel: i128,
    rel_reserved: i128,
}

impl Buckets {
    fn add(&mut self, p: RelPoint) {
        if self.best.is_none_or(|b| p.rel > b.rel) {
            self.best = Some(p);
        }
        if (p.entry + 1).is_multiple_of(self.width) {
            self.close();
        }
    }

    fn close(&mut self) {
        let Some(b) = self.best.take() else { return };
        if self.points.len() == TIMELINE_POINTS {
            // Pairs of buckets become one.
            let merged: Vec<RelPoint> = self
                .points
                .chunks(2)
                .map(|c| {
                    if c.len() == 2 && c[1].rel > c[0].rel {
                        c[1]
                    } else {
                        c[0]
                    }
                })
                .collect();
            self.points = merged;
            self.width *= 2;
            // The bucket just closed may be the first half of a wider one.
            if !(b.entry + 1).is_multiple_of(self.width) {
                self.best = Some(b);
                return;
            }
        }
        self.points.push(b);
    }
}

/// Entry times by index, every `stride`-th kept: where annotated ranges fall in the history.
#[derive(Debug, Clone)]
pub struct TimeIndex {
    stride: usize,
    /// `i64::MAX` for an entry without a time.
    times: Vec<i64>,
}

impl Default for TimeIndex {
    fn default() -> Self {
        TimeIndex {
            stride: 1,
            times: Vec::new(),
        }
    }
}

impl TimeIndex {
    fn add(&mut self, i: usize, t: Option<i64>) {
        if !i.is_multiple_of(self.stride) {
            return;
        }
        if self.times.len() == MAX_TIMES {
            let kept: Vec<i64> = self.times.iter().step_by(2).copied().collect();
            self.times = kept;
            self.stride *= 2;
            if !i.is_multiple_of(self.stride) {
                return;
            }
        }
        self.times.push(t.unwrap_or(i64::MAX));
    }

    /// The index of the first entry at or after `t` (entries are recorded in time order),
    /// to within the stride.
    pub fn entry_at(&self, t: i64, entries: usize) -> usize {
        (self.times.partition_point(|&x| x < t) * self.stride).min(entries)
    }
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            entries: 0,
            addrs: FxHashMap::default(),
            pre_freed: 0,
            rel: 0,
            rel_reserved: 0,
            max_reserved: 0,
            peak: 0,
            peak_at: None,
            peak_time: None,
            epoch: 0,
            timeline: Buckets::default(),
            intervals: Largest::new(KEPT_INTERVALS),
            t_min: None,
            times: TimeIndex::default(),
        }
    }
}

impl Walk {
    /// Plays one entry forward.
    fn entry(&mut self, e: &TraceEntry) {
        let i = self.entries;
        self.entries += 1;
        if let Some(t) = e.time_us {
            self.t_min = Some(self.t_min.map_or(t, |m| m.min(t)));
        }
        self.times.add(i, e.time_us);
        let alloc = match e.action {
            Action::Alloc => true,
            Action::FreeCompleted => false,
            Action::SegmentAlloc | Action::SegmentMap => {
                self.rel_reserved += i128::from(e.size);
                self.max_reserved = self.max_reserved.max(self.rel_reserved);
                return self.point(i, e);
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                self.rel_reserved -= i128::from(e.size);
                return self.point(i, e);
            }
            _ => return self.point(i, e),
        };
        let epoch = self.epoch;
        let block = Live {
            size: e.size,
            stream: e.stream,
            stack: e.stack,
            made: None,
        };
        let mut pre_freed = 0;
        let a = self.addrs.entry(e.addr).or_insert_with(|| {
            // First touched: before the history a block was here if this frees one.
            let before = (!alloc).then_some(block);
            pre_freed = before.map_or(0, |b| b.size);
            Addr {
                now: before,
                at_peak: None,
                epoch: epoch.wrapping_sub(1),
            }
        });
        self.pre_freed += pre_freed;
        if a.epoch != epoch {
            // The first touch since the latest maximum: the block here then was `now`.
            a.at_peak = a.now.map(|b| (b, i as u32));
            a.epoch = epoch;
        }
        // A free ends the block here; an allocation ends one made again without a free in
        // between (a history that dropped entries).
        let ended = if alloc {
            a.now.replace(Live {
                made: Some(i as u32),
                ..block
            })
        } else {
            a.now.take()
        };
        if alloc {
            self.rel += i128::from(e.size);
        }
        if let Some(b) = ended {
            self.rel -= i128::from(b.size);
            self.intervals.push(Interval {
                addr: e.addr,
                size: b.size,
                made: b.made,
                freed: Some(i as u32),
                stack: b.stack,
            });
        }
        self.point(i, e)
    }

    fn point(&mut self, i: usize, e: &TraceEntry) {
        if self.rel > self.peak {
            self.peak = self.rel;
            self.peak_at = Some(i);
            self.peak_time = e.time_us;
            self.epoch = self.epoch.wrapping_add(1);
        }
        self.timeline.add(RelPoint {
            entry: i,
            time_us: e.time_us,
            rel: self.rel,
            rel_reserved: self.rel_reserved,
        });
    }

    /// The device's memory, with `end` (the segments' active blocks) the state after the
    /// last entry.
    fn finish(
        self,
        s: &Snapshot,
        device: i64,
        phases: &[AnnotatedRange],
        end: &[(u64, Live)],
        end_reserved: u64,
    ) -> DeviceMemory {
        let Walk {
            entries,
            addrs,
            pre_freed,
            rel_reserved,
            max_reserved,
            peak,
            peak_at,
            peak_time,
            epoch,
            mut timeline,
            mut intervals,
            times,
            ..
        } = self;
        timeline.close();
        if let Some(b) = timeline.best.take() {
            // The last bucket, cut short by the history's end.
            timeline.points.push(b);
        }
        // Blocks from before the history it never touched: alive throughout.
        let untouched: Vec<&(u64, Live)> =
            end.iter().filter(|(a, _)| !addrs.contains_key(a)).collect();
        let end_allocated: u64 = end.iter().map(|(_, b)| b.size).sum();
        let start_allocated = untouched.iter().map(|(_, b)| b.size).sum::<u64>() + pre_freed;
        let start_reserved = clamp(i128::from(end_reserved) - rel_reserved);
        let abs = |rel: i128| clamp(i128::from(start_allocated) + rel);
        let abs_reserved = |rel: i128| clamp(i128::from(start_reserved) + rel);
        let timeline = timeline
            .points
            .iter()
            .map(|p| TimelinePoint {
                entry: p.entry,
                time_us: p.time_us,
                allocated_bytes: abs(p.rel),
                reserved_bytes: abs_reserved(p.rel_reserved),
            })
            .collect();
        // What was alive at the peak, and alive at the end, address by address.
        let mut alive = Vec::new();
        let mut never_freed_made = Vec::new();
        let mut addrs: Vec<(u64, Addr)> = addrs.into_iter().collect();
        addrs.sort_unstable_by_key(|(a, _)| *a);
        for (addr, a) in addrs {
            let at_peak = if a.epoch == epoch {
                a.at_peak.map(|(b, f)| (b, Some(f as usize)))
            } else {
                a.now.map(|b| (b, None))
            };
            if let Some((b, freed_at)) = at_peak {
                alive.push(alive_block(s, addr, b, freed_at));
            }
            if let Some(b) = a.now {
                let v = Interval {
                    addr,
                    size: b.size,
                    made: b.made,
                    freed: None,
                    stack: b.stack,
                };
                if b.made.is_some() {
                    never_freed_made.push(v);
                }
                intervals.push(v);
            }
        }
        for &&(addr, b) in &untouched {
            alive.push(alive_block(s, addr, b, None));
            intervals.push(Interval {
                addr,
                size: b.size,
                made: None,
                freed: None,
                stack: b.stack,
            });
        }
        alive.sort_unstable_by_key(|b| (std::cmp::Reverse(b.size), b.addr));
        let (allocations, largest_not_kept) = (intervals.seen, intervals.largest_dropped);
        let mut intervals = intervals.into_vec();
        intervals.sort_unstable_by_key(|v| (v.made, v.addr, v.freed));
        never_freed_made.sort_unstable_by_key(|v| (v.made, v.addr));
        let time_us = peak_time;
        let peak = Peak {
            allocated_bytes: abs(peak),
            entry: peak_at,
            time_us,
            phase: time_us.and_then(|t| innermost_phase(phases, device, t)),
            by_kind: by_kind(&alive),
            by_python_frame: sites::top_sites(s, &alive, sites::python_site),
            by_cpp_frame: sites::top_sites(s, &alive, sites::cpp_site),
            stacks: sites::collapsed(s, alive.iter().map(|b| (b.stream, b.stack, b.size))),
            alive,
        };
        let (never_freed, never_freed_total) = never_freed(s, &never_freed_made);
        DeviceMemory {
            device,
            entries,
            timeline,
            start_allocated_bytes: start_allocated,
            end_allocated_bytes: end_allocated,
            end_reserved_bytes: end_reserved,
            peak_reserved_bytes: abs_reserved(max_reserved),
            peak,
            never_freed,
            never_freed_total,
            intervals,
            allocations,
            largest_not_kept,
            time_index: times,
        }
    }
}

fn clamp(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

fn alive_block(s: &Snapshot, addr: u64, b: Live, freed_at: Option<usize>) -> AliveBlock {
    AliveBlock {
        addr,
        size: b.size,
        stream: b.stream,
        stack: b.stack,
        made_at: b.made.map(|m| m as usize),
        freed_at,
        kind: sites::kind(s, s.stack(b.stack)),
    }
}

/// The state the snapshot was taken in on `device`: its segments' active blocks, and the
/// bytes those segments reserve.
fn end_state(s: &Snapshot, device: i64) -> (Vec<(u64, Live)>, u64) {
    let mut end: FxHashMap<u64, Live> = FxHashMap::default();
    let mut reserved = 0u64;
    for g in s.segments.iter().filter(|g| g.device == device) {
        reserved = reserved.saturating_add(g.total_size);
        for b in &g.blocks {
            if s.str(b.state) == "active_allocated" {
                let live = Live {
                    size: b.size,
                    stream: g.stream,
                    stack: b.stack,
                    made: None,
                };
                end.insert(b.address, live);
            }
        }
    }
    let mut end: Vec<(u64, Live)> = end.into_iter().collect();
    end.sort_unstable_by_key(|(a, _)| *a);
    (end, reserved)
}

/// The replay of every history list a read hands over: a [`HistorySink`] whose lists
/// `analyze_streamed` turns into the analysis.
#[derive(Debug, Default)]
pub struct Replay {
    walks: FxHashMap<usize, Walk>,
}

impl HistorySink for Replay {
    fn entries(&mut self, list: usize, batch: Vec<TraceEntry>) {
        self.feed(list, &batch);
    }
}

impl Replay {
    /// A replay on a thread of its own, fed as the read goes: the read and the replay run
    /// side by side.
    pub fn on_thread() -> ReplayThread {
        Replay::on_thread_with(|r, list, batch| r.entries(list, batch))
    }

    /// [`Replay::on_thread`] with each batch handed to `play` (tests give one that fails).
    fn on_thread_with(
        mut play: impl FnMut(&mut Replay, usize, Vec<TraceEntry>) + Send + 'static,
    ) -> ReplayThread {
        // A few batches in flight keep both sides busy without holding the history.
        let (tx, rx) = mpsc::sync_channel::<(usize, Vec<TraceEntry>)>(8);
        let handle = std::thread::spawn(move || {
            let mut r = Replay::default();
            for (list, batch) in rx {
                play(&mut r, list, batch);
            }
            r
        });
        ReplayThread {
            tx: Some(tx),
            handle: Some(handle),
        }
    }

    /// Plays `entries` of the list `list` forward.
    pub fn feed(&mut self, list: usize, entries: &[TraceEntry]) {
        if entries.is_empty() {
            return;
        }
        let w = self.walks.entry(list).or_default();
        for e in entries {
            w.entry(e);
        }
    }

    /// The earliest entry time of every list.
    pub(super) fn t_min(&self) -> Option<i64> {
        self.walks.values().filter_map(|w| w.t_min).min()
    }

    /// How many entries `list` had.
    pub(super) fn len(&self, list: usize) -> usize {
        self.walks.get(&list).map_or(0, |w| w.entries)
    }

    /// Whether `list` had entries.
    pub(super) fn has(&self, list: usize) -> bool {
        self.walks.contains_key(&list)
    }

    /// The walk of `list`, if it had entries.
    pub(super) fn take(&mut self, list: usize) -> Option<Walk> {
        self.walks.remove(&list)
    }
}

/// A [`Replay`] running on its own thread ([`Replay::on_thread`]).
#[derive(Debug)]
pub struct ReplayThread {
    tx: Option<mpsc::SyncSender<(usize, Vec<TraceEntry>)>>,
    handle: Option<std::thread::JoinHandle<Replay>>,
}

impl HistorySink for ReplayThread {
    fn entries(&mut self, list: usize, batch: Vec<TraceEntry>) {
        if let Some(tx) = &self.tx {
            if tx.send((list, batch)).is_err() {
                // The thread is gone, which only a panic there does: raise it here.
                self.tx = None;
                self.wait();
            }
        }
    }
}

impl ReplayThread {
    /// The replay of everything sent.
    pub fn join(mut self) -> Replay {
        self.tx = None;
        self.wait()
    }

    fn wait(&mut self) -> Replay {
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Replay::default(),
        }
    }
}

/// The memory of `device`, whose history `walk` replayed (`None`: no entries).
pub(super) fn device_memory(
    s: &Snapshot,
    device: i64,
    walk: Option<Walk>,
    phases: &[AnnotatedRange],
) -> DeviceMemory {
    let (end, end_reserved) = end_state(s, device);
    walk.unwrap_or_default()
        .finish(s, device, phases, &end, end_reserved)
}

/// The `k` largest of the intervals pushed (ties: the earliest made, then the lowest address),
/// in a heap whose top is the least of them; with how many were pushed and the largest left out.
#[derive(Debug)]
struct Largest {
    k: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Ranked>>,
    seen: usize,
    largest_dropped: u64,
}

/// An interval ordered by how much it is wanted: larger, then made earlier, then lower.
#[derive(Debug, PartialEq, Eq)]
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
            // Grown as allocations come, not reserved: a device with a few entries holds a
            // few (a forged snapshot's 100,000 one-entry devices reserved 200 KB each).
            heap: std::collections::BinaryHeap::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A replay thread that panics hands its panic to the reader feeding it, on the next
    /// batch sent or at the join, rather than the read going on (or ending) with part of the
    /// history replayed.
    #[test]
    fn a_panic_on_the_replay_thread_is_raised_on_the_reading_thread() {
        let entry = || TraceEntry {
            action: crate::model::tables::snapshot::Action::Alloc,
            addr: 0,
            size: 512,
            stream: 0,
            time_us: Some(1),
            stack: crate::model::tables::snapshot::StackId(0),
        };
        let failing = || Replay::on_thread_with(|_, _, _| panic!("the replay failed"));
        let message = |e: Box<dyn std::any::Any + Send>| {
            e.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .unwrap_or_default()
        };
        // Fed on until the send fails: raised there.
        let mut t = failing();
        let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..1000 {
                t.entries(0, vec![entry()]);
            }
        }));
        assert_eq!(message(fed.unwrap_err()), "the replay failed");
        // One batch, then the join: raised at the join.
        let mut t = failing();
        t.entries(0, vec![entry()]);
        let joined = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.join()));
        assert_eq!(message(joined.unwrap_err()), "the replay failed");
        // A replay that does not fail has every batch.
        let mut t = Replay::on_thread();
        t.entries(3, vec![entry(), entry()]);
        assert!(t.join().has(3));
    }

    /// Past [`MAX_TIMES`] entries every other time is dropped and the stride doubles: a
    /// time still falls within a stride of its entry, never past it, and never past the end.
    #[test]
    fn range_times_fall_within_a_stride_of_their_entry_past_the_kept_times() {
        let n = 3 * MAX_TIMES + 5;
        let mut ix = TimeIndex::default();
        for i in 0..n {
            // Entry i at time 10 * i.
            ix.add(i, Some(10 * i as i64));
        }
        assert_eq!(ix.stride, 4);
        assert!(ix.times.len() <= MAX_TIMES);
        for want in [0, 1, 12_345, MAX_TIMES + 3, n - 1] {
            let got = ix.entry_at(10 * want as i64, n);
            assert!(got >= want && got < want + ix.stride, "{want}: {got}");
        }
        assert_eq!(ix.entry_at(i64::MAX - 1, n), n);
        // Up to MAX_TIMES entries: exact.
        let mut ix = TimeIndex::default();
        for i in 0..1000 {
            ix.add(i, Some(10 * i as i64));
        }
        assert_eq!(ix.entry_at(5_005, 1000), 501);
    }
}
