use super::*;

fn gz(data: &[u8]) -> Vec<u8> {
    gzip_stream(data, 6)
}

/// A file as capture writes it: members that say their length, inflated on all threads.
fn members_of(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    steptrace_formats::gzip_members::write(&mut &data[..], &mut out, 1, 2).unwrap();
    out
}

fn trace_text(n: usize) -> Vec<u8> {
    let mut v = b"{\"traceEvents\": [".to_vec();
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(format!("{{\"ph\": \"X\", \"ts\": {i}}},\n").as_bytes());
        i += 7;
    }
    v
}

#[test]
fn capture_gzip_members_inflate_in_parallel_to_the_same_bytes_and_checks_hold() {
    let data = trace_text(9 << 20);
    let file = members_of(&data);
    assert!(steptrace_formats::gzip_members::members(&file).is_some());
    let (out, cut) = inflate(&file, Expect::JsonObject, None).unwrap();
    assert!(!cut);
    assert!(out == data);
    // A byte of the second member's stream changed: its CRC or its stream says so.
    let (m, _) = steptrace_formats::gzip_members::members(&file).unwrap();
    let mut bad = file.clone();
    bad[m[1].offset + 200] ^= 0x55;
    assert!(matches!(
        inflate(&bad, Expect::JsonObject, None),
        Err(InflateError::Corrupt(_))
    ));
    // Cut inside the last member: the whole members and what of the last inflates.
    let cut_at = m[2].offset + m[2].len / 2;
    let (out, cut) = inflate(&file[..cut_at], Expect::JsonObject, None).unwrap();
    assert!(cut);
    assert!(out.len() > m[0].inflated + m[1].inflated && data.starts_with(&out));
    // Not what was expected: refused on the first member.
    assert!(matches!(
        inflate(&members_of(b"\x80\x02}q"), Expect::JsonObject, None),
        Err(InflateError::NotExpected(_))
    ));
    // Past the limit: refused from the members' sizes, before inflating.
    assert!(matches!(
        inflate(&file, Expect::JsonObject, Some(1 << 20)),
        Err(InflateError::TooLarge(_))
    ));
}

#[test]
fn a_stream_over_capture_gzip_members_yields_the_text_in_order() {
    let data = trace_text(11 << 20);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trace.json.gz");
    std::fs::write(&p, members_of(&data)).unwrap();
    let mut back = Vec::new();
    open_stream(&p).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == data);
    // A member whose data inflates but whose CRC is wrong is an error to the stream's reader
    // too (zlib-rs reads it again after libdeflate refuses it, and checks the CRC as well).
    let mut file = members_of(&data);
    let (m, _) = steptrace_formats::gzip_members::members(&file).unwrap();
    file[m[1].offset + m[1].len - 8] ^= 1;
    std::fs::write(&p, &file).unwrap();
    let err = open_stream(&p)
        .unwrap()
        .read_to_end(&mut Vec::new())
        .unwrap_err();
    assert!(err.to_string().contains("invalid checksum"), "{err}");
}

#[test]
fn size_hint_reads_isize_and_ignores_implausible_values() {
    // Text-like data that compresses a few times over, as traces do.
    let mut x = 1u32;
    let data: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            b'a' + ((x >> 16) % 8) as u8
        })
        .collect();
    let z = gz(&data);
    assert!(z.len() * 2 < data.len());
    assert_eq!(inflated_size_hint(&z), data.len() + 1);
    // A truncated stream's last four bytes are deflate data: fall back to 8x.
    let mut cut = z[..z.len() - 8].to_vec();
    cut.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(inflated_size_hint(&cut), cut.len() * 8);
    assert_eq!(inflated_size_hint(&[1, 2]), 16);
}

#[test]
fn inflates_whole_stream() {
    let data: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let (out, truncated) = inflate(&gz(&data), Expect::Any, None).unwrap();
    assert_eq!(out, data);
    assert!(!truncated);
}

