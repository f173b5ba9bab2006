//! CUDA caching-allocator memory snapshots (`torch.cuda.memory._snapshot()` dumped with
//! pickle, or libtorch `_memory_snapshot_pickled()`), plain or gzip, read without executing
//! anything (see [`super::pickle`]).

use std::path::Path;

use rustc_hash::FxHashMap;

use super::pickle::{self, Pickle, RecordShape, Value, ValueId};
use super::{source, Error};
use crate::diagnostics::Diagnostics;
use crate::intern::{Interner, StrId};

/// A `device_traces` history entry: the members read, `action` first (what makes a dict one),
/// and those torch may also write that nothing here reads. Read as fixed records, the
/// millions of entries of a GB snapshot take a fraction of what generic dicts did.
pub static HISTORY_ENTRY: RecordShape = RecordShape::new(
    &["action", "addr", "size", "stream", "time_us", "frames"],
    &["compile_context", "user_metadata"],
);

pub use crate::model::tables::snapshot::*;

/// An entry's `action` as the snapshot names it.
fn parse_action(s: &[u8]) -> Action {
    match s {
        b"alloc" => Action::Alloc,
        b"free_requested" => Action::FreeRequested,
        b"free_completed" | b"free" => Action::FreeCompleted,
        b"segment_alloc" => Action::SegmentAlloc,
        b"segment_free" => Action::SegmentFree,
        b"segment_map" => Action::SegmentMap,
        b"segment_unmap" => Action::SegmentUnmap,
        b"snapshot" => Action::Snapshot,
        b"oom" => Action::Oom,
        _ => Action::Other,
    }
}

/// Whether `path` is a file that starts as a pickle does (after inflating, when gzip): the
/// PROTO opcode of protocol 2 and later, which every snapshot torch writes starts with. A
/// trace starts with `{`; this tells the two apart without reading either whole.
pub fn looks_like_snapshot(path: &Path) -> bool {
    path.is_file() && matches!(source::first_byte(path), Ok(Some(0x80)))
}

/// Reads a snapshot pickle (plain or gzip) as it streams from the file, never holding the
/// whole: one cut short (a writer killed while it wrote) yields what it holds, with a
/// warning, as a cut trace does.
pub fn load(path: &Path, diag: &mut Diagnostics) -> Result<Snapshot, Error> {
    let (stream, gz) = source::open_pickle_stream(path)?;
    Ok(collected(from_stream(
        path,
        stream,
        gz,
        diag,
        None,
        pickle::ReadMode::Ahead,
    )?))
}

/// [`load`], handing each device's history to `sink` as it is read instead of keeping it:
/// the snapshot's `device_traces` are empty and [`Snapshot::streamed`] says which list of
/// the sink's is which device's. What the read holds is then the pickle's memo (4 bytes per
/// object it names, packed to a few bits where its slots repeat, as a history's do), the
/// objects outside the history (segments, frames, distinct stacks), and the sink's own state,
/// not the history: a 1.76 GB real snapshot is read in 58 MB.
pub fn load_streamed(
    path: &Path,
    diag: &mut Diagnostics,
    sink: &mut dyn HistorySink,
) -> Result<Snapshot, Error> {
    let (stream, gz) = source::open_pickle_stream(path)?;
    Ok(from_stream(path, stream, gz, diag, Some(sink), pickle::ReadMode::Ahead)?.0)
}

/// Parses snapshot pickle bytes.
pub fn from_bytes(path: &Path, bytes: &[u8], diag: &mut Diagnostics) -> Result<Snapshot, Error> {
    Ok(collected(from_stream(
        path,
        Box::new(bytes),
        false,
        diag,
        None,
        pickle::ReadMode::Direct,
    )?))
}

/// A streamed read's snapshot with the entries the built-in [`Collect`] sink kept put in
/// `device_traces`.
fn collected((mut s, c): (Snapshot, Collect)) -> Snapshot {
    let mut lists = c.0;
    s.device_traces = s
        .streamed
        .drain(..)
        .map(|l| l.and_then(|l| lists.remove(&l)).unwrap_or_default())
        .collect();
    s
}

