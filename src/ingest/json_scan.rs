//! Structural scanning of JSON text without building values: find a top-level key, skip a
//! value, and cut a large array into chunks at element boundaries so the elements can be
//! parsed on several threads.
//!
//! The scanner only needs to know where strings start and end (so braces inside names do not
//! count) and how deep braces and brackets nest; `memchr` finds those bytes, which is what
//! makes the split cheap next to the parse.

use memchr::{memchr2, memchr3};

/// Skips JSON whitespace from `i`; returns the first index that is not whitespace.
pub(crate) fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && matches!(buf[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// `buf[i]` is an opening quote; returns the index just past the closing quote, or `None` when
/// the text ends first.
pub(crate) fn skip_string(buf: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr2(b'"', b'\\', &buf[j..])?;
        if buf[k] == b'"' {
            return Some(k + 1);
        }
        // A backslash escapes the next byte, whatever it is.
        j = k + 2;
        if j > buf.len() {
            return None;
        }
    }
}

/// Skips one JSON value starting at `i` (after whitespace). Returns the index just past it, or
/// `None` when the text ends before the value does. Validity beyond nesting is not checked: the
/// real parser does that.
pub(crate) fn skip_value(buf: &[u8], i: usize) -> Option<usize> {
    let i = skip_ws(buf, i);
    match *buf.get(i)? {
        b'"' => skip_string(buf, i),
        open @ (b'{' | b'[') => {
            let close = if open == b'{' { b'}' } else { b']' };
            let mut depth = 0usize;
            let mut j = i;
            loop {
                let k = j + memchr3(b'"', open, close, &buf[j..])?;
                match buf[k] {
                    b'"' => {
                        j = skip_string(buf, k)?;
                        continue;
                    }
                    c if c == open => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(k + 1);
                        }
                    }
                }
                j = k + 1;
            }
        }
        _ => {
            // Number, true, false, null: runs until a delimiter.
            let mut j = i;
            while j < buf.len()
                && !matches!(buf[j], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            {
                j += 1;
            }
            if j == buf.len() {
                None
            } else {
                Some(j)
            }
        }
    }
}

/// Where a top-level key's value lies in an object document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Index of the value's first byte.
    pub value_start: usize,
}

/// Finds `key` among the members of the top-level object. `Ok(None)` when the object has no
/// such member; `Err(offset)` when the text is not an object or ends before the key is found.
pub(crate) fn find_top_level_key(buf: &[u8], key: &[u8]) -> Result<Option<Found>, usize> {
    let mut i = skip_ws(buf, 0);
    // A UTF-8 byte order mark is legal in files written by some tools.
    if buf[i..].starts_with(&[0xEF, 0xBB, 0xBF]) {
        i = skip_ws(buf, i + 3);
    }
    if buf.get(i) != Some(&b'{') {
        return Err(i);
    }
    i += 1;
    loop {
        i = skip_ws(buf, i);
        match buf.get(i) {
            Some(b'}') => return Ok(None),
            Some(b'"') => {}
            _ => return Err(i),
        }
        let kend = skip_string(buf, i).ok_or(i)?;
        let this_key = &buf[i + 1..kend - 1];
        i = skip_ws(buf, kend);
        if buf.get(i) != Some(&b':') {
            return Err(i);
        }
        i = skip_ws(buf, i + 1);
        if this_key == key {
            return Ok(Some(Found { value_start: i }));
        }
        i = skip_value(buf, i).ok_or(i)?;
        i = skip_ws(buf, i);
        match buf.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => return Ok(None),
            _ => return Err(i),
        }
    }
}

/// The elements of an array, cut into chunks at element boundaries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ArrayChunks {
    /// `(start, end)` byte ranges; each holds whole elements separated by commas.
    pub chunks: Vec<(usize, usize)>,
    /// Index just past the closing bracket, or `None` if the text ended inside the array.
    pub end: Option<usize>,
    /// Where scanning stopped when the array is incomplete: the start of the first element
    /// that could not be read whole.
    pub cut_at: Option<usize>,
    /// Number of complete elements.
    pub elements: usize,
}

/// Cuts the array starting at `start` (its `[`) into chunks of about `chunk_bytes`.
pub(crate) fn chunk_array(
    buf: &[u8],
    start: usize,
    chunk_bytes: usize,
) -> Result<ArrayChunks, usize> {
    if buf.get(start) != Some(&b'[') {
        return Err(start);
    }
    let mut out = ArrayChunks::default();
    let mut i = skip_ws(buf, start + 1);
    let mut chunk_start: Option<usize> = None;
    let mut last_end = i;
    if buf.get(i) == Some(&b']') {
        out.end = Some(i + 1);
        return Ok(out);
    }
    loop {
        let elem_start = skip_ws(buf, i);
        let Some(elem_end) = skip_value(buf, elem_start) else {
            out.cut_at = Some(elem_start);
            break;
        };
        out.elements += 1;
        let cs = *chunk_start.get_or_insert(elem_start);
        last_end = elem_end;
        if elem_end - cs >= chunk_bytes {
            out.chunks.push((cs, elem_end));
            chunk_start = None;
        }
        i = skip_ws(buf, elem_end);
        match buf.get(i) {
            Some(b',') => i += 1,
            Some(b']') => {
                out.end = Some(i + 1);
                break;
            }
            None => {
                out.cut_at = Some(i);
                break;
            }
            Some(_) => return Err(i),
        }
    }
    if let Some(cs) = chunk_start {
        out.chunks.push((cs, last_end));
    }
    Ok(out)
}

