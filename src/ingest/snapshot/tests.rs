use super::*;

/// The committed resnet18 snapshot, inflated.
fn sample() -> Vec<u8> {
    let gz = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces/resnet18/snapshot.pickle.gz"),
    )
    .unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).unwrap();
    out
}

/// A protocol-2 pickle of `{'segments': [], 'device_traces': [[entries...]]}`, each entry a
/// dict of (key, value) pairs (a string value when it starts with a letter, else an int;
/// `NaN`, a negative number and `2^64-1` as a float, a 4-byte int and a 9-byte long),
/// given one SETITEM at a time when `pairwise` (as protocols 0 and 1 write a dict), else
/// with one SETITEMS.
fn history_pickle(entries: &[&[(&str, &str)]], pairwise: bool) -> Vec<u8> {
    history_batches(&[entries], pairwise)
}

/// [`history_pickle`] with the history appended in batches (one APPENDS each).
fn history_batches(batches: &[&[&[(&str, &str)]]], pairwise: bool) -> Vec<u8> {
    fn text(p: &mut Vec<u8>, t: &str) {
        p.extend_from_slice(&[0x8c, t.len() as u8]);
        p.extend_from_slice(t.as_bytes());
    }
    let mut p = vec![0x80, 2, b'}', b'('];
    text(&mut p, "segments");
    p.push(b']');
    text(&mut p, "device_traces");
    p.extend_from_slice(b"](]");
    for entries in batches {
        p.push(b'(');
        for e in entries.iter() {
            p.push(b'}');
            if !pairwise {
                p.push(b'(');
            }
            for (k, v) in e.iter() {
                text(&mut p, k);
                match v.parse::<u8>() {
                    Ok(n) => p.extend_from_slice(&[b'K', n]),
                    Err(_) if *v == "[]" => p.push(b']'),
                    // BINFLOAT (big-endian), BININT, and LONG1 of 2^64 - 1 (nine bytes).
                    Err(_) if *v == "NaN" => {
                        p.push(b'G');
                        p.extend_from_slice(&f64::NAN.to_be_bytes());
                    }
                    Err(_) if v.starts_with('-') => {
                        p.push(b'J');
                        p.extend_from_slice(&v.parse::<i32>().unwrap().to_le_bytes());
                    }
                    Err(_) if *v == "2^64-1" => {
                        p.extend_from_slice(&[0x8a, 9]);
                        p.extend_from_slice(&[0xff; 8]);
                        p.push(0);
                    }
                    Err(_) => text(&mut p, v),
                }
                if pairwise {
                    p.push(b's');
                }
            }
            if !pairwise {
                p.push(b'u');
            }
        }
        p.push(b'e');
    }
    p.extend_from_slice(b"eu.");
    p
}

#[test]
fn entries_with_members_beyond_the_shape_are_read_and_entries_without_an_action_warned() {
    let full = |action: &'static str, t: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("action", action),
            ("addr", "16"),
            ("size", "64"),
            ("stream", "0"),
            ("time_us", t),
            ("frames", "[]"),
        ]
    };
    let a = full("alloc", "1");
    // A member no record keeps: a generic dict, read by key.
    let mut b = full("free_completed", "2");
    b.push(("extra", "1"));
    // An action that is no string (a record), and no action at all (a generic dict).
    let c = full("7", "3");
    let d = vec![("addr", "16"), ("extra", "2")];
    // Each entry given whole (SETITEMS), then a pair at a time (protocol 0/1 SETITEMs: the
    // dicts stay generic and are read by key once in their list): the same entries, and
    // the same warnings.
    for pairwise in [false, true] {
        let p = history_pickle(&[&a, &b, &c, &d], pairwise);
        let mut diag = Diagnostics::default();
        let s = from_bytes(Path::new("h.pickle"), &p, &mut diag).unwrap();
        let got: Vec<(Action, u64, Option<i64>)> = s.device_traces[0]
            .iter()
            .map(|e| (e.action, e.size, e.time_us))
            .collect();
        assert_eq!(
            got,
            [
                (Action::Alloc, 64, Some(1)),
                (Action::FreeCompleted, 64, Some(2))
            ],
            "pairwise: {pairwise}"
        );
        assert_eq!(diag.count("snapshot_entry_without_action"), 2);
        // In batches: one of entries alone (which leaves the pickle's list once handed
        // on) and one with the others: the same entries and warnings.
        let p = history_batches(&[&[&a], &[&b, &c, &d]], pairwise);
        let mut diag = Diagnostics::default();
        let t = from_bytes(Path::new("h.pickle"), &p, &mut diag).unwrap();
        assert_eq!(t.device_traces, s.device_traces, "pairwise: {pairwise}");
        assert_eq!(diag.count("snapshot_entry_without_action"), 2);
    }
}

