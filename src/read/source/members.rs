//! A file capture wrote (gzip members that say their sizes, [`steptrace_formats::gzip_members`])
//! read a member at a time: the parse inflates each member into a buffer of its thread's own
//! and reads it there, so the text is never held whole. Held whole, a 255 MB trace's text took
//! 255 MB of fresh pages, whose faults were 0.1-0.3 s of kernel time on the 2-core machine; a
//! buffer reused for each member is faulted in once.
//!
//! What is read of the text outside the events array (the header before it, the members after
//! it) is kept at its own offsets in a mapping of the whole text's length ([`MemberText::into_bytes`]):
//! pages never written there take no memory, and read as zeros. Only the stretches filled by
//! [`MemberText::prefix`] and [`MemberText::fill_from`] may be read from it.

use steptrace_formats::gzip_members::Member;

use super::{inflate_member, Bytes};

/// A capture-form gzip file, its members inflated on demand.
pub struct MemberText {
    raw: Bytes,
    members: Vec<Member>,
    /// Where each member's text starts (the first at 0).
    starts: Vec<usize>,
    total: usize,
    /// The whole text's length, written only where asked.
    sparse: memmap2::MmapMut,
    /// Members inflated into `sparse`: the first `head` of them, and every one from `tail`.
    head: usize,
    tail: usize,
    /// Set once a member did not inflate into the mapping.
    failed: bool,
}

impl std::fmt::Debug for MemberText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberText")
            .field("members", &self.members.len())
            .field("total", &self.total)
            .finish()
    }
}

impl MemberText {
    /// `raw`'s members (a whole file: none cut), or `raw` back where they cannot be read so
    /// (no text, or no mapping for it).
    pub(super) fn new(raw: Bytes, members: Vec<Member>) -> Result<MemberText, Bytes> {
        let mut starts = Vec::with_capacity(members.len());
        let mut total = 0usize;
        for m in &members {
            starts.push(total);
            total = total.saturating_add(m.inflated);
        }
        if total == 0 {
            return Err(raw);
        }
        // No swap reserved: most of the mapping is never written.
        let Ok(sparse) = memmap2::MmapOptions::new()
            .len(total)
            .no_reserve_swap()
            .map_anon()
        else {
            return Err(raw);
        };
        let n = members.len();
        Ok(MemberText {
            raw,
            members,
            starts,
            total,
            sparse,
            head: 0,
            tail: n,
            failed: false,
        })
    }

    /// The whole text's length.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The index of the member holding text offset `at` (the last for the end).
    fn member_at(&self, at: usize) -> usize {
        self.starts.partition_point(|&s| s <= at).saturating_sub(1)
    }

    /// Inflates member `i` into its place in `sparse`.
    fn inflate_into_sparse(&mut self, i: usize) -> Option<()> {
        let (s, m) = (self.starts[i], &self.members[i]);
        let r = inflate_member(&self.raw, m, &mut self.sparse[s..s + m.inflated]).ok();
        self.failed |= r.is_none();
        r
    }

    /// Whether a member did not inflate into the mapping (what was read of it is not the text).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The text from 0 through at least `want` (or the whole), inflated into the mapping;
    /// `None` where a member does not inflate.
    pub fn prefix(&mut self, want: usize) -> Option<&[u8]> {
        while self.head < self.members.len() && self.starts[self.head] < want.min(self.total) {
            if self.head < self.tail {
                self.inflate_into_sparse(self.head)?;
            }
            self.head += 1;
        }
        Some(self.head())
    }

    /// The text [`MemberText::prefix`] has filled, from 0.
    pub fn head(&self) -> &[u8] {
        let end = self.starts.get(self.head).copied().unwrap_or(self.total);
        &self.sparse[..end]
    }

    /// Inflates into the mapping every member from the one holding `from` to the last (what
    /// is read after the events array); `None` where one does not inflate.
    pub fn fill_from(&mut self, from: usize) -> Option<()> {
        let first = self.member_at(from);
        for i in (first..self.tail).rev() {
            if i >= self.head {
                self.inflate_into_sparse(i)?;
            }
            self.tail = i;
        }
        Some(())
    }

