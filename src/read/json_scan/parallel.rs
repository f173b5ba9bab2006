//! Walking an array in pieces on all threads, over text whole in memory or arriving.

use super::*;

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
pub(super) fn piece_count(span: usize, piece_bytes: usize) -> usize {
    (span / piece_bytes.max(1)).clamp(1, 1 << 20)
}

/// Each piece's limit: the next piece's start, and no limit for the last.
pub(super) fn limits_of(cuts: &[usize]) -> Vec<usize> {
    cuts.iter()
        .skip(1)
        .copied()
        .chain(std::iter::once(usize::MAX))
        .collect()
}

/// The pieces' results in order, each piece after a wrong guess redone from the true boundary
/// the piece before stopped on.
pub(super) fn verify_pieces<T>(
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
pub(super) fn array_first(buf: &[u8], start: usize) -> Result<Result<usize, ArrayEnd>, usize> {
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
pub(super) const READ_AHEAD: usize = 4 << 10;

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
