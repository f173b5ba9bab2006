//! Truncated traces (a crashed run): what is complete is analysed, with a warning.

use std::io::Write;

use crate::common::root;

#[test]
fn truncated_sample_keeps_complete_events() {
    let path = root().join("sample_traces/resnet18/trace.json.gz");
    let text = steptrace::ingest::source::read(&path)
        .unwrap()
        .bytes
        .to_vec();
    let mut d = steptrace::diagnostics::Diagnostics::default();
    let whole = steptrace::ingest::kineto::from_bytes(&path, text.clone(), false, &mut d).unwrap();
    let mut last = 0;
    for frac in [0.05, 0.3, 0.5, 0.77, 0.999] {
        let cut = (text.len() as f64 * frac) as usize;
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let t = steptrace::ingest::kineto::from_bytes(&path, text[..cut].to_vec(), false, &mut d)
            .unwrap();
        assert!(t.truncated.is_some());
        assert_eq!(d.count("truncated_trace"), 1);
        assert!(t.event_count < whole.event_count);
        assert!(t.event_count >= last, "more text never yields fewer events");
        last = t.event_count;
        // Every recovered op is one of the whole trace's, in order.
        assert_eq!(
            &whole.ops[..t.ops.len()]
                .iter()
                .map(|o| o.start)
                .collect::<Vec<_>>(),
            &t.ops.iter().map(|o| o.start).collect::<Vec<_>>()
        );
    }
}

#[test]
fn truncated_gzip_file_is_analysed_with_a_warning() {
    let path = root().join("sample_traces/gpt_bf16/trace.json.gz");
    let gz = std::fs::read(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("trace.json.gz");
    std::fs::File::create(&cut)
        .unwrap()
        .write_all(&gz[..gz.len() * 2 / 3])
        .unwrap();
    let props = steptrace::AnalyzeProps {
        input: cut,
        out: Some(dir.path().join("out")),
        top: 3,
        ..Default::default()
    };
    let out = steptrace::analyze(&props).unwrap();
    assert!(out.analysis.summary.truncated);
    assert_eq!(out.diagnostics.count("truncated_trace"), 1);
    assert!(out.analysis.summary.iterations >= 1);
}

/// Issue 46: gzip inputs that the inflate-while-parsing path starts on but does not finish
/// (its stated size a cut file's last bytes, or the last of two members') are read the usual
/// way: a cut one yields its complete events with a warning, two members the whole trace.
#[test]
fn issue46_gzip_files_the_parallel_path_leaves_are_read_as_before() {
    let path = root().join("sample_traces/gpt_bf16/trace.json.gz");
    let text = steptrace::ingest::source::read(&path)
        .unwrap()
        .bytes
        .to_vec();
    let load = |file: &[u8]| {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.json.gz");
        std::fs::write(&p, file).unwrap();
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let t = steptrace::ingest::kineto::load(&p, &mut d).unwrap();
        (t, d)
    };
    let (whole, _) = load(&std::fs::read(&path).unwrap());
    let gz = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    // Two members: the last one's size is not the text's.
    let half = text.len() / 2;
    let mut two = gz(&text[..half]);
    two.extend_from_slice(&gz(&text[half..]));
    let (t, d) = load(&two);
    assert!(t.truncated.is_none() && d.count("truncated_trace") == 0);
    assert_eq!(t.event_count, whole.event_count);
    assert_eq!(t.ops.len(), whole.ops.len());
    // Cut, its last four bytes made to state a size the text could have.
    let one = gz(&text);
    let mut cut = one[..one.len() * 2 / 3].to_vec();
    cut.extend_from_slice(&(text.len() as u32).to_le_bytes());
    let (t, d) = load(&cut);
    assert!(t.truncated.is_some());
    assert_eq!(d.count("truncated_trace"), 1);
    assert!(t.event_count > 0 && t.event_count < whole.event_count);
}
