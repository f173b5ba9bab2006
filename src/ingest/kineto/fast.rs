//! A hand-written reader for events in the plain form Kineto writes: ASCII strings without
//! escapes, integer ids, decimal times. It takes each byte once and allocates nothing, which is
//! several times faster than serde's generic path. Anything else (an escape, a non-ASCII byte,
//! a float id, a duplicate key, an array where an object belongs, malformed text) makes it give
//! up on that event with [`Bail`], and serde_json reads the event instead. So this reader only
//! ever accepts what serde_json accepts, and yields the same [`RawEvent`] for it; a unit test,
//! a property test and a fuzz target compare the two.

use std::borrow::Cow;

use super::keys::{ArgKey, EventKey, KeyTable};
use super::raw::{IdOrName, Lenient, LenientStr, RawArgs, RawEvent};
use super::time::RawTime;

/// This event is not in the plain form: let serde_json read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bail;

type R<T> = Result<T, Bail>;

/// Nesting beyond this is left to serde_json (whose own limit is 128).
const MAX_DEPTH: usize = 64;

/// Reads the event whose `{` is at `at` into `ev` (which must be the default); returns the
/// index just past its `}`. After a [`Bail`], `ev` holds whatever was read before it.
pub(crate) fn event<'a>(buf: &'a [u8], at: usize, ev: &mut RawEvent<'a>) -> R<usize> {
    let mut c = Cur { b: buf, i: at };
    c.eat(b'{')?;
    c.ws();
    if c.peek()? == b'}' {
        return Ok(c.i + 1);
    }
    let mut seen = 0u32;
    let mut hint = 0;
    loop {
        let key = match c.common_key(&EVENT_KEYS, &mut hint) {
            Some(key) => Some(key),
            None => EventKey::parse(c.key()?),
        };
        match key {
            // serde's path refuses a repeated field; let it say so.
            Some(key) if seen & key.bit() != 0 => return Err(Bail),
            Some(key) => {
                seen |= key.bit();
                match key {
                    EventKey::Ph => ev.ph = c.lenient_str()?,
                    EventKey::Cat => ev.cat = c.lenient_str()?,
                    EventKey::Name => ev.name = c.lenient_str()?,
                    EventKey::Pid => ev.pid = c.id_or_name()?,
                    EventKey::Tid => ev.tid = c.id_or_name()?,
                    EventKey::Ts => ev.ts = c.time()?,
                    EventKey::Dur => ev.dur = c.time()?,
                    EventKey::Id => ev.id = c.id_or_name()?,
                    EventKey::Args => c.args(&mut ev.args)?,
                }
            }
            None => c.skip(1)?,
        }
        if c.next_member(b'}')? {
            return Ok(c.i);
        }
    }
}

/// An event key as Kineto writes it, with the `": "` after it, as one masked 8-byte word:
/// matching it is one load and compare where reading the key as a string took a scan and a
/// match against every name.
struct KeyPat {
    word: u64,
    mask: u64,
    len: usize,
    key: EventKey,
}

/// `"name": ` for `key`, as the masked word [`Cur::common_key`] compares.
const fn key_pat(key: EventKey) -> KeyPat {
    let name = key.text().as_bytes();
    let len = name.len() + 4;
    assert!(len <= 8);
    let mut word = 0u64;
    let mut mask = 0u64;
    let mut i = 0;
    while i < len {
        let byte = match i {
            0 => b'"',
            _ if i <= name.len() => name[i - 1],
            _ if i == name.len() + 1 => b'"',
            _ if i == name.len() + 2 => b':',
            _ => b' ',
        };
        word |= (byte as u64) << (8 * i);
        mask |= 0xff << (8 * i);
        i += 1;
    }
    KeyPat {
        word,
        mask,
        len,
        key,
    }
}

