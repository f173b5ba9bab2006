//! Path → bytes: plain files and gzip streams (sniffed by magic, not by extension), with
//! truncated gzip streams yielding what they hold.

use std::io::Read;
use std::ops::Deref;
use std::path::Path;

use super::Error;

/// An input's bytes: the file mapped into memory, or a buffer (inflated gzip, tests).
#[derive(Debug)]
pub enum Bytes {
    /// Owned bytes.
    Owned(Vec<u8>),
    /// A read-only mapping of the whole file.
    Mapped(memmap2::Mmap),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes::Owned(v)
    }
}

/// Files at least this large are mapped rather than read. Reading copies every byte out of the
/// page cache on one thread (a fifth of a whole `analyze` of a 222 MB trace) into freshly
/// zeroed pages; a mapping is filled by page faults on the parse threads themselves. Small
/// files are read: a mapping costs more to set up than it saves.
const MAP_AT_LEAST: u64 = 1 << 20;

/// The whole file at `path`: mapped when large, read otherwise.
fn open(path: &Path) -> std::io::Result<Bytes> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len >= MAP_AT_LEAST && file.metadata()?.is_file() {
        // SAFETY: the mapping is read-only and private to this process. What it cannot guard
        // against is another process truncating or rewriting the file while it is mapped:
        // that may show changed bytes (parsed like any other input) or raise SIGBUS for
        // pages past a new end. Traces and snapshots are written once, when a run ends, and
        // analysed afterwards; the speed-up is measured in docs/performance.md.
        if let Ok(m) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(Bytes::Mapped(m));
        }
    }
    let mut v = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
    (&file).read_to_end(&mut v)?;
    Ok(Bytes::Owned(v))
}

/// What was read from one input file.
#[derive(Debug)]
pub struct Source {
    /// The decompressed bytes.
    pub bytes: Bytes,
    /// Size on disk.
    pub file_len: u64,
    /// Whether the file was a gzip stream.
    pub gzipped: bool,
    /// Set when a gzip stream ended early (a crashed writer): the bytes hold what came before.
    pub truncated_gzip: bool,
}

/// Whether `head` starts with the gzip magic bytes (RFC 1952).
fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}

/// Reads a whole file, inflating it when it starts with the gzip magic bytes.
pub fn read(path: &Path) -> Result<Source, Error> {
    let raw = open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file_len = raw.len() as u64;
    if is_gzip(&raw) {
        let (bytes, truncated_gzip) = inflate(&raw).map_err(|e| Error::Format {
            path: path.to_path_buf(),
            what: format!("corrupt gzip stream: {e}"),
        })?;
        if bytes.is_empty() && truncated_gzip {
            return Err(Error::Format {
                path: path.to_path_buf(),
                what: "gzip stream ends before any data".into(),
            });
        }
        Ok(Source {
            bytes: Bytes::Owned(bytes),
            file_len,
            gzipped: true,
            truncated_gzip,
        })
    } else {
        Ok(Source {
            bytes: raw,
            file_len,
            gzipped: false,
            truncated_gzip: false,
        })
    }
}

/// The decompressed text of `path` as a stream, for a second pass that should not hold the
/// whole text (the annotated trace): the file itself, or its gzip members inflated as read.
pub fn open_stream(path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
    let mut file = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(path)?);
    let gz = is_gzip(std::io::BufRead::fill_buf(&mut file)?);
    Ok(if gz {
        Box::new(flate2::bufread::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

/// Inflates a (possibly multi-member) gzip stream. An unexpected end of stream is not an error:
/// the bytes decoded so far are returned with `true`, so a trace written by a killed process
/// still yields its complete events.
fn inflate(raw: &[u8]) -> std::io::Result<(Vec<u8>, bool)> {
    let mut out = Vec::with_capacity(inflated_size_hint(raw));
    let mut dec = flate2::read::MultiGzDecoder::new(raw);
    // read_to_end decodes straight into `out`'s spare capacity (no bounce buffer), retries
    // `Interrupted` itself and, on an error, keeps what it had appended: that is the truncated
    // trace's readable prefix.
    match dec.read_to_end(&mut out) {
        Ok(_) => Ok((out, false)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok((out, true)),
        // A stream cut inside a deflate block surfaces as InvalidInput/InvalidData; with output
        // already produced that is truncation, with none it is a corrupt file.
        Err(e) if out.is_empty() => Err(e),
        Err(_) => Ok((out, true)),
    }
}

/// The buffer to reserve for the inflated bytes. A gzip member ends with its uncompressed size
/// mod 2^32 (ISIZE); for the usual single-member trace under 4 GiB that is exact, and it saves
/// regrowing (and copying) a buffer of hundreds of MB. A truncated or multi-member file can
/// make the field anything, so it is used only when plausible; otherwise traces compress about
/// 10:1.
fn inflated_size_hint(raw: &[u8]) -> usize {
    let fallback = raw.len().saturating_mul(8);
    let Some(tail) = raw.len().checked_sub(4).and_then(|i| raw.get(i..)) else {
        return fallback.min(1 << 34);
    };
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize;
    let plausible = stored >= raw.len() / 2 && stored <= raw.len().saturating_mul(64);
    // One extra byte so read_to_end's final zero-length probe does not regrow the buffer.
    let want = if plausible { stored + 1 } else { fallback };
    want.min(1 << 34)
}

/// Drops `v` on a helper thread: unmapping a large file or freeing the tables of a large trace
/// is kernel and allocator work that nothing downstream waits for. If no thread can be started,
/// `v` is dropped here.
pub fn drop_aside<T: Send + 'static>(v: T) {
    let _ = std::thread::Builder::new()
        .name("steptrace-drop".into())
        .spawn(move || drop(v));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn size_hint_reads_isize_and_ignores_implausible_values() {
        // Text-like data that compresses a few times over, as traces do.
        let mut x = 1u32;
        let data: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                b'a' + ((x >> 16) % 8) as u8
            })
            .collect();
        let z = gz(&data);
        assert!(z.len() * 2 < data.len());
        assert_eq!(inflated_size_hint(&z), data.len() + 1);
        // A truncated stream's last four bytes are deflate data: fall back to 8x.
        let mut cut = z[..z.len() - 8].to_vec();
        cut.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(inflated_size_hint(&cut), cut.len() * 8);
        assert_eq!(inflated_size_hint(&[1, 2]), 16);
    }

    #[test]
    fn inflates_whole_stream() {
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let (out, truncated) = inflate(&gz(&data)).unwrap();
        assert_eq!(out, data);
        assert!(!truncated);
    }

    #[test]
    fn truncated_stream_yields_prefix() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = gz(&data);
        let (out, truncated) = inflate(&z[..z.len() / 2]).unwrap();
        assert!(truncated);
        assert!(!out.is_empty());
        assert_eq!(&data[..out.len()], &out[..]);
    }
}
