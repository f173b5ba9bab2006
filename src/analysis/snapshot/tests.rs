use std::path::PathBuf;

use super::*;
use crate::intern::Interner;
use crate::model::snapshot::{Annotation, Block, Frame, FrameId, Segment, TraceEntry};

/// A snapshot built by hand: stacks from (file, line, name) frames, innermost first.
struct Build {
    s: Snapshot,
}

impl Build {
    fn new() -> Self {
        Build {
            s: Snapshot {
                path: PathBuf::from("snap.pickle"),
                strings: Interner::new(),
                frames: Vec::new(),
                stacks: vec![Box::new([])],
                segments: Vec::new(),
                device_traces: vec![Vec::new()],
                streamed: Vec::new(),
                annotations: Vec::new(),
                legacy_layout: false,
            },
        }
    }

    fn stack(&mut self, frames: &[(&str, i64, &str)]) -> StackId {
        let ids: Box<[FrameId]> = frames
            .iter()
            .map(|&(file, line, name)| {
                let f = Frame {
                    name: self.s.strings.intern(name),
                    filename: self.s.strings.intern(file),
                    line,
                };
                self.s.frames.push(f);
                FrameId(self.s.frames.len() as u32 - 1)
            })
            .collect();
        self.s.stacks.push(ids);
        StackId(self.s.stacks.len() as u32 - 1)
    }

    fn entry(&mut self, action: Action, addr: u64, size: u64, time: i64, stack: StackId) {
        self.s.device_traces[0].push(TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            time_us: Some(time),
            stack,
        });
    }

    /// One segment at `base` holding `blocks` (address offset, size, requested, active).
    fn segment(&mut self, base: u64, total: u64, blocks: &[(u64, u64, u64, bool, StackId)]) {
        let active = self.s.strings.intern("active_allocated");
        let inactive = self.s.strings.intern("inactive");
        self.s.segments.push(Segment {
            device: 0,
            address: base,
            total_size: total,
            allocated_size: 0,
            stream: 0,
            segment_type: None,
            pool: None,
            blocks: blocks
                .iter()
                .map(|&(off, size, req, on, stack)| Block {
                    address: base + off,
                    size,
                    requested_size: Some(req),
                    state: if on { active } else { inactive },
                    stack,
                })
                .collect(),
        });
    }
}

