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
        // `get`: a text cut right after the quote (or a caller's index at the end) is
        // "ended first", never an out-of-range slice.
        let k = j + memchr2(b'"', b'\\', buf.get(j..)?)?;
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

/// [`skip_value`] for an object or array at `i`, 64 bytes at a time: one pass of byte
/// compares makes bitmasks of quotes, brackets and backslashes; a prefix XOR of the quotes
/// marks the bytes inside strings, and only the brackets outside them are counted. Half the
/// events of a `with_stack` trace are skipped whole, and this is several times faster than
/// finding their strings one by one. `None` where `skip_value` should decide instead: a
/// backslash (rare in traces), no bracket at `i`, or the text ending inside the value.
pub(crate) fn skip_container(buf: &[u8], i: usize) -> Option<usize> {
    let open = *buf.get(i)?;
    let close = match open {
        b'{' => b'}',
        b'[' => b']',
        _ => return None,
    };
    let mut depth = 0u32;
    let mut in_string = 0u64;
    let mut pos = i;
    loop {
        let rest = buf.get(pos..)?;
        let (m, whole) = match rest.first_chunk::<64>() {
            Some(block) => (BlockMasks::of(block, open, close), true),
            None if rest.is_empty() => return None,
            None => {
                // Padding with spaces adds no quote or bracket.
                let mut block = [b' '; 64];
                block[..rest.len()].copy_from_slice(rest);
                (BlockMasks::of(&block, open, close), false)
            }
        };
        if m.backslash != 0 {
            return None;
        }
        // Set from an opening quote up to (not including) its closing one; a string running
        // on from the block before flips the whole block.
        let inside = prefix_xor(m.quote) ^ in_string;
        in_string = ((inside as i64) >> 63) as u64;
        let mut brackets = (m.open | m.close) & !inside;
        while brackets != 0 {
            let k = brackets.trailing_zeros();
            if m.open >> k & 1 == 1 {
                depth += 1;
            } else {
                depth -= 1;
                if depth == 0 {
                    return Some(pos + k as usize + 1);
                }
            }
            brackets &= brackets - 1;
        }
        if !whole {
            return None;
        }
        pos += 64;
    }
}

/// Bit `k` set: `x` has an odd number of set bits at positions `0..=k`.
#[inline]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Where one 64-byte block holds quotes, backslashes, and the opening and closing bracket
/// being counted: bit `k` for byte `k`.
#[derive(Debug, PartialEq, Eq)]
struct BlockMasks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl BlockMasks {
    #[inline]
    fn of(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        #[cfg(target_arch = "x86_64")]
        {
            BlockMasks::sse2(b, open, close)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            BlockMasks::portable(b, open, close)
        }
    }

    /// The definition, byte by byte (other targets, and the tests' reference).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn portable(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        let mut m = BlockMasks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (k, &c) in b.iter().enumerate() {
            m.quote |= u64::from(c == b'"') << k;
            m.backslash |= u64::from(c == b'\\') << k;
            m.open |= u64::from(c == open) << k;
            m.close |= u64::from(c == close) << k;
        }
        m
    }

    /// SSE2 is part of every x86_64 CPU, so this needs no runtime detection.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn sse2(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is enabled on every x86_64 target, which is all these intrinsics need;
        // `b` is 64 bytes long, so bytes 16k..16k+16 are in bounds for k < 4, and `loadu` has
        // no alignment requirement.
        unsafe {
            let splat = |c: u8| _mm_set1_epi8(c as i8);
            let (q, bs, o, c) = (splat(b'"'), splat(b'\\'), splat(open), splat(close));
            let mut m = BlockMasks {
                quote: 0,
                backslash: 0,
                open: 0,
                close: 0,
            };
            for k in 0..4 {
                let v = _mm_loadu_si128(b.as_ptr().add(16 * k).cast::<__m128i>());
                let bits = |x: __m128i| u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, x)) as u16);
                m.quote |= bits(q) << (16 * k);
                m.backslash |= bits(bs) << (16 * k);
                m.open |= bits(o) << (16 * k);
                m.close |= bits(c) << (16 * k);
            }
            m
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