/// Issue 80: a size that is no whole number of bytes (NaN, negative, a string, 2^64 - 1) is
/// counted as 0 and said, never taken as 0 without a word.
#[test]
fn sizes_that_are_no_whole_number_of_bytes_are_warned_about() {
    let entry = |size: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("action", "alloc"),
            ("addr", "16"),
            ("size", size),
            ("stream", "0"),
            ("time_us", "1"),
            ("frames", "[]"),
        ]
    };
    let (a, b, c, d, e) = (
        entry("NaN"),
        entry("-5"),
        entry("x"),
        entry("2^64-1"),
        entry("64"),
    );
    let p = history_pickle(&[&a, &b, &c, &d, &e], false);
    let mut diag = Diagnostics::default();
    let s = from_bytes(Path::new("h.pickle"), &p, &mut diag).unwrap();
    let sizes: Vec<u64> = s.device_traces[0].iter().map(|e| e.size).collect();
    assert_eq!(sizes, [0, 0, 0, 0, 64]);
    assert_eq!(
        diag.count("snapshot_size_not_bytes"),
        4,
        "{:?}",
        diag.lines()
    );
}

/// Issue 80: a key given twice keeps its later value, as Python's unpickled dict does (the
/// first was taken), whether the dict comes whole or a pair at a time.
#[test]
fn a_key_given_twice_keeps_its_later_value() {
    let e: Vec<(&str, &str)> = vec![
        ("action", "alloc"),
        ("addr", "16"),
        ("size", "64"),
        ("stream", "0"),
        ("time_us", "1"),
        ("frames", "[]"),
        ("size", "32"),
    ];
    for pairwise in [false, true] {
        let p = history_pickle(&[&e], pairwise);
        let mut diag = Diagnostics::default();
        let s = from_bytes(Path::new("h.pickle"), &p, &mut diag).unwrap();
        assert_eq!(s.device_traces[0][0].size, 32, "pairwise: {pairwise}");
    }
}

/// Its bytes up to `cut`, then a read error of `kind`.
struct Failing {
    bytes: Vec<u8>,
    at: usize,
    kind: std::io::ErrorKind,
}

