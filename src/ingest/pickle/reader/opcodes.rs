//! The opcode loop: each data-building opcode read and applied to the machine's stack, marks
//! and memo; opcodes that would run code are refused where they stand.

use super::super::{CodeOpcode, Kind, PickleError, ValueId};
use super::{appended, Reader, NONE};

impl Reader<'_> {
    /// Runs opcodes from the current position to STOP; the value left on the stack is the
    /// pickle's root.
    pub(in crate::ingest::pickle) fn run(&mut self) -> Result<ValueId, PickleError> {
        loop {
            let offset = self.pos();
            let op = self.u8()?;
            match op {
                b'.' => return self.pop(offset),
                0x80 | 0x95 => self.framing(op, offset)?,
                b'('
                | b'}'
                | b']'
                | b')'
                | 0x8f
                | b'd'
                | b'l'
                | b't'
                | 0x91
                | 0x85..=0x87
                | b'a'
                | b'e'
                | 0x90
                | b's'
                | b'u' => self.container(op, offset)?,
                b'J' | b'K' | b'M' | 0x8a | 0x8b | b'I' | b'L' | b'G' | b'F' | b'N' | 0x88
                | 0x89 => self.scalar(op, offset)?,
                0x8c | b'X' | 0x8d | b'U' | b'T' | b'V' | b'S' | b'C' | b'B' | 0x8e | 0x96 => {
                    self.text(op, offset)?
                }
                0x94 | b'q' | b'r' | b'p' | b'h' | b'j' | b'g' | b'0' | b'1' | b'2' => {
                    self.memo_or_stack(op, offset)?
                }
                _ => return Err(refused(op, offset)),
            }
        }
    }

    /// PROTO and FRAME: checked and skipped.
    #[inline(always)]
    fn framing(&mut self, op: u8, offset: usize) -> Result<(), PickleError> {
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
            _ => return Err(refused(op, offset)),
        }
        Ok(())
    }

    /// Marks, empty containers and the opcodes that fill them.
    #[inline(always)]
    fn container(&mut self, op: u8, offset: usize) -> Result<(), PickleError> {
        match op {
            b'(' => self.marks.push(self.stack.len()),
            b'}' => {
                if self.direct && self.direct_entry(offset)? {
                    return Ok(());
                }
                let id = self.empty_dict();
                self.stack.push(id);
            }
            b']' => {
                let id = self.empty_list();
                self.stack.push(id);
            }
            b')' => {
                let id = self.pk.seqs.add(&[]);
                self.stack.push(ValueId::new(Kind::Tuple, id));
            }
            0x8f => {
                let id = self.pk.seqs.add(&[]);
                self.stack.push(ValueId::new(Kind::Set, id));
            }
            b'd' => {
                let from = self.pop_mark(offset)?;
                let id = ValueId::new(Kind::Dict, self.pk.maps.add(&[]));
                self.add_to_dict(id, from, offset)?;
                self.stack.push(id);
            }
            b'l' => {
                let from = self.pop_mark(offset)?;
                let v = self.seq_from_stack(Kind::List, from);
                self.stack.push(v);
            }
            b't' => {
                let from = self.pop_mark(offset)?;
                let v = self.seq_from_stack(Kind::Tuple, from);
                self.stack.push(v);
            }
            0x91 => {
                let from = self.pop_mark(offset)?;
                let v = self.seq_from_stack(Kind::Set, from);
                self.stack.push(v);
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let floor = self.marks.last().copied().unwrap_or(0);
                if self.stack.len() < floor + n {
                    return Err(self.malformed("stack underflow", offset));
                }
                let from = self.stack.len() - n;
                let v = self.seq_from_stack(Kind::Tuple, from);
                self.stack.push(v);
            }
            b'a' => {
                let v = self.pop(offset)?;
                let mut list = self.top(offset)?;
                if list.kind() == Kind::Frozen {
                    list = self.thaw(self.stack.len() - 1);
                }
                if !matches!(list.kind(), Kind::List | Kind::Set) {
                    return Err(self.malformed("APPEND to something that is not a list", offset));
                }
                self.pk.seqs.extend(list.data(), &[v]);
                appended(self.appending().0, list, &[v]);
            }
            b'e' | 0x90 => {
                let from = self.pop_mark(offset)?;
                let list = self.below(from, offset)?;
                self.add_to_list(list, from, offset)?;
            }
            b's' => {
                // One key and value: the same path as SETITEMS, so a record read
                // as a record keeps its members when it grows.
                let floor = self.marks.last().copied().unwrap_or(0);
                let from = self.stack.len().checked_sub(2).filter(|&f| f >= floor);
                let from = from.ok_or_else(|| self.malformed("stack underflow", offset))?;
                let d = self.below(from, offset)?;
                self.add_to_dict(d, from, offset)?;
            }
            b'u' => {
                let from = self.pop_mark(offset)?;
                let d = self.below(from, offset)?;
                self.add_to_dict(d, from, offset)?;
            }
            _ => return Err(refused(op, offset)),
        }
        Ok(())
    }

    /// Integers, floats, booleans and None.
    #[inline(always)]
    fn scalar(&mut self, op: u8, offset: usize) -> Result<(), PickleError> {
        match op {
            b'J' => {
                let b = self.input.take(4)?;
                let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64;
                let v = self.int(v);
                self.stack.push(v);
            }
            b'K' => {
                let v = self.u8()? as i64;
                let v = self.int(v);
                self.stack.push(v);
            }
            b'M' => {
                let v = self.u16()? as i64;
                let v = self.int(v);
                self.stack.push(v);
            }
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    self.u8()? as usize
                } else {
                    self.u32()?
                };
                let v = self.long_next(n)?;
                self.stack.push(v);
            }
            b'I' | b'L' => {
                let line = self.input.line()?;
                let t = std::str::from_utf8(&line)
                    .unwrap_or("")
                    .trim_end_matches('L');
                let v = match t {
                    "00" => ValueId::new(Kind::Bool, 0),
                    "01" => ValueId::new(Kind::Bool, 1),
                    _ => {
                        let v = t
                            .parse()
                            .map_err(|_| self.malformed("bad integer text", offset))?;
                        self.int(v)
                    }
                };
                self.stack.push(v);
            }
            b'G' => {
                let b = self.input.take(8)?;
                let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                let v = self.float(v);
                self.stack.push(v);
            }
            b'F' => {
                let line = self.input.line()?;
                let v: f64 = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| self.malformed("bad float text", offset))?;
                let v = self.float(v);
                self.stack.push(v);
            }
            b'N' => self.stack.push(NONE),
            0x88 => self.stack.push(ValueId::new(Kind::Bool, 1)),
            0x89 => self.stack.push(ValueId::new(Kind::Bool, 0)),
            _ => return Err(refused(op, offset)),
        }
        Ok(())
    }

    /// Strings and bytes, copied out of the input.
    #[inline(always)]
    fn text(&mut self, op: u8, offset: usize) -> Result<(), PickleError> {
        match op {
            0x8c | b'X' | 0x8d => {
                let n = match op {
                    0x8c => self.u8()? as usize,
                    b'X' => self.u32()?,
                    _ => self.u64()?,
                };
                let v = self.str_next(n)?;
                self.stack.push(v);
            }
            b'U' | b'T' => {
                // Python 2 byte strings: decode as latin-1 would; snapshots use them only for ASCII.
                let n = if op == b'U' {
                    self.u8()? as usize
                } else {
                    self.u32()?
                };
                let b = self.input.take(n)?;
                let s: String = b.iter().map(|&c| c as char).collect();
                let v = self.owned_str(s);
                self.stack.push(v);
            }
            b'V' => {
                // Raw-unicode-escape text: read as UTF-8, which every ASCII name is.
                let line = self.input.line()?;
                let t = std::str::from_utf8(&line)
                    .map_err(|_| self.malformed("string is not UTF-8", offset))?
                    .to_owned();
                let v = self.owned_str(t);
                self.stack.push(v);
            }
            b'S' => {
                let line = self.input.line()?;
                let t = std::str::from_utf8(&line).unwrap_or("");
                let t = t.trim_matches(|c| c == '\'' || c == '"');
                let v = self.owned_str(t.to_string());
                self.stack.push(v);
            }
            b'C' | b'B' | 0x8e | 0x96 => {
                let n = match op {
                    b'C' => self.u8()? as usize,
                    b'B' => self.u32()?,
                    _ => self.u64()?,
                };
                let v = self.bytes_next(n)?;
                self.stack.push(v);
            }
            _ => return Err(refused(op, offset)),
        }
        Ok(())
    }

    /// The memo (PUT, GET) and the stack's own opcodes (POP, POP_MARK, DUP).
    #[inline(always)]
    fn memo_or_stack(&mut self, op: u8, offset: usize) -> Result<(), PickleError> {
        match op {
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
                let line = self.input.line()?;
                let idx = std::str::from_utf8(&line)
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
                let line = self.input.line()?;
                let idx = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| self.malformed("bad GET index", offset))?;
                self.memo_get(idx, offset)?;
            }
            b'0' => {
                // POP takes the topmost thing, a MARK included.
                if self.marks.last() == Some(&self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.stack
                        .pop()
                        .ok_or_else(|| self.malformed("POP on an empty stack", offset))?;
                }
            }
            b'1' => {
                let from = self.pop_mark(offset)?;
                self.stack.truncate(from);
            }
            b'2' => {
                let v = self.top(offset)?;
                self.copied(v);
                self.stack.push(v);
            }
            _ => return Err(refused(op, offset)),
        }
        Ok(())
    }
}

/// The error for an opcode the reader does not apply: one that would run code (named), or one
/// it does not know.
fn refused(op: u8, offset: usize) -> PickleError {
    match CodeOpcode::of(op) {
        Some(opcode) => PickleError::Forbidden { opcode, offset },
        None => PickleError::UnknownOpcode { byte: op, offset },
    }
}