/// Text that may still be arriving (a gzip stream inflating on another thread): its whole
/// length is known, its bytes come in order.
pub(crate) trait Arriving: Sync {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// The text so far, once at least `want` bytes of it have arrived (fewer only where it
    /// stopped arriving early: its source failed).
    fn wait_for(&self, want: usize) -> &[u8];
}

impl Arriving for [u8] {
    fn total(&self) -> usize {
        self.len()
    }
    fn wait_for(&self, _want: usize) -> &[u8] {
        self
    }
}

/// Text whose first bytes are had as far as they are asked for (text arriving, or inflated
/// member by member), for finding what comes before a large array.
pub(crate) trait Prefix {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// The text from 0 through at least `want` bytes (fewer where there are no more to have).
    fn prefix(&mut self, want: usize) -> &[u8];
}

/// [`Arriving`] text as a [`Prefix`].
pub(crate) struct Arrived<'a, T: ?Sized>(pub &'a T);

impl<T: Arriving + ?Sized> Prefix for Arrived<'_, T> {
    fn total(&self) -> usize {
        self.0.total()
    }
    fn prefix(&mut self, want: usize) -> &[u8] {
        self.0.wait_for(want)
    }
}

/// Text that arrives only as far as it is asked for: the most a reader can be held back, each
/// piece seeing the text end just past its stretch and margin (tests and the fuzz target
/// `arriving_walk` hold [`walk_array_arriving`] to [`walk_array_parallel`] with it).
pub(crate) struct OnDemand<'a> {
    text: &'a [u8],
    shown: std::sync::Mutex<usize>,
}

impl<'a> OnDemand<'a> {
    /// `text`, none of it shown yet.
    pub(crate) fn new(text: &'a [u8]) -> Self {
        OnDemand {
            text,
            shown: std::sync::Mutex::new(0),
        }
    }
}

impl Arriving for OnDemand<'_> {
    fn total(&self) -> usize {
        self.text.len()
    }
    fn wait_for(&self, want: usize) -> &[u8] {
        let mut n = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        *n = (*n).max(want.min(self.text.len()));
        &self.text[..*n]
    }
}

/// Walks the array whose `[` is at `start` on all threads, in pieces of about `piece_bytes`,
/// with no scan ahead of the work: each piece starts at a guessed element start (a `{` after a
/// `,`) and runs `task(text, from, limit)` until an element starts at or past the next guess. A
/// guess counts only if the piece before it, which started at a true boundary, stopped exactly
/// on it; a wrong guess (the bytes were inside a string) has its piece redone from the true
/// boundary. So the results, in order, are always those of one sequential walk cut at the
/// same places, whatever the number of threads.
pub(crate) fn walk_array_parallel<T: Send>(
    buf: &[u8],
    start: usize,
    piece_bytes: usize,
    task: impl Fn(&[u8], usize, usize) -> (T, Stop) + Sync,
) -> Result<(Vec<T>, ArrayEnd), usize> {
    use rayon::prelude::*;
    let first = match array_first(buf, start)? {
        Ok(first) => first,
        Err(empty) => return Ok((Vec::new(), empty)),
    };
    let span = buf.len().saturating_sub(first);
    let pieces = piece_count(span, piece_bytes);
    let cuts = piece_starts(buf, first, pieces, &mut 0);
    let limits = limits_of(&cuts);
    let results: Vec<Option<(T, Stop)>> = cuts
        .par_iter()
        .zip(limits.par_iter())
        // A piece a task, as for windows (`walk_array_windows`).
        .with_max_len(1)
        .map(|(&from, &limit)| Some(task(buf, from, limit)))
        .collect();
    verify_pieces(buf, &cuts, &limits, results, &task)
}

/// How many pieces of about `piece_bytes` the `span` bytes of array text are cut into.
fn piece_count(span: usize, piece_bytes: usize) -> usize {
    (span / piece_bytes.max(1)).clamp(1, 1 << 20)
}

/// Each piece's limit: the next piece's start, and no limit for the last.
fn limits_of(cuts: &[usize]) -> Vec<usize> {
    cuts.iter()
        .skip(1)
        .copied()
        .chain(std::iter::once(usize::MAX))
        .collect()
}

