//! Input formats: detects from content (never from the file name) whether a
//! path is a `docker save` archive (legacy or Engine 25+), an OCI image
//! layout (directory or tar), or a plain rootfs tar, possibly compressed as a
//! whole with gzip or zstd, and exposes its images as manifests, configs and
//! layer streams.
//!
//! Detection, after whole-file gzip/zstd is undone (by magic bytes):
//! - `manifest.json` at the top: a `docker save` archive (`docker`), legacy
//!   `<id>/layer.tar` or Engine 25+ `blobs/sha256/` paths.
//! - else `index.json` (or `oci-layout`): an OCI image layout (`oci`),
//!   directory or tar; nested indexes are walked, platforms chosen.
//! - else a tar with neither: a plain rootfs (`docker export`), one layer, a
//!   synthesized config whose diff_ids the caller fills in after unpacking.
//! - a `repositories` file alone is a pre-1.10 docker archive: refused.
//!
//! CONTRACT (used by `store` and the CLI; owned by the format work):
//! - `Input::open(path, scratch_dir)` sniffs the input. A whole-compressed
//!   archive is decompressed once into a temporary file under `scratch_dir`
//!   (unlinked at once, so it is gone when `Input` and its readers are
//!   dropped, even after a crash) so that members can be read by offset;
//!   at most `MAX_DECOMPRESSED` bytes or the scratch space minus a margin.
//! - `Input::images()` lists what is there (for error messages and `@INDEX`).
//! - `Input::resolve(selector, platform)` returns one `ImageSource` whose
//!   manifest and config digests are already verified.
//! - `Input::open_layer(&source, i)` returns a `LayerReader` yielding the
//!   *uncompressed* tar stream of layer `i` (compression sniffed by magic),
//!   decompressed and hashed on a background thread. `LayerReader::finish()`
//!   drains the rest and checks the compressed digest (when known) and the
//!   diff_id; a mismatch also fails the `read` that reaches the end.
//!   `LayerReader::abort()` stops without draining (after a failed unpack)
//!   and returns a verification error only if one is already known.
//! - `InputIdentity::of(path)` / `Input::identity()` give a stable key of the
//!   input file (device, inode, size, mtime, canonical path) for caching.
//!
//! JSON documents are capped at `MAX_JSON` bytes before parsing; blobs are
//! sha256 only. An input lists at most `MAX_IMAGES` images of at most
//! `MAX_LAYERS` layers each; configs read for platforms are read once each,
//! and only for the images a selector can pick.

mod archive;
mod docker;
mod layer;
mod oci;
mod scan;
mod select;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_bombs;
#[cfg(test)]
mod tests_malformed;
#[cfg(test)]
mod tests_real;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::compress::{read_head, Compression, READ_BUFFER};
use crate::digest::Digest;
use crate::error::{Error, IoContext};
use crate::Result;
use archive::Container;
pub use layer::LayerReader;
use layer::LayerSpec;
use select::{Candidate, Target};

/// Largest JSON document (manifest, index, config) read from an input.
pub const MAX_JSON: u64 = 16 << 20;
/// Most images (`manifest.json` entries, image manifests found through
/// `index.json`) an input may list; real archives hold a handful.
pub const MAX_IMAGES: usize = 1024;
/// Most layers one image may have (docker itself stops at 127).
pub const MAX_LAYERS: usize = 256;

/// The config of a plain rootfs tar; `rootfs.diff_ids` is filled in by the caller.
pub const SYNTHESIZED_CONFIG: &str =
    r#"{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":[]}}"#;

/// What the user asked for inside a multi-image archive: `PATH:NAME[:TAG]` or `PATH@INDEX`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Selector {
    #[default]
    Only,
    Name(String),
    Index(usize),
}

/// `os/arch[/variant]`, default `linux/amd64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Default for Platform {
    fn default() -> Self {
        Platform {
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
        }
    }
}

/// The detected kind of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    DockerArchive,
    OciArchive,
    OciLayoutDir,
    RootfsTar,
}

