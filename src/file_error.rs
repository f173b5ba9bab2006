//! The one shape in which the library reports an I/O failure: the file and the OS error.
//! Ingest (reading) and report (writing) both wrap it, so the CLI words every such failure
//! the same way, as one line naming the file.

use std::path::PathBuf;

/// An operation on `path` failed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}
