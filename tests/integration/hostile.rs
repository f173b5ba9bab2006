//! Hostile input (issue 22): each case small and generated here, each asserting the bound it
//! protects by counting (records built, bytes read), not by the clock.

use std::path::Path;

/// Protocol-4 pickle opcodes, enough to build snapshots by hand.
#[derive(Default)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn op(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }
    fn text(&mut self, s: &str) -> &mut Self {
        self.0.push(0x8c); // SHORT_BINUNICODE
        self.0.push(s.len() as u8);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(&mut self, v: i32) -> &mut Self {
        self.0.push(b'J'); // BININT
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// MEMOIZE: the top of the stack becomes memo entry `n` (counting from 0).
    fn memo(&mut self) -> &mut Self {
        self.op(0x94)
    }
    /// LONG_BINGET: pushes memo entry `i` again.
    fn get(&mut self, i: u32) -> &mut Self {
        self.0.push(b'j');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    /// A dict of `(key, int)` members, memoised.
    fn dict(&mut self, members: &[(&str, i32)], text: &[(&str, &str)]) -> &mut Self {
        self.op(b'}').memo().op(b'(');
        for (k, v) in members {
            self.text(k).int(*v);
        }
        for (k, v) in text {
            self.text(k).text(v);
        }
        self.op(b'u')
    }
}

/// Issue 22, case 1: a pickle of a few KB naming one segment, block, device list and history
/// entry thousands of times through its memo. Copying each reference made a 1,690-byte file
/// allocate until the process aborted; each repeat is now skipped, so what is built is one
/// of each, and a warning counts the repeats.
#[test]
fn issue22_memo_references_do_not_multiply_snapshot_records() {
    const N: u32 = 2000;
    let mut p = Pickle::default();
    p.op(0x80).op(4).op(b'}').memo().op(b'('); // memo 0: root
                                               // segments: [S] * N, S = {..., blocks: [B] * N}
    p.text("segments").op(b']').memo().op(b'('); // memo 1: the segment list
    p.op(b'}').memo().op(b'('); // memo 2: S
    p.text("address").int(0).text("total_size").int(1024);
    p.text("allocated_size").int(512).text("stream").int(0);
    p.text("blocks").op(b']').memo().op(b'('); // memo 3: S's blocks
    p.dict(
        &[("address", 0), ("size", 512)],
        &[("state", "active_allocated")],
    ); // memo 4: B
    for _ in 1..N {
        p.get(4);
    }
    p.op(b'e').op(b'u'); // S's blocks, S's members
    for _ in 1..N {
        p.get(2);
    }
    p.op(b'e'); // the segment list
                // device_traces: [D] * N, D = [E] * N
    p.text("device_traces").op(b']').memo().op(b'('); // memo 5
    p.op(b']').memo().op(b'('); // memo 6: D
    p.dict(
        &[("addr", 0), ("size", 512), ("stream", 0), ("time_us", 1)],
        &[("action", "alloc")],
    ); // memo 7: E
    for _ in 1..N {
        p.get(7);
    }
    p.op(b'e');
    for _ in 1..N {
        p.get(6);
    }
    p.op(b'e').op(b'u').op(b'.');
    let bytes = &p.0;
    assert!(bytes.len() < 41_000, "{}", bytes.len());
    let mut d = steptrace::diagnostics::Diagnostics::default();
    let s =
        steptrace::ingest::snapshot::from_bytes(Path::new("bomb.pickle"), bytes, &mut d).unwrap();
    // Copied, it would be 2,000 segments of 2,000 blocks and 2,000 devices of 2,000 entries.
    assert_eq!(s.segments.len(), 1);
    assert_eq!(s.segments[0].blocks.len(), 1);
    assert_eq!(s.device_traces.len(), 1);
    assert_eq!(s.device_traces[0].len(), 1);
    assert_eq!(s.device_traces[0][0].size, 512);
    assert_eq!(d.count("snapshot_repeated_records"), 1);
    let w = d.lines().join("\n");
    assert!(w.contains(&format!("{} segment", 4 * (N - 1))), "{w}");
    // The fuzz target's bound: records built never outnumber the input's bytes.
    steptrace::fuzzing::pickle(bytes);
}

/// Issue 22, case 9: a manifest's file names stay inside its run directory and name regular
/// files: `"trace": "/dev/zero"` read 8.4 GB before failing, `/dev/urandom` never ended.
#[test]
fn issue22_manifest_paths_stay_inside_the_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(run.join("sub")).unwrap();
    std::fs::write(
        dir.path().join("outside.json"),
        crate::synthetic::training_trace(2, false),
    )
    .unwrap();
    for (name, why) in [
        ("/dev/zero", "not a file name inside"),
        ("../outside.json", "not a file name inside"),
        ("sub/../../outside.json", "not a file name inside"),
        ("sub", "not a regular file"),
        ("", "not a file name inside"),
    ] {
        std::fs::write(
            run.join("manifest.json"),
            serde_json::json!({"files": {"trace": name}}).to_string(),
        )
        .unwrap();
        let err = steptrace::analyze(&steptrace::AnalyzeProps {
            input: run.clone(),
            out: Some(dir.path().join("out")),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(why) && err.contains("refused"),
            "{name}: {err}"
        );
        assert!(err.contains("manifest.json"), "{err}");
    }
    // A snapshot named outside is refused too, though the trace is fine.
    std::fs::copy(dir.path().join("outside.json"), run.join("trace.json")).unwrap();
    std::fs::write(
        run.join("manifest.json"),
        serde_json::json!({"files": {"trace": "trace.json", "snapshot": "/dev/urandom"}})
            .to_string(),
    )
    .unwrap();
    let err = steptrace::analyze(&steptrace::AnalyzeProps {
        input: run.clone(),
        out: Some(dir.path().join("out")),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("/dev/urandom"), "{err}");
    // Inside, it is read.
    std::fs::write(
        run.join("manifest.json"),
        serde_json::json!({"files": {"trace": "trace.json"}}).to_string(),
    )
    .unwrap();
    assert!(steptrace::analyze(&steptrace::AnalyzeProps {
        input: run,
        out: Some(dir.path().join("out")),
        ..Default::default()
    })
    .is_ok());
}

/// Issue 22, case 10: a snapshot cut short, as a killed writer leaves it, yields the records
/// before the cut (it gave exit 2 and no output): at every cut, each device's history read is
/// a prefix of the whole one (a record cut in its middle is left out, never read wrong), with
/// a warning; the longer the file, the more it holds.
#[test]
fn issue22_a_cut_snapshot_yields_the_records_before_the_cut() {
    let gz = std::fs::read(crate::common::root().join("sample_traces/resnet18/snapshot.pickle.gz"))
        .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
    let mut d = steptrace::diagnostics::Diagnostics::default();
    let whole =
        steptrace::ingest::snapshot::from_bytes(Path::new("s.pickle"), &bytes, &mut d).unwrap();
    assert_eq!(d.count("truncated_snapshot"), 0);
    let full: usize = whole.device_traces.iter().map(Vec::len).sum();
    let mut last = 0;
    for k in 1..20 {
        let cut = bytes.len() * k / 20;
        let mut d = steptrace::diagnostics::Diagnostics::default();
        let Ok(s) =
            steptrace::ingest::snapshot::from_bytes(Path::new("s.pickle"), &bytes[..cut], &mut d)
        else {
            continue; // cut before the root's members: nothing to hold
        };
        assert_eq!(d.count("truncated_snapshot"), 1, "cut at {cut}");
        for (dev, h) in s.device_traces.iter().enumerate() {
            let w = &whole.device_traces[dev];
            assert!(h.len() <= w.len());
            for (a, b) in h.iter().zip(w) {
                assert_eq!(
                    (a.action, a.addr, a.size, a.time_us),
                    (b.action, b.addr, b.size, b.time_us),
                    "cut at {cut}"
                );
            }
        }
        let n: usize = s.device_traces.iter().map(Vec::len).sum();
        assert!(
            n >= last && n <= full,
            "cut at {cut}: {n} entries after {last}"
        );
        last = n;
    }
    assert!(last > full / 2, "{last} of {full} entries at the last cut");
}

/// Issue 22, case 11: what used to pass silently is a warning: a second `traceEvents`, text
/// after the trace's object, and a memory counter past 2^63 (which became a peak of -1 bytes).
#[test]
fn issue22_duplicate_events_trailing_text_and_overflowing_counters_are_warned() {
    let dir = tempfile::tempdir().unwrap();
    let t = crate::synthetic::training_trace(2, true);
    let run = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        steptrace::analyze(&steptrace::AnalyzeProps {
            input: p,
            out: Some(dir.path().join(format!("{name}.out"))),
            ..Default::default()
        })
        .unwrap()
    };
    let clean = run("clean.json", t.clone());
    for kind in [
        "duplicate_trace_events",
        "trailing_data",
        "memory_counter_out_of_range",
    ] {
        assert_eq!(clean.diagnostics.count(kind), 0, "{kind}");
    }
    let trailing = run("trailing.json", format!("{t}\n{{\"traceEvents\": []}}"));
    assert_eq!(trailing.diagnostics.count("trailing_data"), 1);
    let end = t.rfind('}').unwrap();
    let twice = run(
        "twice.json",
        format!("{}, \"traceEvents\": []}}", &t[..end]),
    );
    assert_eq!(twice.diagnostics.count("duplicate_trace_events"), 1);
    // The first memory event's total underflowed in the writer.
    let at = t.find("\"Total Allocated\":").unwrap() + "\"Total Allocated\":".len();
    let len = t[at..].find(',').unwrap();
    let over = run(
        "over.json",
        format!("{}18446744073709551615{}", &t[..at], &t[at + len..]),
    );
    assert_eq!(over.diagnostics.count("memory_counter_out_of_range"), 1);
    assert_eq!(
        over.analysis.summary.peak_allocated_bytes,
        clean.analysis.summary.peak_allocated_bytes
    );
}

/// Issue 22, case 11: an Execution Trace from another run joins none of the trace's ops; the
/// liveness is then the allocator events', and says so (it claimed `execution_trace`).
#[test]
fn issue22_an_execution_trace_that_joins_nothing_is_not_claimed_as_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.json");
    // Ops with record-function ids far from the ET's.
    let t = crate::synthetic::training_trace(2, true);
    std::fs::write(&p, &t).unwrap();
    let out = steptrace::analyze(&steptrace::AnalyzeProps {
        input: p,
        exec_trace: Some(crate::common::root().join("sample_traces/resnet18/exec_trace.json.gz")),
        out: Some(dir.path().join("o")),
        ..Default::default()
    })
    .unwrap();
    let s = &out.analysis.summary;
    assert_eq!(s.execution_trace.as_ref().map(|j| j.ops_matched), Some(0));
    assert_eq!(
        serde_json::to_value(s.liveness_source).unwrap(),
        serde_json::json!("memory_events")
    );
}

/// A manifest whose ranks all name one trace ran a full analysis per rank (200 ranks of one
/// 0.5 MB trace: 17 s, 574 MB written) and merged them as ranks: refused with one line naming
/// two of them.
#[test]
fn a_manifest_whose_ranks_name_one_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::copy(
        crate::common::trace_path(&crate::common::root().join("sample_traces/libtorch_cnn")),
        run.join("trace.json.gz"),
    )
    .unwrap();
    let ranks: Vec<String> = (0..200)
        .map(|r| format!(r#"{{"rank": {r}, "files": {{"trace": "trace.json.gz"}}}}"#))
        .collect();
    std::fs::write(
        run.join("manifest.json"),
        format!(
            r#"{{"files": {{"trace": "trace.json.gz"}}, "ranks": [{}]}}"#,
            ranks.join(",")
        ),
    )
    .unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_steptrace"))
        .arg("analyze")
        .arg(&run)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("ranks 0 and 1 both name the trace 'trace.json.gz'"),
        "{err}"
    );
    assert!(!dir.path().join("out").exists());
}

/// Issue 80, item 1: a snapshot whose history entries all name one long frame many times (a
/// few bytes each in the pickle, through its memo) made the report's interactive view carry
/// the whole stack: 13 MB of page from a 239 KB pickle. The view's stacks are bounded as the
/// flame-graph lines are (each frame cut, the frames past the stack's bound counted, not
/// written), so the page stays a small multiple of its input.
#[test]
fn issue80_a_repeated_long_frame_does_not_blow_up_the_report() {
    const N: i32 = 50; // history entries
    const K: usize = 100; // references to the one frame in each entry's stack
    let mut p = Pickle::default();
    p.op(0x80).op(4).op(b'}').op(b'(');
    p.text("segments").op(b']');
    p.text("device_traces").op(b']').op(b'('); // the devices
    p.op(b']').op(b'('); // device 0's entries
    for i in 0..N {
        p.op(b'}').op(b'(');
        p.text("action").text("alloc").text("addr").int(i * 512);
        p.text("size")
            .int(512)
            .text("stream")
            .int(0)
            .text("time_us")
            .int(i);
        p.text("frames").op(b']').op(b'(');
        for k in 0..K {
            if i == 0 && k == 0 {
                // memo 0: the frame, 20,000 bytes of file name.
                p.op(b'}').memo().op(b'(').text("filename");
                let long = "x".repeat(20_000);
                p.0.push(b'X'); // BINUNICODE
                p.0.extend_from_slice(&(long.len() as u32).to_le_bytes());
                p.0.extend_from_slice(long.as_bytes());
                p.text("line").int(1).text("name").text("f").op(b'u');
            } else {
                p.get(0);
            }
        }
        p.op(b'e').op(b'u');
    }
    p.op(b'e').op(b'e').op(b'u').op(b'.');
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("amp.pickle");
    std::fs::write(&input, &p.0).unwrap();
    let props = steptrace::AnalyzeProps {
        input: input.clone(),
        out: Some(dir.path().join("out")),
        ..Default::default()
    };
    assert!(steptrace::is_snapshot_input(&props));
    steptrace::analyze_snapshot(&props).unwrap();
    let html = std::fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    let input_len = p.0.len();
    // Unbounded, the one stack alone was K frames of 20 KB: 2 MB.
    assert!(
        html.len() < 300_000,
        "{} bytes from {input_len}",
        html.len()
    );
    assert!(html.contains("frames)"), "the frames left out are counted");
    // Each block's row carried its stack's 16 KiB (820 KB for these 50 blocks); the stack is
    // written once, in peak_stacks.csv, and the rows name it.
    let size = |f: &str| {
        std::fs::metadata(dir.path().join("out").join(f))
            .unwrap()
            .len()
    };
    let (rows, stacks) = (size("peak_allocations.csv"), size("peak_stacks.csv"));
    assert!(
        rows + stacks < 40_000,
        "{rows} + {stacks} bytes from {input_len}"
    );
    let stacks = std::fs::read_to_string(dir.path().join("out/peak_stacks.csv")).unwrap();
    assert_eq!(stacks.lines().count(), 2, "one stack, its {N} blocks");
    assert!(stacks
        .lines()
        .nth(1)
        .unwrap()
        .starts_with(&format!("0,{N},{},", N * 512)));
}

/// Issue 80, low: Python pickles a string holding a lone surrogate (`'\ud800'`) as bytes that
/// are not UTF-8 (`surrogatepass`); one such frame name refused the whole snapshot. It is read
/// with U+FFFD in place of those bytes, and a warning counts such strings.
#[test]
fn issue80_a_lone_surrogate_is_read_with_a_replacement_and_a_warning() {
    let mut p = Pickle::default();
    p.op(0x80).op(4).op(b'}').op(b'(');
    p.text("segments").op(b']');
    p.text("device_traces").op(b']').op(b'(').op(b']').op(b'(');
    p.op(b'}').op(b'(');
    p.text("action").text("alloc").text("addr").int(0);
    p.text("size")
        .int(512)
        .text("stream")
        .int(0)
        .text("time_us")
        .int(1);
    p.text("frames").op(b']').op(b'(');
    p.op(b'}')
        .op(b'(')
        .text("filename")
        .text("train.py")
        .text("line")
        .int(3);
    // "f\ud800" as Python's pickle writes it: SHORT_BINUNICODE of 4 bytes.
    p.text("name").op(0x8c).op(4);
    p.0.extend_from_slice(&[b'f', 0xed, 0xa0, 0x80]);
    p.op(b'u').op(b'e').op(b'u');
    p.op(b'e').op(b'e').op(b'u').op(b'.');
    let mut d = steptrace::diagnostics::Diagnostics::default();
    let s = steptrace::ingest::snapshot::from_bytes(Path::new("s.pickle"), &p.0, &mut d)
        .expect("read, not refused");
    assert_eq!(d.count("snapshot_text_not_utf8"), 1, "{:?}", d.lines());
    let names: Vec<&str> = s.frames.iter().map(|f| s.str(f.name)).collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with('f') && n.contains('\u{fffd}')),
        "{names:?}"
    );
}