/// One image found in an input, for listings.
#[derive(Debug, Clone)]
pub struct ImageEntry {
    pub index: usize,
    pub names: Vec<String>,
    pub platform: Option<String>,
}

/// One image of an input, ready to unpack.
#[derive(Debug, Clone)]
pub struct ImageSource {
    /// sha256 of the config blob: the image ID. For a plain rootfs tar it is
    /// only known after the layer was read (see `ImageSource::synthesized`).
    pub config_digest: Option<Digest>,
    /// Raw config JSON (verified); for a rootfs tar, a minimal config whose
    /// diff_ids are filled in by the caller after unpacking.
    pub config: Vec<u8>,
    /// Names from the archive (RepoTags, `org.opencontainers.image.ref.name`).
    pub names: Vec<String>,
    pub layers: Vec<LayerSource>,
    /// True for a plain rootfs tar: config and diff_id are derived, not read.
    pub synthesized: bool,
}

#[derive(Debug, Clone)]
pub struct LayerSource {
    /// Where the layer lives in the input (member name or blob path), for messages.
    pub location: String,
    /// Digest of the stored (possibly compressed) bytes, when the format names it.
    pub blob_digest: Option<Digest>,
    /// Expected digest of the uncompressed tar (config `rootfs.diff_ids`);
    /// None only for a plain rootfs tar.
    pub diff_id: Option<Digest>,
    /// Stored size in bytes (for progress).
    pub size: u64,
}

/// Identifies an input file as it was when opened: if all fields are equal,
/// the file has not been replaced or modified (short of a same-size rewrite
/// within one mtime tick). For a layout directory, device, inode, size and
/// mtime are those of its `index.json` (or `manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    /// Changes on any write or metadata change, even one that restores mtime.
    pub ctime_ns: i64,
    pub path: PathBuf,
}

impl InputIdentity {
    pub fn of(path: &Path) -> Result<InputIdentity> {
        let canonical = std::fs::canonicalize(path).ctx("resolve", path)?;
        let mut meta = std::fs::metadata(&canonical).ctx("stat", path)?;
        if meta.is_dir() {
            // A layout directory changes through its top-level documents.
            for doc in ["index.json", "manifest.json"] {
                if let Ok(m) = std::fs::metadata(canonical.join(doc)) {
                    meta = m;
                    break;
                }
            }
        }
        Ok(InputIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
            ctime_ns: meta
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.ctime_nsec()),
            path: canonical,
        })
    }

    /// One string holding every field, e.g. for a file name or a map key.
    pub fn key(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}:{}",
            self.dev,
            self.ino,
            self.size,
            self.mtime_ns,
            self.ctime_ns,
            self.path.display()
        )
    }
}

pub struct Input {
    /// The path as given (used in every message).
    pub path: PathBuf,
    pub kind: InputKind,
    /// How the whole file was compressed (`None` for a directory).
    pub compression: Compression,
    identity: InputIdentity,
    container: Container,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

/// Parse JSON read from the input; `what` names the document in errors.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    raw: &[u8],
    what: &str,
    file: &Path,
) -> Result<T> {
    serde_json::from_slice(raw).map_err(|e| Error::Format {
        file: file.to_path_buf(),
        reason: format!("`{what}` is not valid: {e}"),
    })
}

/// Whether a 512-byte block is a tar header (its checksum adds up) or the
/// all-zero end-of-archive block of an empty tar.
fn looks_like_tar(block: &[u8]) -> bool {
    if block.len() < 512 {
        return false;
    }
    if block[..512].iter().all(|b| *b == 0) {
        return true;
    }
    let field = &block[148..156];
    let digits: String = field
        .iter()
        .take_while(|b| **b != 0 && **b != b' ')
        .map(|b| *b as char)
        .collect();
    let Ok(stored) = u32::from_str_radix(digits.trim_start(), 8) else {
        return false;
    };
    let sum: u32 = block[..148]
        .iter()
        .chain(&block[156..512])
        .map(|b| u32::from(*b))
        .sum::<u32>()
        + 8 * u32::from(b' ');
    sum == stored
}

