//! The content-addressed image store: plain directories on the local
//! filesystem, no daemon, no database, no global lock.
//!
//! ```text
//! ROOT/                       (default /var/lib/runbox)
//! ├── rootfs/<chain>/         flattened image directories, keyed by the layer chain ID
//! ├── images/<id>.json        one record per image (id = sha256 of its config)
//! ├── images/<id>.used        empty file whose mtime is the image's last use
//! ├── refs/<name>             a name (`busybox:latest`, `/` escaped as %2F) -> image ID
//! ├── sources/<key>           identity of a loaded input file -> image ID (fast reload)
//! ├── locks/<chain>.unpack    flock: exclusive while a loader unpacks that chain
//! ├── locks/<chain>.use       flock: shared by every running container of that chain
//! ├── tmp/<session>/          a load's private scratch: unpack target, decompressed archive
//! ├── tmp/<session>.lock      flock: exclusive for the session's whole life
//! ├── containers/             per-container writable layers (the runner's)
//! └── trash/                  directories renamed here, deleted later in a batch
//! ```
//!
//! Rules:
//! - Nothing is visible under `rootfs/` until complete: a load unpacks into its
//!   session directory and `rename`s into place. Records, refs and sources
//!   are written to a temporary name and renamed, so readers never see half.
//! - Order of writes: rootfs, then record, then refs and sources. A crash in
//!   between leaves an unreferenced rootfs or record that `prune` removes.
//! - Loads of the same chain serialise on `<chain>.unpack` and re-check for
//!   the rootfs after taking it, so the chain is unpacked once; loads of
//!   different chains never wait for each other. The fast path (chain already
//!   stored) takes no lock at all.
//! - A session directory whose `.lock` can be taken belongs to a dead process:
//!   it is debris, moved to `trash/` by the next load or `prune`.
//! - A rootfs is removed only while holding `<chain>.use` exclusively (no
//!   container runs on it) and `<chain>.unpack` (no loader is finishing it).
//! - Deleting many files slows file creation nearby for minutes on this
//!   filesystem, so removal is a `rename` into `trash/`; the trash is emptied
//!   after a load has finished, or by `prune`.

mod load;
mod locks;
mod names;
mod record;

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::error::IoContext;
use crate::format::{ImageSource, Platform, Selector};
use crate::unpack::UnpackStats;
use crate::{Error, Result};

use locks::read_capped;
pub(crate) use locks::{lock_file, remove_if_exists, write_atomic, Lock};
pub use names::normalize_name;
use names::{escape_name, unescape_name};
pub use record::ImageRecord;

/// What a load reports to its caller while it works (progress bars, lines).
pub trait LoadObserver {
    /// A phase started: "resolving", "unpacking", ...
    fn phase(&mut self, _what: &str) {}
    /// Layer `index` (0-based) of `count` starts; `size` stored bytes.
    fn layer_start(&mut self, _index: usize, _count: usize, _size: u64) {}
    /// `bytes` more stored bytes of the current layer were read.
    fn layer_progress(&mut self, _bytes: u64) {}
    fn layer_done(&mut self, _index: usize, _stats: &UnpackStats) {}
}

/// An observer that ignores everything.
pub struct Silent;
impl LoadObserver for Silent {}

/// How a load went.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub image: ImageRecord,
    /// False when the image was already stored and no layer was read.
    pub unpacked: bool,
    pub layers: usize,
    pub stats: UnpackStats,
    /// Open the input, read and verify manifest and config.
    pub resolve: Duration,
    /// Apply layers (decompression and hashing overlap with it).
    pub extract: Duration,
    /// Hashing the uncompressed layers (on the reader thread, overlapped
    /// with extraction) plus the final drain and digest check.
    pub verify: Duration,
    /// Rename into place, write record and names.
    pub commit: Duration,
    pub total: Duration,
    /// Stored bytes read from the input.
    pub bytes_read: u64,
}

/// Options of a load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub selector: Selector,
    pub platform: Platform,
    /// Extra names to give the image.
    pub tags: Vec<String>,
}

