//! Entry points shared by the fuzz targets (`tests/fuzz/`) and the test that replays their
//! corpus in CI: each feeds arbitrary bytes through a parser and, where it accepts them, the
//! analyses downstream. They must never panic.

use std::path::Path;

use crate::diagnostics::Diagnostics;

/// A Kineto trace: parse, build the model, run every analysis.
pub fn kineto(data: &[u8]) {
    let mut d = Diagnostics::default();
    let Ok(k) =
        crate::ingest::kineto::from_bytes(Path::new("fuzz.json"), data.to_vec(), false, &mut d)
    else {
        return;
    };
    let loaded = crate::ingest::Loaded {
        kineto: k,
        snapshot: None,
        exec_trace: None,
        diagnostics: d,
    };
    let mut diag = Diagnostics::default();
    let mut t = crate::model::Trace::build(loaded, &mut diag);
    if t.kineto.ops.is_empty() {
        return;
    }
    let a = crate::analysis::run(
        &mut t,
        &crate::analysis::Options::default(),
        Default::default(),
        &mut diag,
    );
    let _ = crate::report::console_summary(&t, &a, &diag, 5);
}

/// A memory snapshot pickle, then its analysis alone (`analyze snapshot.pickle`).
/// Panics when what is built is not proportional to the input (memo references
/// multiplied records): every segment, block, history entry, frame and stack needs bytes of
/// its own in the pickle; and when the analysis panics, or a snapshot compared with itself
/// shows a change.
pub fn pickle(data: &[u8]) {
    let mut d = Diagnostics::default();
    if let Ok(s) = crate::ingest::snapshot::from_bytes(Path::new("fuzz.pickle"), data, &mut d) {
        let records = s.segments.len()
            + s.segments.iter().map(|g| g.blocks.len()).sum::<usize>()
            + s.device_traces.iter().map(Vec::len).sum::<usize>()
            + s.annotations.len()
            + s.frames.len()
            + s.stacks.len();
        assert!(
            records <= data.len(),
            "{records} records from {} bytes",
            data.len()
        );
        let a = crate::analysis::snapshot::analyze(&s);
        let _ = crate::analysis::snapshot::end_stacks(&s);
        assert!(crate::analysis::snapshot::compare(&a, &a).is_empty());
        for d in &a.devices {
            let alive: u64 = d.peak.alive.iter().map(|b| b.size).sum();
            assert_eq!(alive, d.peak.allocated_bytes);
        }
        // A stack's text is bounded however often the pickle's memo repeats a long frame
        // (issue 80: one 64 KiB frame shared by every block's stack took 6.5 GB).
        let mut seen = std::collections::HashSet::new();
        let peak = a.devices.iter().flat_map(|d| &d.peak.alive);
        for b in peak.filter(|b| seen.insert(b.stack)).take(64) {
            let text = crate::analysis::snapshot::sites::fragment(&s, b.stack);
            let most = crate::analysis::snapshot::sites::STACK_TEXT_MAX
                + crate::analysis::snapshot::sites::FRAME_TEXT_MAX
                + 64;
            assert!(text.len() <= most, "a {}-byte stack", text.len());
        }
    }
}

/// An Execution Trace.
pub fn exec_trace(data: &[u8]) {
    let _ = crate::ingest::exec_trace::from_bytes(Path::new("fuzz_et.json"), data);
}

/// One Kineto event through the fast reader and through serde_json: where the fast reader
/// accepts the bytes, both must read the same event; and the block-wise skip must end where the
/// byte-wise one does. Panics when they differ.
pub fn kineto_event(data: &[u8]) {
    assert!(
        crate::ingest::kineto::container_skip_agrees(data),
        "the block-wise and byte-wise skips disagree on {:?}",
        String::from_utf8_lossy(data)
    );
    assert!(
        crate::ingest::kineto::fast_reader_agrees(data),
        "the fast reader and serde_json disagree on {:?}",
        String::from_utf8_lossy(data)
    );
}

/// Any bytes as a JSON text: where it has `traceEvents`, the walk over its text arriving only
/// as far as asked must give what the walk over the whole gives (pieces, elements, end), at a
/// few piece sizes. Panics when they differ.
pub fn arriving_walk(data: &[u8]) {
    use crate::read::json_scan as js;
    let Ok(Some(found)) = js::find_top_level_key(data, b"traceEvents") else {
        return;
    };
    let spans = js::element_spans;
    for piece in [97, 4096] {
        let whole = js::walk_array_parallel(data, found.value_start, piece, spans);
        let text = js::OnDemand::new(data);
        let arriving = js::walk_array_arriving(&text, found.value_start, piece, spans);
        assert_eq!(arriving, whole, "piece {piece}");
        // The same text held a window at a time (a capture file's members).
        let windows = js::InWindows::new(data, piece);
        let task = |view: &[u8], base: usize, from: usize, limit: usize| {
            let (s, stop) = spans(view, from, limit);
            (
                s.iter()
                    .map(|&(a, b)| (base + a, base + b))
                    .collect::<Vec<_>>(),
                stop,
            )
        };
        let by_windows = js::walk_array_windows(&windows, data, found.value_start, task)
            .map(|w| w.map(|(p, end, _)| (p.concat(), end)));
        let flat = whole.map(|(p, end)| Some((p.concat(), end)));
        assert_eq!(by_windows, flat, "windows of {piece}");
        // The same text arriving a window at a time from one producer (a single gzip
        // stream), at most two windows ahead.
        let mut in_order = js::InMemory::start(data, piece, 2);
        let _ = js::Prefix::prefix(&mut in_order, found.value_start + js::WINDOW_MARGIN);
        let walked = in_order
            .walk(found.value_start, task)
            .map(|w| w.map(|(p, end, _)| (p.concat(), end)));
        assert!(in_order.finish().1, "the producer ended whole");
        assert_eq!(walked, flat, "windows of {piece} arriving in order");
    }
}

/// Any bytes as a gzip trace file (`trace.json.gz`): read as analyze reads it, the gzip
/// framing and the inflate-while-parsing path included; it must end in a trace or an error,
/// never a panic or a hang.
pub fn gzip_trace(data: &[u8]) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "steptrace-fuzz-{}-{}.json.gz",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let mut d = Diagnostics::default();
    let _ = crate::ingest::kineto::load(&path, &mut d);
    let _ = std::fs::remove_file(&path);
}
