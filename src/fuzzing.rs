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
    let a = crate::analysis::run(&mut t, &crate::analysis::Options::default(), &mut diag);
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