/// The pieces' results in order, each piece after a wrong guess redone from the true boundary
/// the piece before stopped on.
fn verify_pieces<T>(
    buf: &[u8],
    cuts: &[usize],
    limits: &[usize],
    mut results: Vec<Option<(T, Stop)>>,
    task: &impl Fn(&[u8], usize, usize) -> (T, Stop),
) -> Result<(Vec<T>, ArrayEnd), usize> {
    let mut out = Vec::with_capacity(results.len());
    let mut k = 0;
    loop {
        let (t, stop) = results[k].take().expect("each piece is taken once");
        out.push(t);
        if let Some(end) = stop.array_end()? {
            return Ok((out, end));
        }
        k += 1;
        let next = stop.at();
        if cuts[k] != next {
            results[k] = Some(task(buf, next, limits[k]));
        }
    }
}

/// The first element's start in the array whose `[` is at `start`, or how an empty array ends.
#[allow(clippy::type_complexity)]
fn array_first(buf: &[u8], start: usize) -> Result<Result<usize, ArrayEnd>, usize> {
    if buf.get(start) != Some(&b'[') {
        return Err(start);
    }
    let first = skip_ws(buf, start + 1);
    if buf.get(first) == Some(&b']') {
        return Ok(Err(ArrayEnd {
            end: Some(first + 1),
            cut_at: None,
        }));
    }
    Ok(Ok(first))
}

/// Text a piece reads past the first element start at or after its limit, at most: the
/// element reader looks some 192 bytes ahead of an element's start (`skippable`).
const READ_AHEAD: usize = 4 << 10;

/// [`walk_array_parallel`] over text that is still arriving: each piece is handed to a thread
/// as soon as its stretch (and a margin) has arrived, with the text so far. A piece whose walk
/// reached too near the end of what it was given (a long element) is redone over the whole
/// text once it is in. The pieces and guesses are those of the whole text, so the results are
/// the same as [`walk_array_parallel`]'s over it.
pub(crate) fn walk_array_arriving<T: Send>(
    text: &(impl Arriving + ?Sized),
    start: usize,
    piece_bytes: usize,
    task: impl Fn(&[u8], usize, usize) -> (T, Stop) + Sync,
) -> Result<(Vec<T>, ArrayEnd), usize> {
    const MARGIN: usize = 64 << 10;
    let total = text.total();
    let head = text.wait_for(start + MARGIN);
    let first = match array_first(head, start)? {
        Ok(first) if first < head.len() => first,
        // An empty array, or whitespace up to the margin: the whole text's walk.
        _ => return walk_array_parallel(text.wait_for(total), start, piece_bytes, task),
    };
    let span = total.saturating_sub(first);
    let pieces = piece_count(span, piece_bytes);
    let slots: Vec<std::sync::Mutex<Option<(T, Stop, usize)>>> =
        (0..pieces).map(|_| std::sync::Mutex::new(None)).collect();
    let mut cuts = vec![first];
    rayon::scope(|s| {
        for k in 1..=pieces {
            let (limit, view) = if k < pieces {
                let window_end = (first + span / pieces * (k + 1)).min(total);
                let view = text.wait_for(window_end + MARGIN);
                if view.len() < (window_end + MARGIN).min(total) {
                    return; // It stopped arriving: the whole walk below.
                }
                let prev = *cuts.last().expect("non-empty");
                match piece_start(view, (first, span, pieces), k, prev, &mut 0) {
                    Some(g) => (g, view),
                    None => continue,
                }
            } else {
                (usize::MAX, text.wait_for(total))
            };
            let (from, slot) = (*cuts.last().expect("non-empty"), &slots[cuts.len() - 1]);
            if limit != usize::MAX {
                cuts.push(limit);
            }
            let task = &task;
            s.spawn(move |_| {
                let (t, stop) = task(view, from, limit);
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some((t, stop, view.len()));
            });
        }
    });
    let buf = text.wait_for(total);
    if buf.len() < total {
        return walk_array_parallel(buf, start, piece_bytes, task);
    }
    let limits = limits_of(&cuts);
    let results: Vec<Option<(T, Stop)>> = slots
        .into_iter()
        .take(cuts.len())
        .zip(cuts.iter().zip(&limits))
        .map(|(slot, (&from, &limit))| {
            let done = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            Some(match done {
                // Given the whole text, or stopped well before the end of what it was given.
                Some((t, stop, seen))
                    if seen == total || matches!(stop, Stop::Next(b) if b + READ_AHEAD <= seen) =>
                {
                    (t, stop)
                }
                _ => task(buf, from, limit),
            })
        })
        .collect();
    verify_pieces(buf, &cuts, &limits, results, &task)
}