#[test]
fn issue22_a_stream_that_is_not_what_is_expected_is_refused_on_its_first_bytes() {
    // 64 MiB of zeros in about 64 KB of gzip: not a JSON object, known from byte 0.
    let z = gz(&vec![0u8; 64 << 20]);
    assert!(z.len() < 100_000);
    match inflate(&z, Expect::JsonObject, None) {
        Err(InflateError::NotExpected(why)) => assert!(why.contains("not a JSON object")),
        other => panic!("{:?}", other.map(|(v, t)| (v.len(), t))),
    }
    assert!(matches!(
        inflate(&z, Expect::Pickle, None),
        Err(InflateError::NotExpected(_))
    ));
    let json = gz(br#"  {"traceEvents": []}"#);
    assert!(inflate(&json, Expect::JsonObject, None).is_ok());
    assert!(matches!(
        inflate(&gz(b"[1, 2]"), Expect::JsonObject, None),
        Err(InflateError::NotExpected(_))
    ));
}

#[test]
fn issue22_inflating_stops_at_the_limit() {
    let mut text = br#"{"traceEvents": ["#.to_vec();
    text.resize(8 << 20, b' ');
    let z = gz(&text);
    match inflate(&z, Expect::JsonObject, Some(1 << 20)) {
        Err(InflateError::TooLarge(l)) => assert_eq!(l, 1 << 20),
        other => panic!("{:?}", other.map(|(v, t)| (v.len(), t))),
    }
    assert_eq!(
        inflate(&z, Expect::JsonObject, Some(9 << 20))
            .unwrap()
            .0
            .len(),
        8 << 20
    );
}

#[test]
fn issue22_a_bad_check_or_bad_data_is_corrupt_not_cut() {
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    let z = gz(&data);
    // CRC32 is the trailer's first four bytes.
    let mut bad_crc = z.clone();
    let at = bad_crc.len() - 8;
    bad_crc[at] ^= 0xff;
    match inflate(&bad_crc, Expect::Any, None) {
        Err(InflateError::Corrupt(e)) => assert!(e.contains("checksum"), "{e}"),
        other => panic!("{:?}", other.map(|(v, t)| (v.len(), t))),
    }
    let mut bad_size = z.clone();
    let at = bad_size.len() - 2;
    bad_size[at] ^= 0xff;
    // Issue 80: a lying size is said as one, not as a checksum error (flate2's words for
    // both).
    match inflate(&bad_size, Expect::Any, None) {
        Err(InflateError::Corrupt(e)) => {
            assert!(
                e.starts_with("length error: a member inflates to 800000 bytes"),
                "{e}"
            )
        }
        other => panic!("{:?}", other.map(|(v, t)| (v.len(), t))),
    }
    assert!(matches!(
        inflate(&bad_size, Expect::Any, None),
        Err(InflateError::Corrupt(_))
    ));
    // Deflate data damaged in the middle, with the rest of the file after it.
    let mut bad_data = z.clone();
    for b in &mut bad_data[z.len() / 3..z.len() / 3 + 64] {
        *b = 0xff;
    }
    assert!(matches!(
        inflate(&bad_data, Expect::Any, None),
        Err(InflateError::Corrupt(_))
    ));
}

/// Resident kB of the mapping that holds `addr`, from `/proc/self/smaps`.
#[cfg(target_os = "linux")]
fn resident_kb(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo <= addr && addr < hi;
                continue;
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("Rss:") {
                return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
        }
    }
    panic!("no mapping holds {addr:#x}")
}

// The parse releases each piece of a mapped trace once read. The released pages
// must leave the resident set (the peak RSS this is for) and read back the same bytes;
// bytes in memory must be left as they are (released heap pages would read as zeros).
#[cfg(target_os = "linux")]
#[test]
fn issue19_released_pages_of_a_mapped_file_leave_the_resident_set_and_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let b = open(&path).unwrap();
    assert!(matches!(b, Bytes::Mapped(_)));
    let sum = |b: &[u8]| b.iter().map(|&x| u64::from(x)).sum::<u64>();
    let want = sum(&data);
    assert_eq!(sum(&b), want);
    let before = resident_kb(b.as_ptr() as usize);
    assert!(
        before >= 3 << 10,
        "{before} kB resident after reading 4 MiB"
    );
    // Not page-aligned ends: only the whole pages inside are released.
    b.release(1000..b.len() - 1000);
    let after = resident_kb(b.as_ptr() as usize);
    assert!(after <= 8, "{after} kB still resident of {before}");
    assert!(
        b[..] == data[..],
        "the released pages read back other bytes"
    );
    assert!(resident_kb(b.as_ptr() as usize) >= 3 << 10);

    let owned = Bytes::from(data.clone());
    owned.release(0..owned.len());
    assert!(owned[..] == data[..], "bytes in memory changed");
}

#[test]
fn members_then_zero_padding_inflate_whole_and_other_trailing_bytes_do_not() {
    let (a, b) = (b"{\"traceEvents\": [".to_vec(), b"]}".to_vec());
    let mut two = gz(&a);
    two.extend_from_slice(&gz(&b));
    let whole = [a.clone(), b.clone()].concat();
    for pad in [0usize, 1, 7, 512] {
        let mut z = two.clone();
        z.resize(z.len() + pad, 0);
        let (out, cut) = inflate(&z, Expect::JsonObject, None).unwrap();
        assert_eq!(out, whole, "{pad} bytes of padding");
        assert!(!cut, "{pad} bytes of padding read as a cut");
    }
    let mut junk = two.clone();
    junk.extend_from_slice(b"\0\0 not a gzip member header");
    assert!(matches!(
        inflate(&junk, Expect::Any, None),
        Err(InflateError::Corrupt(_))
    ));
}

