//! The reader against hand-made and generated pickles.

use super::store::{SLOT_MAX_LEN, TEXT_MAX_LEN};
use super::*;

/// The shape of torch's allocator history entries, as the snapshot reader names it.
static ENTRY: RecordShape = RecordShape::new(
    &["action", "addr", "size", "stream", "time_us", "frames"],
    &["compile_context", "user_metadata"],
);

fn parse(buf: &[u8]) -> Result<Pickle, PickleError> {
    parse_records(buf, &ENTRY)
}

fn parse_with(buf: &[u8], share: bool) -> Result<Pickle, PickleError> {
    super::parse_with(buf, share, Some(&ENTRY))
}

/// Whether two parses hold the same values: equal scalars and texts, containers with equal
/// items in order, history records alike in both. Shared objects are compared once (by the
/// pair of ids), so cyclic pickles terminate.
fn same(a: &Pickle, b: &Pickle) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![(a.root, b.root)];
    while let Some((x, y)) = todo.pop() {
        if !seen.insert((x, y)) {
            continue;
        }
        match (a.record(x), b.record(y)) {
            (Some(rx), Some(ry)) => {
                for k in ENTRY.keys {
                    match (rx.get(k), ry.get(k)) {
                        (Some(u), Some(v)) => todo.push((u, v)),
                        (None, None) => {}
                        _ => return false,
                    }
                }
                continue;
            }
            (None, None) => {}
            _ => return false,
        }
        let ok = match (a.get(x), b.get(y)) {
            (Value::List(u), Value::List(v))
            | (Value::Tuple(u), Value::Tuple(v))
            | (Value::Set(u), Value::Set(v)) => {
                u.len() == v.len() && {
                    todo.extend(u.iter().copied().zip(v.iter().copied()));
                    true
                }
            }
            (Value::Dict(u), Value::Dict(v)) => {
                u.len() == v.len() && {
                    for (&(k1, v1), &(k2, v2)) in u.iter().zip(v) {
                        todo.push((k1, k2));
                        todo.push((v1, v2));
                    }
                    true
                }
            }
            // NaN floats compare by bits.
            (Value::Float(u), Value::Float(v)) => u.to_bits() == v.to_bits(),
            (u, v) => u == v,
        };
        if !ok {
            return false;
        }
    }
    true
}

#[test]
fn reads_protocol_2_dict_with_memo_sharing() {
    // pickle.dumps({'a': [1, -2, 3.5, 'x'], 'b': None, 'c': (True,)}, protocol=2), hand-built
    // with a shared list referenced twice through the memo.
    let mut p = vec![0x80, 2, b'}', b'q', 0, b'('];
    p.extend_from_slice(&[0x8c, 1, b'a', b']', b'q', 1, b'(', b'K', 1, 0x8a, 1, 0xfe]);
    p.push(b'G');
    p.extend_from_slice(&3.5f64.to_be_bytes());
    p.extend_from_slice(&[0x8c, 1, b'x', b'e']);
    p.extend_from_slice(&[0x8c, 1, b'b', b'h', 1]);
    p.extend_from_slice(&[0x8c, 1, b'c', 0x88, 0x85, b'u', b'.']);
    let pk = parse(&p).unwrap();
    let a = pk.dict_get(pk.root, "a").unwrap();
    let b = pk.dict_get(pk.root, "b").unwrap();
    assert_eq!(a, b, "memo GET shares the value");
    let items = pk.items(a);
    assert_eq!(pk.as_i64(items[0]), Some(1));
    assert_eq!(pk.as_i64(items[1]), Some(-2));
    assert_eq!(pk.as_f64(items[2]), Some(3.5));
    assert_eq!(pk.as_str(items[3]), Some("x"));
    let c = pk.dict_get(pk.root, "c").unwrap();
    assert_eq!(pk.get(pk.items(c)[0]), Value::Bool(true));
}

#[test]
fn refuses_code_execution_opcodes() {
    // pickle.dumps(os.system) style: GLOBAL 'posix system', then REDUCE.
    let evil = b"cposix\nsystem\n(S'echo pwned'\ntR.";
    match parse(evil) {
        Err(PickleError::Forbidden { opcode, offset }) => {
            assert_eq!(opcode.name(), "GLOBAL");
            assert_eq!(offset, 0);
        }
        other => panic!("{other:?}"),
    }
    let stack_global = [
        0x80, 4, 0x8c, 2, b'o', b's', 0x8c, 6, b's', b'y', b's', b't', b'e', b'm', 0x93,
    ];
    assert!(matches!(
        parse(&stack_global),
        Err(PickleError::Forbidden {
            opcode: CodeOpcode::StackGlobal,
            offset: 14
        })
    ));
}