pub struct Store {
    root: PathBuf,
}

/// A shared hold on an image's rootfs: while it lives, `rmi` and `prune`
/// leave that rootfs alone.
#[derive(Debug)]
pub struct ImagePin {
    _lock: File,
}

impl std::os::fd::AsRawFd for ImagePin {
    /// The descriptor holding the shared lock: a process that keeps a
    /// duplicate keeps the image pinned (see runbox-runner's deleter).
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self._lock.as_raw_fd()
    }
}

impl Store {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Store> {
        let store = Store {
            root: root.to_path_buf(),
        };
        // Images may hold setuid files, capabilities and device nodes: only
        // root may reach into the store (docker keeps its root 0710/0700).
        // One stat per directory on the usual path (all there already).
        ensure_dir(&store.root, Some(0o711))?;
        for (dir, mode) in [
            ("rootfs", Some(0o700)),
            ("images", None),
            ("refs", None),
            ("sources", None),
            ("locks", None),
            ("tmp", Some(0o700)),
            ("containers", Some(0o700)),
            ("trash", Some(0o700)),
        ] {
            ensure_dir(&store.root.join(dir), mode)?;
        }
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory for per-container writable layers (`upper`/`work`), on the
    /// store's filesystem so overlayfs can use it.
    pub fn containers_dir(&self) -> PathBuf {
        self.root.join("containers")
    }

    /// Where removed directories wait for a batched delete.
    pub fn trash_dir(&self) -> PathBuf {
        self.root.join("trash")
    }

    fn record_path(&self, id: &Digest) -> PathBuf {
        self.root.join("images").join(format!("{}.json", id.hex()))
    }

    fn used_path(&self, id: &Digest) -> PathBuf {
        self.root.join("images").join(format!("{}.used", id.hex()))
    }

    pub(crate) fn rootfs_path(&self, chain: &Digest) -> PathBuf {
        self.root.join("rootfs").join(chain.hex())
    }

    pub(crate) fn lock_path(&self, chain: &Digest, kind: &str) -> PathBuf {
        self.root
            .join("locks")
            .join(format!("{}.{kind}", chain.hex()))
    }

    fn new_record(
        &self,
        id: Digest,
        chain: &Digest,
        source: &ImageSource,
        layers: Vec<Digest>,
    ) -> Result<ImageRecord> {
        let config: serde_json::Value = serde_json::from_slice(&source.config)
            .map_err(|e| Error::Invalid(format!("image config is not JSON: {e}")))?;
        let created = config
            .get("created")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        let now = SystemTime::now();
        Ok(ImageRecord {
            id,
            names: vec![],
            chain_id: chain.clone(),
            rootfs: self.rootfs_path(chain),
            config,
            layers,
            size: 0,
            files: 0,
            created,
            loaded: now,
            last_used: now,
        })
    }

    fn write_record(&self, rec: &ImageRecord) -> Result<()> {
        let mut on_disk = rec.clone();
        on_disk.names.clear();
        let bytes = serde_json::to_vec_pretty(&on_disk).expect("record serialises");
        write_atomic(&self.record_path(&rec.id), &bytes)
    }

    /// Reads one record by full ID, with names and last use filled in.
    pub fn read_record(&self, id: &Digest) -> Result<ImageRecord> {
        let mut rec = self.read_bare(id)?;
        rec.names = names_of(&self.refs()?, id);
        Ok(rec)
    }

    /// A record without its names (they cost a read of every ref).
    pub(crate) fn read_bare(&self, id: &Digest) -> Result<ImageRecord> {
        let mut rec = self.read_json(id)?;
        rec.last_used = fs::metadata(self.used_path(id))
            .and_then(|m| m.modified())
            .unwrap_or(rec.loaded);
        Ok(rec)
    }

    /// The record file alone: no names, `last_used` not read (`run` sets
    /// it when it marks the image used).
    pub(crate) fn read_json(&self, id: &Digest) -> Result<ImageRecord> {
        let path = self.record_path(id);
        let bytes = read_capped(&path)?.ok_or_else(|| Error::ImageNotFound(id.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
            path,
            reason: e.to_string(),
        })
    }

