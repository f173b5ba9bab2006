//! A pickle reader for plain data, and nothing else.
//!
//! Memory snapshots are Python pickles. `pickle.load` would run whatever callable the file
//! names, so this reader implements only the opcodes that build data (protocols 0 to 5: ints,
//! floats, strings, bytes, lists, tuples, dicts, sets, the memo). Every opcode that imports or
//! calls (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID,
//! EXT*) is an error naming the opcode and its offset; it is never executed.
//!
//! Values live in an arena and the memo stores arena indices, so an object that the pickle
//! shares in thousands of places (stack frames) is stored once and never copied.

use std::fmt;

/// Index of a value in a [`Pickle`] arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A plain-data pickle value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// An integer too large for 64 bits, kept as little-endian two's complement bytes.
    BigInt(Box<[u8]>),
    /// A float.
    Float(f64),
    /// A text string.
    Str(Box<str>),
    /// A bytes object.
    Bytes(Box<[u8]>),
    /// A list.
    List(Vec<ValueId>),
    /// A tuple.
    Tuple(Vec<ValueId>),
    /// A dict, in insertion order.
    Dict(Vec<(ValueId, ValueId)>),
    /// A set or frozenset.
    Set(Vec<ValueId>),
}

/// Why a pickle was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleError {
    /// An opcode that would import or call code.
    Forbidden {
        /// Opcode name, e.g. `GLOBAL`.
        opcode: &'static str,
        /// Byte offset of the opcode.
        offset: usize,
    },
    /// An opcode this reader does not know.
    UnknownOpcode {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// The data ended inside an opcode or before STOP.
    Truncated {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// Structurally wrong: stack underflow, missing mark, bad memo index, bad text.
    Malformed {
        /// What was wrong.
        what: String,
        /// Offset of the opcode.
        offset: usize,
    },
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Forbidden { opcode, offset } => write!(
                f,
                "pickle opcode {opcode} at byte {offset} would import or call code; refused (steptrace reads data only)"
            ),
            PickleError::UnknownOpcode { byte, offset } => {
                write!(f, "unknown pickle opcode 0x{byte:02x} at byte {offset}")
            }
            PickleError::Truncated { offset } => write!(f, "pickle ends early at byte {offset}"),
            PickleError::Malformed { what, offset } => {
                write!(f, "malformed pickle at byte {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for PickleError {}

/// A parsed pickle: an arena of values and the root.
#[derive(Debug, Clone)]
pub struct Pickle {
    values: Vec<Value>,
    /// The value STOP returned.
    pub root: ValueId,
}

impl Pickle {
    /// The value behind an id.
    pub fn get(&self, id: ValueId) -> &Value {
        &self.values[id.0 as usize]
    }

    /// Number of values in the arena.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the arena is empty.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `dict[key]` for a string key, if `id` is a dict holding it.
    pub fn dict_get(&self, id: ValueId, key: &str) -> Option<ValueId> {
        match self.get(id) {
            Value::Dict(items) => items
                .iter()
                .find(|(k, _)| matches!(self.get(*k), Value::Str(s) if &**s == key))
                .map(|(_, v)| *v),
            _ => None,
        }
    }

    /// The items of a list or tuple (empty for anything else).
    pub fn items(&self, id: ValueId) -> &[ValueId] {
        match self.get(id) {
            Value::List(v) | Value::Tuple(v) | Value::Set(v) => v,
            _ => &[],
        }
    }

    /// An integer value (bools count as 0/1; floats that are whole numbers too).
    pub fn as_i64(&self, id: ValueId) -> Option<i64> {
        match self.get(id) {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(*f as i64),
            _ => None,
        }
    }

    /// A float value (ints convert).
    pub fn as_f64(&self, id: ValueId) -> Option<f64> {
        match self.get(id) {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self, id: ValueId) -> Option<&str> {
        match self.get(id) {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Upper bound on values, so a small hostile file cannot make us allocate without end: each
/// value needs at least one opcode byte, so `len + 1` is never exceeded by honest input.
fn value_budget(len: usize) -> usize {
    len + 1
}

enum Slot {
    Mark,
    Val(ValueId),
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    values: Vec<Value>,
    stack: Vec<Slot>,
    memo: Vec<Option<ValueId>>,
    budget: usize,
}

/// Parses a pickle holding plain data.
pub fn parse(buf: &[u8]) -> Result<Pickle, PickleError> {
    let mut r = Reader {
        buf,
        pos: 0,
        values: Vec::new(),
        stack: Vec::new(),
        memo: Vec::new(),
        budget: value_budget(buf.len()),
    };
    let root = r.run()?;
    Ok(Pickle {
        values: r.values,
        root,
    })
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        if self.buf.len() - self.pos < n {
            return Err(PickleError::Truncated { offset: self.pos });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Result<usize, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Result<usize, PickleError> {
        let b = self.take(8)?;
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| PickleError::Truncated { offset: self.pos })
    }

    fn line(&mut self) -> Result<&'a [u8], PickleError> {
        let rest = &self.buf[self.pos..];
        let n = memchr::memchr(b'\n', rest).ok_or(PickleError::Truncated {
            offset: self.buf.len(),
        })?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    fn malformed(&self, what: impl Into<String>, offset: usize) -> PickleError {
        PickleError::Malformed {
            what: what.into(),
            offset,
        }
    }

    fn alloc(&mut self, v: Value, offset: usize) -> Result<ValueId, PickleError> {
        if self.values.len() >= self.budget {
            return Err(self.malformed("more values than the file can hold", offset));
        }
        self.values.push(v);
        Ok(ValueId(self.values.len() as u32 - 1))
    }

    fn push(&mut self, v: Value, offset: usize) -> Result<(), PickleError> {
        let id = self.alloc(v, offset)?;
        self.stack.push(Slot::Val(id));
        Ok(())
    }

    fn pop(&mut self, offset: usize) -> Result<ValueId, PickleError> {
        match self.stack.pop() {
            Some(Slot::Val(v)) => Ok(v),
            Some(Slot::Mark) => Err(self.malformed("unexpected MARK on the stack", offset)),
            None => Err(self.malformed("stack underflow", offset)),
        }
    }

    fn top(&self, offset: usize) -> Result<ValueId, PickleError> {
        match self.stack.last() {
            Some(Slot::Val(v)) => Ok(*v),
            _ => Err(self.malformed("expected a value on the stack", offset)),
        }
    }

    /// Pops everything above the topmost MARK (and the mark).
    fn pop_mark(&mut self, offset: usize) -> Result<Vec<ValueId>, PickleError> {
        let idx = self
            .stack
            .iter()
            .rposition(|s| matches!(s, Slot::Mark))
            .ok_or_else(|| self.malformed("no MARK on the stack", offset))?;
        let items = self
            .stack
            .drain(idx..)
            .skip(1)
            .map(|s| match s {
                Slot::Val(v) => v,
                Slot::Mark => unreachable!("rposition found the topmost mark"),
            })
            .collect();
        Ok(items)
    }

    fn text(&self, b: &[u8], offset: usize) -> Result<Box<str>, PickleError> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.into()),
            Err(_) => Err(self.malformed("string is not UTF-8", offset)),
        }
    }

    fn memo_put(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v = self.top(offset)?;
        if idx > self.buf.len() {
            return Err(self.malformed(format!("memo index {idx} out of range"), offset));
        }
        if self.memo.len() <= idx {
            self.memo.resize(idx + 1, None);
        }
        self.memo[idx] = Some(v);
        Ok(())
    }

    fn memo_get(&mut self, idx: usize, offset: usize) -> Result<(), PickleError> {
        let v =
            self.memo.get(idx).copied().flatten().ok_or_else(|| {
                self.malformed(format!("memo index {idx} was never stored"), offset)
            })?;
        self.stack.push(Slot::Val(v));
        Ok(())
    }

    fn add_to_list(
        &mut self,
        list: ValueId,
        items: Vec<ValueId>,
        offset: usize,
    ) -> Result<(), PickleError> {
        match &mut self.values[list.0 as usize] {
            Value::List(v) | Value::Set(v) => {
                v.extend(items);
                Ok(())
            }
            _ => Err(self.malformed("APPEND to something that is not a list", offset)),
        }
    }

    fn add_to_dict(
        &mut self,
        dict: ValueId,
        items: Vec<ValueId>,
        offset: usize,
    ) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items", offset));
        }
        match &mut self.values[dict.0 as usize] {
            Value::Dict(d) => {
                d.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => Err(self.malformed("SETITEM on something that is not a dict", offset)),
        }
    }

    fn long(&self, b: &[u8]) -> Value {
        if b.is_empty() {
            return Value::Int(0);
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut bytes = if neg { [0xffu8; 8] } else { [0u8; 8] };
            bytes[..b.len()].copy_from_slice(b);
            Value::Int(i64::from_le_bytes(bytes))
        } else {
            Value::BigInt(b.into())
        }
    }

    fn run(&mut self) -> Result<ValueId, PickleError> {
        loop {
            let offset = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(self.malformed(format!("unsupported protocol {proto}"), offset));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => return self.pop(offset),
                b'(' => self.stack.push(Slot::Mark),
                b'}' => self.push(Value::Dict(Vec::new()), offset)?,
                b']' => self.push(Value::List(Vec::new()), offset)?,
                b')' => self.push(Value::Tuple(Vec::new()), offset)?,
                0x8f => self.push(Value::Set(Vec::new()), offset)?,
                b'd' => {
                    let items = self.pop_mark(offset)?;
                    let id = self.alloc(Value::Dict(Vec::new()), offset)?;
                    self.add_to_dict(id, items, offset)?;
                    self.stack.push(Slot::Val(id));
                }
                b'l' => {
                    let items = self.pop_mark(offset)?;
                    self.push(Value::List(items), offset)?;
                }
                b't' => {
                    let items = self.pop_mark(offset)?;
                    self.push(Value::Tuple(items), offset)?;
                }
                0x91 => {
                    let items = self.pop_mark(offset)?;
                    self.push(Value::Set(items), offset)?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(offset)?);
                    }
                    items.reverse();
                    self.push(Value::Tuple(items), offset)?;
                }
                b'a' => {
                    let v = self.pop(offset)?;
                    let list = self.top(offset)?;
                    self.add_to_list(list, vec![v], offset)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark(offset)?;
                    let list = self.top(offset)?;
                    self.add_to_list(list, items, offset)?;
                }
                b's' => {
                    let v = self.pop(offset)?;
                    let k = self.pop(offset)?;
                    let d = self.top(offset)?;
                    self.add_to_dict(d, vec![k, v], offset)?;
                }
                b'u' => {
                    let items = self.pop_mark(offset)?;
                    let d = self.top(offset)?;
                    self.add_to_dict(d, items, offset)?;
                }
                b'J' => {
                    let b = self.take(4)?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64;
                    self.push(Value::Int(v), offset)?;
                }
                b'K' => {
                    let v = self.u8()? as i64;
                    self.push(Value::Int(v), offset)?;
                }
                b'M' => {
                    let v = self.u16()? as i64;
                    self.push(Value::Int(v), offset)?;
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    let v = self.long(b);
                    self.push(v, offset)?;
                }
                0x8b => {
                    let n = self.u32()?;
                    let b = self.take(n)?;
                    let v = self.long(b);
                    self.push(v, offset)?;
                }
                b'I' | b'L' => {
                    let line = self.line()?;
                    let t = std::str::from_utf8(line)
                        .unwrap_or("")
                        .trim_end_matches('L');
                    let v = match t {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        _ => Value::Int(
                            t.parse()
                                .map_err(|_| self.malformed("bad integer text", offset))?,
                        ),
                    };
                    self.push(v, offset)?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.push(Value::Float(v), offset)?;
                }
                b'F' => {
                    let line = self.line()?;
                    let v = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad float text", offset))?;
                    self.push(Value::Float(v), offset)?;
                }
                b'N' => self.push(Value::None, offset)?,
                0x88 => self.push(Value::Bool(true), offset)?,
                0x89 => self.push(Value::Bool(false), offset)?,
                0x8c | b'X' | 0x8d => {
                    let n = match op {
                        0x8c => self.u8()? as usize,
                        b'X' => self.u32()?,
                        _ => self.u64()?,
                    };
                    let b = self.take(n)?;
                    let s = self.text(b, offset)?;
                    self.push(Value::Str(s), offset)?;
                }
                b'U' | b'T' => {
                    // Python 2 byte strings: decode as latin-1 would; snapshots use them only for ASCII.
                    let n = if op == b'U' {
                        self.u8()? as usize
                    } else {
                        self.u32()?
                    };
                    let b = self.take(n)?;
                    let s: String = b.iter().map(|&c| c as char).collect();
                    self.push(Value::Str(s.into()), offset)?;
                }
                b'V' => {
                    let line = self.line()?;
                    let s = self.text(line, offset)?;
                    self.push(Value::Str(s), offset)?;
                }
                b'S' => {
                    let line = self.line()?;
                    let t = std::str::from_utf8(line).unwrap_or("");
                    let t = t.trim_matches(|c| c == '\'' || c == '"');
                    self.push(Value::Str(t.into()), offset)?;
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.u8()? as usize,
                        b'B' => self.u32()?,
                        _ => self.u64()?,
                    };
                    let b = self.take(n)?;
                    self.push(Value::Bytes(b.into()), offset)?;
                }
                0x94 => {
                    let idx = self.memo.len();
                    self.memo_put(idx, offset)?;
                }
                b'q' => {
                    let idx = self.u8()? as usize;
                    self.memo_put(idx, offset)?;
                }
                b'r' => {
                    let idx = self.u32()?;
                    self.memo_put(idx, offset)?;
                }
                b'p' => {
                    let line = self.line()?;
                    let idx = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad PUT index", offset))?;
                    self.memo_put(idx, offset)?;
                }
                b'h' => {
                    let idx = self.u8()? as usize;
                    self.memo_get(idx, offset)?;
                }
                b'j' => {
                    let idx = self.u32()?;
                    self.memo_get(idx, offset)?;
                }
                b'g' => {
                    let line = self.line()?;
                    let idx = std::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| self.malformed("bad GET index", offset))?;
                    self.memo_get(idx, offset)?;
                }
                b'0' => {
                    self.stack
                        .pop()
                        .ok_or_else(|| self.malformed("POP on an empty stack", offset))?;
                }
                b'1' => {
                    self.pop_mark(offset)?;
                }
                b'2' => {
                    let v = self.top(offset)?;
                    self.stack.push(Slot::Val(v));
                }
                _ => {
                    let forbidden = match op {
                        b'c' => Some("GLOBAL"),
                        0x93 => Some("STACK_GLOBAL"),
                        b'R' => Some("REDUCE"),
                        b'b' => Some("BUILD"),
                        b'i' => Some("INST"),
                        b'o' => Some("OBJ"),
                        0x81 => Some("NEWOBJ"),
                        0x92 => Some("NEWOBJ_EX"),
                        b'P' => Some("PERSID"),
                        b'Q' => Some("BINPERSID"),
                        0x82 => Some("EXT1"),
                        0x83 => Some("EXT2"),
                        0x84 => Some("EXT4"),
                        0x97 => Some("NEXT_BUFFER"),
                        0x98 => Some("READONLY_BUFFER"),
                        _ => None,
                    };
                    return Err(match forbidden {
                        Some(opcode) => PickleError::Forbidden { opcode, offset },
                        None => PickleError::UnknownOpcode { byte: op, offset },
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(pk.get(pk.items(c)[0]), &Value::Bool(true));
    }

    #[test]
    fn refuses_code_execution_opcodes() {
        // pickle.dumps(os.system) style: GLOBAL 'posix system', then REDUCE.
        let evil = b"cposix\nsystem\n(S'echo pwned'\ntR.";
        match parse(evil) {
            Err(PickleError::Forbidden { opcode, offset }) => {
                assert_eq!(opcode, "GLOBAL");
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
                opcode: "STACK_GLOBAL",
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
        let r = Reader {
            buf: &[],
            pos: 0,
            values: vec![],
            stack: vec![],
            memo: vec![],
            budget: 0,
        };
        assert_eq!(r.long(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(r.long(&[0xff, 0x00]), Value::Int(255));
        assert_eq!(r.long(&[0; 9]), Value::BigInt(vec![0; 9].into()));
    }
}
