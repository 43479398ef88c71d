//! The error type of the image crate. Every variant names what failed and
//! where (file, layer, entry, path), so that the CLI prints one clear line.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on a named path failed.
    #[error("failed to {op} `{path}`: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The input is not a valid image archive/layout, or a part of it is malformed.
    #[error("{file}: {reason}")]
    Format { file: PathBuf, reason: String },
    /// A blob or layer did not hash to the digest it was announced with.
    #[error("{file}: digest mismatch for {what}: expected {expected}, found {found}")]
    DigestMismatch {
        file: PathBuf,
        what: String,
        expected: String,
        found: String,
    },
    /// A layer entry could not be applied (malformed, hostile or an I/O failure).
    #[error("{file}: layer {layer}: entry `{entry}`: {reason}")]
    Entry {
        file: PathBuf,
        /// 1-based layer number.
        layer: usize,
        entry: String,
        reason: String,
    },
    /// A layer stream is malformed outside any entry (truncated, bad header).
    #[error("{file}: layer {layer}: {reason}")]
    Layer {
        file: PathBuf,
        layer: usize,
        reason: String,
    },
    /// The archive holds several images and none or a missing one was selected.
    #[error("{file}: {reason}")]
    Select { file: PathBuf, reason: String },
    /// No stored image has this name or ID.
    #[error("no such image: {0}")]
    ImageNotFound(String),
    /// A reference matches more than one stored image.
    #[error("image reference `{name}` is ambiguous: {candidates}")]
    Ambiguous { name: String, candidates: String },
    /// The image is used by a running container.
    #[error("image {id} is in use by container {container}")]
    InUse { id: String, container: String },
    /// Stored metadata is unreadable.
    #[error("corrupt store metadata `{path}`: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
}

impl Error {
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Attach an operation and a path to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}