    /// Every stored image, names filled in, sorted by load time (newest first).
    pub fn records(&self) -> Result<Vec<ImageRecord>> {
        let refs = self.refs()?;
        let dir = self.root.join("images");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).ctx("list", &dir)? {
            let entry = entry.ctx("list", &dir)?;
            let name = entry.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            let Some(id) = Digest::parse(&format!("sha256:{hex}")) else {
                continue;
            };
            match self.read_bare(&id) {
                Ok(mut r) => {
                    r.names = names_of(&refs, &id);
                    out.push(r)
                }
                // Removed by a concurrent rmi between listing and reading; or
                // torn by a crash (no fsync): `prune` removes it.
                Err(Error::ImageNotFound(_)) | Err(Error::Corrupt { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.loaded));
        Ok(out)
    }

    /// All names and the image each points at.
    pub fn refs(&self) -> Result<Vec<(String, Digest)>> {
        let dir = self.root.join("refs");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).ctx("list", &dir)? {
            let entry = entry.ctx("list", &dir)?;
            let Some(file) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if file.starts_with('.') {
                continue;
            }
            let Ok(text) = fs::read_to_string(entry.path()) else {
                continue;
            };
            if let Some(id) = Digest::parse(text.trim()) {
                out.push((unescape_name(&file), id));
            }
        }
        Ok(out)
    }

    /// Points each name at `id` (moving it from another image, as docker does).
    pub fn add_names(&self, id: &Digest, names: &[String]) -> Result<()> {
        for name in names {
            let name = normalize_name(name)?;
            let path = self.root.join("refs").join(escape_name(&name));
            if fs::read_to_string(&path).is_ok_and(|t| t.trim() == id.as_str()) {
                continue;
            }
            write_atomic(&path, id.as_str().as_bytes())?;
        }
        Ok(())
    }

    /// Looks up a stored image by name[:tag], full ID, `sha256:` ID or unique ID prefix.
    pub fn lookup(&self, reference: &str) -> Result<ImageRecord> {
        self.read_record(&self.resolve_id(reference)?)
    }

    /// The ID a reference names (see `lookup`).
    fn resolve_id(&self, reference: &str) -> Result<Digest> {
        if let Ok(name) = normalize_name(reference) {
            let path = self.root.join("refs").join(escape_name(&name));
            if let Ok(text) = fs::read_to_string(&path) {
                if let Some(id) = Digest::parse(text.trim()) {
                    return Ok(id);
                }
            }
        }
        let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
        if hex.len() >= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let hex = hex.to_ascii_lowercase();
            let dir = self.root.join("images");
            let mut found = Vec::new();
            for entry in fs::read_dir(&dir).ctx("list", &dir)? {
                let entry = entry.ctx("list", &dir)?;
                if let Some(full) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".json"))
                {
                    if full.starts_with(&hex) {
                        found.push(full.to_string());
                    }
                }
            }
            match found.len() {
                0 => {}
                1 => {
                    return Digest::parse(&format!("sha256:{}", found[0]))
                        .ok_or_else(|| Error::ImageNotFound(reference.into()));
                }
                _ => {
                    return Err(Error::Ambiguous {
                        name: reference.into(),
                        candidates: found
                            .iter()
                            .map(|h| &h[..12])
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
                }
            }
        }
        Err(Error::ImageNotFound(reference.into()))
    }

    /// For `runbox run IMAGE`: if `arg` names an existing file or directory
    /// (optionally with a `:NAME`/`@INDEX` selector), load it (cheap when
    /// already stored) and return its record; otherwise look it up by name or ID.
    /// Either way the image is marked used now.
    pub fn resolve_or_load(&self, arg: &str, platform: &Platform) -> Result<ImageRecord> {
        let (path, selector) = Selector::parse_path_arg(arg);
        // `run` has no use for the names: never read every ref.
        if path.exists() {
            let opts = LoadOptions {
                selector,
                platform: platform.clone(),
                tags: vec![],
            };
            // Loaded before (every run after the first): no load at all.
            if let Some(rec) = self.reuse_source(&path, &opts)? {
                return Ok(rec);
            }
            return Ok(self.load(&path, &opts, &mut Silent)?.image);
        }
        let id = self.resolve_id(arg)?;
        let mut rec = self.read_json(&id)?;
        rec.last_used = self.touch(&id)?;
        Ok(rec)
    }

