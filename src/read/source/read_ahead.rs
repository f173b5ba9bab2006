//! A stream read on a thread of its own, a chunk ahead of its reader: a snapshot's pickle is
//! read by one thread from start to end, and the source's own work (the kernel's copy out of
//! the page cache for a plain file, the whole inflate for a `.pickle.gz`) then runs beside it
//! on another core instead of before each window it reads.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Bytes a chunk holds.
const CHUNK: usize = 1 << 20;
/// Chunks read and not yet taken, at most: what the source may be ahead by.
const AHEAD: usize = 4;

/// A chunk as its thread sends it: its bytes and what the thread made of them.
pub(crate) type Sent<T> = io::Result<(Vec<u8>, T)>;

/// The reading end of chunks a thread reads ([`feed`]): the chunks in order, then the
/// source's error if one ended it.
pub(crate) struct Chunks<T> {
    chunks: Receiver<Sent<T>>,
    /// Chunks taken, sent back to be filled again (the reader's memory stays a few chunks).
    spent: SyncSender<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    /// Bytes each chunk's buffer has before its own ([`channels`]).
    head: usize,
    done: bool,
}

/// The channels between a thread that reads chunks and their reader, `ahead` chunks deep;
/// each chunk's buffer has `head` bytes of room before the chunk's own, for a reader that
/// takes the buffer whole ([`Chunks::next_whole`]) to put in front what it has not read yet.
#[allow(clippy::type_complexity)]
pub(crate) fn channels<T>(
    ahead: usize,
    head: usize,
) -> ((SyncSender<Sent<T>>, Receiver<Vec<u8>>), Chunks<T>) {
    let (tx, chunks) = sync_channel::<Sent<T>>(ahead);
    let (spent, back) = sync_channel::<Vec<u8>>(ahead + 2);
    (
        (tx, back),
        Chunks {
            chunks,
            spent,
            chunk: Vec::new(),
            at: 0,
            head,
            done: false,
        },
    )
}