impl std::io::Read for Failing {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.bytes.len() {
            return Err(std::io::Error::new(self.kind, "the source failed"));
        }
        let n = out.len().min(self.bytes.len() - self.at).min(4096);
        out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn read_failing(
    cut: usize,
    kind: std::io::ErrorKind,
    gz: bool,
    mode: pickle::ReadMode,
) -> (Result<Snapshot, Error>, Diagnostics) {
    let bytes = sample()[..cut].to_vec();
    let mut d = Diagnostics::default();
    let src = Failing { bytes, at: 0, kind };
    (
        from_stream(
            Path::new("s.pickle.gz"),
            Box::new(src),
            gz,
            &mut d,
            None,
            mode,
        )
        .map(collected),
        d,
    )
}

/// `bytes` read as a snapshot the way `mode` says (the tables giving back what the sink
/// took or not, entries by their own path or the loop): the snapshot (or the error) and
/// the warnings, written out.
fn read_as_text(bytes: &[u8], mode: pickle::ReadMode) -> String {
    let mut d = Diagnostics::default();
    let s = from_stream(
        Path::new("s.pickle"),
        Box::new(bytes),
        false,
        &mut d,
        None,
        mode,
    )
    .map(collected);
    format!("{s:?} {d:?}")
}

/// Every committed snapshot, whole and cut at a few places, reads the same with the
/// tables giving back what the sink took (the history entries' dicts and frame lists)
/// as with every one keeping its slot, and with the entries read by their own path as
/// through the opcode loop alone: the same entries, stacks, segments and warnings.
#[test]
fn snapshots_read_alike_every_way_the_reader_can_take_them() {
    use pickle::ReadMode::{Ahead, Direct, Kept, Released};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.to_string_lossy().ends_with(".pickle.gz") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let mut entries = 0;
    for f in &files {
        let gz = std::fs::read(f).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
        for cut in [bytes.len(), bytes.len() * 2 / 3, bytes.len() / 2 + 7] {
            let b = &bytes[..cut];
            let kept = read_as_text(b, Kept);
            for freed in [
                read_as_text(b, Ahead),
                read_as_text(b, Direct),
                read_as_text(b, Released),
            ] {
                if freed == kept {
                    continue;
                }
                let at = freed.bytes().zip(kept.bytes()).take_while(|(x, y)| x == y);
                let mut at = at.count().saturating_sub(200);
                while !freed.is_char_boundary(at) {
                    at -= 1;
                }
                panic!(
                    "{} cut at {cut} reads apart:\n{}\n{}",
                    f.display(),
                    freed.get(at..).unwrap_or_default(),
                    kept.get(at..).unwrap_or_default()
                );
            }
            entries += kept.matches("TraceEntry").count();
        }
    }
    assert!(entries > 10_000, "{entries}");
}

/// Snapshots with bytes changed at random (a few committed ones, a seeded generator):
/// read every way the reader can (see the test above), each reads the same or fails
/// the same, and none panics.
#[test]
fn damaged_snapshots_read_alike_every_way_the_reader_can_take_them() {
    use pickle::ReadMode::{Ahead, Direct, Kept, Released};
    let cases: usize = std::env::var("STEPTRACE_DAMAGED_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces/corpus");
    let files = ["cpp_mnist", "py_dcgan", "ddp_torchrun"].map(|d| {
        let dir = root.join(d);
        let f = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".pickle.gz"))
            .min()
            .unwrap();
        let gz = std::fs::read(f).unwrap();
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut b).unwrap();
        b
    });
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..cases {
        let mut b = files[case % files.len()].clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % b.len() as u64) as usize;
            b[at] = next() as u8;
        }
        let kept = read_as_text(&b, Kept);
        assert!(read_as_text(&b, Ahead) == kept, "case {case}, ahead");
        assert!(read_as_text(&b, Direct) == kept, "case {case}, direct");
        assert!(read_as_text(&b, Released) == kept, "case {case}, released");
    }
}

#[test]
fn a_gzip_stream_cut_short_yields_its_records_with_warnings_and_a_failed_read_is_an_error() {
    let whole = sample();
    let mut d = Diagnostics::default();
    let all = from_bytes(Path::new("s.pickle"), &whole, &mut d).unwrap();
    let n_all: usize = all.device_traces.iter().map(Vec::len).sum();
    let cut = whole.len() * 3 / 4;
    // Read by the thread ahead (as `load` reads) and by the reader's own (as in memory).
    for mode in [pickle::ReadMode::Ahead, pickle::ReadMode::Direct] {
        let (s, d) = read_failing(cut, std::io::ErrorKind::UnexpectedEof, true, mode);
        let s = s.unwrap();
        let n: usize = s.device_traces.iter().map(Vec::len).sum();
        assert!(n > 0 && n < n_all, "{n} of {n_all}, {mode:?}");
        // One for the gzip stream, one for the pickle it cut.
        assert_eq!(d.count("truncated_snapshot"), 2, "{mode:?}");
        // Corrupt deflate data, or any read error of a plain file: refused, not half-read.
        for (kind, gz) in [
            (std::io::ErrorKind::InvalidData, true),
            (std::io::ErrorKind::UnexpectedEof, false),
        ] {
            let (s, _) = read_failing(cut, kind, gz, mode);
            let Err(e) = s else {
                panic!("a failed read was taken as a snapshot ({mode:?})")
            };
            let e = e.to_string();
            assert!(e.contains("the source failed"), "{e}, {mode:?}");
        }
    }
}