/// Text held a window at a time (a file capture wrote, in gzip members that say their sizes):
/// any stretch of it can be had, copied into a buffer, but never the whole at once.
pub(crate) trait Windows: Sync {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// Where each window starts, ascending, the first at 0.
    fn starts(&self) -> &[usize];
    /// The text from the start of the window holding `from` through at least `to` (or the
    /// end) into `buf`, which keeps its length from call to call (its pages are reused, never
    /// zeroed again): that stretch's start and length, or `None` where it cannot be had (a
    /// window that does not inflate).
    fn fill(&self, from: usize, to: usize, buf: &mut Vec<u8>) -> Option<(usize, usize)>;
}

/// A text in memory held as [`Windows`] of a given size (tests and the fuzz target
/// `arriving_walk` hold [`walk_array_windows`] to [`walk_array_parallel`] with it).
pub(crate) struct InWindows<'a> {
    text: &'a [u8],
    starts: Vec<usize>,
}

impl<'a> InWindows<'a> {
    /// `text` in windows of `size` bytes (the last shorter).
    pub(crate) fn new(text: &'a [u8], size: usize) -> Self {
        let starts = (0..text.len().max(1)).step_by(size.max(1)).collect();
        InWindows { text, starts }
    }
}

impl Windows for InWindows<'_> {
    fn total(&self) -> usize {
        self.text.len()
    }
    fn starts(&self) -> &[usize] {
        &self.starts
    }
    fn fill(&self, from: usize, to: usize, buf: &mut Vec<u8>) -> Option<(usize, usize)> {
        let i = self
            .starts
            .partition_point(|&s| s <= from)
            .saturating_sub(1);
        let base = self.starts[i];
        let own = self.starts.get(i + 1).copied().unwrap_or(self.text.len());
        let end = to.min(self.text.len()).max(own);
        if buf.len() < end - base {
            buf.resize(end - base, 0);
        }
        buf[..end - base].copy_from_slice(&self.text[base..end]);
        Some((base, end - base))
    }
}

/// How far past its window a piece of [`walk_array_windows`] is given text: an element that
/// starts in the window and ends within this is read with no second fill.
pub(crate) const WINDOW_MARGIN: usize = 64 << 10;

/// The least text a window of [`walk_array_windows`] holds: members smaller than this are
/// read together. One window a member, a file of 21,000 members of 15 bytes each had each
/// window fill its margin from thousands of members (quadratic: 80 s in the dev build, 0.13 s
/// after; docs/robustness.md has the release build's figures);
/// at 16 margins a window, the margins add at most a sixteenth to what is inflated.
pub(crate) const MIN_WINDOW: usize = 16 * WINDOW_MARGIN;

/// Window starts from member starts (sorted): each member start that is at least `min` past
/// the window before it begins a window; the first member's always does.
pub(crate) fn windows_of(starts: &[usize], min: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for &s in starts {
        match out.last() {
            Some(&w) if s < w.saturating_add(min) => {}
            _ => out.push(s),
        }
    }
    out
}

