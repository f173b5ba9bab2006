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