/// A FIFO given as the input is refused before it is opened (opening one waits for a
/// writer: `analyze` of one hung). The read runs on a thread, so that a regression fails
/// the test instead of hanging it.
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_before_it_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.json");
    crate::file_error::make_fifo(&fifo);
    let (tx, rx) = std::sync::mpsc::channel();
    let p = fifo.clone();
    std::thread::spawn(move || {
        let r = read(&p).map(|_| ()).map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the read of a FIFO returned");
    let e = r.expect_err("a FIFO is not read");
    assert!(
        e.contains("not a regular file") && e.contains("trace.json"),
        "{e}"
    );
    assert!(open_stream(&fifo).is_err());
}

#[test]
fn truncated_stream_yields_prefix() {
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    let z = gz(&data);
    let (out, truncated) = inflate(&z[..z.len() / 2], Expect::Any, None).unwrap();
    assert!(truncated);
    assert!(!out.is_empty());
    assert_eq!(&data[..out.len()], &out[..]);
}

/// The one-call inflate (libdeflate) takes the usual single-member trace to the same bytes as
/// the streaming inflate; a file of two members, one whose trailer states another size, or
/// one with zero padding after its trailer (whose last bytes then state nothing) is left to the
/// streaming inflate (`None`), so a second member is never dropped, though the first alone
/// checks out in libdeflate.
#[test]
fn one_member_inflates_in_one_call_and_anything_else_streams() {
    let text = trace_text(3000);
    let one = gz(&text);
    let whole = |raw: &[u8]| inflate_whole(raw, Expect::JsonObject, None).unwrap();
    assert_eq!(whole(&one).as_deref(), Some(&text[..]));
    let mut padded = one.clone();
    padded.extend_from_slice(&[0; 512]);
    assert_eq!(whole(&padded), None);
    assert_eq!(inflate(&padded, Expect::JsonObject, None).unwrap().0, text);
    // Two members whose last states the first's size: libdeflate would take the first alone.
    let mut two = one.clone();
    two.extend_from_slice(&one);
    assert_eq!(whole(&two), None);
    assert_eq!(
        inflate(&two, Expect::JsonObject, None).unwrap().0,
        [&text[..], &text[..]].concat()
    );
    let mut lying = one.clone();
    let n = lying.len();
    lying[n - 4..].copy_from_slice(&((text.len() as u32) + 1).to_le_bytes());
    assert_eq!(whole(&lying), None);
    // Not a JSON object: refused on its first bytes, before the whole is inflated.
    let mut x = 1u32;
    let noise: Vec<u8> = (0..100_000)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    let pickle = gz(&[&[0x80u8, 4][..], &noise].concat());
    assert!(matches!(
        inflate_whole(&pickle, Expect::JsonObject, None),
        Err(InflateError::NotExpected(_))
    ));
}

/// Issue 80, item 7: a member whose stated length covers its deflate data and, behind it, a
/// hidden member (its trailer forged to match the first text): `gzip -d` and Python read the
/// hidden text too; steptrace took the member as the first text alone. Now refused, naming the
/// bytes between the deflate data's end and the trailer.
#[test]
fn a_member_hiding_bytes_before_its_trailer_is_refused() {
    use steptrace_formats::gzip_members::{header, member, HEADER_LEN, TRAILER_LEN};
    let shown = trace_text(2_000);
    let honest = member(&shown, 6);
    let hidden = gzip_stream(b"{\"traceEvents\": []}", 6);
    let deflate = &honest[HEADER_LEN..honest.len() - TRAILER_LEN];
    let len = (HEADER_LEN + deflate.len() + hidden.len() + TRAILER_LEN) as u32;
    let mut forged = header(len).to_vec();
    forged.extend_from_slice(deflate);
    forged.extend_from_slice(&hidden);
    forged.extend_from_slice(&honest[honest.len() - TRAILER_LEN..]);
    assert!(steptrace_formats::gzip_members::members(&forged).is_some());
    match inflate(&forged, Expect::JsonObject, None) {
        Err(InflateError::Corrupt(why)) => assert!(why.contains("before its trailer"), "{why}"),
        other => panic!("{:?}", other.map(|(t, cut)| (t.len(), cut))),
    }
    // The honest member reads as before.
    assert_eq!(inflate(&honest, Expect::JsonObject, None).unwrap().0, shown);
}