#[test]
fn truncated_and_garbage_inputs_are_errors() {
    assert!(matches!(
        parse(&[0x80, 2, b'X', 9, 0, 0]),
        Err(PickleError::Truncated { .. })
    ));
    assert!(parse(&[0x80, 2, b']']).is_err());
    assert!(parse(&[0xff]).is_err());
    assert!(parse(&[b'h', 3]).is_err());
    assert!(parse(&[]).is_err());
    // A huge length field must not allocate.
    assert!(parse(&[0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
}

#[test]
fn long1_sign_extends() {
    // LONG1 of 2 bytes 00 80, of 2 bytes ff 00, of 9 zero bytes, in a tuple.
    let mut p = vec![
        0x80, 2, b'(', 0x8a, 2, 0x00, 0x80, 0x8a, 2, 0xff, 0x00, 0x8a, 9,
    ];
    p.extend_from_slice(&[0; 9]);
    p.extend_from_slice(b"t.");
    let pk = parse(&p).unwrap();
    let v = pk.items(pk.root);
    assert_eq!(pk.get(v[0]), Value::Int(-32768));
    assert_eq!(pk.get(v[1]), Value::Int(255));
    assert_eq!(pk.get(v[2]), Value::BigInt(&[0; 9]));
}

#[test]
fn containers_grown_in_several_batches_keep_their_items() {
    // [ [1], then a second list filled, then 2 and 3 appended to the first ]: the first
    // list's items are no longer at the end of the shared table when it grows again.
    let p = [
        0x80, 2, b']', b'q', 0, b'(', b'K', 1, b'e', // a = [1]
        b']', b'(', b'K', 9, b'e', // b = [9]
        b'h', 0, b'(', b'K', 2, b'K', 3, b'e', b'0', // a += [2, 3]
        b'0', b'h', 0, b'.',
    ];
    let pk = parse(&p).unwrap();
    let items: Vec<i64> = pk
        .items(pk.root)
        .iter()
        .map(|&v| pk.as_i64(v).unwrap())
        .collect();
    assert_eq!(items, [1, 2, 3]);
}

#[test]
fn history_entries_read_as_records_answer_like_dicts() {
    // [{'action': 'alloc', 'addr': 2**50, 'frames': [], 'user_metadata': ''},
    //  {'action': 'free', 'extra': 1}]: the first becomes a record, the second (a member
    //  no record keeps) stays a dict.
    let mut p = vec![0x80, 2, b']', b'(', b'}', b'('];
    p.extend_from_slice(&[0x8c, 6]);
    p.extend_from_slice(b"action");
    p.extend_from_slice(&[0x8c, 5]);
    p.extend_from_slice(b"alloc");
    p.extend_from_slice(&[0x8c, 4]);
    p.extend_from_slice(b"addr");
    p.extend_from_slice(&[0x8a, 8]);
    p.extend_from_slice(&(1i64 << 50).to_le_bytes());
    p.extend_from_slice(&[0x8c, 6]);
    p.extend_from_slice(b"frames");
    p.push(b']');
    p.extend_from_slice(&[0x8c, 13]);
    p.extend_from_slice(b"user_metadata");
    p.extend_from_slice(&[0x8c, 0, b'u', b'}', b'(', 0x8c, 6]);
    p.extend_from_slice(b"action");
    p.extend_from_slice(&[0x8c, 4]);
    p.extend_from_slice(b"free");
    p.extend_from_slice(&[0x8c, 5]);
    p.extend_from_slice(b"extra");
    p.extend_from_slice(&[b'K', 1, b'u', b'e', b'.']);
    let pk = parse(&p).unwrap();
    let v = pk.items(pk.root);
    assert!(pk.record(v[0]).is_some());
    assert!(pk.record(v[1]).is_none());
    let a = |i: usize, k: &str| pk.dict_get(v[i], k);
    assert_eq!(pk.as_str(a(0, "action").unwrap()), Some("alloc"));
    assert_eq!(pk.as_i64(a(0, "addr").unwrap()), Some(1 << 50));
    assert_eq!(pk.items(a(0, "frames").unwrap()), &[] as &[ValueId]);
    assert_eq!(a(0, "size"), None);
    assert_eq!(pk.as_str(a(1, "action").unwrap()), Some("free"));
    assert_eq!(pk.as_i64(a(1, "extra").unwrap()), Some(1));

    // Without a shape (the general reader) both stay dicts, every member kept.
    let pk = super::parse(&p).unwrap();
    let v = pk.items(pk.root);
    assert!(pk.record(v[0]).is_none() && pk.record(v[1]).is_none());
    assert_eq!(
        pk.as_str(pk.dict_get(v[0], "action").unwrap()),
        Some("alloc")
    );
    assert!(matches!(pk.get(v[0]), Value::Dict(m) if m.len() == 4));
}

#[test]
fn setitem_after_a_history_record_keeps_its_members() {
    // d = {'action': 'alloc'} (read as a record), then d['size'] = 7 with SETITEM.
    let mut p = vec![0x80, 2, b'}', b'(', 0x8c, 6];
    p.extend_from_slice(b"action");
    p.extend_from_slice(&[0x8c, 5]);
    p.extend_from_slice(b"alloc");
    p.extend_from_slice(&[b'u', 0x8c, 4]);
    p.extend_from_slice(b"size");
    p.extend_from_slice(&[b'K', 7, b's', b'.']);
    let pk = parse(&p).unwrap();
    let get = |k: &str| pk.dict_get(pk.root, k);
    assert_eq!(pk.as_str(get("action").unwrap()), Some("alloc"));
    assert_eq!(pk.as_i64(get("size").unwrap()), Some(7));
}

#[test]
fn wide_and_narrow_integers_round_trip() {
    for v in [
        0i64,
        -1,
        1 << 59,
        (1 << 59) - 1,
        -(1 << 59),
        i64::MIN,
        i64::MAX,
        1_795_308_187_017_576,
    ] {
        let mut p = vec![0x8a, 8];
        p.extend_from_slice(&v.to_le_bytes());
        p.push(b'.');
        let pk = parse(&p).unwrap();
        assert_eq!(pk.as_i64(pk.root), Some(v));
    }
}

/// Protocol 4 opcodes with the memo counted, for building pickles in tests.
struct W {
    out: Vec<u8>,
    memo: usize,
    /// BINPUT / LONG_BINPUT with explicit indices (protocol 2) instead of MEMOIZE.
    explicit: bool,
}

impl W {
    fn new() -> W {
        W {
            out: vec![0x80, 4],
            memo: 0,
            explicit: false,
        }
    }
    fn op(&mut self, b: &[u8]) -> &mut W {
        self.out.extend_from_slice(b);
        self
    }
    /// MEMOIZE; returns the index.
    fn put(&mut self) -> usize {
        match (self.explicit, self.memo) {
            (false, _) => self.out.push(0x94),
            (true, i) if i < 256 => self.out.extend_from_slice(&[b'q', i as u8]),
            (true, i) => {
                self.out.push(b'r');
                self.out.extend_from_slice(&(i as u32).to_le_bytes());
            }
        }
        self.memo += 1;
        self.memo - 1
    }
    /// LONG_BINPUT at `i`, whatever MEMOIZE's count.
    fn put_at(&mut self, i: usize) -> &mut W {
        self.op(b"r");
        self.op(&(i as u32).to_le_bytes())
    }
    fn get(&mut self, i: usize) -> &mut W {
        if i < 256 {
            self.op(&[b'h', i as u8])
        } else {
            let mut b = vec![b'j'];
            b.extend_from_slice(&(i as u32).to_le_bytes());
            self.op(&b)
        }
    }
    fn str(&mut self, t: &str) -> &mut W {
        self.op(&[0x8c, t.len() as u8]);
        self.op(t.as_bytes())
    }
    fn long(&mut self, v: i64) -> &mut W {
        self.op(&[0x8a, 8]);
        self.op(&v.to_le_bytes())
    }
}

#[test]
fn issue7_lists_with_equal_items_share_them_and_grow_apart() {
    // [[f, g], [g], [f, g], [f, g]] over two memoised dicts f, g; then the third list
    // grows by [g] (APPENDS on a memo reference).
    let mut w = W::new();
    w.op(b"]");
    w.put();
    w.op(b"(}");
    let f = w.put();
    w.op(b"}");
    let g = w.put();
    let mut lists = Vec::new();
    for items in [&[f, g][..], &[g], &[f, g], &[f, g]] {
        w.op(b"]");
        lists.push(w.put());
        w.op(b"(");
        for &i in items {
            w.get(i);
        }
        w.op(b"e");
    }
    w.op(b"e");
    w.get(lists[2]).op(b"(").get(g).op(b"e0.");
    let pk = parse(&w.out).unwrap();
    assert!(same(&pk, &parse_with(&w.out, false).unwrap()));
    let top = pk.items(pk.root);
    let (fv, gv) = (top[0], top[1]);
    assert_eq!(pk.items(top[2]), [fv, gv]);
    assert_eq!(pk.items(top[3]), [gv]);
    assert_eq!(pk.items(top[4]), [fv, gv, gv], "grew apart");
    assert_eq!(pk.items(top[5]), [fv, gv]);
    assert_eq!(
        pk.items(top[2]).as_ptr(),
        pk.items(top[5]).as_ptr(),
        "equal items stored once"
    );
    // Equal items, one place in the table (which the snapshot's stacks are found by); the
    // list that grew apart has a vector of its own and no place; others have their own.
    assert_eq!(pk.items_place(top[2]), pk.items_place(top[5]));
    assert!(pk.items_place(top[2]).is_some());
    assert_eq!(pk.items_place(top[4]), None);
    assert_ne!(pk.items_place(top[3]), pk.items_place(top[2]));
    assert_eq!(pk.items_place(fv), None, "a dict is no list");
}

#[test]
fn issue7_long_containers_and_texts_leave_the_packed_words() {
    // A list of 2^24 items is past a flat slot's length; it moves to a vector of its own.
    let n = SLOT_MAX_LEN + 1;
    let mut p = vec![0x80, 2, b']', b'('];
    p.extend(std::iter::repeat_n([b'K', 7], n).flatten());
    p.extend_from_slice(b"e.");
    let pk = parse(&p).unwrap();
    assert_eq!(pk.items(pk.root).len(), n);
    assert!(matches!(pk.seqs.slot(0), Slot::Own(_)));
    assert!(pk.items(pk.root).iter().all(|&v| pk.as_i64(v) == Some(7)));
    // The same made at once (MARK ... LIST) goes to its own vector straight away.
    let mut p = vec![0x80, 2, b'('];
    p.extend(std::iter::repeat_n([b'K', 7], n).flatten());
    p.extend_from_slice(b"l.");
    let pk = parse(&p).unwrap();
    assert_eq!(pk.items(pk.root).len(), n);
    assert!(matches!(pk.seqs.slot(0), Slot::Own(_)));
    // A string past a text word's length goes to the side table.
    let n = TEXT_MAX_LEN + 1;
    let mut p = vec![0x80, 2, b'X'];
    p.extend_from_slice(&(n as u32).to_le_bytes());
    p.extend(std::iter::repeat_n(b'a', n));
    p.push(b'.');
    let pk = parse(&p).unwrap();
    assert_eq!(pk.as_str(pk.root).map(str::len), Some(n));
    assert_eq!(pk.texts.side.len(), 1);
}

/// The pickle's start: the outer list, an empty segment list, three frame dicts (`name` f, g,
/// h; the key memoised once) in a list, and the history list opened. Returns the frames' memo
/// indices and the `name` key's.
fn frame_dicts(w: &mut W) -> (Vec<usize>, usize) {
    w.op(b"]");
    w.put();
    w.op(b"(]");
    w.put();
    w.op(b"(");
    let mut frames = Vec::new();
    let mut name = None;
    for f in ["f", "g", "h"] {
        w.op(b"}");
        frames.push(w.put());
        match name {
            Some(n) => {
                w.get(n);
            }
            None => {
                w.str("name");
                name = Some(w.put());
            }
        }
        w.str(f).put();
        w.op(b"s");
    }
    w.op(b"e]");
    w.put();
    w.op(b"(");
    (frames, name.expect("three frames name it"))
}

/// A history of entries in many shapes, each drawn from one number: members present or
/// not, an entry named twice, an entry's memo slot stored over, keys written out or by the memo, frames lists new, shared, empty or holding a
/// new frame dict, members no record keeps, duplicate keys, FRAME opcodes; and lists
/// grown afterwards.
fn history_pickle(choices: &[u32], explicit: bool) -> Vec<u8> {
    history_pickle_grown(choices, explicit, true)
}

/// [`history_pickle`], its frame lists grown after the history or not (`grow`).
fn history_pickle_grown(choices: &[u32], explicit: bool, grow: bool) -> Vec<u8> {
    let mut w = W::new();
    if explicit {
        w.out[1] = 2;
        w.explicit = true;
    }
    let (mut frames, name) = frame_dicts(&mut w);
    let mut keys: std::collections::HashMap<&str, usize> = Default::default();
    let mut lists = Vec::new();
    let mut actions = Vec::new();
    let mut overwritten = Vec::new();
    for (n, &c) in choices.iter().enumerate() {
        let bit = |i: u32| c >> i & 1 == 1;
        w.op(b"}");
        let d = w.put();
        if bit(27) && bit(28) && bit(29) {
            // The entry named twice in the history: a copy by the memo before its members.
            w.get(d);
        }
        w.op(b"(");
        if bit(30) && !bit(31) && bit(29) {
            // Stored over before its members.
            w.op(b"K\x05").put_at(d).op(b"0");
            overwritten.push(d);
        }
        let mut members = vec!["action", "addr", "size", "stream", "time_us", "frames"];
        members.retain(|m| *m == "action" && !bit(20) || !bit(members_bit(m)));
        if bit(11) {
            members.push("compile_context");
        }
        if bit(12) && bit(13) {
            members.push("unknown");
        }
        if bit(14) && bit(15) {
            members.push("addr");
        }
        for m in members {
            if bit(16) && bit(17) {
                w.op(&[0x95, 0, 0, 0, 0, 0, 0, 0, 0]);
            }
            match keys.get(m) {
                Some(&k) if !bit(18) => {
                    w.get(k);
                }
                _ => {
                    w.str(m);
                    let k = w.put();
                    keys.insert(m, k);
                }
            }
            match m {
                "action" => match actions.get(c as usize % 4) {
                    Some(&a) if bit(19) => {
                        w.get(a);
                    }
                    _ => {
                        w.str(["alloc", "free_requested", "free_completed", "oom"][n % 4]);
                        actions.push(w.put());
                    }
                },
                "addr" | "time_us" => {
                    w.long((n as i64) << 40 | c as i64);
                }
                "size" => {
                    w.op(&[b'M', c as u8, 1]);
                }
                "stream" => {
                    w.op(if bit(9) { b"N" } else { b"K\x07" });
                }
                "frames" => match (c >> 2) % 4 {
                    0 => {
                        w.op(b"]");
                        w.put();
                    }
                    1 if !lists.is_empty() => {
                        w.get(lists[c as usize % lists.len()]);
                    }
                    _ => {
                        w.op(b"]");
                        lists.push(w.put());
                        w.op(b"(");
                        for i in 0..(c >> 4) % 4 + 1 {
                            w.get(frames[(c >> (5 + i)) as usize % frames.len()]);
                        }
                        if (c >> 2) % 4 == 3 && bit(10) {
                            // A frame dict of its own, written inside the list.
                            w.op(b"}");
                            frames.push(w.put());
                            w.get(name).str("new").put();
                            w.op(b"s");
                        }
                        w.op(b"e");
                    }
                },
                _ => {
                    w.op(b"K\x01");
                }
            }
        }
        w.op(b"u");
        if bit(30) && bit(31) {
            // Something else stored over the entry's memo slot before its list has it.
            w.op(b"K\x05").put_at(d).op(b"0");
            overwritten.push(d);
        }
    }
    w.op(b"e");
    for &d in &overwritten {
        w.get(d);
    }
    // Lists grown afterwards (APPENDS onto a memo reference, then POP).
    for &c in choices.iter().take(if grow { 3 } else { 0 }) {
        if let Some(&l) = lists.get(c as usize % lists.len().max(1)) {
            w.get(l).op(b"(");
            w.get(frames[c as usize % frames.len()]);
            w.op(b"e0");
        }
    }
    w.op(b"e.");
    w.out
}

fn members_bit(m: &str) -> u32 {
    match m {
        "addr" => 21,
        "size" => 22,
        "stream" => 23,
        "time_us" => 24,
        "frames" => 25,
        _ => 26,
    }
}

proptest::proptest! {
    /// Sharing the items of equal lists changes no value.
    #[test]
    fn issue7_shared_and_separate_lists_read_alike(
        choices in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..40),
        explicit in proptest::prelude::any::<bool>(),
    ) {
        let p = history_pickle(&choices, explicit);
        let shared = parse(&p).unwrap();
        let separate = parse_with(&p, false).unwrap();
        proptest::prop_assert!(same(&shared, &separate));
        proptest::prop_assert_eq!(shared.records.len(), separate.records.len());
    }
}

/// A pickle that memoizes more wide values than the memo's side table holds (2^31 - 1; a few
/// in the unit tests' build) is refused with one message naming the offset, not read wrong.
#[test]
fn a_memo_past_its_side_table_is_refused() {
    // A list of `n` wide integers, each memoized.
    let wide_list = |n: i64| {
        let mut w = W::new();
        w.op(b"(");
        for i in 0..n {
            w.long(1 << 50 | i);
            w.put();
        }
        w.op(b"l.");
        w.out
    };
    let e = parse(&wide_list(5)).unwrap_err();
    assert!(
        matches!(&e, PickleError::Malformed { what, .. } if what.contains("wide values memoized")),
        "{e}"
    );
    // Four fit.
    let pk = parse(&wide_list(4)).unwrap();
    assert_eq!(pk.items(pk.root).len(), 4);
}

#[test]
fn marks_cannot_be_popped_as_values() {
    assert!(parse(b"(.").is_err());
    assert!(
        parse(&[b'K', 1, b'(', b'0', b'.']).is_ok(),
        "POP takes the mark"
    );
    assert!(parse(b"(2").is_err(), "DUP of a mark");
    assert!(parse(b"](a.").is_err(), "APPEND of a mark");
}

/// What a [`RecordSink`] was given: each record's members, and the numbers forgotten. With
/// `drops_batches`, it says a batch of records alone need not stay in its list, as the
/// snapshot's sink does.
#[derive(Default)]
struct Taken {
    records: Vec<Vec<Option<ValueId>>>,
    /// Each record's members written out as they read when it was made ([`render`]).
    written: Vec<Vec<String>>,
    forgotten: Vec<usize>,
    drops_batches: bool,
}

/// `v` written out whole as `pk` holds it now: containers by their items (to `depth`, so
/// that cycles end), whatever ids the read gave them.
fn render(pk: &Pickle, v: ValueId, depth: usize) -> String {
    if depth == 0 {
        return "...".into();
    }
    let items = |i: &[ValueId]| -> String {
        let v: Vec<String> = i.iter().map(|&x| render(pk, x, depth - 1)).collect();
        v.join(",")
    };
    match pk.get(v) {
        Value::List(i) => format!("L[{}]", items(i)),
        Value::Tuple(i) => format!("T[{}]", items(i)),
        Value::Set(i) => format!("S[{}]", items(i)),
        Value::Dict(kv) => {
            let v: Vec<String> = kv
                .iter()
                .map(|&(k, x)| format!("{}:{}", render(pk, k, depth - 1), render(pk, x, depth - 1)))
                .collect();
            format!("{{{}}}", v.join(","))
        }
        other => format!("{other:?}"),
    }
}

impl RecordSink for Taken {
    fn record(&mut self, pk: &Pickle, members: &[Option<ValueId>]) -> usize {
        self.records.push(members.to_vec());
        self.written.push(
            members
                .iter()
                .map(|m| m.map_or("-".into(), |v| render(pk, v, 6)))
                .collect(),
        );
        self.records.len() - 1
    }

    fn forget(&mut self, number: usize) {
        self.forgotten.push(number);
    }

    fn appended(&mut self, pk: &Pickle, _list: ValueId, items: &[ValueId]) -> bool {
        self.drops_batches
            && !items.is_empty()
            && items.iter().all(|&i| pk.record_number(i).is_some())
    }
}

proptest::proptest! {
    /// A sink is given every record the pickle would keep, with the same members (the same
    /// values: ids are made alike in both reads while records keep their slots), and told of
    /// each record extended after it was complete, which the kept read turns back into a
    /// generic dict. With the slots of what the sink took given back, its records read the
    /// same member by member, the same are forgotten, and the root reads the same.
    #[test]
    fn a_sink_gets_the_records_the_pickle_would_keep(
        choices in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..40),
        explicit in proptest::prelude::any::<bool>(),
    ) {
        let p = history_pickle(&choices, explicit);
        let kept = parse(&p).unwrap();
        let n = ENTRY.keys.len();
        let want: Vec<Vec<Option<ValueId>>> = kept
            .records
            .chunks_exact(n)
            .map(|r| r.iter().map(|&v| (v.kind() != Kind::Absent).then_some(v)).collect())
            .collect();
        let mut sink = Taken::default();
        let s = parse_stream_into_with(Box::new(&p[..]), &ENTRY, &mut sink, ReadMode::Kept).unwrap();
        proptest::prop_assert!(s.cut.is_none());
        proptest::prop_assert_eq!(&sink.records, &want);
        let still = (0..kept.dict_count())
            .filter(|&d| kept.record(ValueId::new(Kind::Dict, d as u64)).is_some())
            .count();
        proptest::prop_assert_eq!(still + sink.forgotten.len(), want.len());
        for d in 0..s.pickle.dict_count() {
            let id = ValueId::new(Kind::Dict, d as u64);
            proptest::prop_assert_eq!(
                s.pickle.record_number(id).is_some(),
                kept.record(id).is_some()
            );
        }
        for mode in [ReadMode::Ahead, ReadMode::Direct, ReadMode::Released] {
            let mut freed = Taken::default();
            let f = parse_stream_into_with(Box::new(&p[..]), &ENTRY, &mut freed, mode).unwrap();
            proptest::prop_assert!(f.cut.is_none());
            proptest::prop_assert_eq!(&freed.written, &sink.written);
            proptest::prop_assert_eq!(&freed.forgotten, &sink.forgotten);
        }
        // The root reads the same too, where no frame list is grown after its entry (one a
        // sunk record alone held is seen as it was by what named it later: `thaw`).
        let p = history_pickle_grown(&choices, explicit, false);
        let mut kept = Taken::default();
        let k = parse_stream_into_with(Box::new(&p[..]), &ENTRY, &mut kept, ReadMode::Kept).unwrap();
        for mode in [ReadMode::Ahead, ReadMode::Direct, ReadMode::Released] {
            let mut freed = Taken::default();
            let f = parse_stream_into_with(Box::new(&p[..]), &ENTRY, &mut freed, mode).unwrap();
            proptest::prop_assert_eq!(&freed.written, &kept.written);
            proptest::prop_assert_eq!(
                render(&f.pickle, f.pickle.root, 8),
                render(&k.pickle, k.pickle.root, 8)
            );
        }
    }
}

/// A history's batches of entries leave its list once the sink has taken them (a GB
/// snapshot's lists held a word per entry), by APPENDS, APPEND and LIST alike; a batch that
/// also holds anything else stays whole, and the list's later items stay too.
#[test]
fn a_list_of_records_the_sink_took_no_longer_holds_them() {
    let mut w = W::new();
    let entry = |w: &mut W, n: u8| {
        w.op(b"}");
        w.put();
        w.op(b"(").str("action").put();
        w.str("alloc").put();
        w.str("addr").put();
        w.op(&[b'K', n, b'u']);
    };
    // History: two entries by APPENDS, one by APPEND.
    w.op(b"]");
    w.put();
    w.op(b"(");
    entry(&mut w, 1);
    entry(&mut w, 2);
    w.op(b"e");
    entry(&mut w, 3);
    w.op(b"a");
    // Mixed: an entry and an integer in one batch.
    w.op(b"]");
    w.put();
    w.op(b"(");
    entry(&mut w, 4);
    w.op(b"K\x07e");
    // A list built in one go by LIST.
    w.op(b"(");
    entry(&mut w, 5);
    w.op(b"l");
    w.op(&[0x87, b'.']);
    let mut sink = Taken {
        drops_batches: true,
        ..Default::default()
    };
    let s = parse_stream_into(Box::new(&w.out[..]), &ENTRY, &mut sink).unwrap();
    assert_eq!(sink.records.len(), 5, "every entry a record");
    let lists = s.pickle.items(s.pickle.root);
    let lens: Vec<usize> = lists.iter().map(|&l| s.pickle.items(l).len()).collect();
    assert_eq!(
        lens,
        [0, 2, 0],
        "taken batches left their lists; the mixed one stayed"
    );
    // Without a sink that says so, every list keeps its items.
    let kept = parse(&w.out).unwrap();
    let lens: Vec<usize> = kept
        .items(kept.root)
        .iter()
        .map(|&l| kept.items(l).len())
        .collect();
    assert_eq!(lens, [3, 2, 1]);
}

/// The grammar reads nearly every history entry of a snapshot torch wrote (its entries'
/// form: keys by GET, a fresh `compile_context` string, a frame list by GET, empty or new),
/// so that a change that sends them back to the loop shows here and not only in a
/// benchmark; the few left to the loop are those cut by a FRAME opcode or met first.
#[test]
fn nearly_every_entry_of_a_real_snapshot_is_read_by_its_grammar() {
    let f = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sample_traces/corpus/nanogpt_train_fp16_accum/snapshot.pickle.gz"
    );
    let gz = std::fs::read(f).unwrap();
    let src = flate2::read::GzDecoder::new(&gz[..]);
    let mut sink = Taken::default();
    let shape = &crate::ingest::snapshot::HISTORY_ENTRY;
    let s = parse_stream_into(Box::new(src), shape, &mut sink).unwrap();
    let n = sink.records.len();
    assert!(n > 5_000, "{n}");
    assert!(s.read_ahead, "the input was read on the reader's thread");
    assert!(
        s.direct_records * 100 >= n * 95,
        "{} of {n}",
        s.direct_records
    );
    // A third of its entries make a new frame list (the others GET one made before), and
    // most of those have the items of the last such list, or none.
    assert!(
        s.list_runs * 100 >= n * 20,
        "{} of {n} took the last list's place",
        s.list_runs
    );
    // And none without the sink's slots given back: that read is the loop's alone.
    let mut kept = Taken::default();
    let src = flate2::read::GzDecoder::new(&gz[..]);
    let k = parse_stream_into_with(Box::new(src), shape, &mut kept, ReadMode::Kept).unwrap();
    assert_eq!((k.direct_records, kept.records.len()), (0, n));
}

