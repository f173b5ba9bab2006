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