    /// Inflates into the mapping the members before those [`MemberText::fill_from`] filled
    /// while the text from their start up to `limit` is all white space: reading back from
    /// `limit` to the last byte that is not (where the annotated trace's events go: after
    /// the comma before an event the text was cut inside) then stays in what is filled.
    /// `None` where a member does not inflate.
    pub fn fill_back_over_ws(&mut self, limit: usize) -> Option<()> {
        loop {
            let start = self.starts.get(self.tail).copied().unwrap_or(self.total);
            let end = limit.min(self.total);
            let blank = self.sparse[start.min(end)..end]
                .iter()
                .rev()
                .all(|c| matches!(c, b' ' | b'\n' | b'\r' | b'\t'));
            if !blank || self.tail == 0 || self.tail <= self.head {
                return Some(());
            }
            self.inflate_into_sparse(self.tail - 1)?;
            self.tail -= 1;
        }
    }

    /// The mapping, read-only: the text where [`MemberText::prefix`] and
    /// [`MemberText::fill_from`] filled it, zeros elsewhere.
    pub fn into_bytes(self) -> Option<Bytes> {
        self.sparse.make_read_only().ok().map(Bytes::Inflated)
    }
}

impl crate::read::json_scan::Windows for MemberText {
    fn total(&self) -> usize {
        self.total
    }

    fn starts(&self) -> &[usize] {
        &self.starts
    }

    fn fill(&self, from: usize, to: usize, buf: &mut Vec<u8>) -> Option<(usize, usize)> {
        let first = self.member_at(from);
        let base = self.starts[first];
        let to = to.clamp(from, self.total);
        let mut len = 0;
        for i in first..self.members.len() {
            let s = self.starts[i];
            if i > first && s >= to {
                break;
            }
            let m = &self.members[i];
            let need = len + m.inflated;
            if buf.len() < need {
                buf.resize(need, 0);
            }
            let part = &mut buf[len..need];
            if i < self.head || i >= self.tail {
                // Already inflated into the mapping (the header's members, read first):
                // copied, not inflated again.
                let n = if s + m.inflated <= to || i == first {
                    m.inflated
                } else {
                    to - s
                };
                part[..n].copy_from_slice(&self.sparse[s..s + n]);
                len += n;
            } else if s + m.inflated <= to || i == first {
                // Whole (every window's own member is read whole, its CRC checked).
                inflate_member(&self.raw, m, part).ok()?;
                len = need;
            } else {
                // Only the start of the member the stretch ends in.
                let want = to - s;
                if !inflate_start(m.deflate(&self.raw), &mut part[..want]) {
                    return None;
                }
                len += want;
            }
        }
        Some((base, len))
    }
}

/// The first `out.len()` bytes of a raw deflate stream (a member's start, for a stretch that
/// ends inside it); whether they inflated. Checked later when the member is read whole.
fn inflate_start(deflate: &[u8], out: &mut [u8]) -> bool {
    let mut d = flate2::Decompress::new(false);
    let mut filled = 0;
    while filled < out.len() {
        let before = (d.total_in() as usize, d.total_out() as usize);
        let Ok(status) = d.decompress(
            &deflate[before.0..],
            &mut out[filled..],
            flate2::FlushDecompress::None,
        ) else {
            return false;
        };
        filled = d.total_out() as usize;
        if status == flate2::Status::StreamEnd || (d.total_in() as usize, filled) == before {
            break;
        }
    }
    filled == out.len()
}

impl crate::read::json_scan::Prefix for MemberText {
    fn total(&self) -> usize {
        self.total
    }
    /// Where a member does not inflate, the text before it (the walk then finds no array
    /// and the caller reads the file whole, which says what is wrong).
    fn prefix(&mut self, want: usize) -> &[u8] {
        let _ = MemberText::prefix(self, want);
        self.head()
    }
}