/// Where the thread ahead cannot be started (out of threads or memory), the reader reads its
/// source on its own thread, from the first byte: the records of a snapshot torch wrote are
/// those read with the thread.
#[test]
fn a_snapshot_whose_thread_ahead_cannot_start_is_read_whole_on_the_readers_thread() {
    // A stack no machine can map: the spawn fails (checked, or the test would prove nothing).
    let refused = || std::thread::Builder::new().stack_size(usize::MAX >> 2);
    assert!(
        refused().spawn(|| ()).is_err(),
        "the thread was made after all"
    );
    let f = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sample_traces/corpus/nanogpt_train_fp16_accum/snapshot.pickle.gz"
    );
    let gz = std::fs::read(f).unwrap();
    let shape = &crate::ingest::snapshot::HISTORY_ENTRY;
    let mut with = Taken::default();
    let src = flate2::read::GzDecoder::new(&gz[..]);
    let a = parse_stream_into_with(Box::new(src), shape, &mut with, ReadMode::Ahead).unwrap();
    assert!(a.read_ahead);
    let mut without = Taken::default();
    let src = flate2::read::GzDecoder::new(&gz[..]);
    let b = super::parse_stream_into_threaded(
        Box::new(src),
        shape,
        &mut without,
        ReadMode::Ahead,
        refused(),
    )
    .unwrap();
    assert!(!b.read_ahead, "read ahead with no thread");
    assert!(b.cut.is_none() && b.read_error.is_none());
    assert!(without.records.len() > 5_000, "{}", without.records.len());
    assert_eq!(without.written, with.written);
    assert_eq!(b.direct_records, a.direct_records);
}

