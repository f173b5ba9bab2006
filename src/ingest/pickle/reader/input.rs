//! The pickle's bytes as they stream in: a window over the source, refilled as opcodes are
//! read, so that a snapshot of many GB is read in a few MB (nothing keeps a span of the input:
//! the texts a pickle holds are copied out as they are read).

use std::io::{self, Read};

use super::super::PickleError;
use super::ahead::{Chunks, HEAD};

/// The window's starting size; it grows only for a single opcode argument larger than it.
const WINDOW: usize = 1 << 20;

/// The largest single opcode argument (a string or bytes object) read: a snapshot's longest
/// texts are file names and frame names. Past it the pickle is refused, so that a gzip stream
/// of zeros behind a claimed length of terabytes is not inflated into memory.
pub(in crate::ingest::pickle) const MAX_ARGUMENT: usize = 1 << 30;

/// Where the bytes come from: a reader, or the thread reading ahead.
enum Src<'r> {
    Read(Box<dyn Read + 'r>),
    Ahead(Chunks),
}

pub(in crate::ingest::pickle) struct Input<'r> {
    src: Src<'r>,
    buf: Vec<u8>,
    /// The next byte to read is `buf[pos]`; `buf[pos..end]` is read and not yet taken.
    pos: usize,
    end: usize,
    /// The offset in the whole input of `buf[0]`, modulo 2^64: a chunk taken whole puts
    /// `buf[0]` in the room before its bytes, which for the first chunk lies before the
    /// input's start (only offsets of `buf[pos..]` are ever taken).
    base: usize,
    eof: bool,
    /// A read error other than the input's end, kept for the caller (a corrupt or cut gzip
    /// stream reads as an error): the pickle ends there, as a cut one does.
    error: Option<io::Error>,
}

impl<'r> Input<'r> {
    pub(in crate::ingest::pickle) fn new(src: Box<dyn Read + 'r>) -> Self {
        Input::with(Src::Read(src))
    }

    /// The input of a thread that reads ahead.
    pub(in crate::ingest::pickle) fn from_chunks(chunks: Chunks) -> Self {
        Input::with(Src::Ahead(chunks))
    }

    fn with(src: Src<'r>) -> Self {
        Input {
            src,
            buf: vec![0; WINDOW],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            error: None,
        }
    }

    /// The offset in the whole input of the next byte.
    #[inline]
    pub(in crate::ingest::pickle) fn offset(&self) -> usize {
        self.base.wrapping_add(self.pos)
    }

    /// Whether a thread ahead reads the source.
    pub(in crate::ingest::pickle) fn is_ahead(&self) -> bool {
        matches!(self.src, Src::Ahead(_))
    }

