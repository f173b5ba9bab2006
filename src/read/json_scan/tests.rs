//! The scanner's tests: the block skip against the byte skip, strings that look like
//! structure, keys after nested members, chunks (parallel against sequential), padding and cut
//! objects.

use super::skip::*;
use super::windows::*;
use super::*;

#[test]
fn issue7_block_skip_ends_where_the_byte_skip_does() {
    // Strings and brackets across block edges, brackets inside strings, the other bracket
    // kind, nesting, text after the value, and values cut short.
    let mut cases: Vec<Vec<u8>> = vec![
        br#"{"a": "x}{", "b": [1, {"c": "]}"}], "d": 3} tail"#.to_vec(),
        br#"[[1, 2], {"]": "["}, "]"] ,"#.to_vec(),
        br#"{"a": {"b": {"c": {}}}}"#.to_vec(),
        br#"{"a": "unterminated }"#.to_vec(),
        b"{".to_vec(),
    ];
    for pad in [0, 1, 30, 55, 60, 62, 63, 64, 65, 127, 128, 200] {
        let name = "n".repeat(pad);
        cases.push(format!(r#"{{"name": "{name}}}{{", "args": {{"x": [1]}}}}, {{}}"#).into());
        cases.push(format!(r#"{{"{name}": 1, "s": "}}", "t": {{"u": "{name}"}}}}"#).into());
    }
    for c in &cases {
        let expect = skip_value(c, 0);
        match skip_container(c, 0) {
            Some(end) => assert_eq!(Some(end), expect, "{}", String::from_utf8_lossy(c)),
            None => assert_eq!(expect, None, "{}", String::from_utf8_lossy(c)),
        }
    }
    // A backslash leaves the decision to the byte-wise skip.
    assert_eq!(skip_container(br#"{"a": "\"}"}"#, 0), None);
}

#[test]
fn block_masks_match_their_definition() {
    let mut b = [0u8; 64];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..200 {
        for c in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly the interesting bytes, some anything.
            *c = if x.is_multiple_of(3) {
                x as u8
            } else {
                b"\"\\{}[] a"[(x % 8) as usize]
            };
        }
        let (o, c) = if round % 2 == 0 {
            (b'{', b'}')
        } else {
            (b'[', b']')
        };
        assert_eq!(BlockMasks::of(&b, o, c), BlockMasks::portable(&b, o, c));
    }
    assert_eq!(prefix_xor(0b1001), 0b0111);
}

#[test]
fn skips_nested_values_with_tricky_strings() {
    let s = br#"{"a": "x}\"{", "b": [1, {"c": "]"}], "d": 3} tail"#;
    assert_eq!(skip_value(s, 0), Some(s.len() - 5));
    assert_eq!(skip_value(br#""ab\\""#, 0), Some(6));
    assert_eq!(skip_value(b"123,", 0), Some(3));
    assert_eq!(skip_value(b"{\"a\": 1", 0), None);
}

#[test]
fn finds_key_after_nested_members() {
    let s = br#"{"deviceProperties": [{"traceEvents": 1}], "traceEvents": [1, 2]}"#;
    let f = find_top_level_key(s, b"traceEvents").unwrap().unwrap();
    assert_eq!(&s[f.value_start..f.value_start + 1], b"[");
    assert_eq!(find_top_level_key(s, b"nope").unwrap(), None);
    assert!(find_top_level_key(b"[1]", b"x").is_err());
}

#[test]
fn chunks_cover_all_elements() {
    let s = br#"[{"a":1}, {"b":"}"} ,{"c":[1,2]}]"#;
    let c = chunk_array(s, 0, 1).unwrap();
    assert_eq!(c.elements, 3);
    assert_eq!(c.chunks.len(), 3);
    assert_eq!(&s[c.chunks[1].0..c.chunks[1].1], br#"{"b":"}"}"#);
    assert_eq!(c.end, Some(s.len()));
    let whole = chunk_array(s, 0, 1 << 20).unwrap();
    assert_eq!(whole.chunks, vec![(1, s.len() - 1)]);
}

#[test]
fn parallel_scan_equals_sequential_even_with_misleading_strings() {
    // Strings that look like element starts (`,{`) must not fool the split.
    let mut s = String::from("{\"traceEvents\": [");
    for i in 0..300 {
        if i > 0 {
            s.push_str(",\n");
        }
        s.push_str(&format!(
            r#"{{"name": "x,{{\"ph\": {i}, [", "v": [{i}, {{"a": ",{{"}}]}}"#
        ));
    }
    s.push_str("]}");
    let b = s.as_bytes();
    let start = find_top_level_key(b, b"traceEvents")
        .unwrap()
        .unwrap()
        .value_start;
    // Element by element the result is exactly the sequential one; with larger chunks the
    // grouping may differ at task edges but the elements, end and cut do not.
    let each = chunk_array(b, start, 1).unwrap();
    let bounds: std::collections::HashSet<(usize, usize)> = each.chunks.iter().copied().collect();
    for piece in [1, 7, 64, 4096, 1 << 20] {
        let p = chunk_array_parallel(b, start, piece).unwrap();
        assert_eq!(p, each, "piece {piece}");
        for (s, e) in p.chunks {
            assert!(bounds.contains(&(s, e)));
        }
    }
    for cut in [b.len() / 3, b.len() / 2, b.len() - 3] {
        let seq = chunk_array(&b[..cut], start, 1).unwrap();
        for piece in [1, 100] {
            assert_eq!(chunk_array_parallel(&b[..cut], start, piece).unwrap(), seq);
        }
    }
}

/// A trace of 400 events whose strings are full of what looks like element starts: a piece
/// starting at one (a wrong guess) is redone, and every 97th event is 150 KB long, longer
/// than the margin a piece is given past its stretch.
fn misleading_trace() -> String {
    let mut s = String::from("{\"traceEvents\": [");
    for i in 0..400 {
        if i > 0 {
            s.push_str(",\n");
        }
        let long = if i % 97 == 5 {
            format!("{}, ", "y".repeat(999))
                .replace(", ", ",{")
                .repeat(150)
        } else {
            String::new()
        };
        s.push_str(&format!(
            r#"{{"name": "x,{{\"ph\": {i}, [{long}", "v": [{i}, {{"a": ",{{"}}]}}"#
        ));
    }
    s.push_str("], \"traceName\": \"t\"}");
    s
}

/// The walk over text still arriving gives what the walk over the whole text gives, piece for
/// piece, whatever the piece size and threads: with elements longer than the margin a piece
/// is handed (redone over the whole text), and strings that look like element starts.
#[test]
fn a_walk_over_arriving_text_equals_the_walk_over_the_whole() {
    let s = misleading_trace();
    let b = s.as_bytes();
    let start = find_top_level_key(b, b"traceEvents")
        .unwrap()
        .unwrap()
        .value_start;
    let spans = element_spans;
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for piece in [64, 4096, 100_000] {
            let whole = pool
                .install(|| walk_array_parallel(b, start, piece, spans))
                .unwrap();
            let t = OnDemand::new(b);
            let arriving = pool
                .install(|| walk_array_arriving(&t, start, piece, spans))
                .unwrap();
            assert_eq!(arriving, whole, "piece {piece}, {threads} threads");
        }
    }
}

/// The windowed walks' task: each element's span, in the text's offsets.
fn spans_in_text(
    view: &[u8],
    base: usize,
    from: usize,
    limit: usize,
) -> (Vec<(usize, usize)>, Stop) {
    let (spans, stop) = element_spans(view, from, limit);
    let spans: Vec<(usize, usize)> = spans.iter().map(|&(s, e)| (base + s, base + e)).collect();
    (spans, stop)
}

/// A walk's elements and end, or where the text is not an array.
type Spans = Result<(Vec<(usize, usize)>, ArrayEnd), usize>;

/// [`walk_array_windows`] over `text` in windows of `size`, its spans in the text's offsets.
fn walk_windows(text: &[u8], start: usize, size: usize) -> Spans {
    let (parts, end, _) =
        walk_array_windows(&InWindows::new(text, size), text, start, spans_in_text)?
            .expect("every window is had");
    Ok((parts.into_iter().flatten().collect(), end))
}

/// [`InOrder::walk`] over `text` sent in windows of `size` by a thread at most `cap` windows
/// ahead, its spans in the text's offsets; as kineto reads a single gzip stream.
fn walk_in_order(text: &[u8], start: usize, size: usize, cap: usize) -> Spans {
    let mut t = InMemory::start(text, size, cap);
    let _ = Prefix::prefix(&mut t, start + WINDOW_MARGIN);
    let walked = t.walk(start, spans_in_text);
    assert!(t.finish().1, "the producer ended whole");
    let (parts, end, _) = walked?.expect("every window arrives");
    Ok((parts.into_iter().flatten().collect(), end))
}

/// `check(text, start, whole walk, pool, threads)` over the misleading trace whole, cut
/// inside an element and not an array at a byte, at 1 and 3 threads.
fn each_misleading_text(check: impl Fn(&[u8], usize, &Spans, &rayon::ThreadPool, usize)) {
    let s = misleading_trace();
    let full = s.as_bytes();
    let start = find_top_level_key(full, b"traceEvents")
        .unwrap()
        .unwrap()
        .value_start;
    let bad = s.replacen("},\n{", "} x {", 1);
    for text in [full, &full[..full.len() / 2], bad.as_bytes()] {
        let whole = walk_array_parallel(text, start, 1 << 20, element_spans)
            .map(|(p, e)| (p.into_iter().flatten().collect::<Vec<_>>(), e));
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            check(text, start, &whole, &pool, threads);
        }
    }
}

// A walk over a text held a window at a time (a capture file's members) must find the same
// elements and end as the walk over the whole text, whatever the window size and the number
// of threads: with long strings full of what looks like element starts (wrong guesses; an
// element spanning many windows), cut inside an element, and not an array at some byte.
#[test]
fn a_walk_over_windows_equals_the_walk_over_the_whole() {
    each_misleading_text(|text, start, whole, pool, threads| {
        for size in [64, 1000, 4096, 100_000] {
            let windows = pool.install(|| walk_windows(text, start, size));
            assert_eq!(
                &windows,
                whole,
                "windows of {size}, {threads} threads, {} bytes",
                text.len()
            );
        }
    });
}

// A walk over a text arriving a window at a time from one producer (a single gzip stream
// inflated into a few buffers) must find the same elements and end as the walk over the whole
// text, whatever the window size, the producer's cap and the number of threads: with wrong
// guesses, elements longer than a window and its margin (redone over windows the producer
// sends past its cap), a text cut inside an element, and one that is not an array at a byte.
#[test]
fn a_walk_over_windows_arriving_in_order_equals_the_walk_over_the_whole() {
    each_misleading_text(|text, start, whole, pool, threads| {
        for (size, cap) in [(64, 1), (1000, 3), (4096, 2), (100_000, 1), (100_000, 8)] {
            let got = pool.install(|| walk_in_order(text, start, size, cap));
            assert_eq!(
                &got,
                whole,
                "windows of {size}, cap {cap}, {threads} threads, {} bytes",
                text.len()
            );
        }
    });
}

#[test]
fn issue22_piece_starts_scan_each_byte_a_bounded_number_of_times_whatever_the_padding() {
    // Events, then padding with no `{` after them: every piece's guess search used to run
    // to the end of the buffer (quadratic in the padding).
    for (pad_at_end, pieces) in [(true, 1000), (false, 1000), (true, 7)] {
        let events = r#"{"ph":"X","name":"a","ts":1},"#.repeat(2000);
        let pad = " ".repeat(4 << 20);
        let body = if pad_at_end {
            format!("[{events}{{}}{pad}]")
        } else {
            format!("[{events}{pad}{{}}]")
        };
        let mut scanned = 0;
        let cuts = piece_starts(body.as_bytes(), 1, pieces, &mut scanned);
        assert!(
            scanned <= 2 * body.len(),
            "{scanned} bytes looked at for {} (pad at end: {pad_at_end})",
            body.len()
        );
        assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        assert!(cuts.iter().all(|&c| body.as_bytes()[c] == b'{'));
    }
}

#[test]
fn issue22_a_second_key_and_text_after_the_object_are_found() {
    let rest = |t: &str| {
        let at = t.find(']').unwrap() + 1;
        rest_of_object(t.as_bytes(), at, b"traceEvents")
    };
    assert_eq!(
        rest(r#"{"traceEvents":[], "a": {"b": 1}}"#),
        Some((false, None))
    );
    assert_eq!(
        rest(r#"{"traceEvents":[], "traceEvents": [1]} "#),
        Some((true, None))
    );
    assert_eq!(
        rest(r#"{"traceEvents":[]} {"traceEvents":[]}"#),
        Some((false, Some(19)))
    );
    assert_eq!(rest(r#"{"traceEvents":[], "a" 1}"#), None);
}

#[test]
fn issue22_the_rest_of_an_object_cut_anywhere_is_not_well_formed_and_never_a_panic() {
    // CI found `rest_of_object` slicing past the end when the text stopped right after a
    // comma (the annotated trace's every-cut test).
    let t = r#"{"traceEvents":[], "a": {"b": "x"y"}, "c": [1, 2], "d": "e"}"#;
    let at = t.find(']').unwrap() + 1;
    for cut in at..t.len() {
        assert_eq!(
            rest_of_object(&t.as_bytes()[..cut], at, b"x"),
            None,
            "cut {cut}"
        );
    }
    assert_eq!(skip_string(b"\"", 0), None);
    assert_eq!(skip_string(b"", 0), None);
}

#[test]
fn truncated_array_reports_cut() {
    let s = br#"[{"a":1}, {"b":2}, {"c":"#;
    let c = chunk_array(s, 0, 1 << 20).unwrap();
    assert_eq!(c.elements, 2);
    assert_eq!(c.end, None);
    assert_eq!(c.cut_at, Some(19));
}

/// Issue 80, item 2: members of a few bytes each are read in windows of at least
/// [`MIN_WINDOW`] (one window a member had each fill its margin from thousands of members);
/// capture's own 2 MiB members stay one window each.
#[test]
fn small_members_are_read_together_and_capture_members_alone() {
    let tiny: Vec<usize> = (0..20_000).map(|k| k * 15).collect();
    let w = windows_of(&tiny, MIN_WINDOW);
    assert_eq!(w, [0]);
    let spread: Vec<usize> = (0..200_000).map(|k| k * 100).collect();
    let w = windows_of(&spread, MIN_WINDOW);
    assert_eq!(w.len(), 20_000_000usize.div_ceil(MIN_WINDOW));
    assert!(w.windows(2).all(|p| p[1] - p[0] >= MIN_WINDOW));
    let capture: Vec<usize> = (0..10).map(|k| k * (2 << 20)).collect();
    assert_eq!(windows_of(&capture, MIN_WINDOW), capture);
}