/// Read the first bytes of a file whatever its current offset.
fn read_start(f: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Largest decompressed copy of a whole-compressed input: far above real
/// image archives, and a bound on what a small compression bomb can make
/// us write. The free space of the scratch file system (minus a margin)
/// lowers it further, so that a bomb fails cleanly instead of filling it.
pub const MAX_DECOMPRESSED: u64 = 64 << 30;

/// Room left free on the scratch file system: 5%, at most 1 GiB.
fn scratch_limit(out: &File) -> u64 {
    match rustix::fs::fstatvfs(out) {
        Ok(st) => {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            let margin = (free / 20).min(1 << 30);
            MAX_DECOMPRESSED.min(free - margin)
        }
        Err(_) => MAX_DECOMPRESSED,
    }
}

/// Decompress the whole input into an unlinked file in `scratch`, at most
/// `MAX_DECOMPRESSED` bytes or what the scratch file system can spare.
fn decompress_to_scratch(
    src: File,
    compression: Compression,
    path: &Path,
    scratch: &Path,
) -> Result<File> {
    decompress_capped(src, compression, path, scratch, None)
}

/// `decompress_to_scratch` with an explicit limit (tests).
fn decompress_capped(
    src: File,
    compression: Compression,
    path: &Path,
    scratch: &Path,
    limit: Option<u64>,
) -> Result<File> {
    let name = scratch.join(format!(
        ".runbox-input-{}-{:016x}.tar",
        std::process::id(),
        rand::random::<u64>()
    ));
    let mut out = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&name)
        .ctx("create", &name)?;
    // Unlinked right away: nothing is left behind whatever happens next.
    std::fs::remove_file(&name).ctx("remove", &name)?;
    let mut decoder = compression
        .decoder(std::io::BufReader::with_capacity(READ_BUFFER, src))
        .map_err(|e| Error::Format {
            file: path.to_path_buf(),
            reason: format!("cannot start {compression} decoder: {e}"),
        })?;
    let limit = limit.unwrap_or_else(|| scratch_limit(&out));
    let mut written: u64 = 0;
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let n = match decoder.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Error::Format {
                    file: path.to_path_buf(),
                    reason: format!("corrupt {compression} stream: {e}"),
                })
            }
        };
        written += n as u64;
        if written > limit {
            return Err(Error::Format {
                file: path.to_path_buf(),
                reason: format!(
                    "decompresses to more than {limit} bytes, the limit for a whole-compressed input \
                     ({MAX_DECOMPRESSED} bytes, or the free space in `{}` minus a margin)",
                    scratch.display()
                ),
            });
        }
        out.write_all(&buf[..n])
            .ctx("write the decompressed copy of", path)?;
    }
    Ok(out)
}

impl Input {
    pub fn open(path: &Path, scratch_dir: &Path) -> Result<Input> {
        let identity = InputIdentity::of(path)?;
        let bad = |reason: &str| Error::Format {
            file: path.to_path_buf(),
            reason: reason.to_string(),
        };
        let meta = std::fs::metadata(path).ctx("stat", path)?;
        let (container, compression) = if meta.is_dir() {
            (Container::dir(path), Compression::None)
        } else {
            let mut f = File::open(path).ctx("open", path)?;
            let mut head = [0u8; 512];
            let n = read_head(&mut f, &mut head).ctx("read", path)?;
            if n == 0 {
                return Err(bad("empty file, not an image archive"));
            }
            let compression = Compression::sniff(&head[..n]);
            let f = if compression == Compression::None {
                f
            } else {
                let f = File::open(path).ctx("open", path)?;
                decompress_to_scratch(f, compression, path, scratch_dir)?
            };
            let mut head = [0u8; 512];
            let n = read_start(&f, &mut head).ctx("read", path)?;
            if !looks_like_tar(&head[..n]) {
                return Err(bad(if compression == Compression::None {
                    "not an image archive: neither a tar archive nor gzip or zstd compressed"
                } else {
                    "not an image archive: the decompressed content is not a tar archive"
                }));
            }
            (Container::scan_tar(f, path)?, compression)
        };
        let m = container.markers();
        let is_dir = meta.is_dir();
        let kind = if m.manifest_json {
            InputKind::DockerArchive
        } else if m.index_json {
            if is_dir {
                InputKind::OciLayoutDir
            } else {
                InputKind::OciArchive
            }
        } else if m.oci_layout {
            return Err(bad("OCI image layout without index.json"));
        } else if m.repositories {
            return Err(bad(
                "docker archive without manifest.json (the pre-1.10 format is not supported)",
            ));
        } else if is_dir {
            return Err(bad("directory is neither an OCI image layout (no index.json) nor a docker save tree (no manifest.json)"));
        } else {
            InputKind::RootfsTar
        };
        Ok(Input {
            path: path.to_path_buf(),
            kind,
            compression,
            identity,
            container,
        })
    }

