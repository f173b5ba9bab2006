//! The one shape in which the library reports an I/O failure: the file and the OS error.
//! Ingest (reading) and report (writing) both wrap it, so the CLI words every such failure
//! the same way, as one line naming the file.

use std::path::{Path, PathBuf};

/// An operation on `path` failed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}

impl FileError {
    /// `source` on `path`.
    pub fn new(path: impl Into<PathBuf>, source: std::io::Error) -> FileError {
        FileError {
            path: path.into(),
            source,
        }
    }

    /// For `map_err`: an I/O error on `path` (then `?` makes it the caller's error type).
    pub fn at(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
        move |source| FileError::new(path, source)
    }
}

/// Reads a side file (a run directory's manifest.json, a planned run's plan.json): only a
/// regular file (a FIFO would hang the read, a link to /dev/zero would never end) of at most
/// `max_bytes`. `Ok(None)` where nothing is there; an error naming the file where something
/// else is.
pub fn read_side_file(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, FileError> {
    use std::io::Read;
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::new(path, e)),
    };
    let refuse = |what: String| {
        FileError::new(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, what),
        )
    };
    if let Some(why) = not_regular(&m) {
        return Err(refuse(why.into()));
    }
    if m.len() > max_bytes {
        return Err(refuse(format!(
            "{} bytes, more than a side file of this kind holds ({max_bytes})",
            m.len()
        )));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(max_bytes + 1).read_to_end(&mut bytes))
        .map_err(FileError::at(path))?;
    if bytes.len() as u64 > max_bytes {
        return Err(refuse(format!(
            "grew past {max_bytes} bytes while being read"
        )));
    }
    Ok(Some(bytes))
}

/// Why a file with metadata `m` is not read as an input (a FIFO would hang the open or the
/// read, a pipe reads once, a directory is no file); `None` for a regular file. Metadata
/// follows links, so a link to a regular file is one.
pub(crate) fn not_regular(m: &std::fs::Metadata) -> Option<&'static str> {
    if m.is_file() {
        None
    } else if m.is_dir() {
        Some("a directory, not a file")
    } else {
        Some("not a regular file (a pipe, socket or device): steptrace reads its inputs from files; write it to one first")
    }
}

/// Makes a FIFO at `path` (tests of inputs that must not be opened).
#[cfg(all(test, unix))]
pub(crate) fn make_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The most a manifest.json holds: a few KB per rank; 64 MiB is thousands of ranks.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// The most a plan.json holds: a few hundred bytes per decision.
pub const MAX_PLAN_BYTES: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn side_files_that_are_not_small_regular_files_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("manifest.json");
        make_fifo(&fifo);
        let e = read_side_file(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let zero = dir.path().join("plan.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(read_side_file(&zero, 100).is_err());
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 101]).unwrap();
        assert!(read_side_file(&big, 100)
            .unwrap_err()
            .to_string()
            .contains("101 bytes"));
        assert_eq!(read_side_file(&dir.path().join("none"), 100).unwrap(), None);
        std::fs::write(&big, b"{}").unwrap();
        assert_eq!(read_side_file(&big, 100).unwrap().unwrap(), b"{}");
    }
}