    /// Marks the image used now (for `prune --until`); returns that time.
    /// One utimensat, a create only the first time.
    pub fn touch(&self, id: &Digest) -> Result<SystemTime> {
        use nix::sys::stat::{utimensat, UtimensatFlags};
        use nix::sys::time::TimeSpec;
        let path = self.used_path(id);
        let now = SystemTime::now();
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let set = || {
            utimensat(
                None,
                &path,
                &TimeSpec::UTIME_OMIT,
                &TimeSpec::from_duration(since_epoch),
                UtimensatFlags::FollowSymlink,
            )
        };
        match set() {
            Err(nix::errno::Errno::ENOENT) => {
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .ctx("create", &path)?;
                set()
            }
            other => other,
        }
        .map_err(|e| Error::io("set mtime of", &path, e.into()))?;
        Ok(now)
    }

    /// Holds the image's rootfs against removal while a container uses it.
    pub fn pin(&self, image: &ImageRecord) -> Result<ImagePin> {
        let lock = lock_file(&self.lock_path(&image.chain_id, "use"), Lock::Shared)?;
        // rmi and prune remove under the exclusive lock: once we hold ours,
        // the image is either gone already or stays.
        if !self.record_path(&image.id).exists() || !image.rootfs.is_dir() {
            return Err(Error::ImageNotFound(format!(
                "{} (removed while starting)",
                image.id
            )));
        }
        Ok(ImagePin { _lock: lock })
    }

    /// Removes an image: its record and names; its rootfs too when no other
    /// image shares it. Fails if a running container uses the rootfs.
    pub fn remove(&self, reference: &str) -> Result<ImageRecord> {
        let rec = self.lookup(reference)?;
        let Some(_locks) = self.try_lock_chain_exclusive(&rec.chain_id)? else {
            return Err(Error::InUse {
                id: rec.id.hex()[..12].to_string(),
                container: "a running container".into(),
            });
        };
        // Decided under the locks: a concurrent load of an image with the
        // same layers writes its record while holding the unpack lock.
        let shared = self
            .records()?
            .iter()
            .any(|r| r.id != rec.id && r.chain_id == rec.chain_id);
        self.forget_record(&rec)?;
        if !shared {
            self.trash(&rec.rootfs)?;
        }
        Ok(rec)
    }

    pub(crate) fn forget_record(&self, rec: &ImageRecord) -> Result<()> {
        for (name, id) in self.refs()? {
            if id == rec.id {
                let p = self.root.join("refs").join(escape_name(&name));
                remove_if_exists(&p)?;
            }
        }
        let sources = self.root.join("sources");
        for entry in fs::read_dir(&sources).ctx("list", &sources)? {
            let entry = entry.ctx("list", &sources)?;
            if fs::read_to_string(entry.path()).is_ok_and(|t| t.trim() == rec.id.as_str()) {
                remove_if_exists(&entry.path())?;
            }
        }
        remove_if_exists(&self.record_path(&rec.id))?;
        remove_if_exists(&self.used_path(&rec.id))
    }