/// Writes a history entry's opening whose keys are written out (and memoized), as the first
/// entry of a history is, up to its `action` pair: the memo index of the `action` key.
fn first_entry_opening(w: &mut W) -> usize {
    w.op(b"}");
    w.put();
    w.op(b"(").str("action");
    let action = w.put();
    w.str("alloc").put();
    action
}

/// A history list opened and its first entry written whole, its keys written out (and
/// memoized) as a history's first entry's are: `action`, then each of `members` with its
/// value's opcodes. The writer, the memo index of the `action` key and those of the others.
fn history_first_entry(members: &[(&str, &[u8])]) -> (W, usize, Vec<usize>) {
    let mut w = W::new();
    w.op(b"]");
    w.put();
    w.op(b"(");
    let action = first_entry_opening(&mut w);
    let keys = members
        .iter()
        .map(|&(k, v)| {
            w.str(k);
            let i = w.put();
            w.op(v);
            i
        })
        .collect();
    w.op(b"u");
    (w, action, keys)
}

/// Reads `bytes` in every mode with a sink: each gives the records the kept read gives
/// (returned); the direct path's counts for each mode that has it.
fn records_alike_in_every_mode(bytes: &[u8]) -> (Taken, Vec<(ReadMode, usize, usize)>) {
    let mut kept = Taken::default();
    parse_stream_into_with(Box::new(bytes), &ENTRY, &mut kept, ReadMode::Kept).unwrap();
    let mut counts = Vec::new();
    for mode in [ReadMode::Ahead, ReadMode::Direct, ReadMode::Released] {
        let mut sink = Taken::default();
        let s = parse_stream_into_with(Box::new(bytes), &ENTRY, &mut sink, mode).unwrap();
        assert_eq!(sink.written, kept.written, "{mode:?}");
        if mode != ReadMode::Released {
            counts.push((mode, s.direct_records, s.list_runs));
        }
    }
    (kept, counts)
}