/// The sink that keeps every list's entries, for readers that want the history whole.
#[derive(Default)]
struct Collect(FxHashMap<usize, Vec<TraceEntry>>);

impl HistorySink for Collect {
    fn entries(&mut self, list: usize, mut batch: Vec<TraceEntry>) {
        let v = self.0.entry(list).or_default();
        if v.is_empty() {
            *v = batch;
        } else {
            v.append(&mut batch);
        }
    }
}

fn from_stream<'a>(
    path: &Path,
    stream: Box<dyn std::io::Read + Send + 'a>,
    gz: bool,
    diag: &mut Diagnostics,
    out: Option<&mut dyn HistorySink>,
    mode: pickle::ReadMode,
) -> Result<(Snapshot, Collect), Error> {
    let format = |what: String| Error::Format {
        path: path.to_path_buf(),
        what,
    };
    let mut collect = Collect::default();
    let out: &mut dyn HistorySink = match out {
        Some(o) => o,
        None => &mut collect,
    };
    let mut sink = EntrySink::new(out);
    // The reference read (tests) takes every batch item by item.
    sink.in_order = mode != pickle::ReadMode::Kept;
    let read = pickle::parse_stream_into_with(stream, &HISTORY_ENTRY, &mut sink, mode)
        .map_err(|e| format(e.to_string()))?;
    sink.flush();
    if let Some(e) = &read.read_error {
        // A gzip stream cut short reads as an early end; anything else that broke the read
        // (corrupt deflate data, a failing disk) is not a snapshot to analyse.
        if !(gz && e.kind() == std::io::ErrorKind::UnexpectedEof) {
            return Err(format(if gz {
                format!("corrupt gzip stream: {e}")
            } else {
                format!("read failed: {e}")
            }));
        }
        diag.warn(
            "truncated_snapshot",
            format!("{}: gzip stream ends early", path.display()),
        );
    }
    if let Some(at) = read.cut {
        diag.warn(
            "truncated_snapshot",
            format!(
                "{}: the pickle ends early at byte {at}: the records before the cut are used",
                path.display(),
            ),
        );
    }
    let (stacks, lists) = sink.finish();
    let s = Extractor::new(path, &read.pickle, diag, stacks, lists).run()?;
    Ok((s, collect))
}

/// Entries a batch gathers before it goes to the [`HistorySink`].
const BATCH: usize = 8192;

/// The history entries, made as the pickle completes each one and handed on, list by list,
/// as the pickle appends them to a list: no entry is kept past the batch it goes in (torch's
/// pickler appends a thousand at a time).
struct EntrySink<'h> {
    stacks: Stacks,
    /// Entries made and not yet in a list, by record number from `base` (`None`: taken).
    pending: std::collections::VecDeque<Option<TraceEntry>>,
    base: usize,
    /// Generic dicts with an `action` member (see [`pickle::RecordSink::generic`]), read
    /// by key when appended.
    generic: rustc_hash::FxHashSet<ValueId>,
    /// What each list that was given an entry got, by the list's dense index.
    lists: FxHashMap<usize, ListCount>,
    /// The batch being gathered, and its list.
    batch: Vec<TraceEntry>,
    batch_list: usize,
    out: &'h mut dyn HistorySink,
    /// Whether batches of the records made first, in order, are taken in one go
    /// ([`EntrySink::appended_in_order`]; off only in tests, to compare).
    in_order: bool,
    /// The actions of recent `action` strings, by the string's id modulo [`ACTION_LINES`]:
    /// a history names a handful of distinct strings millions of times (short strings are
    /// one id per text), and reading each one's bytes to match them was a tenth of the
    /// sink's work for an entry.
    actions: [(ValueId, Action); ACTION_LINES],
}

/// Lines of [`EntrySink::actions`], a power of two.
const ACTION_LINES: usize = 16;

