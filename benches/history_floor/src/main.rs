//! A floor for the snapshot reader's history path (issue #44): a pickle machine that keeps
//! nothing of a history entry but its record (action, address, size, stream, time, stack).
//! Entry dicts become a record where their SETITEMS ends; a frame list, once its items are in,
//! becomes the number of its stack (equal item lists share one), so no table holds either.
//! Everything else (segments, frames, strings) is kept the plain way. It reads the opcodes a
//! snapshot torch writes (protocols 2 to 5) and stops at any other.
//!
//! It is not steptrace's reader: no checks beyond what it needs, no cut files, no streaming,
//! no replay. It answers one question: how many instructions an entry costs when the work is
//! only what the record needs (`valgrind --tool=callgrind`), against steptrace's ~3,300 then
//! (2026-11-29; 2,071 since steptrace's reader took this grammar, 2026-11-30).
//!   cargo run --release -- SNAPSHOT.pickle [ROUNDS [MODE]]
//! MODE: the plain machine by default, or `split`, `template`, `grammar`, `grammar2`, `stream`.
//! `split` decodes the opcodes on a thread of their own, the machine applying them on another.
//! `template` reads an entry whose bytes have the opcode skeleton of one of the last eight
//! entries read by the opcodes (a masked compare, its values then read at known offsets,
//! no value stack), and learns each entry the opcodes read as a skeleton.
//! `grammar` reads each entry at its `}` by the entry's grammar (a store, MARK, pairs of a
//! key's GET and a value, SETITEMS) straight into its record, no value stack, its new frame
//! list straight to a stack number; any other form is left to the opcodes from the `}`.
//! `grammar2` is `grammar` with its reads unchecked inside a window checked once, and a GET
//! held only below the entry's first store (its stores rising), not to each store.
//! `stream` is `grammar2` with its records handed in batches of 8,192 to a thread that replays
//! them (a block's bytes from its `alloc` to its `free_completed`) as they come, none kept:
//! the two-thread shape of a reader built on the grammar.
//! Every mode prints the same records' hash and replayed peak.
use rustc_hash::FxHashMap;
use std::time::Instant;

/// A value: a tag in the top 4 bits, a payload below.
type V = u64;
const SHIFT: u32 = 60;
const PAYLOAD: u64 = (1 << SHIFT) - 1;
const INT: u64 = 0;
const STR: u64 = 1;
const DICT: u64 = 2;
const LIST: u64 = 3;
const NONE: u64 = 4;
const BOOL: u64 = 5;
const OTHER: u64 = 6;
/// A history entry made a record: its number.
const REC: u64 = 7;
const MARK: V = u64::MAX;

fn v(tag: u64, payload: u64) -> V {
    tag << SHIFT | (payload & PAYLOAD)
}
fn tag(x: V) -> u64 {
    x >> SHIFT
}
fn payload(x: V) -> u64 {
    x & PAYLOAD
}

/// The members a record keeps, by the key's text.
fn field(key: &[u8]) -> u8 {
    match key {
        b"action" => 0,
        b"addr" => 1,
        b"size" => 2,
        b"stream" => 3,
        b"time_us" => 4,
        b"frames" => 5,
        _ => 6,
    }
}

#[derive(Clone, Copy, Default)]
struct Rec {
    action: u8,
    addr: u64,
    size: u64,
    stream: i64,
    time_us: i64,
    stack: u32,
}

enum List {
    Open(Vec<V>),
    /// Its items made a stack: its number.
    Stack(u32),
}

#[derive(Default)]
struct Machine {
    strs: Vec<(u32, u32)>,
    dicts: Vec<Vec<(V, V)>>,
    /// The memo slot each dict was stored at, or `u32::MAX`.
    dict_slot: Vec<u32>,
    lists: Vec<List>,
    memo: Vec<V>,
    stack: Vec<V>,
    marks: Vec<usize>,
    recs: Vec<Rec>,
    stacks: FxHashMap<Box<[V]>, u32>,
    /// (key value, field) of the keys met: a direct-mapped cache.
    keys: Vec<(V, u8)>,
    last_action: (V, u8),
    last_items: (Vec<V>, u32),
    /// Template mode (`template` on the command line).
    templates: bool,
    /// The skeletons learnt, at most [`TEMPLATES`], each in its slot until a newer one
    /// takes the slot in turn.
    tmpls: Vec<Tmpl>,
    /// The skeleton read last, which one followed each the last time, and the slot the next
    /// skeleton learnt goes to.
    last_t: Option<usize>,
    succ: Vec<usize>,
    next_slot: usize,
    /// Entries read by the opcodes whose skeleton could not be learnt.
    unlearnt: usize,
    /// The new list's items, a buffer kept.
    fresh: Vec<V>,
    /// Where each dict's bytes start (just past its `}`): an entry's, learnt as a skeleton.
    dict_pos: Vec<usize>,
    /// Entries read by a template, or by the grammar.
    hits: usize,
    /// Grammar mode (`grammar` on the command line).
    grammar: bool,
    /// `grammar2` on the command line.
    grammar2: bool,
    /// `grammar2`'s keys by their place in the entry: the key there last time and its field
    /// (every entry of a history names the same keys in the same order).
    g2_keys: [(V, u8); 16],
    /// `stream` mode: records handed in batches to a thread that replays them, none kept.
    stream: Option<std::sync::mpsc::SyncSender<Vec<Rec>>>,
    batch: Vec<Rec>,
    /// Records made (in `stream` mode, where `recs` stays empty).
    n_recs: u64,
}

/// Records a batch holds in `stream` mode (steptrace's sink's batch).
const BATCH: usize = 8192;

/// The window `grammar2` reads an entry in.
const G2: usize = 4096;

/// Skeletons kept.
const TEMPLATES: usize = 8;

/// What a byte range of a template entry is, in the order the bytes come.
#[derive(Clone, Copy)]
enum Role {
    /// A memo store of the dict (0), the string (1) or the list (2): its argument's width
    /// (0: MEMOIZE).
    Put { off: usize, width: u8, what: u8 },
    /// An integer member, `width` bytes (signed where `signed`).
    Int {
        off: usize,
        width: u8,
        signed: bool,
        field: u8,
    },
    /// A member that is a memo GET.
    Get { off: usize, width: u8, field: u8 },
    /// An item of the new frame list, a memo GET.
    Item { off: usize, width: u8 },
    /// A string member (its text part of the skeleton).
    Str { off: usize, len: u32 },
    /// The new frame list made.
    NewList,
}

