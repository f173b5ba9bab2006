//! Where the annotated trace puts its events in the trace's own text.

use super::json_scan;
use super::EventsSpan;

/// Where added events go: just past the last complete element of the `traceEvents` array that
/// starts at `arr_start` (its `]` just before `end`, or the text cut at `cut_at`).
pub(super) fn events_span(
    buf: &[u8],
    arr_start: usize,
    end: Option<usize>,
    cut_at: Option<usize>,
) -> EventsSpan {
    // The last byte that is not white space before `limit`, at or after the `[`.
    let last_non_ws = |limit: usize| {
        let mut i = limit.min(buf.len());
        while i > arr_start && matches!(buf[i - 1], b' ' | b'\n' | b'\r' | b'\t') {
            i -= 1;
        }
        i.saturating_sub(1).max(arr_start)
    };
    let limit = match end {
        // `end` is just past the `]`.
        Some(e) => e.saturating_sub(1),
        None => cut_at.unwrap_or(buf.len()),
    };
    let last = last_non_ws(limit);
    let (insert_at, has_elements) = if last <= arr_start {
        (arr_start + 1, false)
    } else if end.is_none() && buf[last] == b',' {
        // A truncated array: the comma after the last complete element goes too.
        (last, true)
    } else {
        (last + 1, true)
    };
    EventsSpan {
        insert_at,
        has_elements,
        complete: end.is_some_and(|e| object_closes(buf, e)),
    }
}

/// Whether the text from `i` (just past the events array) is the rest of the top-level object:
/// more members, then `}` and nothing but white space. A trace cut after its events array is
/// not (its annotated copy closes the object itself).
fn object_closes(buf: &[u8], mut i: usize) -> bool {
    loop {
        i = json_scan::skip_ws(buf, i);
        match buf.get(i) {
            Some(b'}') => return json_scan::skip_ws(buf, i + 1) == buf.len(),
            Some(b',') => {
                i = json_scan::skip_ws(buf, i + 1);
                if buf.get(i) != Some(&b'"') {
                    return false;
                }
                let Some(k) = json_scan::skip_string(buf, i) else {
                    return false;
                };
                i = json_scan::skip_ws(buf, k);
                if buf.get(i) != Some(&b':') {
                    return false;
                }
                i = json_scan::skip_ws(buf, i + 1);
                let Some(v) = json_scan::skip_value(buf, i) else {
                    return false;
                };
                i = v;
            }
            _ => return false,
        }
    }
}
