//! One piece of traceEvents parsed: each element by the fast reader, or by serde where it declines; the checks that the two agree.

use super::*;

/// Whether the fast event reader and serde_json agree on the event at the start of `buf`:
/// where the fast reader accepts it, serde_json must read the same event, ending at the same
/// byte. The fuzz target `kineto_event` and a property test hold the fast reader to this.
#[doc(hidden)]
pub fn fast_reader_agrees(buf: &[u8]) -> bool {
    let mut fast = RawEvent::default();
    let Ok(end) = fast::event(buf, 0, &mut fast) else {
        return true;
    };
    matches!(serde_event(buf), Some(Ok((slow, e))) if slow == fast && e == end)
}

/// Whether the block-wise skip of a container ends where the plain structural skip does,
/// wherever it answers (fuzz target `kineto_event`, property test).
#[doc(hidden)]
pub fn container_skip_agrees(buf: &[u8]) -> bool {
    match json_scan::skip_container(buf, 0) {
        Some(end) => json_scan::skip_value(buf, 0) == Some(end),
        None => true,
    }
}

/// The event at the start of `buf` as serde_json reads it, with the index past it; `None` for
/// text holding no value.
pub(super) fn serde_event(buf: &[u8]) -> Option<Result<(RawEvent<'_>, usize), serde_json::Error>> {
    let mut s = serde_json::Deserializer::from_slice(buf).into_iter::<RawEvent>();
    Some(s.next()?.map(|ev| (ev, s.byte_offset())))
}

/// Reads the event at the start of `buf` with the fast reader only (benches); the index past it,
/// or `None` where serde_json would have to read it.
#[doc(hidden)]
pub fn fast_event_end(buf: &[u8]) -> Option<usize> {
    fast::event(buf, 0, &mut RawEvent::default()).ok()
}

/// Reads the event at the start of `buf` with serde_json only (benches); the index past it.
#[doc(hidden)]
pub fn serde_event_end(buf: &[u8]) -> Option<usize> {
    serde_event(buf)?.ok().map(|(_, end)| end)
}

/// Parses the events of one piece of `traceEvents`: from `from` until an element starts at or
/// past `limit`, in `buf`, a stretch of the text starting at byte `base` (what messages say).
pub(super) fn parse_piece(
    buf: &[u8],
    base: usize,
    from: usize,
    limit: usize,
) -> (Partial, json_scan::Stop) {
    let mut p = Partial::for_text(limit.min(buf.len()).saturating_sub(from));
    let stop = json_scan::walk_elements(buf, from, limit, |pos| {
        let end = parse_element(&mut p, buf, base, pos);
        p.elements += usize::from(end.is_some());
        end
    });
    p.shrink();
    (p, stop)
}

/// Parses the element at `pos` into `p`; returns the index past it, or `None` when the text
/// ends inside it. `buf` starts at byte `base` of the text.
pub(super) fn parse_element(p: &mut Partial, buf: &[u8], base: usize, pos: usize) -> Option<usize> {
    if skippable(&buf[pos..]) {
        return json_scan::skip_container(buf, pos).or_else(|| json_scan::skip_value(buf, pos));
    }
    // Filled in place: an event is some 500 bytes, and moving it out of the reader and into
    // `add` showed in the profile.
    let mut ev = RawEvent::default();
    if let Ok(end) = fast::event(buf, pos, &mut ev) {
        p.add(&ev, base + pos);
        return Some(end);
    }
    match serde_event(&buf[pos..])? {
        Ok((ev, used)) => {
            p.add(&ev, base + pos);
            Some(pos + used)
        }
        Err(e) => {
            // One malformed event does not spoil the rest: skip it structurally. If even that
            // fails, the text ends inside it.
            let next = json_scan::skip_value(buf, pos)?;
            p.anomalies.push((
                "malformed_event",
                format!(
                    "event at byte {} could not be read ({e}); skipped",
                    base + pos
                ),
            ));
            Some(next)
        }
    }
}