/// A key's memo slot stored over between two entries that name it (no pickle torch writes
/// does that) names the new key in the later entry, however the entries are read: the
/// direct path's keys kept from one entry to the next are dropped once their slots change.
#[test]
fn a_key_slot_stored_over_between_entries_names_the_new_key() {
    // The first entry writes its keys (and memoizes them); the later ones GET them.
    let (mut w, action, keys) = history_first_entry(&[("addr", b"K\x01")]);
    let key = keys[0];
    let entry = |w: &mut W, n: u8| {
        w.op(b"}");
        w.put();
        w.op(b"(").get(action).str("alloc").put();
        w.get(key).op(&[b'K', n, b'u']);
    };
    entry(&mut w, 2);
    entry(&mut w, 3);
    // The key's slot now holds "size" (stored, then popped off the list's items).
    w.str("size").put_at(key).op(b"0");
    entry(&mut w, 4);
    entry(&mut w, 5);
    w.op(b"e.");
    let (kept, counts) = records_alike_in_every_mode(&w.out);
    let addr_size: Vec<(String, String)> = kept
        .written
        .iter()
        .map(|r| (r[1].clone(), r[2].clone()))
        .collect();
    assert_eq!(
        addr_size,
        [
            ("Int(1)", "-"),
            ("Int(2)", "-"),
            ("Int(3)", "-"),
            ("-", "Int(4)"),
            ("-", "Int(5)")
        ]
        .map(|(a, s)| (a.to_string(), s.to_string())),
    );
    for (mode, direct, _) in counts {
        assert_eq!(direct, 4, "{mode:?}");
    }
}

