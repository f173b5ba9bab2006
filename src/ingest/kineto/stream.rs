//! A single gzip stream parsed as it inflates, and resumed from where the inflate stopped.

use super::*;

/// A single-stream gzip file (torch's `.json.gz`) parsed a window at a time as it inflates
/// ([`source::StreamText`]), its text never held whole: its tables are those of the same text
/// read whole. `None` where the stream does not inflate whole and checked, or where what is
/// read after the events array lies outside the text kept of its end
/// ([`source::KEEP_TAIL`]): the caller reads the file whole.
pub(super) fn from_stream(
    path: &Path,
    mut text: source::StreamText,
    file_len: u64,
    diag: &mut Diagnostics,
) -> Result<Option<KinetoTrace>, Error> {
    let total = json_scan::Prefix::total(&text);
    let found = find_events(path, &mut text);
    let walked = found.as_ref().ok().map(|&arr_start| {
        let _ = json_scan::Prefix::prefix(&mut text, arr_start + (64 << 10));
        text.walk(arr_start, parse_piece)
    });
    let head = text.take_head();
    // Whatever the walk found, the stream is read to its end and checked first: a stream
    // that is not whole is the whole reading's to say.
    let source::Ended::Whole {
        blocks,
        tail_at,
        text: mut kept_text,
    } = source::Inflating::finish(text)
    else {
        return Ok(None);
    };
    let arr_start = found?;
    let walked = walked.expect("walked where found");
    let Some((partials, array, last_from)) = walked.map_err(|off| bad_array(path, off))? else {
        return Ok(None);
    };
    // The text `finish` reads: the header before the array (in the head) and everything from
    // the last piece and the insertion point on (in the tail).
    let head_len = head.len();
    let kept = |from: usize| from >= tail_at || tail_at <= head_len;
    let back_from = match array.end {
        Some(e) => e.saturating_sub(1),
        None => array.cut_at.unwrap_or(total),
    };
    if head.len() < arr_start.min(total) || head.len() > total || !kept(last_from.min(back_from)) {
        return Ok(None);
    }
    // Reading back from `back_from` over white space to the insertion point must end inside
    // what is kept.
    let blank = |c: &u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t');
    if tail_at > head.len() && kept_text[tail_at..back_from.max(tail_at)].iter().all(blank) {
        return Ok(None);
    }
    kept_text[..head.len()].copy_from_slice(&head);
    drop(head);
    let Ok(bytes) = kept_text.make_read_only() else {
        return Ok(None);
    };
    let bytes = source::Bytes::Inflated(bytes);
    let blocks: Vec<source::BlockStart> = blocks.into_iter().filter(|b| kept(b.text_at)).collect();
    let mut t = finish(
        path,
        bytes,
        (arr_start, partials, array),
        Some((&blocks, file_len)),
        false,
        diag,
    )?;
    t.gzipped = true;
    Ok(Some(t))
}

/// The most text after a block start that the annotated trace's splice keeps (past it the
/// whole text is compressed again, as before).
pub(super) const RESUME_TAIL_MAX: usize = 32 << 20;

/// What the annotated trace needs to splice into this single-stream gzip input (`blocks`
/// its deflate blocks' starts, `file_len` its size) given where its events go: the last block
/// start at or before that point, and the text after it.
pub(super) fn gzip_resume(
    path: &Path,
    text: &[u8],
    (blocks, file_len): (&[source::BlockStart], u64),
    span: EventsSpan,
) -> Option<GzipResume> {
    let b = blocks.iter().rev().find(|b| b.text_at <= span.insert_at)?;
    let tail = text.get(b.text_at..)?;
    if !span.complete || tail.len() > RESUME_TAIL_MAX {
        return None;
    }
    // The trailer read now, so a file rewritten before the annotated trace is written is seen.
    let raw = source::read_raw(path).ok()?;
    let trailer: [u8; 8] = raw.get(raw.len().checked_sub(8)?..)?.try_into().ok()?;
    // A trailer followed by zero padding is not where the file ends: not spliced.
    if raw.len() as u64 != file_len || trailer[4..] != (text.len() as u32).to_le_bytes() {
        return None;
    }
    Some(GzipResume {
        file_len,
        trailer,
        bit: b.bit,
        text_at: b.text_at,
        crc: b.crc,
        tail: tail.to_vec(),
    })
}