/// The reading thread's loop: reads `src` in chunks of `size` (each after `head` bytes of
/// room in its buffer, as [`channels`] was told), hands each with what `work` makes of it
/// (given the chunk and its offset in the stream) to the reader, until the source ends or
/// fails or the reader is gone.
pub(crate) fn feed<T>(
    mut src: impl Read,
    (tx, back): (SyncSender<Sent<T>>, Receiver<Vec<u8>>),
    size: usize,
    head: usize,
    mut work: impl FnMut(&[u8], u64) -> T,
) {
    let mut base = 0u64;
    loop {
        let mut buf = back.try_recv().unwrap_or_default();
        buf.resize(head + size, 0);
        let mut n = 0;
        let err = loop {
            match src.read(&mut buf[head + n..]) {
                Ok(0) => break None,
                Ok(k) => {
                    n += k;
                    if n == size {
                        break None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        buf.truncate(head + n);
        let end = n < size || err.is_some();
        if n > 0 {
            let made = work(&buf[head..], base);
            base += n as u64;
            if tx.send(Ok((buf, made))).is_err() {
                return;
            }
        }
        if let Some(e) = err {
            let _ = tx.send(Err(e));
        }
        if end {
            return;
        }
    }
}

impl<T> Chunks<T> {
    /// Reads into `out` as `Read` does; what the thread made of each chunk goes to `made` as
    /// the chunk is taken (before any of its bytes are read).
    pub(crate) fn read_with(
        &mut self,
        out: &mut [u8],
        mut made: impl FnMut(T),
    ) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.next_whole(&mut made)? {
                Some(next) => {
                    let old = std::mem::replace(&mut self.chunk, next);
                    self.give_back(old);
                    self.at = self.head;
                }
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }

    /// Whether every byte of the chunks taken so far has been read: the next is to be had
    /// whole ([`Chunks::next_whole`]).
    pub(crate) fn between_chunks(&self) -> bool {
        self.at == self.chunk.len()
    }

    /// The next chunk's buffer itself, its bytes after the room [`channels`] was told of
    /// (what the thread made of it goes to `made`); `None` at the end. Only between chunks
    /// ([`Chunks::between_chunks`]): the reader hands it back with [`Chunks::give_back`].
    pub(crate) fn next_whole(&mut self, mut made: impl FnMut(T)) -> io::Result<Option<Vec<u8>>> {
        debug_assert!(self.between_chunks());
        if self.done {
            return Ok(None);
        }
        match self.chunks.recv() {
            Ok(Ok((next, m))) => {
                made(m);
                Ok(Some(next))
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(_) => {
                self.done = true;
                Ok(None)
            }
        }
    }

    /// A buffer the reader is done with, for the thread to fill again.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        // A full channel back only means the thread has buffers enough.
        let _ = self.spent.try_send(buf);
    }
}

/// The reading end of a stream read on a thread of its own.
pub(super) struct ReadAhead(Chunks<()>);

impl ReadAhead {
    /// Starts reading `src` on a new thread. The thread ends at the source's end or error,
    /// or once this reader is dropped.
    pub(super) fn new(src: Box<dyn Read + Send>) -> io::Result<ReadAhead> {
        let (ends, chunks) = channels(AHEAD, 0);
        std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || feed(src, ends, CHUNK, 0, |_, _| ()))?;
        Ok(ReadAhead(chunks))
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.0.read_with(out, |()| {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that hands out `step` bytes a read and then fails, or ends.
    struct Source {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
        fail: bool,
    }

    impl Read for Source {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.at == self.bytes.len() {
                return if self.fail {
                    Err(io::Error::new(io::ErrorKind::InvalidData, "broken"))
                } else {
                    Ok(0)
                };
            }
            let n = out.len().min(self.step).min(self.bytes.len() - self.at);
            out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn every_byte_comes_in_order_and_a_source_error_after_them() {
        let bytes: Vec<u8> = (0..3 * CHUNK + 777).map(|i| (i * 7 % 251) as u8).collect();
        for (step, fail) in [(CHUNK, false), (1000, false), (65_537, true)] {
            let src = Source {
                bytes: bytes.clone(),
                at: 0,
                step,
                fail,
            };
            let mut r = ReadAhead::new(Box::new(src)).unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 300_001];
            let err = loop {
                match r.read(&mut buf) {
                    Ok(0) => break None,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => break Some(e),
                }
            };
            assert!(
                got == bytes,
                "step {step}: {} of {} bytes",
                got.len(),
                bytes.len()
            );
            assert_eq!(
                err.map(|e| e.kind()),
                fail.then_some(io::ErrorKind::InvalidData)
            );
        }
    }

    /// With room before each chunk, a reader that copies (`read_with`) gets every byte in
    /// order, and one that takes the buffers whole (`next_whole`) gets the chunks in order
    /// after the room, what the thread made of each before its bytes, then the source's end.
    #[test]
    fn chunks_with_room_before_them_read_as_the_stream_either_way() {
        let bytes: Vec<u8> = (0..5 * 1000 + 77).map(|i| (i * 13 % 251) as u8).collect();
        for whole in [false, true] {
            let (ends, mut chunks) = channels::<u64>(2, 7);
            let src = Source {
                bytes: bytes.clone(),
                at: 0,
                step: 333,
                fail: false,
            };
            let t = std::thread::spawn(move || {
                feed(src, ends, 1000, 7, |c, base| base + c.len() as u64)
            });
            let (mut got, mut made) = (Vec::new(), Vec::new());
            if whole {
                while let Some(buf) = chunks.next_whole(|m| made.push(m)).unwrap() {
                    assert!(buf.len() > 7);
                    got.extend_from_slice(&buf[7..]);
                    chunks.give_back(buf);
                }
            } else {
                let mut out = vec![0u8; 450];
                loop {
                    match chunks.read_with(&mut out, |m| made.push(m)).unwrap() {
                        0 => break,
                        n => got.extend_from_slice(&out[..n]),
                    }
                }
            }
            t.join().unwrap();
            assert!(
                got == bytes,
                "whole {whole}: {} of {} bytes",
                got.len(),
                bytes.len()
            );
            // Each chunk's end offset, as the thread made it: 1000 bytes a chunk.
            assert_eq!(made, [1000, 2000, 3000, 4000, 5000, 5077], "whole {whole}");
        }
    }

    #[test]
    fn a_reader_dropped_early_ends_the_thread_without_reading_on() {
        let src = Source {
            bytes: vec![1; 100 * CHUNK],
            at: 0,
            step: CHUNK,
            fail: false,
        };
        let mut r = ReadAhead::new(Box::new(src)).unwrap();
        let mut b = [0u8; 10];
        assert_eq!(r.read(&mut b).unwrap(), 10);
        drop(r);
    }
}
