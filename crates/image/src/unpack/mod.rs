//! Applies layer tar streams, in order, into one directory: the flattened
//! rootfs. Every path is resolved beneath the root directory fd
//! (openat2 RESOLVE_IN_ROOT / RESOLVE_BENEATH), never by joining strings.
//!
//! CONTRACT (used by `store`; owned by the unpack work):
//! - `Unpacker::new(root)` takes an empty, existing directory.
//! - `apply_layer(reader, layer_no)` applies one uncompressed layer tar
//!   (whiteouts hide lower layers only), returns per-layer stats; errors are
//!   `Error::Entry`/`Error::Layer` with `file` left empty (the caller fills it).
//! - `finish()` applies directory mtimes (after all children) and returns totals.

use std::io::Read;
use std::path::Path;

use crate::Result;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Entries created (files, dirs, links, devices...).
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

pub struct Unpacker {
    _priv: (),
}

impl Unpacker {
    pub fn new(root: &Path) -> Result<Unpacker> {
        let _ = root;
        todo!("unpack work")
    }
    pub fn apply_layer<R: Read>(&mut self, reader: R, layer_no: usize) -> Result<UnpackStats> {
        let _ = (reader, layer_no);
        todo!("unpack work")
    }
    pub fn finish(self) -> Result<UnpackStats> {
        todo!("unpack work")
    }
}