    /// The input file as it was when opened.
    pub fn identity(&self) -> &InputIdentity {
        &self.identity
    }

    /// The images of the input. Platforms that only a config can tell are
    /// read for the candidates `want(top, names)` accepts, each config once.
    fn candidates(&self, want: &dyn Fn(usize, &[String]) -> bool) -> Result<Vec<Candidate>> {
        match self.kind {
            InputKind::DockerArchive => docker::candidates(&self.container, &self.path, want),
            InputKind::OciArchive | InputKind::OciLayoutDir => {
                oci::candidates(&self.container, &self.path, want)
            }
            InputKind::RootfsTar => Ok(vec![Candidate {
                top: 0,
                names: Vec::new(),
                platform: None,
                target: Target::Docker(0),
            }]),
        }
    }

    pub fn images(&self) -> Result<Vec<ImageEntry>> {
        Ok(self
            .candidates(&|_, _| true)?
            .into_iter()
            .map(|c| ImageEntry {
                index: c.top,
                names: c.names,
                platform: c.platform.map(|p| p.to_string()),
            })
            .collect())
    }

    pub fn resolve(&self, selector: &Selector, platform: &Platform) -> Result<ImageSource> {
        // Only the candidates the selector can pick need their platform.
        let want = |top: usize, names: &[String]| match selector {
            Selector::Only => true,
            Selector::Index(i) => top == *i,
            Selector::Name(n) => names.iter().any(|x| select::name_matches(n, x)),
        };
        let cands = self.candidates(&want)?;
        let cand = select::choose(&cands, selector, platform, &self.path)?;
        match (&self.kind, &cand.target) {
            (InputKind::RootfsTar, _) => {
                let size = self.container.whole().map_or(0, |(_, n)| n);
                Ok(ImageSource {
                    config_digest: None,
                    config: SYNTHESIZED_CONFIG.as_bytes().to_vec(),
                    names: Vec::new(),
                    layers: vec![LayerSource {
                        location: self.path.display().to_string(),
                        blob_digest: None,
                        diff_id: None,
                        size,
                    }],
                    synthesized: true,
                })
            }
            (_, Target::Docker(n)) => docker::build(&self.container, &self.path, *n),
            (_, Target::Oci(desc)) => oci::build(&self.container, &self.path, cand, desc),
        }
    }

    pub fn open_layer(&self, source: &ImageSource, index: usize) -> Result<LayerReader> {
        let layer = source.layers.get(index).ok_or_else(|| {
            Error::Invalid(format!(
                "layer index {index} out of range (the image has {} layers)",
                source.layers.len()
            ))
        })?;
        let bad = |reason: String| Error::Format {
            file: self.path.clone(),
            reason: format!("layer {}: {reason}", index + 1),
        };
        let (reader, _) = if source.synthesized {
            self.container
                .whole()
                .ok_or_else(|| bad("a rootfs tar must be a file".into()))?
        } else {
            self.container.open(&layer.location).map_err(bad)?
        };
        LayerReader::spawn(
            reader,
            LayerSpec {
                file: self.path.clone(),
                layer: index + 1,
                location: layer.location.clone(),
                blob_digest: layer.blob_digest.clone(),
                diff_id: layer.diff_id.clone(),
            },
        )
    }
}