/// An event's keys, in the order Kineto writes them (`ph`, `cat`, `name`, `pid`, `tid`, `ts`,
/// `dur`, `args`), so the next key is usually the next pattern. A key followed by anything but
/// `": "` is read the long way, with the same result.
const EVENT_KEYS: [KeyPat; 9] = [
    key_pat(EventKey::Ph),
    key_pat(EventKey::Cat),
    key_pat(EventKey::Name),
    key_pat(EventKey::Pid),
    key_pat(EventKey::Tid),
    key_pat(EventKey::Ts),
    key_pat(EventKey::Dur),
    key_pat(EventKey::Args),
    key_pat(EventKey::Id),
];

/// Any byte that ends the plain part of a string: `"`, `\`, a control character or non-ASCII.
#[inline]
fn special_in(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH != 0;
    // Bytes below 0x20 (exact for ASCII bytes; non-ASCII ones are caught by HIGH itself).
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
    w & HIGH != 0
        || below_space
        || has_zero(w ^ (ONES * b'"' as u64))
        || has_zero(w ^ (ONES * b'\\' as u64))
}

/// Bytes already checked to be ASCII as text, without checking them again: `str::from_utf8`
/// on every name and number was 6% of a whole `analyze` run.
#[inline]
fn ascii(b: &[u8]) -> &str {
    debug_assert!(b.is_ascii());
    // SAFETY: every caller passes bytes it has checked to be below 0x80 (string contents,
    // number and literal characters, JSON punctuation and whitespace), and ASCII is UTF-8.
    unsafe { std::str::from_utf8_unchecked(b) }
}

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn peek(&self) -> R<u8> {
        self.b.get(self.i).copied().ok_or(Bail)
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn eat(&mut self, c: u8) -> R<()> {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Bail)
        }
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// At `"`: the string's content, which must be plain ASCII.
    #[inline]
    fn string(&mut self) -> R<&'a str> {
        let b = self.b;
        if b.get(self.i) != Some(&b'"') {
            return Err(Bail);
        }
        let start = self.i + 1;
        let mut j = start;
        while let Some(w) = b.get(j..j + 8) {
            let w = u64::from_le_bytes(w.try_into().map_err(|_| Bail)?);
            if special_in(w) {
                break;
            }
            j += 8;
        }
        loop {
            match *b.get(j).ok_or(Bail)? {
                b'"' => break,
                b'\\' | 0..0x20 | 0x80.. => return Err(Bail),
                _ => j += 1,
            }
        }
        self.i = j + 1;
        Ok(ascii(&b[start..j]))
    }

    /// One of `pats` at the cursor, tried from `hint` on (then `hint` names the one after it):
    /// its key, with the cursor past the key, `:` and space. `None` leaves the cursor as it was.
    #[inline]
    fn common_key(&mut self, pats: &[KeyPat], hint: &mut usize) -> Option<EventKey> {
        let w = u64::from_le_bytes(self.b.get(self.i..self.i + 8)?.try_into().ok()?);
        let n = pats.len();
        let mut k = *hint;
        for _ in 0..n {
            if k >= n {
                k = 0;
            }
            let p = &pats[k];
            k += 1;
            if w & p.mask == p.word {
                // The space after `:` may be followed by more whitespace; `ws` eats it as the
                // long way would.
                self.i += p.len;
                self.ws();
                *hint = k;
                return Some(p.key);
            }
        }
        None
    }

    /// A member's key and the `:` after it.
    #[inline]
    fn key(&mut self) -> R<&'a str> {
        let k = self.string()?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Ok(k)
    }

    /// After a member's value: `true` at the closing `close` (consumed), `false` after a `,`
    /// (consumed, with the whitespace before the next key).
    #[inline]
    fn next_member(&mut self, close: u8) -> R<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                self.ws();
                Ok(false)
            }
            c if c == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(Bail),
        }
    }

    /// A number in JSON's grammar; its text.
    #[inline]
    fn number(&mut self) -> R<&'a str> {
        let b = self.b;
        let s = self.i;
        let mut j = s;
        let digits = |j: &mut usize| {
            let d = *j;
            while let Some(b'0'..=b'9') = b.get(*j) {
                *j += 1;
            }
            *j > d
        };
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        match b.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => {
                digits(&mut j);
            }
            _ => return Err(Bail),
        }
        if b.get(j) == Some(&b'.') {
            j += 1;
            if !digits(&mut j) {
                return Err(Bail);
            }
        }
        if let Some(b'e' | b'E') = b.get(j) {
            j += 1;
            if let Some(b'+' | b'-') = b.get(j) {
                j += 1;
            }
            if !digits(&mut j) {
                return Err(Bail);
            }
        }
        self.i = j;
        Ok(ascii(&b[s..j]))
    }

    /// An integer that serde_json would hand over as `i64`/`u64` without loss: at most 18
    /// characters with the sign, read in the same pass that checks them.
    #[inline]
    fn int(&mut self) -> R<i64> {
        let b = self.b;
        let s = self.i;
        let neg = b.get(s) == Some(&b'-');
        let mut j = s + usize::from(neg);
        let mut v: i64 = 0;
        match b.get(j) {
            // A leading zero stands alone; serde_json reads `-0` as the float -0.0.
            Some(b'0') if !neg => j += 1,
            Some(b'1'..=b'9') => {
                while let Some(&c @ b'0'..=b'9') = b.get(j) {
                    v = v * 10 + i64::from(c - b'0');
                    j += 1;
                    if j - s > 18 {
                        return Err(Bail);
                    }
                }
            }
            _ => return Err(Bail),
        }
        if let Some(b'.' | b'e' | b'E') = b.get(j) {
            return Err(Bail);
        }
        self.i = j;
        Ok(if neg { -v } else { v })
    }

    fn lenient_str(&mut self) -> R<LenientStr<'a>> {
        match self.peek()? {
            b'"' => Ok(LenientStr(Some(Cow::Borrowed(self.string()?)))),
            b'n' => self.literal(b"null").map(|()| LenientStr(None)),
            _ => Err(Bail),
        }
    }

    fn id_or_name(&mut self) -> R<Option<IdOrName<'a>>> {
        match self.peek()? {
            b'"' => Ok(Some(IdOrName::Name(Cow::Borrowed(self.string()?)))),
            b'n' => self.literal(b"null").map(|()| None),
            _ => Ok(Some(IdOrName::Num(self.int()?))),
        }
    }

    fn time(&mut self) -> R<RawTime<'a>> {
        match self.peek()? {
            b'"' => Ok(RawTime(Some(Cow::Borrowed(self.string()?)))),
            b'n' => self.literal(b"null").map(|()| RawTime(None)),
            _ => Ok(RawTime(Some(Cow::Borrowed(self.number()?)))),
        }
    }

    fn lenient(&mut self) -> R<Lenient> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Lenient::default()),
            _ => Ok(Lenient::Int(self.int()?)),
        }
    }

    /// A recorded-inputs member: its JSON text, as serde_json's `RawValue` would give it.
    fn raw(&mut self) -> R<Option<&'a str>> {
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        let s = self.i;
        self.skip(2)?;
        // Whatever `skip` accepts is ASCII: its strings are checked byte by byte, the rest is
        // digits, letters of literals, punctuation and whitespace.
        Ok(Some(ascii(&self.b[s..self.i])))
    }

    /// `args` into `out` (which is `None`): filled in place, as returning some 400 bytes of
    /// fields per event and moving them into the event showed as a copy in the profile.
    fn args(&mut self, out: &mut Option<RawArgs<'a>>) -> R<()> {
        match self.peek()? {
            b'n' => return self.literal(b"null"),
            b'{' => self.i += 1,
            _ => return Err(Bail),
        }
        let a = out.insert(RawArgs::default());
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(());
        }
        let mut seen = 0u32;
        loop {
            match ArgKey::parse(self.key()?) {
                Some(key) if seen & key.bit() != 0 => return Err(Bail),
                Some(key) => {
                    seen |= key.bit();
                    match key {
                        ArgKey::ExtId => a.ext_id = self.lenient()?,
                        ArgKey::RfId => a.rf_id = self.lenient()?,
                        ArgKey::Seq => a.seq = self.lenient()?,
                        ArgKey::FwdTid => a.fwd_tid = self.lenient()?,
                        ArgKey::Correlation => a.correlation = self.lenient()?,
                        ArgKey::Addr => a.addr = self.lenient()?,
                        ArgKey::SignedBytes => a.signed_bytes = self.lenient()?,
                        ArgKey::TotalAllocated => a.total_allocated = self.lenient()?,
                        ArgKey::TotalReserved => a.total_reserved = self.lenient()?,
                        ArgKey::DeviceType => a.device_type = self.lenient()?,
                        ArgKey::DeviceId => a.device_id = self.lenient()?,
                        ArgKey::Device => a.device = self.lenient()?,
                        ArgKey::Stream => a.stream = self.lenient()?,
                        ArgKey::Bytes => a.bytes = self.lenient()?,
                        ArgKey::InputDims => a.input_dims = self.raw()?,
                        ArgKey::InputType => a.input_type = self.raw()?,
                        ArgKey::ConcreteInputs => a.concrete_inputs = self.raw()?,
                        ArgKey::Name => a.name = self.lenient_str()?,
                        ArgKey::Collective => a.collective = self.lenient_str()?,
                        ArgKey::PgName => a.pg_name = self.lenient_str()?,
                        ArgKey::InNelems => a.in_nelems = self.lenient()?,
                        ArgKey::OutNelems => a.out_nelems = self.lenient()?,
                        ArgKey::Dtype => a.dtype = self.lenient_str()?,
                    }
                }
                None => self.skip(2)?,
            }
            if self.next_member(b'}')? {
                return Ok(());
            }
        }
    }

    /// Skips one value, checking it against JSON's grammar as serde_json would.
    fn skip(&mut self, depth: usize) -> R<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return Err(Bail);
                }
                self.i += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.key()?;
                    self.skip(depth + 1)?;
                    if self.next_member(b'}')? {
                        return Ok(());
                    }
                }
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return Err(Bail);
                }
                self.i += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.next_member(b']')? {
                        return Ok(());
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde_json reading of one event, with its end.
    fn by_serde(text: &str) -> Option<(RawEvent<'_>, usize)> {
        let mut s = serde_json::Deserializer::from_str(text).into_iter::<RawEvent>();
        let ev = s.next()?.ok()?;
        Some((ev, s.byte_offset()))
    }

    #[test]
    fn plain_events_read_like_serde() {
        for text in [
            r#"{"ph": "X", "cat": "cpu_op", "name": "aten::nll_loss_backward", "pid": 600, "tid": 625, "ts": 4451161997353.046, "dur": 178.315, "args": {"External id": 515, "Record function id": 380, "Concrete Inputs": ["", "", "", "", "1", "-100", ""], "Input type": ["float", "float", "long int", "", "Scalar", "Scalar", "float"], "Input Strides": [[], [10, 1], [1], [], [], [], []], "Input Dims": [[], [8, 10], [8], [], [], [], []], "Ev Idx": 2}}"#,
            r#"{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 425, "tid": 425, "ts": 4449236826679.243, "args": {"Total Reserved": 322961408, "Total Allocated": 215906816, "Bytes": -262144, "Device Id": 0, "Device Type": 1, "Addr": 139825376919552, "finished": false, "Ev Idx": 5947}}"#,
            r#"{"ph":"f","id":1,"pid":600,"tid":625,"ts":1.5e3,"cat":"fwdbwd","name":"fwdbwd","bp":"e"}"#,
            r#"{"ph":"X","cat":"Trace","name":"x","pid":"Spans","tid":"PyTorch Profiler","ts":"12.5","dur":null,"args":null}"#,
            r#"{ }"#,
            r#"{"args":{},"extra":[true,false,null,{"a":[-0.5e-3]}]}"#,
            r#"{"ph":"M","name":"process_name","pid":3,"args":{"name":"python3"}}"#,
        ] {
            let mut fast = RawEvent::default();
            let end =
                event(text.as_bytes(), 0, &mut fast).unwrap_or_else(|_| panic!("bailed: {text}"));
            let (slow, slow_end) = by_serde(text).unwrap();
            assert_eq!(fast, slow, "{text}");
            assert_eq!(end, slow_end);
            assert!(super::super::fast_reader_agrees(text.as_bytes()));
        }
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for text in [
            r#"{"name":"a\"b"}"#,       // escape
            "{\"name\":\"caf\u{e9}\"}", // non-ASCII
            r#"{"pid":1.5}"#,           // float id
            r#"{"ts":1,"ts":2}"#,       // duplicate field
            r#"{"args":{"Addr":1,"Addr":2}}"#,
            r#"["X","cpu_op"]"#, // a struct as a sequence
            r#"{"ph":"X",}"#,    // trailing comma
            r#"{"ts":01}"#,      // leading zero
            r#"{"ts":1.}"#,
            r#"{"x":tru}"#,
            r#"{"ph":"X""#, // cut
            r#"{"args":{"External id":"5"}}"#,
            r#"{"args":{"Bytes":123456789012345678901}}"#,
            r#"{"args":{"Bytes":-0}}"#, // serde_json: the float -0.0
            "{\"name\":\"a\tb\"}",      // raw control character
        ] {
            let mut ev = RawEvent::default();
            assert_eq!(
                event(text.as_bytes(), 0, &mut ev).map(|_| ()),
                Err(Bail),
                "{text}"
            );
        }
    }

    #[test]
    fn key_patterns_name_the_fields_the_long_way_names() {
        let text = |p: &KeyPat| {
            let b: Vec<u8> = (0..p.len).map(|i| (p.word >> (8 * i)) as u8).collect();
            let b = b.strip_suffix(b"\": ").expect("ends with \": ").to_vec();
            String::from_utf8(b.strip_prefix(b"\"").unwrap().to_vec()).unwrap()
        };
        for p in &EVENT_KEYS {
            assert_eq!(EventKey::parse(&text(p)), Some(p.key), "{}", text(p));
        }
        // Every field has its pattern.
        for &(_, key) in EventKey::SPELLINGS {
            assert!(EVENT_KEYS.iter().any(|p| p.key == key), "{key:?}");
        }
        // Patterns and the long way agree on whole events (key order shuffled, spacing varied).
        for text in [
            r#"{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 2, "ts": 3, "dur": 4, "args": {"External id": 5, "Record function id": 6, "Concrete Inputs": [""], "Input type": ["float"], "Input Strides": [[1]], "Input Dims": [[2]], "Ev Idx": 7}}"#,
            r#"{"args":   {"Input Dims" :  [[2]], "External id":5}, "dur":4, "ph":"X"}"#,
            r#"{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Total Reserved": 2, "Total Allocated": 1, "Bytes": -3, "Device Id": 0, "Device Type": 1, "Addr": 9, "finished": false, "Ev Idx": 2}}"#,
            r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"External id": 1, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 9, "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.5, "warps per SM": 2, "grid": [1, 1, 1], "block": [32, 1, 1], "est. achieved occupancy %": 3}}"#,
        ] {
            assert!(super::super::fast_reader_agrees(text.as_bytes()), "{text}");
            let mut ev = RawEvent::default();
            assert!(event(text.as_bytes(), 0, &mut ev).is_ok(), "{text}");
        }
    }

    #[test]
    fn special_bytes_are_found_in_any_lane() {
        for lane in 0..8 {
            for c in [b'"', b'\\', 0x1f, 0x00, 0x80, 0xff] {
                let mut w = [b'a'; 8];
                w[lane] = c;
                assert!(special_in(u64::from_le_bytes(w)), "{c:#x} at {lane}");
            }
            let mut w = [b'~'; 8];
            w[lane] = b' ';
            assert!(!special_in(u64::from_le_bytes(w)));
        }
    }
}