/// What a list was given, as [`Extractor::run`] reports it for a device's history (its
/// other items, entries without an action among them, are what is left of its length).
#[derive(Debug, Default, Clone, Copy)]
struct ListCount {
    /// Entries handed on.
    entries: usize,
    /// Items that were entries already given to a list (memo references).
    repeats: usize,
    /// Entries the list no longer holds: batches whose every item was an entry handed on
    /// ([`pickle::RecordSink::appended`]).
    dropped: usize,
}

/// An entry whose `action` is no string: no entry ([`Extractor::run`] warns once per such).
const NO_ACTION: StackId = StackId(u32::MAX - 1);

impl<'h> EntrySink<'h> {
    fn new(out: &'h mut dyn HistorySink) -> Self {
        EntrySink {
            stacks: Stacks::default(),
            pending: Default::default(),
            base: 0,
            generic: Default::default(),
            lists: FxHashMap::default(),
            batch: Vec::new(),
            batch_list: 0,
            out,
            in_order: true,
            actions: [(ValueId::ABSENT, Action::Other); ACTION_LINES],
        }
    }

    /// The entry of a history dict's members in [`HISTORY_ENTRY`]'s order (a record's, or
    /// a generic dict's looked up by key); its stack is [`NO_ACTION`] where `action` is no
    /// string.
    fn entry(&mut self, pk: &Pickle, m: &[Option<ValueId>]) -> TraceEntry {
        // Taken apart by a pattern, not by `map` over indices (an out-of-line call, 2.6% of
        // a GB snapshot's read).
        let &[action, addr, size, stream, time_us, frames] = m else {
            unreachable!("HISTORY_ENTRY has six kept members")
        };
        let u64_of = |v: Option<ValueId>| v.and_then(|v| pk.as_u64(v));
        let action = action.and_then(|a| {
            let line = &mut self.actions[a.line(ACTION_LINES)];
            if line.0 == a {
                return Some(line.1);
            }
            let parsed = parse_action(pk.str_bytes(a)?);
            *line = (a, parsed);
            Some(parsed)
        });
        let stack = if action.is_none() {
            NO_ACTION
        } else {
            // By where the list's frames are kept (lists of equal frames share them), not by
            // the list: a table by list number grew by a word for every entry's new list.
            self.stacks.stack_of(pk, frames)
        };
        TraceEntry {
            action: action.unwrap_or(Action::Other),
            addr: u64_of(addr).unwrap_or(0),
            size: u64_of(size).unwrap_or(0),
            stream: stream.and_then(|v| pk.as_i64(v)).unwrap_or(0),
            time_us: time_us.and_then(|v| pk.as_i64(v)),
            stack,
        }
    }

    /// The entry `item` makes in a list, if it is one not yet in a list: a pending record's,
    /// or a generic entry dict read by key. `Err(())`: an entry met before.
    fn take(&mut self, pk: &Pickle, item: ValueId) -> Option<Result<TraceEntry, ()>> {
        if let Some(r) = pk.record_number(item) {
            let slot = r
                .checked_sub(self.base)
                .and_then(|i| self.pending.get_mut(i));
            return Some(slot.and_then(Option::take).ok_or(()));
        }
        if self.generic.is_empty() || !self.generic.remove(&item) {
            return None;
        }
        let m: Vec<Option<ValueId>> = HISTORY_ENTRY
            .keys()
            .iter()
            .map(|k| pk.dict_get(item, k))
            .collect();
        Some(Ok(self.entry(pk, &m)))
    }