/// A frame's memo slot stored over between two entries whose new frame lists name it (no
/// pickle torch writes does that) names the new frame in the later entry, however the entries
/// are read: the items the direct path keeps from one entry's list to the next are dropped
/// once their slots change, and lists of the same items as the last one take its place.
#[test]
fn a_frame_slot_stored_over_between_entries_names_the_new_frame() {
    let mut w = W::new();
    w.op(b"]");
    w.put();
    w.op(b"(");
    // Two frames memoized (and popped off the list's items).
    w.str("f1");
    let f1 = w.put();
    w.op(b"0").str("f2");
    let f2 = w.put();
    w.op(b"0");
    // The first entry writes its keys (and memoizes them); the later ones GET them.
    let action = first_entry_opening(&mut w);
    w.str("frames");
    let frames = w.put();
    w.op(b"]");
    w.put();
    w.op(b"(").get(f1).get(f2).op(b"eu");
    let entry = |w: &mut W| {
        w.op(b"}");
        w.put();
        w.op(b"(").get(action).str("alloc").put();
        w.get(frames).op(b"]");
        w.put();
        w.op(b"(").get(f1).get(f2).op(b"eu");
    };
    entry(&mut w);
    entry(&mut w);
    // The second frame's slot now holds "f3".
    w.str("f3").put_at(f2).op(b"0");
    entry(&mut w);
    entry(&mut w);
    w.op(b"e.");
    let (kept, counts) = records_alike_in_every_mode(&w.out);
    let named: Vec<bool> = kept.written.iter().map(|r| r[5].contains("f3")).collect();
    assert_eq!(
        named,
        [false, false, false, true, true],
        "{:?}",
        kept.written
    );
    for (mode, direct, runs) in counts {
        assert_eq!(direct, 4, "{mode:?}");
        // The third entry's list and the fifth's are the list before them again.
        assert_eq!(runs, 2, "{mode:?}");
    }
}

