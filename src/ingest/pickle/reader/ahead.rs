//! The pickle read on a thread of its own a chunk ahead of the reader, which also decodes the
//! history entries in each chunk ([`Decoded`]): the reader's thread then only resolves them
//! against the memo and applies them (a quarter less work on that thread for a GB snapshot,
//! docs/performance.md). The chunks are read as `read::source::read_ahead` reads them.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::Scope;

use super::entry::Decoded;
use crate::read::source::read_ahead;

/// Bytes a chunk holds: in the tests, a few KB and odd, so that the committed snapshots'
/// entries fall across chunks (those the reader decodes itself).
const CHUNK: usize = if cfg!(test) { 4099 } else { 1 << 20 };
/// Chunks read and not yet taken, at most.
const AHEAD: usize = 16;

/// The reading end: chunks in order with their decoded entries, and the decoded batches
/// spent, sent back to be filled again.
pub(in crate::ingest::pickle) struct Chunks {
    chunks: read_ahead::Chunks<Decoded>,
    spent_decoded: SyncSender<Decoded>,
}

/// The thread's builder (named, so that a profile tells the thread apart).
pub(in crate::ingest::pickle) fn builder() -> std::thread::Builder {
    std::thread::Builder::new().name("decode-ahead".into())
}

/// Starts reading `src` in chunks on a thread of `scope` made by `builder` ([`builder`]; the
/// tests give one that cannot start), each chunk's entries decoded. The source comes back,
/// unread, where the thread cannot be started, to be read the plain way.
pub(in crate::ingest::pickle) fn spawn<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    src: Box<dyn Read + Send + 'env>,
    builder: std::thread::Builder,
) -> Result<Chunks, Box<dyn Read + Send + 'env>> {
    let (ends, chunks) = read_ahead::channels::<Decoded>(AHEAD);
    let (spent_decoded, back_decoded) = sync_channel::<Decoded>(AHEAD + 2);
    // The source goes to the thread once it runs, so that a thread not started leaves it here.
    let (give, take) = sync_channel::<Box<dyn Read + Send + 'env>>(1);
    let started = builder.spawn_scoped(scope, move || {
        if let Ok(src) = take.recv() {
            read_ahead::feed(src, ends, CHUNK, |chunk, base| {
                let mut d = back_decoded.try_recv().unwrap_or_default();
                d.clear();
                d.decode_chunk(chunk, base);
                d
            });
        }
    });
    if started.is_err() {
        return Err(src);
    }
    if let Err(e) = give.send(src) {
        return Err(e.0);
    }
    Ok(Chunks {
        chunks,
        spent_decoded,
    })
}

impl Chunks {
    /// Reads into `out` as `Read` does; each chunk's decoded entries go to `decoded` as the
    /// chunk is taken, so they are there before the reader reaches its bytes.
    pub(super) fn read(
        &mut self,
        out: &mut [u8],
        decoded: &mut VecDeque<Decoded>,
    ) -> io::Result<usize> {
        self.chunks.read_with(out, |d| decoded.push_back(d))
    }

    /// A batch of decoded entries the reader has passed, sent back to be filled again.
    pub(super) fn spent(&self, d: Decoded) {
        let _ = self.spent_decoded.try_send(d);
    }
}