    /// [`pickle::RecordSink::appended`] of a batch that is the records made first and not yet
    /// in a list, in the order they were made, each with an action (every batch of a history
    /// torch writes): their entries moved to the batch in one go, where the general path
    /// takes them one by one (a tenth of a GB snapshot's read, with the pickle's side). False,
    /// having done nothing, for any other batch.
    fn appended_in_order(&mut self, pk: &Pickle, li: usize, items: &[ValueId]) -> bool {
        let n = items.len();
        if n == 0 || n > self.pending.len() {
            return false;
        }
        let in_order = items
            .iter()
            .zip(&self.pending)
            .enumerate()
            .all(|(i, (&it, e))| {
                pk.record_number(it) == Some(self.base + i)
                    && e.as_ref().is_some_and(|e| e.stack != NO_ACTION)
            });
        if !in_order {
            return false;
        }
        for _ in 0..n {
            let Some(Some(e)) = self.pending.pop_front() else {
                continue; // checked above: every one is there
            };
            self.push(li, e);
        }
        self.base += n;
        let c = self.lists.entry(li).or_default();
        c.entries += n;
        c.dropped += n;
        self.drop_taken_front();
        true
    }

    /// Adds `e`, given to the list `li`, to the batch, which is handed on first where it is
    /// another list's or full.
    fn push(&mut self, li: usize, e: TraceEntry) {
        if self.batch_list != li || self.batch.len() >= BATCH {
            self.flush();
            self.batch_list = li;
        }
        self.batch.push(e);
    }

    /// Taken entries leave the front (records never put in a list stay: no snapshot torch
    /// writes has one).
    fn drop_taken_front(&mut self) {
        while let Some(None) = self.pending.front() {
            self.pending.pop_front();
            self.base += 1;
        }
    }

    /// Hands the batch gathered on.
    fn flush(&mut self) {
        if !self.batch.is_empty() {
            let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            self.out.entries(self.batch_list, b);
        }
    }

    fn finish(self) -> (Stacks, FxHashMap<usize, ListCount>) {
        (self.stacks, self.lists)
    }
}

impl pickle::RecordSink for EntrySink<'_> {
    fn record(&mut self, pk: &Pickle, m: &[Option<ValueId>]) -> usize {
        let e = self.entry(pk, m);
        self.pending.push_back(Some(e));
        self.base + self.pending.len() - 1
    }

    fn forget(&mut self, number: usize) {
        if let Some(Some(e)) = number
            .checked_sub(self.base)
            .and_then(|i| self.pending.get_mut(i))
        {
            e.stack = NO_ACTION;
        }
    }

    fn generic(&mut self, dict: ValueId) {
        self.generic.insert(dict);
    }

    fn appended(&mut self, pk: &Pickle, list: ValueId, items: &[ValueId]) -> bool {
        let Some(li) = pk.seq_index(list) else {
            return false;
        };
        if self.in_order && self.appended_in_order(pk, li, items) {
            return true;
        }
        let mut count = ListCount::default();
        for &item in items {
            match self.take(pk, item) {
                None => {}
                Some(Err(())) => count.repeats += 1,
                Some(Ok(e)) if e.stack == NO_ACTION => {}
                Some(Ok(e)) => {
                    count.entries += 1;
                    self.push(li, e);
                }
            }
        }
        // A batch of entries alone (every batch of a history torch writes) leaves the list:
        // its entries are handed on, and the list would only hold a word for each.
        let all = !items.is_empty() && count.entries == items.len();
        if count.entries + count.repeats > 0 {
            let c = self.lists.entry(li).or_default();
            c.entries += count.entries;
            c.repeats += count.repeats;
            if all {
                c.dropped += count.entries;
            }
        }
        self.drop_taken_front();
        all
    }
}

/// The stacks of a snapshot: its strings, frames and distinct frame lists, found from the
/// pickle's frame objects.
#[derive(Default)]
struct Stacks {
    strings: Interner,
    frames: Vec<Frame>,
    frame_index: FxHashMap<ValueId, FrameId>,
    stacks: Vec<Box<[FrameId]>>,
    /// Stacks by the pickle's frame objects (a list per entry, its frames shared)...
    stack_by_list: FxHashMap<Box<[ValueId]>, StackId>,
    /// ...by where those items are stored in the pickle's table (see `stack_of`)...
    stack_by_items: FxHashMap<(usize, usize), StackId>,
    /// ...and by content (equal stacks written as separate lists).
    stack_by_frames: FxHashMap<Box<[FrameId]>, StackId>,
    /// The last place looked up and its stack: most entries name the frames of the entry
    /// before, whose list the pickle reader gives the same place.
    last_place: Option<((usize, usize), StackId)>,
    /// Stacks by the frozen number of a list a history entry alone held
    /// ([`Pickle::frozen_number`], dense; [`NO_STACK`] where not yet looked up): nearly
    /// every entry's frames, found without the place's hash.
    by_frozen: Vec<StackId>,
}