/// Before the history: a 4 KiB block (alive to the end) and a 2 KiB one freed at entry 0.
/// Then 8 KiB made (1), 1 KiB made (2), 8 KiB freed (3): the peak is after entry 2, at
/// 4 + 8 + 1 = 13 KiB, with the 8 KiB block, made at entry 1 and freed at 3, alive in it.
#[test]
fn the_peak_is_replayed_back_from_the_segments_and_forward_through_the_history() {
    let mut b = Build::new();
    let opt = b.stack(&[
        ("/x/torch/optim/adam.py", 90, "_init_group"),
        ("train.py", 10, "main"),
    ]);
    let fwd = b.stack(&[
        ("/x/torch/nn/functional.py", 5, "linear"),
        ("/x/torch/nn/modules/module.py", 1775, "_call_impl"),
        ("model.py", 3, "forward"),
        ("/x/torch/nn/modules/module.py", 1775, "_call_impl"),
        ("train.py", 12, "main"),
    ]);
    let none = StackId(0);
    b.entry(Action::SegmentAlloc, 0x10000, 1 << 20, 5, none);
    b.entry(Action::FreeCompleted, 0x2000, 2048, 10, none);
    b.entry(Action::Alloc, 0x4000, 8192, 20, fwd);
    b.entry(Action::Alloc, 0x8000, 1024, 30, opt);
    b.entry(Action::FreeCompleted, 0x4000, 8192, 40, fwd);
    b.segment(
        0x0,
        1 << 20,
        &[
            (0x0, 4096, 4000, true, opt),
            (0x2000, 2048, 2048, false, none),
            (0x4000, 8192, 8192, false, none),
            (0x8000, 1024, 1000, true, opt),
        ],
    );
    b.s.annotations = vec![
        Annotation {
            start: true,
            name: b.s.strings.intern("ProfilerStep#1"),
            device: 0,
            time_us: 15,
        },
        Annotation {
            start: false,
            name: b.s.strings.intern("ProfilerStep#1"),
            device: 0,
            time_us: 45,
        },
    ];
    let a = analyze(&b.s);
    let d = &a.devices[0];
    assert_eq!(d.start_allocated_bytes, 4096 + 2048);
    assert_eq!(d.end_allocated_bytes, 4096 + 1024);
    assert_eq!(d.peak.allocated_bytes, 4096 + 8192 + 1024);
    assert_eq!(d.peak.entry, Some(3));
    assert_eq!(d.peak.time_us, Some(30));
    assert_eq!(d.peak.phase.as_deref(), Some("ProfilerStep#1"));
    let big = &d.peak.alive[0];
    assert_eq!(
        (big.size, big.made_at, big.freed_at, big.kind),
        (8192, Some(2), Some(4), SiteKind::ModuleForward)
    );
    assert_eq!(d.peak.by_python_frame[0].site, "model.py:3:forward");
    assert_eq!(
        d.peak.stacks[0].0,
        "stream_0;active_allocated;train.py:12:main;module.py:1775:_call_impl;model.py:3:forward;module.py:1775:_call_impl;functional.py:5:linear"
    );
    // Reserved: the 1 MiB segment made at entry 0 (none before), the same at the end.
    assert_eq!(d.timeline.first().unwrap().reserved_bytes, 1 << 20);
    assert_eq!(d.peak_reserved_bytes, 1 << 20);
    // Never freed within the history: the 1 KiB optimizer block.
    assert_eq!(d.never_freed.len(), 1);
    assert_eq!(
        (d.never_freed[0].bytes, d.never_freed[0].kind),
        (1024, SiteKind::Optimizer)
    );
    // segsum: asked-for bytes, rounding, and the free blocks.
    assert_eq!(a.segments.allocated_bytes, 5000);
    assert_eq!(a.segments.free_internal_bytes, 96 + 24);
    assert_eq!(a.segments.free_external_bytes, 2048 + 8192);
    assert_eq!(a.segments.largest_free_block_bytes, 8192);
    // Every allocation's life: the two before the history, the two made in it.
    assert_eq!(d.intervals.len(), 4);
}

#[test]
fn frames_are_formatted_and_filtered_as_torch_memory_viz_does() {
    let mut b = Build::new();
    let s = b.stack(&[
        ("/usr/lib/libtorch.so", 0, "at::native::empty_cuda"),
        ("Python/ceval.c", 0, "_PyEval_EvalFrameDefault"),
        ("/a/b/train.py", 7, "step"),
    ]);
    assert_eq!(
        sites::fragment(&b.s, s),
        "train.py:7:step;libtorch.so:0:at::native::empty_cuda"
    );
    assert_eq!(sites::fragment(&b.s, StackId(0)), "<non-python>");
}

#[test]
fn kinds_come_from_the_innermost_telling_frame() {
    let mut b = Build::new();
    let closure_forward = b.stack(&[
        ("/x/torch/nn/modules/module.py", 1775, "_call_impl"),
        ("train.py", 3, "closure"),
        ("/x/torch/optim/lbfgs.py", 300, "step"),
    ]);
    let loader = b.stack(&[("/x/torch/utils/data/_utils/pin_memory.py", 1, "pin")]);
    let setup = b.stack(&[
        ("/x/torch/nn/modules/module.py", 1097, "<lambda>"),
        ("/x/torch/nn/modules/module.py", 934, "_apply"),
    ]);
    let engine = b.stack(&[("libtorch.so", 0, "torch::autograd::Engine::thread_main()")]);
    let program = b.stack(&[("train.py", 9, "main")]);
    assert_eq!(
        sites::kind(&b.s, b.s.stack(closure_forward)),
        SiteKind::ModuleForward
    );
    assert_eq!(sites::kind(&b.s, b.s.stack(loader)), SiteKind::DataLoading);
    assert_eq!(sites::kind(&b.s, b.s.stack(setup)), SiteKind::ModelSetup);
    assert_eq!(sites::kind(&b.s, b.s.stack(engine)), SiteKind::Backward);
    assert_eq!(sites::kind(&b.s, b.s.stack(program)), SiteKind::Program);
    assert_eq!(sites::kind(&b.s, &[]), SiteKind::NoStack);
}

