//! The pickle machine: opcodes in, the tables of a [`Pickle`] out. Only opcodes that build
//! data are run; see the module above for what is refused. This file holds the machine's state
//! and the operations on it; `opcodes` reads the opcodes that drive them.

pub(super) mod ahead;
mod containers;
mod entry;
mod fresh;
mod input;
mod keys;
mod memo;
mod opcodes;
mod primitives;
use self::fresh::{appended, short_key, Fresh, ShortKey, NO_PUT, SHORT_STR};
use self::keys::{inline_int, short_text, KeySlot, Keys, ABSENT, KEY_CACHE, NONE, SHARE_MAX};

pub(super) use input::Input;

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use super::store::{Slot, Store, Text, Texts};
use super::{
    Kind, Pickle, PickleError, RecordShape, RecordSink, ValueId, PAYLOAD_BITS, RECORD_MAX_KEYS,
    TAKEN,
};

/// The pickle machine: the tables it builds, and its stack, marks and memo.
pub(super) struct Reader<'a> {
    /// Whether lists with equal items share them (off only in tests, to compare).
    share: bool,
    pub(super) pk: Pickle,
    pub(super) input: Input<'a>,
    /// Where records go as they complete, if the caller gave one.
    pub(super) sink: Option<&'a mut dyn RecordSink>,
    /// Whether the slots of records the sink took, and of their frame lists, are given back
    /// (`sink_record`; off only in tests, to compare).
    pub(super) release: bool,
    /// Whether history entries of the usual form are read by their grammar (`entry`; off
    /// only in tests, to compare; on only with `release`).
    pub(super) direct: bool,
    /// What that path keeps from one entry to the next, and the entry it reads.
    grammar: entry::Grammar,
    /// How many entries that path read.
    pub(super) direct_records: usize,
    /// How many of those had the new frame list of the one before it, or an empty one
    /// (`entry::Grammar::last_items`).
    pub(super) list_runs: usize,
    stack: Vec<ValueId>,
    /// Stack heights at each MARK, innermost last.
    marks: Vec<usize>,
    memo: memo::Memo,
    /// What recent dict keys name.
    keys: Keys,
    /// Where in `seqs.flat` each distinct short list filled in one go is, by a hash of its
    /// items: every allocation's stack is a list of its own, mostly of the same frames as
    /// others, and sharing their items saves a tenth of a GB snapshot's memory.
    shared: FxHashMap<u64, usize>,
    /// Short strings met so far, by their bytes: a snapshot writes each history entry's
    /// action afresh (millions of `'alloc'`), and one id for each distinct one keeps their
    /// bytes and words out of the tables.
    short_strs: FxHashMap<ShortKey, ValueId>,
    /// The last empty dict and list made while a sink reads records, followed until a
    /// record takes them (`sink_record`).
    fresh_dict: Fresh,
    fresh_list: Fresh,
    /// (record number, memo index) of sunk records not yet put in a list, oldest first.
    sunk_puts: VecDeque<(u64, usize)>,
    /// The [`Kind::Frozen`] number of each place frozen so far.
    frozen_at: FxHashMap<u64, u64>,
    /// Whether the sink was told of a generic dict (`RecordSink::generic`), which its
    /// `appended` may then take: no history entry's new list is then read by the grammar.
    generic_given: bool,
}

impl<'a> Reader<'a> {
    pub(super) fn new(
        input: Input<'a>,
        share: bool,
        shape: Option<&'static RecordShape>,
    ) -> Reader<'a> {
        Reader {
            share,
            input,
            sink: None,
            release: false,
            direct: false,
            grammar: entry::Grammar::default(),
            direct_records: 0,
            list_runs: 0,
            pk: Pickle {
                texts: Texts::default(),
                wide: Vec::new(),
                floats: Vec::new(),
                seqs: Store::new(),
                maps: Store::new(),
                shape,
                records: Vec::new(),
                sunk: false,
                frozen: Vec::new(),
                root: NONE,
                lossy_texts: 0,
            },
            stack: Vec::new(),
            marks: Vec::new(),
            memo: memo::Memo::default(),
            keys: Keys {
                cache: [(0, None); KEY_CACHE],
                first: None,
            },
            shared: FxHashMap::default(),
            short_strs: FxHashMap::default(),
            fresh_dict: Fresh::NONE,
            fresh_list: Fresh::NONE,
            sunk_puts: VecDeque::new(),
            frozen_at: FxHashMap::default(),
            generic_given: false,
        }
    }

    /// Items above the mark at `from` that were waiting for a single APPEND (a list of one
    /// item is pickled as the empty list, the item, APPEND, with no mark) go into their list:
    /// a container after an empty list, where the level holds key-value pairs at an odd count
    /// (`dict_level`: its pending items alternate key, value, so a container in a key's place
    /// is such an item), or after an empty list in a list's pending items.
    fn settle_single_appends(&mut self, from: usize, dict_level: bool) {
        loop {
            let n = self.stack.len();
            if n < from + 2 {
                return;
            }
            let (prev, top) = (self.stack[n - 2], self.stack[n - 1]);
            let item = matches!(
                top.kind(),
                Kind::List | Kind::Dict | Kind::Set | Kind::Tuple | Kind::Sunk | Kind::Frozen
            );
            let waiting = if dict_level {
                !(n - from).is_multiple_of(2) && item
            } else {
                matches!(top.kind(), Kind::List | Kind::Dict | Kind::Sunk)
            };
            if !(waiting
                && matches!(prev.kind(), Kind::List | Kind::Set)
                && self.pk.items(prev).is_empty())
            {
                return;
            }
            self.pk.seqs.extend(prev.data(), &[top]);
            self.stack.pop();
            appended(self.appending().0, prev, &[top]);
        }
    }

    /// After a cut at `offset`: closes the open containers from the innermost out (see
    /// [`parse_lenient`]) and returns the bottom of the stack, the root being built.
    pub(super) fn salvage(&mut self, offset: usize) -> Result<ValueId, PickleError> {
        let mut unfinished_dict: Option<ValueId> = None;
        // The bottom of the stack is a level too: a root filled by single SETITEMs.
        let mut levels = std::mem::take(&mut self.marks);
        levels.insert(0, 1);
        while let Some(from) = levels.pop() {
            if from > self.stack.len() || from == 0 {
                break;
            }
            if let Some(d) = unfinished_dict.take() {
                if self.stack.len() > from && self.stack.last() == Some(&d) {
                    self.stack.pop();
                }
            }
            let container = self.stack[from - 1];
            let dict = matches!(container.kind(), Kind::Dict | Kind::Sunk);
            self.settle_single_appends(from, dict);
            match container.kind() {
                Kind::List | Kind::Set => {
                    self.add_to_list(container, from, offset)?;
                }
                Kind::Dict | Kind::Sunk => {
                    if !(self.stack.len() - from).is_multiple_of(2) {
                        self.stack.pop(); // a key whose value never came
                    }
                    self.add_to_dict(container, from, offset)?;
                    // As the stack now names it (a record the sink took is sunk there).
                    unfinished_dict = Some(self.stack[from - 1]);
                }
                // A tuple or anything else in the making: its items are dropped.
                _ => self.stack.truncate(from),
            }
        }
        self.stack
            .first()
            .copied()
            .ok_or(PickleError::Truncated { offset })
    }
}