/// The skeleton of an entry: its bytes after `}`, which of them must match, and the roles.
struct Tmpl {
    bytes: Vec<u8>,
    mask: Vec<u8>,
    roles: Vec<Role>,
}

fn le(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(x)
}

fn u32_at(f: &[u8], c: usize) -> u64 {
    u32::from_le_bytes(f[c..c + 4].try_into().unwrap()) as u64
}

/// A string or bytes opcode's length at `f[c..]` and the bytes that said it.
fn text_len(f: &[u8], op: u8, c: usize) -> (usize, usize) {
    match op {
        0x8c | b'C' => (f[c] as usize, 1),
        0x8d | 0x8e => (le(&f[c..c + 8]) as usize, 8),
        _ => (u32_at(f, c) as usize, 4),
    }
}

/// The `n` (at most 8) bytes at `f[c..]` as a signed little-endian integer, read as one word
/// where 8 bytes are there.
fn long1(f: &[u8], c: usize, n: usize) -> i64 {
    if n == 0 {
        return 0;
    }
    let w = match f.get(c..c + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().unwrap()),
        None => le(&f[c..c + n]),
    };
    let sh = 64 - 8 * n as u32;
    ((w << sh) as i64) >> sh
}

impl Machine {
    fn str_bytes<'a>(&self, f: &'a [u8], s: V) -> &'a [u8] {
        let (at, n) = self.strs[payload(s) as usize];
        &f[at as usize..(at + n) as usize]
    }

    fn action_of(&mut self, f: &[u8], x: V) -> u8 {
        if self.last_action.0 == x {
            return self.last_action.1;
        }
        let a = match self.str_bytes(f, x) {
            b"alloc" => 1,
            b"free_requested" => 2,
            b"free_completed" => 3,
            b"segment_alloc" => 4,
            b"segment_free" => 5,
            _ => 6,
        };
        self.last_action = (x, a);
        a
    }

    fn key_field(&mut self, f: &[u8], k: V) -> u8 {
        let line = (k as usize ^ (k >> 7) as usize) & 63;
        if self.keys[line].0 == k {
            return self.keys[line].1;
        }
        let fi = if tag(k) == STR {
            field(self.str_bytes(f, k))
        } else {
            6
        };
        self.keys[line] = (k, fi);
        fi
    }

    fn stack_of(&mut self, l: V) -> u32 {
        if tag(l) != LIST {
            return u32::MAX;
        }
        let li = payload(l) as usize;
        let items = match &mut self.lists[li] {
            List::Stack(s) => return *s,
            List::Open(items) => std::mem::take(items),
        };
        // Numbered as `number_stack` does, the items moved into `last_items`, not copied.
        let s = if items == self.last_items.0 {
            self.last_items.1
        } else {
            let next = self.stacks.len() as u32;
            let s = *self.stacks.entry(items.clone().into()).or_insert(next);
            self.last_items = (items, s);
            s
        };
        self.lists[li] = List::Stack(s);
        s
    }

    /// The number of the stack of `items` (equal item lists share one), the last list's
    /// items compared first.
    #[inline(always)]
    fn number_stack(&mut self, items: &[V]) -> u32 {
        if items == self.last_items.0.as_slice() {
            return self.last_items.1;
        }
        let next = self.stacks.len() as u32;
        let s = *self.stacks.entry(items.into()).or_insert(next);
        self.last_items.0.clear();
        self.last_items.0.extend_from_slice(items);
        self.last_items.1 = s;
        s
    }

    /// A grammar entry's new frame list, its items in `fresh`: the list, made the number of
    /// its stack.
    #[inline(always)]
    fn fresh_list(&mut self) -> V {
        let fresh = std::mem::take(&mut self.fresh);
        let s = self.number_stack(&fresh);
        self.fresh = fresh;
        self.lists.push(List::Stack(s));
        v(LIST, self.lists.len() as u64 - 1)
    }

    /// A grammar entry's member `fi` (a [`field`]) set to `x` in `r`; `None` where the
    /// action is no string (the opcodes read that entry).
    #[inline(always)]
    fn grammar_field(&mut self, f: &[u8], r: &mut Rec, fi: u8, x: V) -> Option<()> {
        match fi {
            0 => {
                if tag(x) != STR {
                    return None;
                }
                r.action = self.action_of(f, x);
            }
            1 => r.addr = payload(x),
            2 => r.size = payload(x),
            3 => r.stream = payload(x) as i64,
            4 => r.time_us = payload(x) as i64,
            5 => r.stack = self.stack_of(x),
            _ => {}
        }
        Some(())
    }

    /// A grammar entry read whole (its `}` just before `f[c]`): its record made, and its
    /// stores `mine` made (the dict's, first where `dict_put`, naming the record), the memo
    /// grown to `len`; the record left on the stack, as the opcodes leave it.
    #[inline(always)]
    fn grammar_commit(
        &mut self,
        r: Rec,
        dict_put: bool,
        mine: &mut [(usize, V)],
        len: usize,
        c: usize,
    ) {
        let rec = v(REC, self.emit(r));
        if dict_put {
            mine[0].1 = rec;
        }
        if len > self.memo.len() {
            self.memo.resize(len, v(NONE, 0));
        }
        for &(i, x) in mine.iter() {
            self.memo[i] = x;
        }
        // The dicts table keeps its count as the opcodes would leave it (a dict each), but
        // for `stream`, which keeps nothing of an entry.
        if self.stream.is_none() {
            self.dicts.push(Vec::new());
            self.dict_slot.push(u32::MAX);
            self.dict_pos.push(c);
        }
        self.stack.push(rec);
        self.hits += 1;
    }

    /// A record made: its number. In `stream` mode it goes to the replaying thread in
    /// batches of [`BATCH`], as steptrace's sink hands its entries on.
    #[inline(always)]
    fn emit(&mut self, r: Rec) -> u64 {
        let n = self.n_recs;
        self.n_recs += 1;
        match &self.stream {
            Some(tx) => {
                self.batch.push(r);
                if self.batch.len() == BATCH {
                    let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
                    tx.send(b).expect("the replaying thread");
                }
            }
            None => self.recs.push(r),
        }
        n
    }

    /// SETITEMS on a dict: a history entry's pairs make a record, others are kept.
    fn setitems(&mut self, f: &[u8], d: V, from: usize) -> Option<V> {
        let di = payload(d) as usize;
        let n = (self.stack.len() - from) / 2;
        if self.dicts[di].is_empty() && n >= 2 {
            let k0 = self.stack[from];
            if self.key_field(f, k0) == 0 {
                let mut r = Rec::default();
                for i in 0..n {
                    let (k, x) = (self.stack[from + 2 * i], self.stack[from + 2 * i + 1]);
                    match self.key_field(f, k) {
                        0 => r.action = self.action_of(f, x),
                        1 => r.addr = payload(x),
                        2 => r.size = payload(x),
                        3 => r.stream = payload(x) as i64,
                        4 => r.time_us = payload(x) as i64,
                        5 => r.stack = self.stack_of(x),
                        _ => {}
                    }
                }
                self.stack.truncate(from);
                let rn = self.emit(r);
                // The dict is the record from now on (a GET of it reads the record).
                return Some(v(REC, rn));
            }
        }
        let pairs: Vec<(V, V)> = self.stack[from..]
            .chunks_exact(2)
            .map(|p| (p[0], p[1]))
            .collect();
        self.stack.truncate(from);
        self.dicts[di].extend(pairs);
        None
    }

    /// The skeleton of the entry whose bytes (after its `}`) are `b`, as read with the memo
    /// as it is now; `None` where it is not of the usual form.
    #[inline(never)]
    fn learn(&mut self, f: &[u8], b: &[u8]) -> Option<Tmpl> {
        let mut mask = vec![0xffu8; b.len()];
        let mut roles = Vec::new();
        let mut c = 0usize;
        let put =
            |c: &mut usize, mask: &mut Vec<u8>, roles: &mut Vec<Role>, what: u8| match b.get(*c) {
                Some(b'q') => {
                    mask[*c + 1] = 0;
                    roles.push(Role::Put {
                        off: *c + 1,
                        width: 1,
                        what,
                    });
                    *c += 2;
                }
                Some(b'r') => {
                    mask[*c + 1..*c + 5].fill(0);
                    roles.push(Role::Put {
                        off: *c + 1,
                        width: 4,
                        what,
                    });
                    *c += 5;
                }
                Some(0x94) => {
                    roles.push(Role::Put {
                        off: *c,
                        width: 0,
                        what,
                    });
                    *c += 1;
                }
                _ => {}
            };
        put(&mut c, &mut mask, &mut roles, 0);
        if *b.get(c)? != b'(' {
            return None;
        }
        c += 1;
        loop {
            let op = *b.get(c)?;
            if op == b'u' {
                c += 1;
                break;
            }
            // The key: a GET, fixed.
            let k = match op {
                b'h' => {
                    c += 2;
                    self.memo[b[c - 1] as usize]
                }
                b'j' => {
                    c += 5;
                    self.memo[u32_at(b, c - 4) as usize]
                }
                _ => return None,
            };
            let field = self.key_field(f, k);
            let op = *b.get(c)?;
            match op {
                b'h' | b'j' => {
                    let w = if op == b'h' { 1 } else { 4 };
                    mask[c + 1..c + 1 + w].fill(0);
                    roles.push(Role::Get {
                        off: c + 1,
                        width: w as u8,
                        field,
                    });
                    c += 1 + w;
                }
                b'K' | b'M' | b'J' => {
                    let w = match op {
                        b'K' => 1,
                        b'M' => 2,
                        _ => 4,
                    };
                    mask[c + 1..c + 1 + w].fill(0);
                    roles.push(Role::Int {
                        off: c + 1,
                        width: w as u8,
                        signed: op == b'J',
                        field,
                    });
                    c += 1 + w;
                }
                0x8a => {
                    let n = *b.get(c + 1)? as usize;
                    if n > 8 {
                        return None;
                    }
                    mask[c + 2..c + 2 + n].fill(0);
                    roles.push(Role::Int {
                        off: c + 2,
                        width: n as u8,
                        signed: true,
                        field,
                    });
                    c += 2 + n;
                }
                b'X' | 0x8c => {
                    let (len, w) = if op == 0x8c {
                        (*b.get(c + 1)? as usize, 1)
                    } else {
                        (u32_at(b, c + 1) as usize, 4)
                    };
                    roles.push(Role::Str {
                        off: c + 1 + w,
                        len: len as u32,
                    });
                    c += 1 + w + len;
                    put(&mut c, &mut mask, &mut roles, 1);
                }
                b']' => {
                    c += 1;
                    roles.push(Role::NewList);
                    put(&mut c, &mut mask, &mut roles, 2);
                    match *b.get(c)? {
                        b'(' => {
                            c += 1;
                            loop {
                                match *b.get(c)? {
                                    b'e' => {
                                        c += 1;
                                        break;
                                    }
                                    b'h' => {
                                        mask[c + 1] = 0;
                                        roles.push(Role::Item {
                                            off: c + 1,
                                            width: 1,
                                        });
                                        c += 2;
                                    }
                                    b'j' => {
                                        mask[c + 1..c + 5].fill(0);
                                        roles.push(Role::Item {
                                            off: c + 1,
                                            width: 4,
                                        });
                                        c += 5;
                                    }
                                    _ => return None,
                                }
                            }
                        }
                        // One item and APPEND.
                        b'h' | b'j'
                            if b.get(c + if b[c] == b'h' { 2 } else { 5 }) == Some(&b'a') =>
                        {
                            let w = if b[c] == b'h' { 1 } else { 4 };
                            mask[c + 1..c + 1 + w].fill(0);
                            roles.push(Role::Item {
                                off: c + 1,
                                width: w as u8,
                            });
                            c += 2 + w;
                        }
                        // An empty list: the next key or the end follows.
                        _ => {}
                    }
                }
                b'N' | 0x88 | 0x89 => c += 1,
                _ => return None,
            }
        }
        (c == b.len()).then_some(Tmpl {
            bytes: b.to_vec(),
            mask,
            roles,
        })
    }

    /// A memo store opcode at `f[*p]`, if any: its index (MEMOIZE's is `len`, the memo's
    /// length as the stores before it left it). `Some(None)`: no store there.
    #[inline(always)]
    fn g_put(f: &[u8], p: &mut usize, len: &mut usize) -> Option<Option<usize>> {
        let i = match *f.get(*p)? {
            b'q' => {
                *p += 2;
                *f.get(*p - 1)? as usize
            }
            b'r' => {
                *p += 5;
                u32::from_le_bytes(f.get(*p - 4..*p)?.try_into().ok()?) as usize
            }
            0x94 => {
                *p += 1;
                *len
            }
            _ => return Some(None),
        };
        *len = (*len).max(i + 1);
        Some(Some(i))
    }

    /// A memo GET at `f[*p]` (opcode `op`), of a slot stored before the entry.
    #[inline(always)]
    fn g_get(&self, f: &[u8], p: &mut usize, op: u8, mine: &[(usize, V)]) -> Option<V> {
        let i = match op {
            b'h' => {
                *p += 2;
                *f.get(*p - 1)? as usize
            }
            b'j' => {
                *p += 5;
                u32::from_le_bytes(f.get(*p - 4..*p)?.try_into().ok()?) as usize
            }
            _ => return None,
        };
        if mine.iter().any(|m| m.0 == i) {
            return None;
        }
        self.memo.get(i).copied()
    }

    /// The grammar modes: reads the history entry whose bytes start at `f[c..]` (after its
    /// `}`) straight into its record, by the entry's grammar (a store, MARK, pairs of a key's
    /// GET and a value, SETITEMS), with no value stack, its reads checked (`grammar`) or
    /// unchecked inside a window (`grammar2`, `UNCHECKED`): the bytes it took. `None` where
    /// the bytes are of any other form: the strings and lists it made are taken back, but
    /// not a stack it numbered or a list it made a stack (the opcodes may then number a
    /// later stack otherwise, or not append to that list: no file measured has had either,
    /// as the records' hash shows).
    #[inline(never)]
    fn try_grammar<const UNCHECKED: bool>(&mut self, f: &[u8], c: usize) -> Option<usize> {
        let (strs, lists) = (self.strs.len(), self.lists.len());
        let r = if UNCHECKED {
            self.grammar2_entry(f, c)
        } else {
            self.grammar_entry(f, c)
        };
        if r.is_none() {
            self.strs.truncate(strs);
            self.lists.truncate(lists);
        }
        r
    }

    #[inline(always)]
    fn grammar_entry(&mut self, f: &[u8], c: usize) -> Option<usize> {
        let mut p = c;
        let mut len = self.memo.len();
        let dict_put = Self::g_put(f, &mut p, &mut len)?;
        if *f.get(p)? != b'(' {
            return None;
        }
        p += 1;
        // The entry's own stores, made once it is read whole.
        let mut mine = [(usize::MAX, 0u64); 4];
        let mut n_mine = 0;
        if let Some(i) = dict_put {
            mine[0] = (i, 0);
            n_mine = 1;
        }
        let mut r = Rec::default();
        let mut n = 0;
        loop {
            let op = *f.get(p)?;
            if op == b'u' {
                p += 1;
                break;
            }
            let k = self.g_get(f, &mut p, op, &mine[..n_mine])?;
            let fi = self.key_field(f, k);
            if n == 0 && fi != 0 {
                return None;
            }
            let op = *f.get(p)?;
            let x = match op {
                b'h' | b'j' => self.g_get(f, &mut p, op, &mine[..n_mine])?,
                b'K' => {
                    p += 2;
                    v(INT, *f.get(p - 1)? as u64)
                }
                b'M' => {
                    p += 3;
                    v(
                        INT,
                        u16::from_le_bytes(f.get(p - 2..p)?.try_into().ok()?) as u64,
                    )
                }
                b'J' => {
                    p += 5;
                    let x = u32::from_le_bytes(f.get(p - 4..p)?.try_into().ok()?);
                    v(INT, x as i32 as i64 as u64)
                }
                0x8a => {
                    let m = *f.get(p + 1)? as usize;
                    if m > 8 || f.len() < p + 2 + m {
                        return None;
                    }
                    let x = long1(f, p + 2, m);
                    p += 2 + m;
                    v(INT, x as u64)
                }
                b'X' | 0x8c => {
                    let (l, w) = if op == 0x8c {
                        (*f.get(p + 1)? as usize, 1)
                    } else {
                        (
                            u32::from_le_bytes(f.get(p + 1..p + 5)?.try_into().ok()?) as usize,
                            4,
                        )
                    };
                    let at = p + 1 + w;
                    f.get(at..at + l)?;
                    p = at + l;
                    self.strs.push((at as u32, l as u32));
                    let s = v(STR, self.strs.len() as u64 - 1);
                    if let Some(i) = Self::g_put(f, &mut p, &mut len)? {
                        if n_mine == mine.len() {
                            return None;
                        }
                        mine[n_mine] = (i, s);
                        n_mine += 1;
                    }
                    s
                }
                b']' => {
                    p += 1;
                    let put = Self::g_put(f, &mut p, &mut len)?;
                    self.fresh.clear();
                    match *f.get(p)? {
                        b'(' => {
                            p += 1;
                            loop {
                                let op = *f.get(p)?;
                                if op == b'e' {
                                    p += 1;
                                    break;
                                }
                                let x = self.g_get(f, &mut p, op, &mine[..n_mine])?;
                                self.fresh.push(x);
                            }
                        }
                        op @ (b'h' | b'j') => {
                            let mut q = p;
                            let x = self.g_get(f, &mut q, op, &mine[..n_mine])?;
                            // One item and APPEND, or an empty list and the next key.
                            if *f.get(q)? == b'a' {
                                self.fresh.push(x);
                                p = q + 1;
                            }
                        }
                        _ => {}
                    }
                    let l = self.fresh_list();
                    if let Some(i) = put {
                        if n_mine == mine.len() {
                            return None;
                        }
                        mine[n_mine] = (i, l);
                        n_mine += 1;
                    }
                    l
                }
                _ => return None,
            };
            self.grammar_field(f, &mut r, fi, x)?;
            n += 1;
        }
        if n < 2 {
            return None;
        }
        self.grammar_commit(r, dict_put.is_some(), &mut mine[..n_mine], len, c);
        Some(p - c)
    }

    /// `grammar2`'s entry: reads unchecked inside a window of [`G2`] bytes checked once, a
    /// GET held only below the entry's first store (its stores must rise), the keys looked
    /// up by their place in the entry first.
    #[inline(always)]
    fn grammar2_entry(&mut self, f: &[u8], c: usize) -> Option<usize> {
        let w: &[u8; G2 + 16] = f.get(c..c + G2 + 16)?.try_into().ok()?;
        let mut len = self.memo.len();
        // GETs are held below the entry's first store, and its stores rise: a GET of a slot
        // the entry stores leaves it to the opcodes.
        let lo = std::cell::Cell::new(usize::MAX);
        // Byte `i` of the window and the words there, unchecked: every offset read is held
        // under G2 + 16 by the loop's check of `p` (each opcode reads at most 9 bytes on).
        let b = |i: usize| unsafe { *w.get_unchecked(i) };
        let u32at =
            |i: usize| unsafe { u32::from_le_bytes(*(w.as_ptr().add(i) as *const [u8; 4])) };
        let memo = self.memo.as_ptr();
        let memo_len = self.memo.len();
        let last_put = std::cell::Cell::new(None::<usize>);
        let get = |p: &mut usize, op: u8| -> Option<V> {
            let i = if op == b'h' {
                *p += 2;
                b(*p - 1) as usize
            } else if op == b'j' {
                *p += 5;
                u32at(*p - 4) as usize
            } else {
                return None;
            };
            if i >= lo.get() || i >= memo_len {
                return None;
            }
            Some(unsafe { *memo.add(i) })
        };
        let put = |p: &mut usize, len: &mut usize| -> Option<Option<usize>> {
            let i = match b(*p) {
                b'q' => {
                    *p += 2;
                    b(*p - 1) as usize
                }
                b'r' => {
                    *p += 5;
                    u32at(*p - 4) as usize
                }
                0x94 => {
                    *p += 1;
                    *len
                }
                _ => return Some(None),
            };
            match last_put.get() {
                Some(l) if i <= l => return None,
                None => lo.set(i),
                _ => {}
            }
            last_put.set(Some(i));
            *len = (*len).max(i + 1);
            Some(Some(i))
        };
        let mut p = 0usize;
        let dict_put = put(&mut p, &mut len)?;
        if b(p) != b'(' {
            return None;
        }
        p += 1;
        let mut mine = [(usize::MAX, 0u64); 4];
        let mut n_mine = 0;
        if let Some(i) = dict_put {
            mine[0] = (i, 0);
            n_mine = 1;
        }
        let mut r = Rec::default();
        let mut n = 0;
        loop {
            if p >= G2 {
                return None;
            }
            let op = b(p);
            if op == b'u' {
                p += 1;
                break;
            }
            let k = get(&mut p, op)?;
            let fi = match self.g2_keys.get(n) {
                Some(&(last, fi)) if last == k => fi,
                _ => {
                    let fi = self.key_field(f, k);
                    if let Some(slot) = self.g2_keys.get_mut(n) {
                        *slot = (k, fi);
                    }
                    fi
                }
            };
            if n == 0 && fi != 0 {
                return None;
            }
            let op = b(p);
            let x = match op {
                b'h' | b'j' => get(&mut p, op)?,
                b'K' => {
                    p += 2;
                    v(INT, b(p - 1) as u64)
                }
                b'M' => {
                    p += 3;
                    v(INT, (b(p - 2) as u64) | (b(p - 1) as u64) << 8)
                }
                b'J' => {
                    p += 5;
                    v(INT, u32at(p - 4) as i32 as i64 as u64)
                }
                0x8a => {
                    let m = b(p + 1) as usize;
                    if m > 8 {
                        return None;
                    }
                    let x = long1(&w[..], p + 2, m);
                    p += 2 + m;
                    v(INT, x as u64)
                }
                b'X' | 0x8c => {
                    let (l, wd) = if op == 0x8c {
                        (b(p + 1) as usize, 1)
                    } else {
                        (u32at(p + 1) as usize, 4)
                    };
                    let at = p + 1 + wd;
                    if l > G2 || at + l >= G2 {
                        return None;
                    }
                    p = at + l;
                    self.strs.push(((c + at) as u32, l as u32));
                    let s = v(STR, self.strs.len() as u64 - 1);
                    if let Some(i) = put(&mut p, &mut len)? {
                        if n_mine == mine.len() {
                            return None;
                        }
                        mine[n_mine] = (i, s);
                        n_mine += 1;
                    }
                    s
                }
                b']' => {
                    p += 1;
                    let lput = put(&mut p, &mut len)?;
                    self.fresh.clear();
                    match b(p) {
                        b'(' => {
                            p += 1;
                            loop {
                                if p >= G2 {
                                    return None;
                                }
                                let op = b(p);
                                if op == b'e' {
                                    p += 1;
                                    break;
                                }
                                let x = get(&mut p, op)?;
                                self.fresh.push(x);
                            }
                        }
                        op @ (b'h' | b'j') => {
                            let mut q = p;
                            let x = get(&mut q, op)?;
                            if b(q) == b'a' {
                                self.fresh.push(x);
                                p = q + 1;
                            }
                        }
                        _ => {}
                    }
                    let l = self.fresh_list();
                    if let Some(i) = lput {
                        if n_mine == mine.len() {
                            return None;
                        }
                        mine[n_mine] = (i, l);
                        n_mine += 1;
                    }
                    l
                }
                _ => return None,
            };
            self.grammar_field(f, &mut r, fi, x)?;
            n += 1;
        }
        if n < 2 {
            return None;
        }
        self.grammar_commit(r, dict_put.is_some(), &mut mine[..n_mine], len, c);
        Some(p)
    }

    /// Whether the bytes at `f[c..]` have `t`'s skeleton: compared word by word.
    fn matches(t: &Tmpl, f: &[u8], c: usize) -> bool {
        let n = t.bytes.len();
        let Some(b) = f.get(c..c + n) else {
            return false;
        };
        let mut i = 0;
        while i + 8 <= n {
            let x = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
            let y = u64::from_le_bytes(t.bytes[i..i + 8].try_into().unwrap());
            let m = u64::from_le_bytes(t.mask[i..i + 8].try_into().unwrap());
            if (x ^ y) & m != 0 {
                return false;
            }
            i += 8;
        }
        (i..n).all(|i| (b[i] ^ t.bytes[i]) & t.mask[i] == 0)
    }

    /// Reads the entry whose bytes start at `f[c..]` (after its `}`) by a template, where
    /// its skeleton matches: the bytes it took.
    #[inline(never)]
    fn try_template(&mut self, f: &[u8], c: usize) -> Option<usize> {
        // The skeleton that followed the last one the last time first: history entries come
        // in a few repeating sequences (an allocation, its free requested, completed).
        let guess = self.last_t.map(|l| self.succ[l]);
        let k = match guess.filter(|&g| g < self.tmpls.len() && Self::matches(&self.tmpls[g], f, c))
        {
            Some(g) => g,
            None => (0..self.tmpls.len()).find(|&k| Self::matches(&self.tmpls[k], f, c))?,
        };
        if let Some(l) = self.last_t {
            self.succ[l] = k;
        }
        self.last_t = Some(k);
        let n = self.tmpls[k].bytes.len();
        let b = &f[c..c + n];
        let roles = std::mem::take(&mut self.tmpls[k].roles);
        let mut r = Rec::default();
        let mut items: Vec<V> = std::mem::take(&mut self.last_items.0);
        let mut fresh: Vec<V> = std::mem::take(&mut self.fresh);
        fresh.clear();
        let mut list_v = None;
        let mut str_v = v(NONE, 0);
        let rn = self.n_recs;
        let arg = |off: usize, w: u8| -> u64 {
            match w {
                1 => b[off] as u64,
                2 => u16::from_le_bytes([b[off], b[off + 1]]) as u64,
                _ => u32_at(b, off),
            }
        };
        for &role in &roles {
            match role {
                Role::Put { off, width, what } => {
                    let idx = if width == 0 {
                        self.memo.len()
                    } else {
                        arg(off, width) as usize
                    };
                    let val = match what {
                        0 => v(REC, rn),
                        1 => str_v,
                        _ => list_v.unwrap_or(v(NONE, 0)),
                    };
                    if idx >= self.memo.len() {
                        self.memo.resize(idx + 1, v(NONE, 0));
                    }
                    self.memo[idx] = val;
                }
                Role::Int {
                    off,
                    width,
                    signed,
                    field,
                } => {
                    let x = if width <= 2 && !signed {
                        arg(off, width)
                    } else if width == 4 && signed {
                        u32_at(b, off) as u32 as i32 as i64 as u64
                    } else {
                        long1(b, off, width as usize) as u64
                    };
                    let x = payload(v(INT, x));
                    match field {
                        1 => r.addr = x,
                        2 => r.size = x,
                        3 => r.stream = x as i64,
                        4 => r.time_us = x as i64,
                        _ => {}
                    }
                }
                Role::Get { off, width, field } => {
                    let x = self.memo[arg(off, width) as usize];
                    match field {
                        0 => r.action = self.action_of(f, x),
                        5 => r.stack = self.stack_of(x),
                        _ => {}
                    }
                }
                Role::Item { off, width } => fresh.push(self.memo[arg(off, width) as usize]),
                Role::Str { off, len } => {
                    self.strs.push(((c + off) as u32, len));
                    str_v = v(STR, self.strs.len() as u64 - 1);
                }
                Role::NewList => {
                    self.lists.push(List::Open(Vec::new()));
                    list_v = Some(v(LIST, self.lists.len() as u64 - 1));
                }
            }
        }
        if let Some(l) = list_v {
            // The new list's stack: the last one's where the items are its items.
            let s = if fresh == items {
                self.last_items.1
            } else {
                let next = self.stacks.len() as u32;
                let s = *self.stacks.entry(fresh.clone().into()).or_insert(next);
                std::mem::swap(&mut items, &mut fresh);
                self.last_items.1 = s;
                s
            };
            self.lists[payload(l) as usize] = List::Stack(s);
            r.stack = s;
        }
        self.last_items.0 = items;
        self.fresh = fresh;
        self.tmpls[k].roles = roles;
        self.emit(r);
        self.stack.push(v(REC, rn));
        self.hits += 1;
        Some(n)
    }

    fn put(&mut self, i: usize) {
        let top = *self.stack.last().expect("a value to store");
        if i >= self.memo.len() {
            self.memo.resize(i + 1, v(NONE, 0));
        }
        self.memo[i] = top;
        if tag(top) == DICT {
            self.dict_slot[payload(top) as usize] = i as u32;
        }
    }

    /// The opcodes that make and fill containers, shared by the loop over the bytes and the
    /// loop over a tape: `c` is the input offset just past the opcode (where a dict's bytes
    /// start, and where a dict's SETITEMS ends).
    #[inline(always)]
    fn container(&mut self, f: &[u8], op: u8, c: usize) -> Option<()> {
        match op {
            b'}' => {
                self.dicts.push(Vec::new());
                self.dict_slot.push(u32::MAX);
                self.dict_pos.push(c);
                self.stack.push(v(DICT, self.dicts.len() as u64 - 1));
            }
            b']' => {
                self.lists.push(List::Open(Vec::new()));
                self.stack.push(v(LIST, self.lists.len() as u64 - 1));
            }
            b')' => self.stack.push(v(OTHER, 0)),
            b'(' => self.marks.push(self.stack.len()),
            b'a' => {
                let x = self.stack.pop()?;
                let l = *self.stack.last()?;
                if let List::Open(items) = &mut self.lists[payload(l) as usize] {
                    items.push(x);
                }
            }
            b'e' => {
                let from = self.marks.pop()?;
                let l = self.stack[from - 1];
                // In `stream` mode a batch of records alone leaves the list (handed on).
                let handed =
                    self.stream.is_some() && self.stack[from..].iter().all(|&x| tag(x) == REC);
                if let (false, List::Open(items)) = (handed, &mut self.lists[payload(l) as usize]) {
                    items.extend_from_slice(&self.stack[from..]);
                }
                self.stack.truncate(from);
            }
            b'u' => {
                let from = self.marks.pop()?;
                let d = self.stack[from - 1];
                if let Some(rec) = self.setitems(f, d, from) {
                    // What the memo stored for it (its slot was written as the dict).
                    let slot = self.dict_slot[payload(d) as usize];
                    if slot != u32::MAX {
                        self.memo[slot as usize] = rec;
                    }
                    *self.stack.last_mut()? = rec;
                    if self.templates {
                        let start = self.dict_pos[payload(d) as usize];
                        let learnt = self.learn(f, &f[start..c]);
                        self.unlearnt += learnt.is_none() as usize;
                        if let Some(new) = learnt {
                            // Into the next slot in turn (the successors name slots).
                            let k = self.next_slot % TEMPLATES;
                            self.next_slot += 1;
                            if k == self.tmpls.len() {
                                self.tmpls.push(new);
                                self.succ.push(0);
                            } else {
                                self.tmpls[k] = new;
                            }
                            if let Some(l) = self.last_t {
                                self.succ[l] = k;
                            }
                            self.last_t = Some(k);
                        }
                    }
                }
            }
            b's' => {
                let x = self.stack.pop()?;
                let k = self.stack.pop()?;
                let d = *self.stack.last()?;
                self.dicts[payload(d) as usize].push((k, x));
            }
            b't' => {
                let from = self.marks.pop()?;
                self.stack.truncate(from);
                self.stack.push(v(OTHER, 0));
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let l = self.stack.len() - n;
                self.stack.truncate(l);
                self.stack.push(v(OTHER, 0));
            }
            _ => return None,
        }
        Some(())
    }

    fn run(&mut self, f: &[u8]) -> Option<V> {
        let mut c = 0usize;
        loop {
            let op = *f.get(c)?;
            c += 1;
            match op {
                0x80 => c += 1,
                0x95 => c += 8,
                b'}' => {
                    let read = if self.grammar2 {
                        self.try_grammar::<true>(f, c)
                    } else if self.grammar {
                        self.try_grammar::<false>(f, c)
                    } else {
                        None
                    };
                    if let Some(n) = read {
                        c += n;
                        continue;
                    }
                    if self.templates {
                        if let Some(n) = self.try_template(f, c) {
                            c += n;
                            continue;
                        }
                    }
                    self.container(f, op, c)?;
                }
                b']' | b')' | b'(' | b'a' | b'e' | b'u' | b's' | b't' | 0x85..=0x87 => {
                    self.container(f, op, c)?
                }
                b'q' => {
                    self.put(f[c] as usize);
                    c += 1;
                }
                b'r' => {
                    self.put(u32_at(f, c) as usize);
                    c += 4;
                }
                0x94 => self.put(self.memo.len()),
                b'h' => {
                    self.stack.push(self.memo[f[c] as usize]);
                    c += 1;
                }
                b'j' => {
                    self.stack.push(self.memo[u32_at(f, c) as usize]);
                    c += 4;
                }
                b'K' => {
                    self.stack.push(v(INT, f[c] as u64));
                    c += 1;
                }
                b'M' => {
                    self.stack
                        .push(v(INT, u16::from_le_bytes([f[c], f[c + 1]]) as u64));
                    c += 2;
                }
                b'J' => {
                    self.stack
                        .push(v(INT, u32_at(f, c) as u32 as i32 as i64 as u64));
                    c += 4;
                }
                0x8a => {
                    let n = (f[c] as usize).min(8);
                    let x = long1(f, c + 1, n);
                    self.stack.push(v(INT, x as u64));
                    c += 1 + n;
                }
                b'X' | 0x8c | b'B' | b'C' | 0x8d | 0x8e => {
                    let (len, w) = text_len(f, op, c);
                    self.strs.push(((c + w) as u32, len as u32));
                    self.stack.push(v(STR, self.strs.len() as u64 - 1));
                    c += w + len;
                }
                b'G' => {
                    self.stack.push(v(OTHER, 0));
                    c += 8;
                }
                b'N' => self.stack.push(v(NONE, 0)),
                0x88 | 0x89 => self.stack.push(v(BOOL, (op == 0x88) as u64)),
                b'.' => return self.stack.pop(),
                _ => {
                    eprintln!("opcode {op:#x} at {} not read here", c - 1);
                    return None;
                }
            }
        }
    }
}

