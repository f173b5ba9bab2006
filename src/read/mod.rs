//! Reading input files, below every part that reads one: a file's bytes (plain, gzip or
//! memory-mapped: [`source`]) and the JSON scanner that finds a trace's events without parsing
//! them whole ([`json_scan`]). Ingest parses traces with them; report's annotated trace copies
//! the input's own text with them.

pub mod json_scan;
pub mod source;

use std::path::PathBuf;

use crate::file_error::FileError;

/// Why a file's bytes could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The file was read but is not what it should be (a corrupt gzip stream, not JSON).
    #[error("{}: {what}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}