/// How one scan task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// At the start of an element at or past the task's limit.
    Next(usize),
    /// Past the closing bracket.
    End(usize),
    /// The text ended inside the element starting here.
    Cut(usize),
    /// Not a well-formed array at this byte.
    Bad(usize),
}

/// What one scan task found: its chunks, its element count, how it ended.
type TaskResult = (Vec<(usize, usize)>, usize, Stop);

/// Scans elements from `from` (an element start) until one starts at or past `limit`.
fn scan_task(buf: &[u8], from: usize, limit: usize, chunk_bytes: usize) -> TaskResult {
    let mut chunks = Vec::new();
    let mut elements = 0;
    let mut chunk_start: Option<usize> = None;
    let mut last_end = from;
    let mut i = from;
    let stop = loop {
        let elem_start = skip_ws(buf, i);
        if elem_start >= limit {
            break Stop::Next(elem_start);
        }
        let Some(elem_end) = skip_value(buf, elem_start) else {
            break Stop::Cut(elem_start);
        };
        elements += 1;
        let cs = *chunk_start.get_or_insert(elem_start);
        last_end = elem_end;
        if elem_end - cs >= chunk_bytes {
            chunks.push((cs, elem_end));
            chunk_start = None;
        }
        i = skip_ws(buf, elem_end);
        match buf.get(i) {
            Some(b',') => i += 1,
            Some(b']') => break Stop::End(i + 1),
            None => break Stop::Cut(i),
            Some(_) => break Stop::Bad(i),
        }
    };
    if let Some(cs) = chunk_start {
        chunks.push((cs, last_end));
    }
    (chunks, elements, stop)
}

/// [`chunk_array`] on several threads. The array is cut at guessed element starts (a `{` after
/// a `,`); each guess is scanned from in parallel, and a guess counts only if the scan of the
/// part before it, which started at a true boundary, lands exactly on it. A wrong guess (the
/// bytes were inside a string) is rescanned from the true boundary, so the result is always
/// that of the sequential scan.
pub(crate) fn chunk_array_parallel(
    buf: &[u8],
    start: usize,
    chunk_bytes: usize,
    tasks: usize,
) -> Result<ArrayChunks, usize> {
    use rayon::prelude::*;
    if buf.get(start) != Some(&b'[') {
        return Err(start);
    }
    let first = skip_ws(buf, start + 1);
    if buf.get(first) == Some(&b']') {
        return Ok(ArrayChunks {
            end: Some(first + 1),
            ..ArrayChunks::default()
        });
    }
    let span = buf.len().saturating_sub(first);
    let tasks = tasks.max(1);
    let mut cuts = vec![first];
    for k in 1..tasks {
        let target = first + span * k / tasks;
        let mut j = target.max(*cuts.last().expect("non-empty") + 1);
        while let Some(o) = buf.get(j..).and_then(|r| memchr::memchr(b'{', r)) {
            let at = j + o;
            let before = buf[..at]
                .iter()
                .rposition(|c| !matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
            if before.is_some_and(|b| buf[b] == b',') {
                cuts.push(at);
                break;
            }
            j = at + 1;
        }
    }
    let limits: Vec<usize> = cuts
        .iter()
        .skip(1)
        .copied()
        .chain(std::iter::once(usize::MAX))
        .collect();
    let mut results: Vec<TaskResult> = cuts
        .par_iter()
        .zip(limits.par_iter())
        .map(|(&from, &limit)| scan_task(buf, from, limit, chunk_bytes))
        .collect();
    // Verify in order, rescanning after any wrong guess.
    let mut out = ArrayChunks::default();
    let mut k = 0;
    loop {
        let (chunks, elements, stop) =
            std::mem::replace(&mut results[k], (Vec::new(), 0, Stop::Bad(0)));
        out.chunks.extend(chunks);
        out.elements += elements;
        match stop {
            Stop::Next(b) => {
                k += 1;
                if cuts[k] != b {
                    results[k] = scan_task(buf, b, limits[k], chunk_bytes);
                }
            }
            Stop::End(e) => {
                out.end = Some(e);
                return Ok(out);
            }
            Stop::Cut(c) => {
                out.cut_at = Some(c);
                return Ok(out);
            }
            Stop::Bad(b) => return Err(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let bounds: std::collections::HashSet<(usize, usize)> =
            each.chunks.iter().copied().collect();
        for tasks in [1, 2, 3, 7, 64] {
            assert_eq!(
                chunk_array_parallel(b, start, 1, tasks).unwrap(),
                each,
                "tasks {tasks}"
            );
            for chunk in [64, 4096] {
                let p = chunk_array_parallel(b, start, chunk, tasks).unwrap();
                assert_eq!(
                    (p.elements, p.end, p.cut_at),
                    (each.elements, each.end, each.cut_at)
                );
                for (s, e) in p.chunks {
                    assert!(bounds.iter().any(|x| x.0 == s) && bounds.iter().any(|x| x.1 == e));
                }
            }
        }
        for cut in [b.len() / 3, b.len() / 2, b.len() - 3] {
            let seq = chunk_array(&b[..cut], start, 1).unwrap();
            assert_eq!(chunk_array_parallel(&b[..cut], start, 1, 5).unwrap(), seq);
        }
    }

    #[test]
    fn truncated_array_reports_cut() {
        let s = br#"[{"a":1}, {"b":2}, {"c":"#;
        let c = chunk_array(s, 0, 1 << 20).unwrap();
        assert_eq!(c.elements, 2);
        assert_eq!(c.end, None);
        assert_eq!(c.cut_at, Some(19));
    }
}
