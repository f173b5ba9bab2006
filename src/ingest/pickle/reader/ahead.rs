//! The pickle read on a thread of its own a chunk ahead of the reader: the source's own work
//! (the kernel's copy out of the page cache for a plain file, the whole inflate for a
//! `.pickle.gz`) then runs beside the reader on another core. The chunks are read as
//! `read::source::read_ahead` reads them, and the reader takes each buffer whole.

use std::io::{self, Read};
use std::sync::mpsc::sync_channel;
use std::thread::Scope;

use crate::read::source::read_ahead;

/// Bytes a chunk holds: in the tests, a few KB and odd, so that the committed snapshots'
/// entries fall across chunks.
const CHUNK: usize = if cfg!(test) { 4099 } else { 1 << 20 };
/// Chunks read and not yet taken, at most.
const AHEAD: usize = 16;
/// Room before each chunk's bytes in its buffer, for the bytes the reader has not taken yet
/// when it takes the buffer whole ([`Chunks::next_whole`]): an entry's grammar asks for
/// 4 KiB at most. In the tests less than that, so that entries fall across hand-overs as
/// well as across chunks, and the copying read still runs for what is longer.
pub(super) const HEAD: usize = if cfg!(test) { 61 } else { 64 << 10 };

/// The reading end: chunks in order.
pub(in crate::ingest::pickle) struct Chunks {
    chunks: read_ahead::Chunks<()>,
}

/// The thread's builder (named, so that a profile tells the thread apart).
pub(in crate::ingest::pickle) fn builder() -> std::thread::Builder {
    std::thread::Builder::new().name("read-ahead".into())
}

/// Starts reading `src` in chunks on a thread of `scope` made by `builder` ([`builder`]; the
/// tests give one that cannot start). The source comes back, unread, where the thread cannot
/// be started, to be read the plain way.
pub(in crate::ingest::pickle) fn spawn<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    src: Box<dyn Read + Send + 'env>,
    builder: std::thread::Builder,
) -> Result<Chunks, Box<dyn Read + Send + 'env>> {
    let (ends, chunks) = read_ahead::channels::<()>(AHEAD, HEAD);
    // The source goes to the thread once it runs, so that a thread not started leaves it here.
    let (give, take) = sync_channel::<Box<dyn Read + Send + 'env>>(1);
    let started = builder.spawn_scoped(scope, move || {
        if let Ok(src) = take.recv() {
            read_ahead::feed(src, ends, CHUNK, HEAD, |_, _| ());
        }
    });
    if started.is_err() {
        return Err(src);
    }
    if let Err(e) = give.send(src) {
        return Err(e.0);
    }
    Ok(Chunks { chunks })
}

impl Chunks {
    /// Reads into `out` as `Read` does.
    pub(super) fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        self.chunks.read_with(out, |()| ())
    }

    /// Whether the chunks taken so far have been read to their end ([`Chunks::next_whole`]).
    pub(super) fn between_chunks(&self) -> bool {
        self.chunks.between_chunks()
    }

    /// The next chunk's buffer itself, its bytes from [`HEAD`] on (`None` at the end); only
    /// between chunks. The reader gives its last buffer back with [`Chunks::give_back`].
    pub(super) fn next_whole(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.chunks.next_whole(|()| ())
    }

    /// A buffer the reader is done with, for the thread to fill again.
    pub(super) fn give_back(&self, buf: Vec<u8>) {
        self.chunks.give_back(buf);
    }
}
