//! Structural scanning of JSON text without building values: find a top-level key, skip a
//! value, and cut a large array into chunks at element boundaries so the elements can be
//! parsed on several threads.
//!
//! The scanner only needs to know where strings start and end (so braces inside names do not
//! count) and how deep braces and brackets nest; `memchr` finds those bytes, which is what
//! makes the split cheap next to the parse.

use memchr::{memchr2, memchr3};

mod in_order;
pub(crate) use in_order::{InMemory, InOrder, Msg, Producer, Window};
mod arriving;
mod parallel;
mod skip;
mod windows;
pub(crate) use self::skip::{skip_container, skip_string, skip_value, skip_ws};

pub(crate) use self::arriving::{Arrived, Arriving, OnDemand, Prefix};
use self::parallel::{array_first, READ_AHEAD};
pub(crate) use self::parallel::{walk_array_arriving, walk_array_parallel};
pub(crate) use self::windows::{
    element_spans, walk_array_windows, InWindows, Windows, WINDOW_MARGIN,
};
use self::windows::{longer, piece_start, piece_starts, run_piece, trusted, window_piece};

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

/// What follows a top-level member's value ending at `after` (its index just past it): whether
/// the object names `key` again, and where non-whitespace text follows the object's end.
/// `None` when the text is not well-formed there (the header reader says so).
pub(crate) fn rest_of_object(
    buf: &[u8],
    mut i: usize,
    key: &[u8],
) -> Option<(bool, Option<usize>)> {
    let mut again = false;
    loop {
        i = skip_ws(buf, i);
        match buf.get(i) {
            Some(b',') => i = skip_ws(buf, i + 1),
            Some(b'}') => {
                let end = skip_ws(buf, i + 1);
                return Some((again, (end < buf.len()).then_some(end)));
            }
            _ => return None,
        }
        // A key must be a string; a text that ends after the comma is not well-formed.
        if buf.get(i) != Some(&b'"') {
            return None;
        }
        let kend = skip_string(buf, i)?;
        again |= &buf[i + 1..kend - 1] == key;
        i = skip_ws(buf, kend);
        if buf.get(i) != Some(&b':') {
            return None;
        }
        i = skip_value(buf, skip_ws(buf, i + 1))?;
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
    let first = skip_ws(buf, start + 1);
    if buf.get(first) == Some(&b']') {
        out.end = Some(first + 1);
        return Ok(out);
    }
    let mut chunk_start: Option<usize> = None;
    let mut last_end = first;
    let stop = walk_elements(buf, first, usize::MAX, |s| {
        let e = skip_value(buf, s)?;
        out.elements += 1;
        let cs = *chunk_start.get_or_insert(s);
        last_end = e;
        if e - cs >= chunk_bytes {
            out.chunks.push((cs, e));
            chunk_start = None;
        }
        Some(e)
    });
    if let Some(cs) = chunk_start {
        out.chunks.push((cs, last_end));
    }
    match stop {
        Stop::End(e) => out.end = Some(e),
        Stop::Cut(c) => out.cut_at = Some(c),
        Stop::Bad(b) => return Err(b),
        // No element starts at or past usize::MAX.
        Stop::Next(_) => {}
    }
    Ok(out)
}

/// How one walk over array elements ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// At the start of an element at or past the walk's limit.
    Next(usize),
    /// Past the closing bracket.
    End(usize),
    /// The text ended inside the element starting here.
    Cut(usize),
    /// Not a well-formed array at this byte.
    Bad(usize),
}

/// Walks the elements of an array from `from` (an element start) until one starts at or past
/// `limit`. `elem(start)` handles the element starting at `start` and returns the index just
/// past it, or `None` when the text ends inside it.
pub(crate) fn walk_elements(
    buf: &[u8],
    from: usize,
    limit: usize,
    mut elem: impl FnMut(usize) -> Option<usize>,
) -> Stop {
    let mut i = from;
    loop {
        let elem_start = skip_ws(buf, i);
        if elem_start >= limit {
            return Stop::Next(elem_start);
        }
        let Some(elem_end) = elem(elem_start) else {
            return Stop::Cut(elem_start);
        };
        i = skip_ws(buf, elem_end);
        match buf.get(i) {
            Some(b',') => i += 1,
            Some(b']') => return Stop::End(i + 1),
            None => return Stop::Cut(i),
            Some(_) => return Stop::Bad(i),
        }
    }
}

impl Stop {
    /// How the array ended where a walk stopped past its end or inside an element, `None`
    /// where it stopped at the next element (the walk goes on), `Err` where it is no array.
    pub(crate) fn array_end(self) -> Result<Option<ArrayEnd>, usize> {
        match self {
            Stop::Next(_) => Ok(None),
            Stop::End(e) => Ok(Some(ArrayEnd {
                end: Some(e),
                cut_at: None,
            })),
            Stop::Cut(c) => Ok(Some(ArrayEnd {
                end: None,
                cut_at: Some(c),
            })),
            Stop::Bad(b) => Err(b),
        }
    }

    /// Where the walk stopped.
    pub(crate) fn at(self) -> usize {
        match self {
            Stop::Next(i) | Stop::End(i) | Stop::Cut(i) | Stop::Bad(i) => i,
        }
    }
}

/// How a whole array walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ArrayEnd {
    /// Index just past the closing bracket, or `None` if the text ended inside the array.
    pub end: Option<usize>,
    /// When the array is incomplete: the start of the first element that could not be read
    /// whole.
    pub cut_at: Option<usize>,
}

/// The array whose `[` is at `start` cut into chunks of whole elements of about `chunk_bytes`,
/// with its end, by the parallel walk.
#[cfg(test)]
fn chunk_array_parallel(
    buf: &[u8],
    start: usize,
    chunk_bytes: usize,
) -> Result<ArrayChunks, usize> {
    let (parts, end) = walk_array_parallel(buf, start, chunk_bytes, element_spans)?;
    let spans: Vec<(usize, usize)> = parts.into_iter().flatten().collect();
    Ok(ArrayChunks {
        elements: spans.len(),
        chunks: spans,
        end: end.end,
        cut_at: end.cut_at,
    })
}

#[cfg(test)]
mod tests;
