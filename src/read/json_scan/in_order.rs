//! Text that arrives a window at a time, in order, from one producer: a single gzip stream (as
//! torch writes `.json.gz`) inflated on a thread of its own into a few buffers used again and
//! again. Inflating a 255 MB stream into one buffer of the whole text's size wrote 255 MB of
//! fresh pages (0.27-0.29 s with zlib-rs on the 2-core machine, against 0.15-0.16 s into a
//! reused buffer of a few MiB: docs/performance.md, "Reading and parsing": one gzip stream), and held
//! the text whole until the parse ended.
//!
//! Each window is parsed as soon as it arrives, on the rayon pool, from its first guessed
//! element start until an element starts in a later window (as [`super::walk_array_windows`]
//! does for a capture file's members); the pieces are checked in order on the calling thread,
//! which hands each window's buffer back once no piece can need its text again. A piece whose
//! guess was wrong, or whose element ran past the window's margin, is redone there from the
//! true boundary over the windows still held (the producer is let past its cap while such a
//! piece waits for text). The results are those of one sequential walk cut where each window
//! ends, whatever the number of threads or the producer's pace.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};

use super::{
    array_first, longer, run_piece, trusted, window_piece, ArrayEnd, Prefix, Stop, WINDOW_MARGIN,
};

/// One window of the text: `own` bytes from `start`, then up to [`WINDOW_MARGIN`] bytes of the
/// next window's (fewer at the end), all in `text`.
#[derive(Debug)]
pub(crate) struct Window {
    /// Where the window starts in the text (a multiple of the producer's window length).
    pub start: usize,
    /// The window's own bytes: the producer's window length, but for the last window.
    pub own: usize,
    /// The window's bytes and its margin.
    pub text: Vec<u8>,
}

/// What the walk's thread is told: by the producer, a window or its end; by a piece, that it is
/// done.
#[derive(Debug)]
pub(crate) enum Msg {
    /// The next window, in order.
    Window(Window),
    /// No more windows: whether the text arrived whole and checked (a gzip stream's CRC and
    /// size). A text that did not is not the walk's to trust.
    Ended(bool),
    /// A piece has put its result in its slot.
    Done,
}

/// The side of a producer the walk needs: the text's length, its window length, and buffers
/// handed back.
pub(crate) trait Producer {
    /// The whole text's length.
    fn total(&self) -> usize;
    /// Every window's own length but the last's.
    fn window_len(&self) -> usize;
    /// A window the walk is done with: its buffer to fill again where the walk had it back
    /// (`None` where a piece still reads it: it is freed when that piece ends). Either way it
    /// no longer counts against the producer's cap.
    fn release(&self, buf: Option<Vec<u8>>);
    /// Lets the producer past its cap until it has sent the text through `to`: a piece being
    /// redone over a long element waits for it.
    fn need(&self, to: usize);
}

/// The walk's side of a text arriving in order: the windows received and not yet handed back,
/// and a copy of the text from 0 as far as [`Prefix::prefix`] was asked.
pub(crate) struct InOrder<P: Producer> {
    producer: P,
    rx: Receiver<Msg>,
    tx: Sender<Msg>,
    held: VecDeque<(usize, usize, Arc<Vec<u8>>)>,
    head: Vec<u8>,
    ended: Option<bool>,
}

impl<P: Producer> std::fmt::Debug for InOrder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InOrder")
            .field("total", &self.producer.total())
            .field("held", &self.held.len())
            .finish()
    }
}

/// A walk's result: the pieces in order, how the array ended, and where the last piece started.
pub(crate) type Walked<T> = (Vec<T>, ArrayEnd, usize);

impl<P: Producer> InOrder<P> {
    /// The walk's side of `producer`, which sends into `tx`'s channel, whose receiver is `rx`.
    pub(crate) fn new(producer: P, tx: Sender<Msg>, rx: Receiver<Msg>) -> Self {
        InOrder {
            producer,
            rx,
            tx,
            held: VecDeque::new(),
            head: Vec::new(),
            ended: None,
        }
    }

    /// The producer.
    #[cfg(test)]
    pub(crate) fn producer(&self) -> &P {
        &self.producer
    }

