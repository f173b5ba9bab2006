//! Walking a parsed snapshot's segments, blocks and history into the model's tables, each record met once.

use super::*;

pub(super) struct Extractor<'a> {
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
    pub(super) fn new(
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

    pub(super) fn run(mut self) -> Result<Snapshot, Error> {
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