/// [`walk_array_arriving`] over text held a window at a time: one piece per window, from its
/// first guessed element start until an element starts in a later window, each read from a
/// buffer of its thread's own (so a trace's text is never held whole, and its pages are not
/// faulted in afresh for each window). `head` is the text from 0 through at least the
/// array's first element; `task(view, base, from, limit)` gets a stretch of the text starting
/// at `base` and offsets into it. A piece whose guess was wrong, or whose walk came within
/// [`READ_AHEAD`] of the end of its stretch, is redone from the true boundary over a longer
/// one. The results, in order, are those of one sequential walk cut where each window ends,
/// whatever the number of threads; the last item is where the last piece started (all a
/// reader of the text after the array needs to keep of it). `Ok(None)` where a window could
/// not be had, or the array's first element lies past `head`.
#[allow(clippy::type_complexity)]
pub(crate) fn walk_array_windows<T: Send>(
    text: &(impl Windows + ?Sized),
    head: &[u8],
    start: usize,
    task: impl Fn(&[u8], usize, usize, usize) -> (T, Stop) + Sync,
) -> Result<Option<(Vec<T>, ArrayEnd, usize)>, usize> {
    use rayon::prelude::*;
    let total = text.total();
    let first = match array_first(head, start)? {
        Ok(first) if first < head.len() || head.len() >= total => first,
        Ok(_) => return Ok(None),
        Err(empty) => return Ok(Some((Vec::new(), empty, start))),
    };
    let starts = &windows_of(text.starts(), MIN_WINDOW);
    let limit_of = |j: usize| starts.get(j + 1).copied().unwrap_or(usize::MAX);
    let reach = |limit: usize| limit.saturating_add(WINDOW_MARGIN).min(total);
    let j0 = starts.partition_point(|&s| s <= first).saturating_sub(1);
    // One buffer a thread, reused for every window it reads.
    let bufs: Vec<std::sync::Mutex<Vec<u8>>> = (0..rayon::current_num_threads().max(1))
        .map(|_| std::sync::Mutex::new(Vec::new()))
        .collect();
    let mut guessed: Vec<Option<(usize, T, Stop, usize)>> = (j0..starts.len())
        .into_par_iter()
        // A window a task: rayon otherwise cuts the range into a few runs of windows read
        // one after another, and a thread done with its runs waits for the last one's.
        .with_max_len(1)
        .map(|j| {
            let slot = &bufs[rayon::current_thread_index().unwrap_or(0) % bufs.len()];
            let mut buf = slot.lock().unwrap_or_else(|e| e.into_inner());
            let limit = limit_of(j);
            // The window is inflated once, for its guess and its piece.
            let (base, len) = text.fill(starts[j].max(first), reach(limit), &mut buf)?;
            let from = (j == j0).then_some(first);
            window_piece(&buf[..len], base, from, limit, total, &task)
        })
        .collect();
    let mut out = Vec::with_capacity(guessed.len());
    let mut buf = Vec::new();
    let (mut at, mut j) = (first, j0);
    loop {
        while j + 1 < starts.len() && starts[j + 1] <= at {
            j += 1;
        }
        let limit = limit_of(j);
        let done = match guessed.get_mut(j - j0).and_then(Option::take) {
            Some((from, t, stop, seen)) if from == at && trusted(stop, seen, total) => (t, stop),
            _ => {
                // Redone from the true boundary, over twice the stretch each time it comes
                // too near the end of what it was given.
                let mut to = reach(limit).max(at);
                loop {
                    let Some((base, len)) = text.fill(at, to, &mut buf) else {
                        return Ok(None);
                    };
                    let (t, stop, seen) = run_piece(&task, &buf[..len], base, at, limit);
                    if trusted(stop, seen, total) {
                        break (t, stop);
                    }
                    to = longer(at, to, total);
                }
            }
        };
        let (t, stop) = done;
        out.push(t);
        if let Some(end) = stop.array_end()? {
            return Ok(Some((out, end, at)));
        }
        at = stop.at();
    }
}

/// The piece over `view` (the text from `base`: a window's own bytes and its margin) whose
/// stretch ends at `limit`: from `first` (the array's first element, in the window holding
/// it) or else the window's first guessed element start, until an element starts at or past
/// `limit`. Its start, result and stop (in the text's offsets) and how far its view reached;
/// `None` where the window has no guess.
fn window_piece<T>(
    view: &[u8],
    base: usize,
    first: Option<usize>,
    limit: usize,
    total: usize,
    task: &impl Fn(&[u8], usize, usize, usize) -> (T, Stop),
) -> Option<(usize, T, Stop, usize)> {
    let from = match first {
        Some(f) => f,
        None => {
            // The window's first `{` after a `,`, both in this window.
            let end = limit.min(base + view.len()).min(total) - base;
            base + window_guess(view, 0, end)?
        }
    };
    let (t, stop, seen) = run_piece(task, view, base, from, limit);
    Some((from, t, stop, seen))
}