/// The replay written the plain way, over the whole history held in memory: the state
/// before the first entry given, every state after it computed, the peak the first highest.
/// Returns (peak bytes, peak entry, the blocks alive at it as (addr, size, made, freed),
/// allocated bytes after each entry).
#[allow(clippy::type_complexity)]
fn naive(
    start: &[(u64, u64)],
    trace: &[TraceEntry],
) -> (
    u64,
    Option<usize>,
    Vec<(u64, u64, Option<usize>, Option<usize>)>,
    Vec<u64>,
) {
    let mut live: std::collections::BTreeMap<u64, (u64, Option<usize>)> =
        start.iter().map(|&(a, s)| (a, (s, None))).collect();
    let total = |l: &std::collections::BTreeMap<u64, (u64, Option<usize>)>| {
        l.values().map(|v| v.0).sum::<u64>()
    };
    let (mut peak, mut peak_at, mut at_peak) = (total(&live), None, live.clone());
    let mut after = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                live.insert(e.addr, (e.size, Some(i)));
            }
            Action::FreeCompleted => {
                live.remove(&e.addr);
            }
            _ => {}
        }
        let t = total(&live);
        after.push(t);
        if t > peak {
            (peak, peak_at, at_peak) = (t, Some(i), live.clone());
        }
    }
    let from = peak_at.map_or(0, |p| p + 1);
    let alive = at_peak
        .iter()
        .map(|(&a, &(s, m))| {
            let freed = (from..trace.len()).find(|&i| {
                trace[i].addr == a
                    && matches!(trace[i].action, Action::Alloc | Action::FreeCompleted)
            });
            (a, s, m, freed)
        })
        .collect();
    (peak, peak_at, alive, after)
}

proptest::proptest! {
    /// The streamed replay (one pass, the start state unknown until the end) finds the
    /// peak, what is alive at it and when each of those goes, and the memory after every
    /// entry, as the plain replay over the whole history does, for histories of blocks
    /// made before and within it at a few reused addresses.
    #[test]
    fn the_streamed_replay_agrees_with_a_whole_history_replay(
        before in proptest::collection::vec(proptest::prelude::any::<bool>(), 8),
        ops in proptest::collection::vec((0u64..8, 1u64..5), 0..60),
    ) {
        let mut b = Build::new();
        let none = StackId(0);
        // Addresses 0x1000 * (k + 1); a block there before the history where `before[k]`.
        let addr = |k: u64| 0x1000 * (k + 1);
        let start: Vec<(u64, u64)> = (0..8u64)
            .filter(|&k| before[k as usize])
            .map(|k| (addr(k), 512 * (k + 1)))
            .collect();
        let mut live: std::collections::BTreeMap<u64, u64> = start.iter().copied().collect();
        for (i, &(k, size)) in ops.iter().enumerate() {
            let a = addr(k);
            let t = i as i64;
            match live.remove(&a) {
                Some(s) => b.entry(Action::FreeCompleted, a, s, t, none),
                None => {
                    live.insert(a, size * 256);
                    b.entry(Action::Alloc, a, size * 256, t, none);
                }
            }
        }
        // The end state: what is alive after the last entry.
        let blocks: Vec<(u64, u64, u64, bool, StackId)> =
            live.iter().map(|(&a, &s)| (a, s, s, true, none)).collect();
        b.segment(0, 1 << 20, &blocks);
        let trace = b.s.device_traces[0].clone();
        let (peak, peak_at, mut alive, after) = naive(&start, &trace);
        let a = analyze(&b.s);
        let d = &a.devices[0];
        proptest::prop_assert_eq!(d.peak.allocated_bytes, peak);
        proptest::prop_assert_eq!(d.peak.entry, peak_at);
        let mut got: Vec<(u64, u64, Option<usize>, Option<usize>)> = d
            .peak
            .alive
            .iter()
            .map(|b| (b.addr, b.size, b.made_at, b.freed_at))
            .collect();
        got.sort_unstable();
        alive.sort_unstable();
        proptest::prop_assert_eq!(got, alive);
        let timeline: Vec<u64> = d.timeline.iter().map(|p| p.allocated_bytes).collect();
        proptest::prop_assert_eq!(timeline, after);
        proptest::prop_assert_eq!(
            d.start_allocated_bytes,
            start.iter().map(|s| s.1).sum::<u64>()
        );
    }
}