/// Every small-integer opcode a history entry's members are written with (BININT1, BININT2,
/// a negative BININT, LONG1 of 0 to 8 bytes, both signs, and one past what a value holds
/// inline), None and the bools, and strings stored by MEMOIZE and by BINPUT, read the same
/// by the entries' own path as by the loop; every entry but one is read by that path, the
/// last of them ending where the input does (no bytes after its SETITEMS but the list's
/// end and STOP, fewer than the path's window), and the one past the inline range is left
/// to the loop.
#[test]
fn every_integer_form_reads_alike_by_the_entries_path_and_the_loop() {
    let (mut w, action, keys) =
        history_first_entry(&[("addr", b"K\x01"), ("stream", b"N"), ("size", b"K\x00")]);
    let [addr, stream, size] = keys[..] else {
        unreachable!("three keys")
    };
    let long1 = |v: i64, n: usize| {
        let mut b = vec![0x8a, n as u8];
        b.extend_from_slice(&v.to_le_bytes()[..n]);
        b
    };
    let values: Vec<Vec<u8>> = vec![
        vec![b'K', 200],
        vec![b'M', 0x34, 0x12],
        [&[b'J'][..], &(-5i32).to_le_bytes()].concat(),
        long1(0, 0),
        long1(-1, 1),
        long1(127, 1),
        long1(-129, 2),
        long1(1 << 40, 6),
        long1(-(1 << 50), 7),
        long1(i64::MAX >> 5, 8),
        long1(i64::MIN >> 5, 8),
        b"N".to_vec(),
        vec![0x88],
        vec![0x89],
    ];
    for (i, v) in values.iter().enumerate() {
        w.op(b"}");
        w.put();
        w.op(b"(").get(action);
        // A string afresh, stored by MEMOIZE or by BINPUT.
        w.str(["alloc", "free_requested"][i % 2]);
        if i % 3 == 0 {
            w.op(&[b'q', w.memo as u8]);
            w.memo += 1;
        } else {
            w.put();
        }
        w.get(addr).op(v);
        w.get(stream).op(b"K\x07");
        w.get(size).op(&[b'M', i as u8, 1]);
        w.op(b"u");
    }
    // A LONG1 past the 60 bits a value holds inline: a wide integer, the loop's.
    w.op(b"}");
    w.put();
    w.op(b"(").get(action).str("alloc").put();
    w.get(addr).op(&long1(i64::MAX, 8)).get(size).op(b"K\x02u");
    // The last entry, read with fewer bytes after it than the window.
    w.op(b"}");
    w.put();
    w.op(b"(").get(action).str("alloc").put();
    w.get(addr).op(&long1(-3, 1)).get(size).op(b"K\x03u");
    w.op(b"e.");
    let (kept, counts) = records_alike_in_every_mode(&w.out);
    let addrs: Vec<&str> = kept.written.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        addrs,
        [
            "Int(1)",
            "Int(200)",
            "Int(4660)",
            "Int(-5)",
            "Int(0)",
            "Int(-1)",
            "Int(127)",
            "Int(-129)",
            "Int(1099511627776)",
            "Int(-1125899906842624)",
            &format!("Int({})", i64::MAX >> 5),
            &format!("Int({})", i64::MIN >> 5),
            "None",
            "Bool(true)",
            "Bool(false)",
            &format!("Int({})", i64::MAX),
            "Int(-3)",
        ]
    );
    for (mode, direct, _) in counts {
        assert_eq!(direct, values.len() + 1, "{mode:?}");
    }
}