/// [`Stacks::by_frozen`] where no stack was looked up.
const NO_STACK: StackId = StackId(u32::MAX);

impl Stacks {
    fn str_of(&mut self, pk: &Pickle, id: Option<ValueId>) -> Option<StrId> {
        let s = pk.as_str(id?)?;
        Some(self.strings.intern(s))
    }

    fn stack_of(&mut self, pk: &Pickle, id: Option<ValueId>) -> StackId {
        let Some(n) = id.and_then(|id| pk.frozen_number(id)) else {
            return self.stack_of_list(pk, id);
        };
        if let Some(&s) = self.by_frozen.get(n) {
            if s != NO_STACK {
                return s;
            }
        }
        let s = self.stack_of_list(pk, id);
        if self.by_frozen.len() <= n {
            self.by_frozen.resize(n + 1, NO_STACK);
        }
        self.by_frozen[n] = s;
        s
    }

    /// [`Stacks::stack_of`] by the list's place or items.
    fn stack_of_list(&mut self, pk: &Pickle, id: Option<ValueId>) -> StackId {
        // Lists with equal items mostly share them in the pickle's tables
        // (the pickle reader's `share_items`): where they do, the items' place finds them
        // without hashing each list's frames. (Their address did, until it was seen that the
        // table's buffer moves as it grows, so that an address can later hold other items.)
        let at = id.and_then(|id| pk.items_place(id));
        if let Some(at) = at {
            // A place's stack never changes once found (the places of lists looked up are
            // never written over), so the last one answers for it as the table would.
            if let Some((last, s)) = self.last_place {
                if last == at {
                    return s;
                }
            }
            if let Some(&s) = self.stack_by_items.get(&at) {
                self.last_place = Some((at, s));
                return s;
            }
        }
        let objects = id.map_or(&[][..], |id| pk.items(id));
        if let Some(&s) = self.stack_by_list.get(objects) {
            if let Some(at) = at {
                self.stack_by_items.insert(at, s);
            }
            return s;
        }
        let frames: Box<[FrameId]> = objects.iter().filter_map(|&f| self.frame(pk, f)).collect();
        let next = StackId(self.stacks.len() as u32);
        let s = *self.stack_by_frames.entry(frames.clone()).or_insert(next);
        if s == next {
            self.stacks.push(frames);
        }
        self.stack_by_list.insert(objects.into(), s);
        if let Some(at) = at {
            self.stack_by_items.insert(at, s);
        }
        s
    }

    fn frame(&mut self, pk: &Pickle, id: ValueId) -> Option<FrameId> {
        if let Some(&f) = self.frame_index.get(&id) {
            return Some(f);
        }
        let name = self.str_of(pk, pk.dict_get(id, "name"))?;
        let filename = self
            .str_of(pk, pk.dict_get(id, "filename"))
            .unwrap_or_else(|| self.strings.intern(""));
        let line = pk
            .dict_get(id, "line")
            .and_then(|l| pk.as_i64(l))
            .unwrap_or(0);
        let f = FrameId(self.frames.len() as u32);
        self.frames.push(Frame {
            name,
            filename,
            line,
        });
        self.frame_index.insert(id, f);
        Some(f)
    }
}

struct Extractor<'a> {
    path: &'a Path,
    pk: &'a Pickle,
    diag: &'a mut Diagnostics,
    stacks: Stacks,
    /// What each list was given as history entries, by the list's dense index.
    lists: FxHashMap<usize, ListCount>,
    /// Records met so far, by dict and by list ([`Extractor::first_use`]).
    seen_dicts: Vec<bool>,
    seen_seqs: Vec<bool>,
    /// Records skipped as repeats.
    repeats: usize,
}