/// A history longer than the timeline's points: the buckets widen as it goes, and the
/// highest point of each bucket stays, the peak among them.
#[test]
fn a_long_history_keeps_each_buckets_highest_point_and_the_peak() {
    let mut b = Build::new();
    let none = StackId(0);
    let n = 3 * TIMELINE_POINTS + 7;
    for i in 0..n {
        // A block made and freed in turn; one larger block at entry 20,001.
        let size = if i == 20_000 { 1 << 20 } else { 4096 };
        let action = if i % 2 == 0 {
            Action::Alloc
        } else {
            Action::FreeCompleted
        };
        let size = if i % 2 == 1 && i == 20_001 {
            1 << 20
        } else {
            size
        };
        b.entry(action, 0x1000, size, i as i64, none);
    }
    let a = analyze(&b.s);
    let d = &a.devices[0];
    assert_eq!(d.entries, n);
    assert!(d.timeline.len() <= TIMELINE_POINTS && d.timeline.len() >= TIMELINE_POINTS / 2);
    assert_eq!(d.peak.allocated_bytes, 1 << 20);
    assert_eq!(d.peak.entry, Some(20_000));
    assert!(d
        .timeline
        .iter()
        .any(|p| p.entry == 20_000 && p.allocated_bytes == 1 << 20));
    // Points in order, the last entry's bucket included.
    assert!(d.timeline.windows(2).all(|w| w[0].entry < w[1].entry));
    assert!(d.timeline.last().unwrap().entry >= n - 4);
    // Ranges fall at their entry (one time per entry here).
    assert_eq!(d.time_index.entry_at(12_345, d.entries), 12_345);
}

/// Issue 80, item 8: the never-freed total counts every block, before the list is cut to its
/// first [`TOP`] stacks (100 stacks of 1 MiB read 50 MiB), and equal stacks are one group
/// whether or not the pickle shared the object (a snapshot pickled without memo sharing
/// grouped differently).
#[test]
fn never_freed_totals_count_every_stack_and_group_by_content() {
    let mut b = Build::new();
    for k in 0..100u64 {
        let st = b.stack(&[("train.py", k as i64, "main")]);
        b.entry(
            Action::Alloc,
            0x1000_0000 + k * (1 << 20),
            1 << 20,
            k as i64,
            st,
        );
    }
    // The same frames twice, as two objects: one group of two blocks.
    let a1 = b.stack(&[("model.py", 7, "forward")]);
    let a2 = b.stack(&[("model.py", 7, "forward")]);
    b.entry(Action::Alloc, 0x9000_0000, 2 << 20, 200, a1);
    b.entry(Action::Alloc, 0x9100_0000, 2 << 20, 201, a2);
    let a = analyze(&b.s);
    let d = &a.devices[0];
    assert_eq!(d.never_freed.len(), TOP);
    assert_eq!(d.never_freed_total.bytes, 100 * (1 << 20) + 2 * (2 << 20));
    assert_eq!(d.never_freed_total.blocks, 102);
    assert_eq!(d.never_freed_total.stacks, 101);
    let first = &d.never_freed[0];
    assert!(first.stack.contains("model.py"), "{first:?}");
    assert_eq!((first.blocks, first.bytes), (2, 4 << 20));
}