    /// The text copied from 0 by [`Prefix::prefix`], taken out.
    pub(crate) fn take_head(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.head)
    }

    /// The next message. On a rayon worker (the walk runs inside the ingest's `join`), the
    /// pool's pending work (this walk's own pieces) is run rather than waited beside.
    fn recv(&self) -> Msg {
        loop {
            match self.rx.try_recv() {
                Ok(m) => return m,
                Err(TryRecvError::Disconnected) => return Msg::Ended(false),
                Err(TryRecvError::Empty) => {}
            }
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                return self.rx.recv().unwrap_or(Msg::Ended(false));
            }
        }
    }

    /// The next message as the walk receives it (tests of a producer).
    #[cfg(test)]
    pub(crate) fn recv_for_test(&self) -> Msg {
        self.recv()
    }

    /// Hands back every held window that ends at or before `at`.
    fn release_before(&mut self, at: usize) {
        while let Some(&(start, own, _)) = self.held.front() {
            if start + own > at {
                break;
            }
            let (_, _, text) = self.held.pop_front().expect("a front");
            self.producer.release(Arc::try_unwrap(text).ok());
        }
    }

    /// Receives windows and hands them back until the producer ends; whether the text
    /// arrived whole and checked.
    pub(crate) fn drain(&mut self) -> bool {
        self.release_before(usize::MAX);
        while self.ended.is_none() {
            match self.recv() {
                Msg::Window(w) => self.producer.release(Some(w.text)),
                Msg::Ended(ok) => self.ended = Some(ok),
                Msg::Done => {}
            }
        }
        self.ended == Some(true)
    }

    /// The text from `at` on, copied from the held windows into `buf` through at least `to`
    /// (or the end): its start and length; `None` where the text through `to` has not all
    /// arrived.
    fn stretch(&self, at: usize, to: usize, buf: &mut Vec<u8>) -> Option<(usize, usize)> {
        let total = self.producer.total();
        // The held windows are consecutive: the last to start at or before `at` holds it,
        // unless `at` lies past its own text and more is to come.
        let first = self.held.iter().rposition(|&(s, _, _)| s <= at)?;
        let (base, own, _) = self.held[first];
        if at >= base + own && base + own < total {
            return None;
        }
        buf.clear();
        let mut end = base;
        for (s, own, text) in self.held.iter().skip(first) {
            if end > at && end >= to {
                break;
            }
            buf.extend_from_slice(&text[..*own]);
            end = s + own;
        }
        if end < to.min(total) {
            return None;
        }
        // The margin of the last window copied: text past `to` a piece may read ahead into.
        if let Some((_, own, text)) = self.held.iter().rfind(|&&(s, own, _)| s + own == end) {
            buf.extend_from_slice(&text[*own..]);
        }
        Some((base, buf.len()))
    }

    /// Walks the array whose `[` is at `start` (in the head [`Prefix::prefix`] copied, which
    /// must reach its first element) with `task(view, base, from, limit)` as
    /// [`super::walk_array_windows`] does. `Ok(None)` where the text stopped arriving (the
    /// producer ended short or unchecked: the caller reads the file another way), or the
    /// array's first element lies past the head.
    pub(crate) fn walk<T: Send>(
        &mut self,
        start: usize,
        task: impl Fn(&[u8], usize, usize, usize) -> (T, Stop) + Sync,
    ) -> Result<Option<Walked<T>>, usize> {
        let total = self.producer.total();
        let w = self.producer.window_len().max(1);
        let first = match array_first(&self.head, start)? {
            Ok(first) if first < self.head.len() || self.head.len() >= total => first,
            Ok(_) => return Ok(None),
            Err(empty) => return Ok(Some((Vec::new(), empty, start))),
        };
        let j0 = first / w;
        let n = total.div_ceil(w).max(j0 + 1);
        let limit_of = move |j: usize| {
            if j + 1 < n {
                (j + 1) * w
            } else {
                usize::MAX
            }
        };
        type Slot<T> = Mutex<Option<Option<(usize, T, Stop, usize)>>>;
        let slots: Vec<Slot<T>> = (j0..n).map(|_| Mutex::new(None)).collect();
        let task = &task;
        let slots = &slots;
        // Windows before the array's first element are in the head already.
        self.release_before(j0 * w);
        let tx = self.tx.clone();
        let tx = &tx;
        rayon::in_place_scope(|s| {
            let spawn = |start: usize, text: Arc<Vec<u8>>| {
                let j = start / w;
                let tx = tx.clone();
                s.spawn(move |_| {
                    let from = (j == j0).then_some(first);
                    let r = window_piece(&text, start, from, limit_of(j), total, task);
                    // Let go of the window before saying so: the walk hands its buffer back
                    // to be filled again only where it holds the last reference.
                    drop(text);
                    *slots[j - j0].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    let _ = tx.send(Msg::Done);
                });
            };
            for (start, _, text) in &self.held {
                spawn(*start, Arc::clone(text));
            }
            let mut out = Vec::with_capacity(n - j0);
            let mut buf = Vec::new();
            let (mut at, mut j) = (first, j0);
            // A piece being redone, waiting for text through this offset.
            let mut redo_to: Option<usize> = None;
            loop {
                // Every piece whose turn it is and whose result is in, in order.
                loop {
                    while j + 1 < n && (j + 1) * w <= at {
                        j += 1;
                    }
                    self.release_before(at);
                    let limit = limit_of(j);
                    let done = if redo_to.is_some() {
                        None
                    } else {
                        let taken = slots[j - j0]
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .take();
                        match taken {
                            None => break,
                            Some(Some((from, t, stop, seen)))
                                if from == at && trusted(stop, seen, total) =>
                            {
                                Some((t, stop))
                            }
                            Some(_) => None,
                        }
                    };
                    let (t, stop) = match done {
                        Some(d) => d,
                        None => {
                            // Redone from the true boundary, over twice the stretch each time
                            // it comes too near the end of what it was given.
                            let mut to = redo_to.unwrap_or_else(|| {
                                limit.saturating_add(WINDOW_MARGIN).min(total).max(at)
                            });
                            let redone = loop {
                                let Some((base, len)) = self.stretch(at, to, &mut buf) else {
                                    break None;
                                };
                                let (t, stop, seen) = run_piece(task, &buf[..len], base, at, limit);
                                if trusted(stop, seen, total) {
                                    break Some((t, stop));
                                }
                                to = longer(at, to, total);
                            };
                            match redone {
                                Some(d) => {
                                    redo_to = None;
                                    d
                                }
                                None => {
                                    // Not arrived yet: the producer is let past its cap.
                                    redo_to = Some(to);
                                    self.producer.need(to);
                                    break;
                                }
                            }
                        }
                    };
                    out.push(t);
                    if let Some(end) = stop.array_end()? {
                        return Ok(Some((out, end, at)));
                    }
                    at = stop.at();
                }
                match self.recv() {
                    Msg::Window(win) => {
                        let text = Arc::new(win.text);
                        if win.start >= j0 * w && win.start / w >= j {
                            spawn(win.start, Arc::clone(&text));
                        }
                        self.held.push_back((win.start, win.own, text));
                    }
                    Msg::Ended(ok) => {
                        self.ended = Some(ok);
                        if !ok {
                            return Ok(None);
                        }
                    }
                    Msg::Done => {}
                }
            }
        })
    }

    /// The producer, once every window has been received and handed back; whether the text
    /// arrived whole and checked.
    pub(crate) fn finish(mut self) -> (P, bool) {
        let ok = self.drain();
        let InOrder { producer, .. } = self;
        (producer, ok)
    }
}