    /// The read error that ended the input early, if one did.
    pub(in crate::ingest::pickle) fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// Makes `n` bytes available at `pos`, reading on; false where the input ends first.
    #[cold]
    fn fill(&mut self, n: usize) -> bool {
        if let Src::Ahead(a) = &mut self.src {
            // The thread's chunks taken whole, the bytes not yet taken put in the room before
            // the chunk's own: nothing is copied but those (each chunk copied into the window
            // had been about 4% of the reader's thread on a GB snapshot).
            while self.end - self.pos < n && !self.eof {
                let rest = self.end - self.pos;
                if rest > HEAD || !a.between_chunks() {
                    break;
                }
                match a.next_whole() {
                    Ok(Some(mut chunk)) => {
                        let start = HEAD - rest;
                        chunk[start..HEAD].copy_from_slice(&self.buf[self.pos..self.end]);
                        // `buf[0]`'s offset may lie before the input's start (the first chunk:
                        // nothing before it): offsets are taken at or past `pos` only.
                        self.base = self.base.wrapping_add(self.pos).wrapping_sub(start);
                        a.give_back(std::mem::replace(&mut self.buf, chunk));
                        self.pos = start;
                        self.end = self.buf.len();
                    }
                    Ok(None) => self.eof = true,
                    Err(e) => {
                        self.error = Some(e);
                        self.eof = true;
                    }
                }
            }
            if self.end - self.pos >= n || self.eof {
                return self.end - self.pos >= n;
            }
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base = self.base.wrapping_add(self.pos);
            self.end -= self.pos;
            self.pos = 0;
        }
        while self.end < n && !self.eof {
            if self.end == self.buf.len() {
                // One argument larger than the window: grown to it in steps as its bytes
                // arrive, so that a length the file only claims allocates nothing.
                let grown = self.buf.len().saturating_mul(2).min(n);
                self.buf.resize(grown, 0);
            }
            let out = &mut self.buf[self.end..];
            let read = match &mut self.src {
                Src::Read(r) => r.read(out),
                Src::Ahead(a) => a.read(out),
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    self.eof = true;
                }
            }
        }
        self.end >= n
    }

    /// The next `n` bytes, taken.
    #[inline]
    pub(in crate::ingest::pickle) fn take(&mut self, n: usize) -> Result<&[u8], PickleError> {
        if n > MAX_ARGUMENT {
            return Err(PickleError::Malformed {
                what: format!("an opcode argument of {n} bytes (more than 1 GiB)"),
                offset: self.offset(),
            });
        }
        if self.end - self.pos < n && !self.fill(n) {
            return Err(PickleError::Truncated {
                offset: self.base.wrapping_add(self.end),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The bytes read and not yet taken, at least `n` of them where the input holds that
    /// many more (fewer only at its end).
    #[inline]
    pub(in crate::ingest::pickle) fn ahead(&mut self, n: usize) -> &[u8] {
        if self.end - self.pos < n {
            // From a reader, half a window or more, so that the bytes kept are moved once in
            // that many (a source may hand out a few KB a read); the thread ahead's chunks
            // come whole, the bytes kept put in front of them.
            let want = match self.src {
                Src::Read(_) => n.max(self.buf.len() / 2),
                Src::Ahead(_) => n,
            };
            self.fill(want);
        }
        &self.buf[self.pos..self.end]
    }

    /// Takes `n` bytes that [`Input::ahead`] showed.
    #[inline]
    pub(in crate::ingest::pickle) fn skip(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.end);
        self.pos += n;
    }

    #[inline]
    pub(in crate::ingest::pickle) fn u8(&mut self) -> Result<u8, PickleError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1)?[0])
    }

    /// The bytes up to the next newline, which is taken too (protocol 0's text arguments).
    pub(in crate::ingest::pickle) fn line(&mut self) -> Result<Vec<u8>, PickleError> {
        let mut out = Vec::new();
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos..self.end]) {
                out.extend_from_slice(&self.buf[self.pos..self.pos + i]);
                self.pos += i + 1;
                return Ok(out);
            }
            out.extend_from_slice(&self.buf[self.pos..self.end]);
            self.pos = self.end;
            if out.len() > MAX_ARGUMENT {
                return Err(PickleError::Malformed {
                    what: "a text argument with no end of line in 1 GiB".into(),
                    offset: self.offset(),
                });
            }
            if !self.fill(1) {
                return Err(PickleError::Truncated {
                    offset: self.base.wrapping_add(self.end),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that hands out at most `step` bytes a read.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn arguments_across_reads_and_larger_than_the_window_come_whole() {
        let mut data = vec![7u8; 3];
        let big: Vec<u8> = (0..(WINDOW * 2 + 5)).map(|i| (i % 251) as u8).collect();
        data.extend_from_slice(&big);
        data.extend_from_slice(b"line one\nrest");
        let mut input = Input::new(Box::new(Trickle(&data, 1000)));
        assert_eq!(input.take(3).unwrap(), &[7, 7, 7]);
        assert_eq!(input.take(big.len()).unwrap(), &big[..]);
        assert_eq!(input.line().unwrap(), b"line one");
        assert_eq!(input.offset(), 3 + big.len() + 9);
        assert_eq!(input.take(4).unwrap(), b"rest");
        assert_eq!(
            input.take(1).unwrap_err(),
            PickleError::Truncated { offset: data.len() }
        );
    }

    #[test]
    fn a_claimed_length_past_the_end_is_truncation_not_an_allocation_of_it() {
        let data = [1u8, 2, 3];
        let mut input = Input::new(Box::new(&data[..]));
        assert_eq!(
            input.take(MAX_ARGUMENT).unwrap_err(),
            PickleError::Truncated { offset: 3 }
        );
        assert!(input.buf.len() <= 4 * WINDOW, "{}", input.buf.len());
        // Past the cap: refused before anything is read for it (zeros behind it would inflate).
        let mut zeros = std::io::repeat(0);
        let mut input = Input::new(Box::new(&mut zeros));
        assert!(matches!(
            input.take(MAX_ARGUMENT + 1),
            Err(PickleError::Malformed { .. })
        ));
        assert!(input.buf.len() <= WINDOW, "{}", input.buf.len());
        // A protocol-0 text argument that never ends: refused at the same cap.
        let mut zeros = std::io::repeat(0);
        let mut input = Input::new(Box::new(&mut zeros));
        assert!(matches!(input.line(), Err(PickleError::Malformed { .. })));
    }
}