/// Issue 80, item 1: a stack naming one 64 KiB frame thousands of times (a few bytes each in
/// the pickle, through its memo) made one flame-graph line of GBs; the line is bounded, each
/// frame cut at [`sites::FRAME_TEXT_MAX`] and the frames past [`sites::STACK_TEXT_MAX`]
/// counted, not written.
#[test]
fn a_stack_line_is_bounded_whatever_the_pickle_repeats() {
    let mut b = Build::new();
    let long = "x".repeat(64 << 10);
    let frames: Vec<(&str, i64, &str)> =
        (0..5_000).map(|_| ("train.py", 1, long.as_str())).collect();
    let st = b.stack(&frames);
    let line = sites::fragment(&b.s, st);
    assert!(
        line.len() <= sites::STACK_TEXT_MAX + sites::FRAME_TEXT_MAX + 64,
        "{}",
        line.len()
    );
    assert!(line.ends_with("frames)"), "{}", &line[line.len() - 40..]);
    // A real stack is written whole.
    let short = b.stack(&[("train.py", 12, "main"), ("model.py", 3, "forward")]);
    assert_eq!(
        sites::fragment(&b.s, short),
        "model.py:3:forward;train.py:12:main"
    );
}

/// Issue 80 (low): a newline in a frame's name forged a flame-graph line of its own, and raw
/// escape bytes reached CSV and TXT files; both are written as escapes.
#[test]
fn control_characters_in_frames_are_escaped() {
    let mut b = Build::new();
    let st = b.stack(&[(
        "train.py",
        3,
        "f\nstream_0;active_allocated;evil 999999\x1b[2J",
    )]);
    let line = sites::fragment(&b.s, st);
    assert!(!line.contains('\n') && !line.contains('\x1b'), "{line:?}");
    assert!(line.contains("\\n") && line.contains("\\u{1b}"), "{line:?}");
}

/// Issue 80, item 10: a snapshot naming 1,000 devices (a forged one: a machine has a few) is
/// analysed on the 64 holding the most, the rest counted and warned of; the page and the
/// outputs stay bounded.
#[test]
fn a_snapshot_of_a_thousand_devices_keeps_the_largest_sixty_four() {
    let mut b = Build::new();
    for d in 0..1000u64 {
        b.segment(d << 32, 2 << 20, &[]);
        let seg = b.s.segments.last_mut().unwrap();
        seg.device = d as i64;
        // Device 500 and up hold twice the bytes: the kept ones are the top 64 of those.
        if d >= 500 {
            seg.total_size = 4 << 20;
        }
    }
    let a = analyze(&b.s);
    assert_eq!(a.devices.len(), MAX_DEVICES);
    assert_eq!(a.devices_left_out, 1000 - MAX_DEVICES);
    let kept: Vec<i64> = a.devices.iter().map(|d| d.device).collect();
    assert_eq!(kept, (500..564).collect::<Vec<i64>>());
    let w = devices_left_out_warning(&a, &b.s.path).unwrap();
    assert!(
        w.contains("1000 devices") && w.contains("936 left out"),
        "{w}"
    );
    // A snapshot of a few devices keeps them all and says nothing.
    let mut few = Build::new();
    few.segment(0, 2 << 20, &[]);
    let a = analyze(&few.s);
    assert_eq!((a.devices.len(), a.devices_left_out), (1, 0));
    assert!(devices_left_out_warning(&a, &few.s.path).is_none());
}