impl<'a> Extractor<'a> {
    fn new(
        path: &'a Path,
        pk: &'a Pickle,
        diag: &'a mut Diagnostics,
        stacks: Stacks,
        lists: FxHashMap<usize, ListCount>,
    ) -> Self {
        Extractor {
            path,
            pk,
            diag,
            stacks,
            lists,
            seen_dicts: vec![false; pk.dict_count()],
            seen_seqs: vec![false; pk.seq_count()],
            repeats: 0,
        }
    }

    /// Whether this is the first time the record `id` (a segment, block or history entry
    /// dict, or a device's entry list) is met. A genuine snapshot never holds one object in
    /// two places; a pickle can, through its memo, name one thousands of times, and copying
    /// each would make a few hundred bytes expand into gigabytes. Repeats are
    /// counted and skipped, so what is built stays proportional to the pickle's content.
    fn first_use(&mut self, id: ValueId) -> bool {
        let slot = match (self.pk.dict_index(id), self.pk.seq_index(id)) {
            (Some(i), _) => self.seen_dicts.get_mut(i),
            (_, Some(i)) => self.seen_seqs.get_mut(i),
            _ => None,
        };
        match slot {
            Some(seen) if *seen => {
                self.repeats += 1;
                false
            }
            Some(seen) => {
                *seen = true;
                true
            }
            None => true,
        }
    }

    fn err(&self, what: &str) -> Error {
        Error::Format {
            path: self.path.to_path_buf(),
            what: format!("not a CUDA memory snapshot: {what}"),
        }
    }

    fn str_of(&mut self, id: Option<ValueId>) -> Option<StrId> {
        self.stacks.str_of(self.pk, id)
    }

    fn stack_of(&mut self, id: Option<ValueId>) -> StackId {
        self.stacks.stack_of(self.pk, id)
    }

    /// One device's history list: what the sink was given from it, its other items
    /// (no entry, or an entry without an action) warned.
    fn history(&mut self, dev: ValueId) -> Option<usize> {
        let li = self.pk.seq_index(dev);
        let c = li
            .and_then(|l| self.lists.get(&l))
            .copied()
            .unwrap_or_default();
        self.repeats += c.repeats;
        let items = self.pk.items(dev).len() + c.dropped;
        let without = items.saturating_sub(c.entries + c.repeats);
        if without > 0 {
            self.diag.warn_n(
                "snapshot_entry_without_action",
                without as u64,
                format!(
                    "{}: a device_traces entry has no action",
                    self.path.display()
                ),
            );
        }
        li.filter(|_| c.entries > 0)
    }

    /// One segment of the snapshot's `segments` list, its blocks with it; a block that keeps
    /// its own history marks the snapshot as of the old layout.
    fn segment(&mut self, s: ValueId, legacy: &mut bool) -> Segment {
        let pk = self.pk;
        let g = |k: &str| pk.dict_get(s, k);
        let mut blocks = Vec::new();
        for &b in g("blocks").map(|b| pk.items(b)).unwrap_or(&[]) {
            if !self.first_use(b) {
                continue;
            }
            let state = self
                .str_of(pk.dict_get(b, "state"))
                .unwrap_or_else(|| self.stacks.strings.intern("unknown"));
            blocks.push(Block {
                address: pk
                    .dict_get(b, "address")
                    .and_then(|v| pk.as_u64(v))
                    .unwrap_or(0),
                size: pk
                    .dict_get(b, "size")
                    .and_then(|v| pk.as_u64(v))
                    .unwrap_or(0),
                requested_size: pk.dict_get(b, "requested_size").and_then(|v| pk.as_u64(v)),
                state,
                stack: self.stack_of(pk.dict_get(b, "frames")),
            });
            // Pre-2.1 snapshots kept the history inside blocks instead of device_traces.
            if pk.dict_get(b, "history").is_some() {
                *legacy = true;
            }
        }
        let segment_type = self.str_of(g("segment_type"));
        Segment {
            device: g("device").and_then(|v| pk.as_i64(v)).unwrap_or(0),
            address: g("address").and_then(|v| pk.as_u64(v)).unwrap_or(0),
            total_size: g("total_size").and_then(|v| pk.as_u64(v)).unwrap_or(0),
            allocated_size: g("allocated_size").and_then(|v| pk.as_u64(v)).unwrap_or(0),
            stream: g("stream").and_then(|v| pk.as_i64(v)).unwrap_or(0),
            segment_type,
            pool: g("segment_pool_id").and_then(|v| match pk.items(v) {
                [a, b] => Some((pk.as_i64(*a)?, pk.as_i64(*b)?)),
                _ => None,
            }),
            blocks,
        }
    }