impl<P: Producer> Prefix for InOrder<P> {
    fn total(&self) -> usize {
        self.producer.total()
    }
    /// The windows received are kept for the walk; their own text is copied into the head.
    fn prefix(&mut self, want: usize) -> &[u8] {
        let want = want.min(self.producer.total());
        // Held windows count against the producer's cap until the walk hands them back.
        self.producer.need(want);
        while self.head.len() < want && self.ended.is_none() {
            match self.recv() {
                Msg::Window(win) => {
                    self.head.extend_from_slice(&win.text[..win.own]);
                    self.held
                        .push_back((win.start, win.own, Arc::new(win.text)));
                }
                Msg::Ended(ok) => self.ended = Some(ok),
                Msg::Done => {}
            }
        }
        &self.head
    }
}

/// A text in memory sent a window at a time by a thread of its own, at most `cap` windows
/// ahead of those handed back (tests and the fuzz target `arriving_walk` hold
/// [`InOrder::walk`] to [`super::walk_array_parallel`] with it).
pub(crate) struct InMemory {
    total: usize,
    window: usize,
    room: Arc<(Mutex<(usize, usize)>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InMemory {
    /// `text` in windows of `window` bytes, at most `cap` out at once (unless more is needed).
    pub(crate) fn start(text: &[u8], window: usize, cap: usize) -> InOrder<InMemory> {
        let (tx, rx) = std::sync::mpsc::channel();
        let window = window.max(1);
        // (windows out, text needed through)
        let room = Arc::new((Mutex::new((0usize, 0usize)), std::sync::Condvar::new()));
        let (total, text, r, send) = (text.len(), text.to_vec(), Arc::clone(&room), tx.clone());
        let thread = std::thread::spawn(move || {
            let mut start = 0;
            while start < text.len() {
                let own = window.min(text.len() - start);
                {
                    let mut g = r.0.lock().unwrap_or_else(|e| e.into_inner());
                    while g.0 >= cap.max(1) && g.1 <= start {
                        g = r.1.wait(g).unwrap_or_else(|e| e.into_inner());
                    }
                    g.0 += 1;
                }
                let end = (start + own + WINDOW_MARGIN).min(text.len());
                let w = Window {
                    start,
                    own,
                    text: text[start..end].to_vec(),
                };
                if send.send(Msg::Window(w)).is_err() {
                    return;
                }
                start += own;
            }
            let _ = send.send(Msg::Ended(true));
        });
        let p = InMemory {
            total,
            window,
            room,
            thread: Some(thread),
        };
        InOrder::new(p, tx, rx)
    }
}

impl Producer for InMemory {
    fn total(&self) -> usize {
        self.total
    }
    fn window_len(&self) -> usize {
        self.window
    }
    fn release(&self, _buf: Option<Vec<u8>>) {
        let mut g = self.room.0.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = g.0.saturating_sub(1);
        self.room.1.notify_all();
    }
    fn need(&self, to: usize) {
        let mut g = self.room.0.lock().unwrap_or_else(|e| e.into_inner());
        g.1 = g.1.max(to);
        self.room.1.notify_all();
    }
}

impl Drop for InMemory {
    fn drop(&mut self) {
        self.need(usize::MAX);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
