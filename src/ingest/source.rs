//! Path → bytes: plain files and gzip streams (sniffed by magic, not by extension), with
//! truncated gzip streams yielding what they hold.

use std::io::Read;
use std::path::Path;

use super::Error;

/// What was read from one input file.
#[derive(Debug)]
pub struct Source {
    /// The decompressed bytes.
    pub bytes: Vec<u8>,
    /// Size on disk.
    pub file_len: u64,
    /// Whether the file was a gzip stream.
    pub gzipped: bool,
    /// Set when a gzip stream ended early (a crashed writer): the bytes hold what came before.
    pub truncated_gzip: bool,
}

/// Reads a whole file, inflating it when it starts with the gzip magic bytes.
pub fn read(path: &Path) -> Result<Source, Error> {
    let raw = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file_len = raw.len() as u64;
    if raw.starts_with(&[0x1f, 0x8b]) {
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
            bytes,
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

/// Inflates a (possibly multi-member) gzip stream. An unexpected end of stream is not an error:
/// the bytes decoded so far are returned with `true`, so a trace written by a killed process
/// still yields its complete events.
fn inflate(raw: &[u8]) -> std::io::Result<(Vec<u8>, bool)> {
    // Traces compress about 10:1; reserving avoids repeated regrowth of a multi-GB buffer.
    let mut out = Vec::with_capacity(raw.len().saturating_mul(8).min(1 << 34));
    let mut dec = flate2::read::MultiGzDecoder::new(raw);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match dec.read(&mut buf) {
            Ok(0) => return Ok((out, false)),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok((out, true)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // A stream cut inside a deflate block surfaces as InvalidInput/InvalidData only
                // when nothing decoded; with output already produced treat it as truncation.
                if out.is_empty() {
                    return Err(e);
                }
                return Ok((out, true));
            }
        }
    }
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
