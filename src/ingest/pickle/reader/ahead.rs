//! The pickle read on a thread of its own a chunk ahead of the reader, which also decodes the
//! history entries in each chunk ([`Decoded`]): the reader's thread then only resolves them
//! against the memo and applies them. Decoding an entry's bytes was a third of that thread's
//! work on a GB snapshot, and the second core was otherwise idle (docs/performance.md).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

use super::entry::Decoded;

/// Bytes a chunk holds: in the tests, a few KB and odd, so that the committed snapshots'
/// entries fall across chunks (those the reader decodes itself).
const CHUNK: usize = if cfg!(test) { 4099 } else { 1 << 20 };
/// Chunks read and not yet taken, at most.
const AHEAD: usize = 16;

type Sent = io::Result<(Vec<u8>, Decoded)>;

/// The reading end: chunks in order with their decoded entries, then the source's error if
/// one ended it.
pub(in crate::ingest::pickle) struct Chunks {
    chunks: Receiver<Sent>,
    /// Chunks and decoded batches spent, sent back to be filled again.
    spent: SyncSender<Vec<u8>>,
    spent_decoded: SyncSender<Decoded>,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
}

/// Starts reading `src` in chunks on a thread of `scope`, each chunk's entries decoded. The
/// source comes back where the thread cannot be started, to be read the plain way.
pub(in crate::ingest::pickle) fn spawn<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    src: Box<dyn Read + Send + 'env>,
) -> Result<Chunks, Box<dyn Read + Send + 'env>> {
    let (tx, chunks) = sync_channel::<Sent>(AHEAD);
    let (spent, back) = sync_channel::<Vec<u8>>(AHEAD + 2);
    let (spent_decoded, back_decoded) = sync_channel::<Decoded>(AHEAD + 2);
    // The source goes to the thread once it runs, so that a thread not started leaves it here.
    let (give, take) = sync_channel::<Box<dyn Read + Send + 'env>>(1);
    let started = std::thread::Builder::new()
        .name("decode-ahead".into())
        .spawn_scoped(scope, move || {
            if let Ok(src) = take.recv() {
                feed(src, &tx, &back, &back_decoded);
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
        spent,
        spent_decoded,
        chunk: Vec::new(),
        at: 0,
        done: false,
    })
}

/// The thread's loop: reads chunks, decodes them and sends them on, until the source ends or
/// fails or the reader is gone.
fn feed(
    mut src: Box<dyn Read + Send + '_>,
    tx: &SyncSender<Sent>,
    back: &Receiver<Vec<u8>>,
    back_decoded: &Receiver<Decoded>,
) {
    let mut base = 0u64;
    loop {
        let mut buf = back.try_recv().unwrap_or_default();
        buf.resize(CHUNK, 0);
        let mut n = 0;
        let err = loop {
            match src.read(&mut buf[n..]) {
                Ok(0) => break None,
                Ok(k) => {
                    n += k;
                    if n == buf.len() {
                        break None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        buf.truncate(n);
        let end = n < CHUNK || err.is_some();
        if n > 0 {
            let mut d = back_decoded.try_recv().unwrap_or_default();
            d.clear();
            d.decode_chunk(&buf, base);
            base += n as u64;
            if tx.send(Ok((buf, d))).is_err() {
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

impl Chunks {
    /// Reads into `out` as `Read` does; each chunk's decoded entries go to `decoded` as the
    /// chunk is taken, so they are there before the reader reaches its bytes.
    pub(super) fn read(
        &mut self,
        out: &mut [u8],
        decoded: &mut VecDeque<Decoded>,
    ) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok((next, d))) => {
                    let old = std::mem::replace(&mut self.chunk, next);
                    // A full channel back only means the thread has buffers enough.
                    let _ = self.spent.try_send(old);
                    self.at = 0;
                    decoded.push_back(d);
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }

    /// A batch of decoded entries the reader has passed, sent back to be filled again.
    pub(super) fn spent(&self, d: Decoded) {
        let _ = self.spent_decoded.try_send(d);
    }
}
