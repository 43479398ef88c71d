//! The image half of runbox: turns an image tarball or layout into one plain,
//! verified directory in a content-addressed store.
//!
//! The module list is the pipeline:
//! `compress` (sniff gzip/zstd by magic) -> `format` (docker save, OCI layout
//! or archive, plain rootfs tar: find manifest, config and layers) -> `digest`
//! (sha256 while streaming) -> `unpack` (apply layers with whiteouts beneath a
//! directory fd) -> `store` (atomic rename into `rootfs/<chain-id>`, names,
//! metadata) -> `gc` (prune unused images and debris).

pub mod compress;
pub mod digest;
pub mod error;
pub mod format;
pub mod gc;
pub mod store;
pub mod unpack;

pub use error::{Error, Result};
