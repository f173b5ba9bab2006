//! The stacks of a snapshot: its strings, frames and distinct frame lists.

use super::*;

/// The stacks of a snapshot: its strings, frames and distinct frame lists, found from the
/// pickle's frame objects.
#[derive(Default)]
pub(super) struct Stacks {
    pub(super) strings: Interner,
    pub(super) frames: Vec<Frame>,
    frame_index: FxHashMap<ValueId, FrameId>,
    pub(super) stacks: Vec<Box<[FrameId]>>,
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
pub(super) const NO_STACK: StackId = StackId(u32::MAX);

impl Stacks {
    pub(super) fn str_of(&mut self, pk: &Pickle, id: Option<ValueId>) -> Option<StrId> {
        let s = pk.as_str(id?)?;
        Some(self.strings.intern(s))
    }

    pub(super) fn stack_of(&mut self, pk: &Pickle, id: Option<ValueId>) -> StackId {
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