/// `task` over `view` (the text from `base`) from `from` until an element starts at or past
/// `limit`: its result, where it stopped (in the text's offsets) and how far its view reached.
fn run_piece<T>(
    task: &impl Fn(&[u8], usize, usize, usize) -> (T, Stop),
    view: &[u8],
    base: usize,
    from: usize,
    limit: usize,
) -> (T, Stop, usize) {
    let (t, stop) = task(view, base, from - base, limit.saturating_sub(base));
    let stop = match stop {
        Stop::Next(i) => Stop::Next(base + i),
        Stop::End(i) => Stop::End(base + i),
        Stop::Cut(i) => Stop::Cut(base + i),
        Stop::Bad(i) => Stop::Bad(base + i),
    };
    (t, stop, base + view.len())
}

/// The stretch from `at` a piece redone over the text through `to` is given next, having come
/// too near its end: twice as long (at least twice the margin), up to the text's end.
fn longer(at: usize, to: usize, total: usize) -> usize {
    at + (to - at)
        .max(WINDOW_MARGIN)
        .saturating_mul(2)
        .min(total - at)
}

/// Whether a piece's stop can be taken: it was given the whole text's rest, or stopped well
/// before the end of what it was given (an element that runs on past its view reads as cut).
fn trusted(stop: Stop, seen: usize, total: usize) -> bool {
    seen >= total || matches!(stop, Stop::Next(b) if b + READ_AHEAD <= seen)
}

/// The first `{` after a `,` (white space between) in `view[from..end]`, the comma read in
/// `view` too; `None` where the stretch has none.
fn window_guess(view: &[u8], from: usize, end: usize) -> Option<usize> {
    let mut j = from;
    while let Some(r) = view.get(j..end) {
        let at = j + memchr::memchr(b'{', r)?;
        let before = view[from..at]
            .iter()
            .rposition(|c| !matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
        if before.is_some_and(|b| view[from + b] == b',') {
            return Some(at);
        }
        j = at + 1;
    }
    None
}

/// Guessed element starts for `pieces` pieces of the array text from `first` (an element
/// start) to the end: in each piece's stretch, the first `{` after a `,` (whitespace between).
/// `scanned` counts the bytes looked at.
fn piece_starts(buf: &[u8], first: usize, pieces: usize, scanned: &mut usize) -> Vec<usize> {
    let mut cuts = vec![first];
    let span = buf.len().saturating_sub(first);
    for k in 1..pieces {
        let prev = *cuts.last().expect("non-empty");
        if let Some(at) = piece_start(buf, (first, span, pieces), k, prev, scanned) {
            cuts.push(at);
        }
    }
    cuts
}

/// The guessed start of piece `k` of `pieces` over `span` bytes of array text from `first`
/// (see [`piece_starts`]; `prev` is the piece before's), reading `buf` up to the next piece's
/// target only (the text arrived so far will do); `None` where its stretch has none.
fn piece_start(
    buf: &[u8],
    (first, span, pieces): (usize, usize, usize),
    k: usize,
    prev: usize,
    scanned: &mut usize,
) -> Option<usize> {
    let target = first + span / pieces * k;
    // A guess is looked for up to the next piece's target only: searching to the end of
    // the buffer made each piece rescan a long run with no `{` (trailing padding), which
    // was quadratic in its length. With none in its stretch, a piece has no
    // start of its own and the one before runs on through it.
    let window_end = (first + span / pieces * (k + 1)).min(buf.len());
    let mut j = target.max(prev + 1);
    while let Some(r) = buf.get(j..window_end) {
        let Some(o) = memchr::memchr(b'{', r) else {
            *scanned += r.len();
            break;
        };
        *scanned += o + 1;
        let at = j + o;
        let before = buf[..at]
            .iter()
            .rposition(|c| !matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
        *scanned += at - before.unwrap_or(0);
        if before.is_some_and(|b| buf[b] == b',') {
            return Some(at);
        }
        j = at + 1;
    }
    None
}

/// A walk task that keeps where each element of its piece starts and ends (the scanner's
/// tests and the fuzz target `arriving_walk` compare walks with it).
pub(crate) fn element_spans(text: &[u8], from: usize, limit: usize) -> (Vec<(usize, usize)>, Stop) {
    let mut spans = Vec::new();
    let stop = walk_elements(text, from, limit, |s| {
        let e = skip_value(text, s)?;
        spans.push((s, e));
        Some(e)
    });
    (spans, stop)
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