/// The split mode: one thread decodes the opcodes into a tape of words (an opcode and its
/// argument, values made where they need no state), another applies the tape to the machine;
/// what steptrace's reader does with its thread ahead, for the lean machine.
mod split {
    use super::*;
    use std::sync::mpsc;

    /// A value pushed as it is: the next word.
    const PUSH: u8 = 0xf0;
    /// A string: its length here, its offset the next word.
    const TEXT: u8 = 0xf1;
    const WORDS: usize = 1 << 16;

    fn word(op: u8, arg: u64) -> u64 {
        (op as u64) << 56 | (arg & ((1 << 56) - 1))
    }

    /// Decodes the whole input into tapes of [`WORDS`] words, sent on `tx`; `None` where an
    /// opcode is not one it reads.
    fn decode(
        f: &[u8],
        tx: mpsc::SyncSender<Vec<u64>>,
        back: mpsc::Receiver<Vec<u64>>,
    ) -> Option<()> {
        let mut c = 0usize;
        let mut tape = Vec::with_capacity(WORDS + 4);
        loop {
            if tape.len() >= WORDS {
                let next = back
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(WORDS + 4));
                tx.send(std::mem::replace(&mut tape, next)).ok()?;
            }
            let op = *f.get(c)?;
            c += 1;
            match op {
                0x80 => c += 1,
                0x95 => c += 8,
                b'}'
                | b']'
                | b')'
                | b'('
                | 0x94
                | b'a'
                | b'e'
                | b'u'
                | b's'
                | b't'
                | 0x85..=0x87 => tape.push(word(op, 0)),
                b'q' | b'h' => {
                    tape.push(word(op, f[c] as u64));
                    c += 1;
                }
                b'r' | b'j' => {
                    tape.push(word(op, u32_at(f, c)));
                    c += 4;
                }
                b'K' => {
                    tape.extend_from_slice(&[word(PUSH, 0), v(INT, f[c] as u64)]);
                    c += 1;
                }
                b'M' => {
                    tape.extend_from_slice(&[
                        word(PUSH, 0),
                        v(INT, u16::from_le_bytes([f[c], f[c + 1]]) as u64),
                    ]);
                    c += 2;
                }
                b'J' => {
                    tape.extend_from_slice(&[
                        word(PUSH, 0),
                        v(INT, u32_at(f, c) as u32 as i32 as i64 as u64),
                    ]);
                    c += 4;
                }
                0x8a => {
                    let n = (f[c] as usize).min(8);
                    tape.extend_from_slice(&[word(PUSH, 0), v(INT, long1(f, c + 1, n) as u64)]);
                    c += 1 + n;
                }
                b'X' | 0x8c | b'B' | b'C' | 0x8d | 0x8e => {
                    let (len, w) = text_len(f, op, c);
                    tape.extend_from_slice(&[word(TEXT, len as u64), (c + w) as u64]);
                    c += w + len;
                }
                b'G' => {
                    tape.extend_from_slice(&[word(PUSH, 0), v(OTHER, 0)]);
                    c += 8;
                }
                b'N' => tape.extend_from_slice(&[word(PUSH, 0), v(NONE, 0)]),
                0x88 | 0x89 => {
                    tape.extend_from_slice(&[word(PUSH, 0), v(BOOL, (op == 0x88) as u64)])
                }
                b'.' => {
                    tape.push(word(op, 0));
                    tx.send(tape).ok()?;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    impl Machine {
        /// Applies tapes as they come until STOP.
        fn apply(
            &mut self,
            f: &[u8],
            rx: mpsc::Receiver<Vec<u64>>,
            back: mpsc::Sender<Vec<u64>>,
        ) -> Option<V> {
            while let Ok(mut tape) = rx.recv() {
                let mut i = 0;
                while i < tape.len() {
                    let w = tape[i];
                    i += 1;
                    let (op, arg) = ((w >> 56) as u8, w & ((1 << 56) - 1));
                    match op {
                        PUSH => {
                            self.stack.push(tape[i]);
                            i += 1;
                        }
                        TEXT => {
                            self.strs.push((tape[i] as u32, arg as u32));
                            self.stack.push(v(STR, self.strs.len() as u64 - 1));
                            i += 1;
                        }
                        b'h' | b'j' => self.stack.push(self.memo[arg as usize]),
                        b'q' | b'r' => self.put(arg as usize),
                        0x94 => self.put(self.memo.len()),
                        // The tape keeps no input offsets: templates are off here, which is
                        // all a container opcode needs one for.
                        b'}'
                        | b']'
                        | b')'
                        | b'('
                        | b'a'
                        | b'e'
                        | b'u'
                        | b's'
                        | b't'
                        | 0x85..=0x87 => self.container(f, op, 0)?,
                        b'.' => return self.stack.pop(),
                        _ => return None,
                    }
                }
                tape.clear();
                let _ = back.send(tape);
            }
            None
        }
    }

    /// The machine run with its decoding on a thread of its own.
    pub fn run(m: &mut Machine, f: &[u8]) -> Option<V> {
        let (tx, rx) = mpsc::sync_channel(16);
        let (back_tx, back_rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || decode(f, tx, back_rx));
            m.apply(f, rx, back_tx)
        })
    }
}

/// What the records come to: their count by action, sizes, a hash of every member in order,
/// and a replay of them (a block's size from its `alloc` until its `free_completed`, as
/// steptrace's walk counts allocated bytes) with its peak. The replay starts from nothing:
/// where blocks were alive before the history, steptrace (which counts them from the
/// snapshot's segments) has a higher peak; on histories that start from nothing the peaks were
/// equal (the 1 GB generated file, a real nanoGPT snapshot: history_floor_grammar_1129).
#[derive(Default)]
struct Stats {
    by_action: [usize; 7],
    bytes: u128,
    hash: rustc_hash::FxHasher,
    live: FxHashMap<u64, u64>,
    allocated: u64,
    peak: u64,
}

impl Stats {
    fn add(&mut self, r: &Rec) {
        std::hash::Hash::hash(
            &(r.action, r.addr, r.size, r.stream, r.time_us, r.stack),
            &mut self.hash,
        );
        self.by_action[r.action as usize] += 1;
        self.bytes += r.size as u128;
        match r.action {
            1 => {
                if let Some(old) = self.live.insert(r.addr, r.size) {
                    self.allocated -= old;
                }
                self.allocated += r.size;
                self.peak = self.peak.max(self.allocated);
            }
            3 => {
                if let Some(s) = self.live.remove(&r.addr) {
                    self.allocated -= s;
                }
            }
            _ => {}
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = std::fs::read(&args[0]).expect("a snapshot pickle");
    let rounds: usize = args.get(1).map_or(1, |r| r.parse().unwrap());
    let mode = args.get(2).map_or("", |m| m.as_str());
    let split = mode == "split";
    let stream = mode == "stream";
    for _ in 0..rounds {
        let t = Instant::now();
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Rec>>(4);
        // `stream`: the records replayed on a thread of their own as they come.
        let replay = stream.then(|| {
            std::thread::spawn(move || {
                let mut st = Stats::default();
                for b in rx {
                    for r in &b {
                        st.add(r);
                    }
                }
                st
            })
        });
        let mut m = Machine {
            keys: vec![(MARK, 0); 64],
            g2_keys: [(MARK, 0); 16],
            last_action: (MARK, 0),
            templates: mode == "template",
            grammar: mode == "grammar",
            grammar2: mode == "grammar2" || stream,
            stream: stream.then_some(tx),
            ..Default::default()
        };
        let top = if split {
            split::run(&mut m, &f)
        } else {
            m.run(&f)
        };
        let st = match replay {
            Some(h) => {
                let rest = std::mem::take(&mut m.batch);
                if let Some(tx) = m.stream.take() {
                    tx.send(rest).expect("the replaying thread");
                }
                h.join().expect("the replaying thread")
            }
            None => {
                let mut st = Stats::default();
                for r in &m.recs {
                    st.add(r);
                }
                st
            }
        };
        // In `stream` mode the time includes the replay; in the others it does not.
        let el = t.elapsed().as_secs_f64();
        println!(
            "{:.3} s: {} entries (by action {:?}), sizes {}, {} stacks, {} dicts, \
             {} lists, top {}, {} by template or grammar, records' hash {:016x}, peak {}",
            el,
            m.n_recs,
            &st.by_action[1..],
            st.bytes,
            m.stacks.len(),
            m.dicts.len(),
            m.lists.len(),
            top.is_some(),
            m.hits,
            std::hash::Hasher::finish(&st.hash),
            st.peak
        );
        if m.templates {
            println!(
                "{} entries read by the opcodes had no skeleton to learn",
                m.unlearnt
            );
        }
    }
}
