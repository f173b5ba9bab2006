//! Skipping JSON values, strings and containers without building them (a container by 64-byte blocks and their quote and escape masks).

use super::*;

/// Skips JSON whitespace from `i`; returns the first index that is not whitespace.
pub(crate) fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && matches!(buf[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// `buf[i]` is an opening quote; returns the index just past the closing quote, or `None` when
/// the text ends first.
pub(crate) fn skip_string(buf: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        // `get`: a text cut right after the quote (or a caller's index at the end) is
        // "ended first", never an out-of-range slice.
        let k = j + memchr2(b'"', b'\\', buf.get(j..)?)?;
        if buf[k] == b'"' {
            return Some(k + 1);
        }
        // A backslash escapes the next byte, whatever it is.
        j = k + 2;
        if j > buf.len() {
            return None;
        }
    }
}

/// Skips one JSON value starting at `i` (after whitespace). Returns the index just past it, or
/// `None` when the text ends before the value does. Validity beyond nesting is not checked: the
/// real parser does that.
pub(crate) fn skip_value(buf: &[u8], i: usize) -> Option<usize> {
    let i = skip_ws(buf, i);
    match *buf.get(i)? {
        b'"' => skip_string(buf, i),
        open @ (b'{' | b'[') => {
            let close = if open == b'{' { b'}' } else { b']' };
            let mut depth = 0usize;
            let mut j = i;
            loop {
                let k = j + memchr3(b'"', open, close, &buf[j..])?;
                match buf[k] {
                    b'"' => {
                        j = skip_string(buf, k)?;
                        continue;
                    }
                    c if c == open => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(k + 1);
                        }
                    }
                }
                j = k + 1;
            }
        }
        _ => {
            // Number, true, false, null: runs until a delimiter.
            let mut j = i;
            while j < buf.len()
                && !matches!(buf[j], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            {
                j += 1;
            }
            if j == buf.len() {
                None
            } else {
                Some(j)
            }
        }
    }
}

/// [`skip_value`] for an object or array at `i`, 64 bytes at a time: one pass of byte
/// compares makes bitmasks of quotes, brackets and backslashes; a prefix XOR of the quotes
/// marks the bytes inside strings, and only the brackets outside them are counted. Half the
/// events of a `with_stack` trace are skipped whole, and this is several times faster than
/// finding their strings one by one. `None` where `skip_value` should decide instead: a
/// backslash (rare in traces), no bracket at `i`, or the text ending inside the value.
pub(crate) fn skip_container(buf: &[u8], i: usize) -> Option<usize> {
    let open = *buf.get(i)?;
    let close = match open {
        b'{' => b'}',
        b'[' => b']',
        _ => return None,
    };
    let mut depth = 0u32;
    let mut in_string = 0u64;
    let mut pos = i;
    loop {
        let rest = buf.get(pos..)?;
        let (m, whole) = match rest.first_chunk::<64>() {
            Some(block) => (BlockMasks::of(block, open, close), true),
            None if rest.is_empty() => return None,
            None => {
                // Padding with spaces adds no quote or bracket.
                let mut block = [b' '; 64];
                block[..rest.len()].copy_from_slice(rest);
                (BlockMasks::of(&block, open, close), false)
            }
        };
        if m.backslash != 0 {
            return None;
        }
        // Set from an opening quote up to (not including) its closing one; a string running
        // on from the block before flips the whole block.
        let inside = prefix_xor(m.quote) ^ in_string;
        in_string = ((inside as i64) >> 63) as u64;
        let mut brackets = (m.open | m.close) & !inside;
        while brackets != 0 {
            let k = brackets.trailing_zeros();
            if m.open >> k & 1 == 1 {
                depth += 1;
            } else {
                depth -= 1;
                if depth == 0 {
                    return Some(pos + k as usize + 1);
                }
            }
            brackets &= brackets - 1;
        }
        if !whole {
            return None;
        }
        pos += 64;
    }
}

/// Bit `k` set: `x` has an odd number of set bits at positions `0..=k`.
#[inline]
pub(super) fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Where one 64-byte block holds quotes, backslashes, and the opening and closing bracket
/// being counted: bit `k` for byte `k`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct BlockMasks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl BlockMasks {
    #[inline]
    pub(super) fn of(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        #[cfg(target_arch = "x86_64")]
        {
            BlockMasks::sse2(b, open, close)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            BlockMasks::portable(b, open, close)
        }
    }

    /// The definition, byte by byte (other targets, and the tests' reference).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    pub(super) fn portable(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        let mut m = BlockMasks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (k, &c) in b.iter().enumerate() {
            m.quote |= u64::from(c == b'"') << k;
            m.backslash |= u64::from(c == b'\\') << k;
            m.open |= u64::from(c == open) << k;
            m.close |= u64::from(c == close) << k;
        }
        m
    }

    /// SSE2 is part of every x86_64 CPU, so this needs no runtime detection.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn sse2(b: &[u8; 64], open: u8, close: u8) -> BlockMasks {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is enabled on every x86_64 target, which is all these intrinsics need;
        // `b` is 64 bytes long, so bytes 16k..16k+16 are in bounds for k < 4, and `loadu` has
        // no alignment requirement.
        unsafe {
            let splat = |c: u8| _mm_set1_epi8(c as i8);
            let (q, bs, o, c) = (splat(b'"'), splat(b'\\'), splat(open), splat(close));
            let mut m = BlockMasks {
                quote: 0,
                backslash: 0,
                open: 0,
                close: 0,
            };
            for k in 0..4 {
                let v = _mm_loadu_si128(b.as_ptr().add(16 * k).cast::<__m128i>());
                let bits = |x: __m128i| u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, x)) as u16);
                m.quote |= bits(q) << (16 * k);
                m.backslash |= bits(bs) << (16 * k);
                m.open |= bits(o) << (16 * k);
                m.close |= bits(c) << (16 * k);
            }
            m
        }
    }
}