    /// Takes `<chain>.use` and `<chain>.unpack` exclusively without waiting;
    /// None when a container or a loader holds either.
    pub(crate) fn try_lock_chain_exclusive(&self, chain: &Digest) -> Result<Option<(File, File)>> {
        let use_lock = match lock_file(&self.lock_path(chain, "use"), Lock::TryExclusive) {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let unpack_lock = match lock_file(&self.lock_path(chain, "unpack"), Lock::TryExclusive) {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        Ok(Some((use_lock, unpack_lock)))
    }

    /// Moves a directory into the trash (deleted later, in a batch).
    pub fn trash(&self, path: &Path) -> Result<()> {
        if !path.exists() {
            return Ok(());
        }
        let name = format!(
            "{}.{}.{:x}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
            std::process::id(),
            rand::random::<u32>()
        );
        let dst = self.trash_dir().join(name);
        fs::rename(path, &dst).ctx("move to trash", path)
    }
}

/// The names in `refs` that point at `id`, sorted.
pub(super) fn names_of(refs: &[(String, Digest)], id: &Digest) -> Vec<String> {
    let mut names: Vec<String> = refs
        .iter()
        .filter(|(_, target)| target == id)
        .map(|(name, _)| name.clone())
        .collect();
    names.sort();
    names
}

/// Creates `path` if needed and makes its mode exactly `mode`.
/// Makes directory `path` if missing, and gives it `mode` when asked.
fn ensure_dir(path: &Path, mode: Option<u32>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match fs::metadata(path) {
        Ok(m) if m.is_dir() => m,
        _ => {
            fs::create_dir_all(path).ctx("create store directory", path)?;
            fs::metadata(path).ctx("stat", path)?
        }
    };
    match mode {
        Some(mode) if meta.permissions().mode() & 0o7777 != mode => {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).ctx("chmod", path)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalized_like_docker() {
        assert_eq!(normalize_name("busybox").unwrap(), "busybox:latest");
        assert_eq!(normalize_name("busybox:1.36").unwrap(), "busybox:1.36");
        assert_eq!(
            normalize_name("docker.io/library/debian:12").unwrap(),
            "debian:12"
        );
        assert_eq!(
            normalize_name("localhost:5000/app").unwrap(),
            "localhost:5000/app:latest"
        );
        assert_eq!(normalize_name("ghcr.io/a/b:v1").unwrap(), "ghcr.io/a/b:v1");
        for bad in ["", "../x", "a/../b", "/abs", "a b", "x:", "a//b"] {
            assert!(normalize_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn ref_file_names_round_trip() {
        for n in ["a/b:c", "x%2F:y", "ghcr.io/a/b:v1"] {
            assert_eq!(unescape_name(&escape_name(n)), n);
            assert!(!escape_name(n).contains('/'));
        }
    }

    #[test]
    fn locks_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.use");
        let shared = lock_file(&p, Lock::Shared).unwrap();
        assert!(matches!(
            lock_file(&p, Lock::TryExclusive),
            Err(Error::Io { ref source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock
        ));
        drop(shared);
        assert!(lock_file(&p, Lock::TryExclusive).is_ok());
    }

    #[test]
    fn records_round_trip_with_names_and_last_use() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = Digest::of(b"config");
        let chain = Digest::of(b"layer");
        let rec = ImageRecord {
            id: id.clone(),
            names: vec![],
            chain_id: chain.clone(),
            rootfs: store.rootfs_path(&chain),
            config: serde_json::json!({"config": {"Env": ["A=1"]}}),
            layers: vec![chain.clone()],
            size: 10,
            files: 1,
            created: None,
            loaded: SystemTime::now(),
            last_used: SystemTime::now(),
        };
        store.write_record(&rec).unwrap();
        store
            .add_names(&id, &["app".into(), "ghcr.io/x/y:1".into()])
            .unwrap();
        store.touch(&id).unwrap();
        let got = store.lookup("app").unwrap();
        assert_eq!(got.id, id);
        assert_eq!(
            got.names,
            vec!["app:latest".to_string(), "ghcr.io/x/y:1".to_string()]
        );
        assert_eq!(store.lookup(&id.hex()[..8]).unwrap().id, id);
        assert_eq!(store.lookup(id.as_str()).unwrap().id, id);
        assert!(matches!(store.lookup("nope"), Err(Error::ImageNotFound(_))));
        assert_eq!(got.config["config"]["Env"][0], "A=1");
    }

    #[test]
    fn store_directories_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        let store = Store::open(&root).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(store.root()), 0o711);
        for sub in ["rootfs", "tmp", "containers", "trash"] {
            assert_eq!(mode(&root.join(sub)), 0o700, "{sub}");
        }
    }
}
