//! The reader's primitives: fixed-width integers and text from the input, the stack and its marks.

use super::*;

impl<'a> Reader<'a> {
    /// The offset of the next byte of the input.
    #[inline]
    pub(super) fn pos(&self) -> usize {
        self.input.offset()
    }

    #[inline]
    pub(super) fn u8(&mut self) -> Result<u8, PickleError> {
        self.input.u8()
    }

    pub(super) fn u16(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    pub(super) fn u32(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    pub(super) fn u64(&mut self) -> Result<usize, PickleError> {
        let b = self.input.take(8)?;
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| PickleError::Truncated {
            offset: self.input.offset(),
        })
    }

    pub(super) fn malformed(&self, what: impl Into<String>, offset: usize) -> PickleError {
        PickleError::Malformed {
            what: what.into(),
            offset,
        }
    }

    #[inline]
    pub(super) fn pop(&mut self, offset: usize) -> Result<ValueId, PickleError> {
        if self.stack.len() <= self.marks.last().copied().unwrap_or(0) && !self.marks.is_empty() {
            return Err(self.malformed("unexpected MARK on the stack", offset));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("stack underflow", offset))
    }

    #[inline]
    pub(super) fn top(&self, offset: usize) -> Result<ValueId, PickleError> {
        match self.stack.last() {
            Some(v) if self.stack.len() > self.marks.last().copied().unwrap_or(0) => Ok(*v),
            _ => Err(self.malformed("expected a value on the stack", offset)),
        }
    }

    /// The value just below the items `stack[from..]` of a popped MARK.
    pub(super) fn below(&self, from: usize, offset: usize) -> Result<ValueId, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match from.checked_sub(1) {
            Some(i) if i >= floor => Ok(self.stack[i]),
            _ => Err(self.malformed("expected a value on the stack", offset)),
        }
    }

    /// The stack height at the topmost MARK, which is removed; the items above it are
    /// `stack[height..]`.
    #[inline]
    pub(super) fn pop_mark(&mut self, offset: usize) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK on the stack", offset))
    }

    /// The next `n` bytes of the input as a string (UTF-8, checked), copied out of it; short
    /// ones share one id per distinct text.
    pub(super) fn str_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        if n <= SHORT_STR {
            if let Some(v) = short_text(&mut self.short_strs, &mut self.pk.texts, short_key(b), b) {
                return Ok(v);
            }
        } else if std::str::from_utf8(b).is_ok() {
            return Ok(ValueId::new(Kind::Str, self.pk.texts.push_bytes(b)));
        }
        // Not UTF-8: one lone surrogate (which Python pickles) is no reason to refuse a
        // snapshot; the text is kept with U+FFFD in place of the bytes, and counted.
        self.pk.lossy_texts += 1;
        let text = String::from_utf8_lossy(b).into_owned();
        Ok(ValueId::new(
            Kind::Str,
            self.pk.texts.push_bytes(text.as_bytes()),
        ))
    }

    /// The id of a short string, one per distinct text whatever opcode wrote it.
    pub(super) fn short_str(&mut self, s: &str) -> ValueId {
        let key = short_key(s.as_bytes());
        if let Some(&v) = self.short_strs.get(&key) {
            return v;
        }
        let v = ValueId::new(Kind::Str, self.pk.texts.push(Text::Owned(s.into())));
        self.short_strs.insert(key, v);
        v
    }

    /// The next `n` bytes of the input as a bytes object, copied out of it.
    pub(super) fn bytes_next(&mut self, n: usize) -> Result<ValueId, PickleError> {
        let b = self.input.take(n)?;
        Ok(ValueId::new(Kind::Bytes, self.pk.texts.push_bytes(b)))
    }

    pub(super) fn owned_str(&mut self, s: String) -> ValueId {
        if s.len() <= SHORT_STR {
            return self.short_str(&s);
        }
        ValueId::new(Kind::Str, self.pk.texts.push(Text::Owned(s.into())))
    }
}
