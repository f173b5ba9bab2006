//! Walking an array in windows of a text that arrives in order (a gzip stream inflating): each window's pieces parsed on all threads, the cuts checked where they met.

use super::*;

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
pub(super) fn window_piece<T>(
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
pub(super) fn run_piece<T>(
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
pub(super) fn longer(at: usize, to: usize, total: usize) -> usize {
    at + (to - at)
        .max(WINDOW_MARGIN)
        .saturating_mul(2)
        .min(total - at)
}

/// Whether a piece's stop can be taken: it was given the whole text's rest, or stopped well
/// before the end of what it was given (an element that runs on past its view reads as cut).
pub(super) fn trusted(stop: Stop, seen: usize, total: usize) -> bool {
    seen >= total || matches!(stop, Stop::Next(b) if b + READ_AHEAD <= seen)
}

/// The first `{` after a `,` (white space between) in `view[from..end]`, the comma read in
/// `view` too; `None` where the stretch has none.
pub(super) fn window_guess(view: &[u8], from: usize, end: usize) -> Option<usize> {
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
pub(super) fn piece_starts(
    buf: &[u8],
    first: usize,
    pieces: usize,
    scanned: &mut usize,
) -> Vec<usize> {
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
pub(super) fn piece_start(
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