    /// `external_annotations`: the `ProfilerStep#N` ranges the profiler marked in the history.
    fn annotations(&mut self, a: ValueId) -> Vec<Annotation> {
        let pk = self.pk;
        let mut annotations = Vec::new();
        for &e in pk.items(a) {
            let g = |k: &str| pk.dict_get(e, k);
            let (Some(stage), Some(name), Some(time_us)) = (
                g("stage").and_then(|v| pk.as_str(v)),
                self.str_of(g("name")),
                g("time_us").and_then(|v| pk.as_i64(v)),
            ) else {
                continue;
            };
            annotations.push(Annotation {
                start: stage == "START",
                name,
                device: g("device").and_then(|v| pk.as_i64(v)).unwrap_or(0),
                time_us,
            });
        }
        annotations
    }

    fn run(mut self) -> Result<Snapshot, Error> {
        let pk = self.pk;
        let root = pk.root;
        // Before PyTorch 2.1 some tools pickled the segment list alone.
        let (segments_id, traces_id, annotations_id) = match pk.get(root) {
            Value::Dict(_) => (
                pk.dict_get(root, "segments"),
                pk.dict_get(root, "device_traces"),
                pk.dict_get(root, "external_annotations"),
            ),
            Value::List(_) => (Some(root), None, None),
            _ => return Err(self.err("the pickle holds neither a dict nor a list")),
        };
        let Some(segments_id) = segments_id else {
            return Err(self.err("no 'segments' member"));
        };
        let mut legacy = traces_id.is_none();
        let mut segments = Vec::new();
        for &s in pk.items(segments_id) {
            if !self.first_use(s) {
                continue;
            }
            let seg = self.segment(s, &mut legacy);
            segments.push(seg);
        }
        let mut streamed = Vec::new();
        if let Some(t) = traces_id {
            for &dev in pk.items(t) {
                if self.first_use(dev) {
                    streamed.push(self.history(dev));
                }
            }
        }
        let annotations = annotations_id.map_or_else(Vec::new, |a| self.annotations(a));
        if pk.lossy_texts > 0 {
            self.diag.warn(
                "snapshot_text_not_utf8",
                format!(
                    "{}: {} string(s) held bytes that are not UTF-8 (a lone surrogate, as Python pickles one): read with U+FFFD in their place",
                    self.path.display(),
                    pk.lossy_texts
                ),
            );
        }
        if self.repeats > 0 {
            self.diag.warn(
                "snapshot_repeated_records",
                format!(
                    "{}: {} segment, block or history records are repeats of one object (memo references), which no snapshot torch writes holds: each kept once",
                    self.path.display(),
                    self.repeats
                ),
            );
        }
        Ok(Snapshot {
            path: self.path.to_path_buf(),
            strings: self.stacks.strings,
            frames: self.stacks.frames,
            stacks: self.stacks.stacks,
            segments,
            device_traces: Vec::new(),
            streamed,
            annotations,
            legacy_layout: legacy,
        })
    }
}

#[cfg(test)]
mod tests;
