//! Applies layer tar streams, in order, into one directory: the flattened
//! rootfs. Every path is resolved beneath the root directory fd
//! (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), never by joining strings.
//!
//! CONTRACT (used by `store`; owned by the unpack work):
//! - `Unpacker::new(root)` takes an empty, existing directory.
//! - `apply_layer(reader, layer_no)` applies one uncompressed layer tar
//!   (whiteouts hide lower layers only), returns per-layer stats; errors are
//!   `Error::Entry`/`Error::Layer` with `file` left empty (the caller fills it).
//! - `finish()` applies directory mtimes (after all children) and returns totals.
//!
//! Submodules: `archive` parses the stream (bounded), `sparse` the sparse
//! maps, `whiteout` decides what a name means (pure), `fsops` acts on the
//! file system beneath the root fd, `writer` finishes small files on other
//! cores (`UnpackOptions::writer_threads`). Whiteouts never remove what the
//! same layer created: every path the layer creates is remembered, and
//! removal walks spare those paths (so an opaque marker may come after the
//! entries of its own layer). A parent that is a symlink is an error, never
//! followed; absolute names are taken relative to the root; `..` that would
//! leave the root is an error.

pub(crate) mod archive;
mod fsops;
mod sparse;
mod whiteout;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, FileType};

use crate::error::IoContext;
use crate::{Error, Result};
use archive::{Entry, Kind, TarStream};
use fsops::{FsError, Meta, Tree};
use whiteout::Class;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Entries created (files, dirs, links, devices...).
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

impl UnpackStats {
    fn add(&mut self, o: &UnpackStats) {
        self.entries += o.entries;
        self.files += o.files;
        self.bytes += o.bytes;
    }
}

/// How entries are applied. Start from `default()` and set fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnpackOptions {
    /// Give entries the owners recorded in the layer (needs root or
    /// CAP_CHOWN). Default: true when running as root.
    pub same_owner: bool,
    /// Threads that create small regular files while the stream is parsed;
    /// 0 writes everything on the calling thread. Default: 2 when the
    /// machine has at least 2 CPUs, else 0.
    pub writer_threads: usize,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        UnpackOptions {
            same_owner: nix::unistd::geteuid().is_root(),
            writer_threads: if cpus >= 2 { 2 } else { 0 },
        }
    }
}

pub struct Unpacker {
    tree: Tree,
    opts: UnpackOptions,
    /// Directory -> mtime, applied in `finish` (later layers overwrite).
    dir_times: HashMap<Vec<u8>, (i64, u32)>,
    totals: UnpackStats,
    /// Started with the first layer when `writer_threads > 0`.
    pool: Option<writer::Pool>,
    /// Our effective uid/gid and umask: what a fresh file gets anyway.
    ids: (u32, u32),
    umask: Option<u32>,
    /// A default ACL makes create modes ignore the umask.
    acl_default_seen: bool,
}

/// An entry failure before it is tagged with the layer number.
struct EntryFail {
    entry: String,
    reason: String,
}

impl From<archive::BadArchive> for EntryFail {
    fn from(b: archive::BadArchive) -> Self {
        EntryFail {
            entry: b.entry.unwrap_or_default(),
            reason: b.reason,
        }
    }
}

fn fail(entry: &Entry, reason: impl Into<String>) -> EntryFail {
    EntryFail {
        entry: String::from_utf8_lossy(&entry.path).into_owned(),
        reason: reason.into(),
    }
}

impl Unpacker {
    pub fn new(root: &Path) -> Result<Unpacker> {
        Self::with_options(root, UnpackOptions::default())
    }

    pub fn with_options(root: &Path, opts: UnpackOptions) -> Result<Unpacker> {
        let tree = Tree::open(root).ctx("open unpack root", root)?;
        Ok(Unpacker {
            tree,
            opts,
            dir_times: HashMap::new(),
            totals: UnpackStats::default(),
            pool: None,
            ids: (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            ),
            umask: read_umask(),
            acl_default_seen: false,
        })
    }

    pub fn apply_layer<R: Read>(&mut self, reader: R, layer_no: usize) -> Result<UnpackStats> {
        let mut tar = TarStream::new(reader);
        let mut created: HashSet<Vec<u8>> = HashSet::new();
        let mut stats = UnpackStats::default();
        if self.pool.is_none() && self.opts.writer_threads > 0 {
            let pool = writer::Pool::new(self.opts.writer_threads)
                .ctx("start unpack writer threads", PathBuf::new())?;
            self.pool = Some(pool);
        }
        let mut r = self.apply_entries(&mut tar, &mut created, &mut stats);
        // Queued files belong to this layer: wait for them (and their errors).
        let flushed = self.flush();
        if r.is_ok() {
            r = flushed;
        }
        // The cached parent may be stale for the next layer's whiteouts.
        self.tree.set_cache(b"", None, self.tree.root_setgid());
        match r {
            Ok(()) => {
                self.totals.add(&stats);
                Ok(stats)
            }
            Err(f) if f.entry.is_empty() => Err(Error::Layer {
                file: PathBuf::new(),
                layer: layer_no,
                reason: f.reason,
            }),
            Err(f) => Err(Error::Entry {
                file: PathBuf::new(),
                layer: layer_no,
                entry: f.entry,
                reason: f.reason,
            }),
        }
    }

    pub fn finish(self) -> Result<UnpackStats> {
        let mut dirs: Vec<(&Vec<u8>, &(i64, u32))> = self.dir_times.iter().collect();
        // Deepest first, so setting a child's times never disturbs a parent's.
        dirs.sort_by_key(|(p, _)| {
            std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count() + usize::from(!p.is_empty()))
        });
        for (path, &(secs, nsecs)) in dirs {
            // A later layer may have removed or replaced the directory.
            let fd = match self.tree.open_dir(path) {
                Ok(Some(fd)) => fd,
                Ok(None) | Err(_) => continue,
            };
            let t = rfs::Timespec {
                tv_sec: secs,
                tv_nsec: i64::from(nsecs),
            };
            let times = rfs::Timestamps {
                last_access: t,
                last_modification: t,
            };
            rfs::futimens(&fd, &times).map_err(|e| Error::Io {
                op: "set directory times of",
                path: PathBuf::from(String::from_utf8_lossy(path).into_owned()),
                source: e.into(),
            })?;
        }
        Ok(self.totals)
    }

    /// Waits for the writer threads to finish every queued file.
    fn flush(&mut self) -> std::result::Result<(), EntryFail> {
        match &mut self.pool {
            Some(p) => p
                .flush()
                .map_err(|(entry, reason)| EntryFail { entry, reason }),
            None => Ok(()),
        }
    }

    fn apply_entries<R: Read>(
        &mut self,
        tar: &mut TarStream<R>,
        created: &mut HashSet<Vec<u8>>,
        stats: &mut UnpackStats,
    ) -> std::result::Result<(), EntryFail> {
        while let Some(entry) = tar.next_entry()? {
            let path = whiteout::normalize(&entry.path).map_err(|r| fail(&entry, r))?;
            match whiteout::classify(&path).map_err(|r| fail(&entry, r))? {
                Class::AufsMeta => {}
                Class::Whiteout { dir, name } => self
                    .whiteout(dir, Some(name), created)
                    .map_err(|e| fail(&entry, e.0))?,
                Class::Opaque { dir } => self
                    .whiteout(dir, None, created)
                    .map_err(|e| fail(&entry, e.0))?,
                Class::Plain => {
                    self.apply_plain(tar, &entry, &path, stats)?;
                    created.insert(path);
                }
            }
        }
        Ok(())
    }

    /// Removes `dir/name` (or every child of `dir` when `name` is None) as
    /// far as lower layers made it.
    ///
    /// A whiteout whose directory is missing removes nothing and creates
    /// nothing. An opaque marker whose directory is missing creates it
    /// (0755, with missing parents): the layer says the directory exists,
    /// and containerd creates every entry's parent too; it is kept from
    /// later opaque markers of this layer. Where `dir` or a parent is a
    /// non-directory left by a lower layer, `dir` cannot hold anything:
    /// nothing is removed or created and the load goes on, rather than
    /// failing over a marker with nothing to hide. A symlink on the way is
    /// still an error, never followed.
    fn whiteout(
        &mut self,
        dir: &[u8],
        name: Option<&[u8]>,
        created: &mut HashSet<Vec<u8>>,
    ) -> std::result::Result<(), FsError> {
        let fd = match self.tree.lookup_dir(dir)? {
            fsops::Lookup::Dir(fd) => fd,
            fsops::Lookup::NotDir => return Ok(()),
            fsops::Lookup::Missing if name.is_none() => {
                self.tree.make_parents(dir)?;
                created.insert(dir.to_vec());
                return Ok(());
            }
            fsops::Lookup::Missing => return Ok(()),
        };
        let keep = |p: &[u8]| created.contains(p);
        match name {
            Some(n) => {
                let mut full = join(dir, n);
                fsops::remove_unless_kept(fd.as_fd(), n, &mut full, &keep)?;
                self.tree.forget_removed(&join(dir, n), false);
            }
            None => {
                for child in fsops::list_dir(fd.as_fd(), dir)? {
                    let mut full = join(dir, &child);
                    fsops::remove_unless_kept(fd.as_fd(), &child, &mut full, &keep)?;
                }
                self.tree.forget_removed(dir, true);
            }
        }
        Ok(())
    }

    fn apply_plain<R: Read>(
        &mut self,
        tar: &mut TarStream<R>,
        entry: &Entry,
        path: &[u8],
        stats: &mut UnpackStats,
    ) -> std::result::Result<(), EntryFail> {
        let meta = Meta {
            uid: entry.uid,
            gid: entry.gid,
            mode: entry.mode,
            mtime: entry.mtime,
            xattrs: &entry.xattrs,
            chown: self.opts.same_owner,
            chmod: true,
        };
        let err = |e: FsError| fail(entry, e.0);
        if path.is_empty() {
            // The root itself: only a directory entry makes sense.
            if entry.kind != Kind::Dir {
                return Err(fail(entry, "a non-directory entry names the root"));
            }
            fsops::apply_meta_fd(self.tree.root(), &meta, path, false).map_err(err)?;
            self.tree.set_root_setgid(entry.mode & 0o2000 != 0);
            self.dir_times.insert(Vec::new(), entry.mtime);
            stats.entries += 1;
            return Ok(());
        }
        let (dir, name) = whiteout::split_parent(path);
        self.tree.enter(dir, true).map_err(err)?;
        if entry.kind == Kind::File
            && entry.sparse.is_none()
            && tar.remaining() <= writer::MAX_POOLED_FILE
            && self.pool.is_some()
        {
            return self.submit_file(tar, entry, path, name, stats);
        }
        let parent = self.tree.parent();
        match entry.kind {
            Kind::File => {
                let (chown, chmod) = self.new_file_fixups(entry);
                let meta = Meta {
                    chown,
                    chmod,
                    ..meta
                };
                let file = fsops::create_file(parent, name, path, entry.mode).map_err(err)?;
                let written = write_contents(tar, entry, &file, path)?;
                fsops::apply_meta_fd(file.as_fd(), &meta, path, true).map_err(err)?;
                stats.files += 1;
                stats.bytes += written;
            }
            Kind::Dir => {
                let fd = fsops::make_dir(parent, name, path).map_err(err)?;
                fsops::apply_meta_fd(fd.as_fd(), &meta, path, false).map_err(err)?;
                self.dir_times.insert(path.to_vec(), entry.mtime);
                // Children usually follow their directory.
                if entry
                    .xattrs
                    .iter()
                    .any(|(n, _)| n == b"system.posix_acl_default")
                {
                    self.acl_default_seen = true;
                }
                self.tree
                    .set_cache(path, Some(fd), entry.mode & 0o2000 != 0);
            }
            Kind::Symlink => {
                fsops::make_symlink(parent, name, path, &entry.link).map_err(err)?;
                let fd = fsops::open_new_node(parent, name, path, FileType::Symlink, None)
                    .map_err(err)?;
                fsops::apply_meta_path_fd(fd.as_fd(), &meta, path, false).map_err(err)?;
            }
            Kind::Hardlink => self.hardlink(entry, path, dir, name)?,
            Kind::Char | Kind::Block | Kind::Fifo => {
                let dev = rfs::makedev(entry.dev_major, entry.dev_minor);
                let (ft, dev) = match entry.kind {
                    Kind::Char => (FileType::CharacterDevice, Some(dev)),
                    Kind::Block => (FileType::BlockDevice, Some(dev)),
                    _ => (FileType::Fifo, None),
                };
                fsops::make_node(parent, name, path, ft, dev.unwrap_or(0)).map_err(err)?;
                let fd = fsops::open_new_node(parent, name, path, ft, dev).map_err(err)?;
                fsops::apply_meta_path_fd(fd.as_fd(), &meta, path, true).map_err(err)?;
            }
        }
        stats.entries += 1;
        Ok(())
    }

    /// Whether a file just created in the cached parent still needs fchown
    /// and fchmod: a fresh file is ours (or the setgid parent's group) and
    /// has the create mode minus the umask, unless a default ACL applies.
    fn new_file_fixups(&self, entry: &Entry) -> (bool, bool) {
        let (euid, egid) = self.ids;
        let owned = entry.uid == euid && entry.gid == egid && !self.tree.parent_setgid();
        let exact = entry.mode & 0o7000 == 0
            && self.umask.is_some_and(|u| entry.mode & u == 0)
            && !self.acl_default_seen;
        (self.opts.same_owner && !owned, !exact)
    }

    /// Creates a small file here, in archive order, and hands the open file
    /// and its contents (copied out of the read buffer) to the writers.
    fn submit_file<R: Read>(
        &mut self,
        tar: &mut TarStream<R>,
        entry: &Entry,
        path: &[u8],
        name: &[u8],
        stats: &mut UnpackStats,
    ) -> std::result::Result<(), EntryFail> {
        let (chown, chmod) = self.new_file_fixups(entry);
        let file = fsops::create_file(self.tree.parent(), name, path, entry.mode)
            .map_err(|e| fail(entry, e.0))?;
        let mut data = Vec::with_capacity(usize::try_from(tar.remaining()).unwrap_or(0));
        loop {
            let buf = tar.data()?;
            if buf.is_empty() {
                break;
            }
            let n = buf.len();
            data.extend_from_slice(buf);
            tar.consume(n);
        }
        stats.entries += 1;
        stats.files += 1;
        stats.bytes += data.len() as u64;
        let job = writer::Job {
            file,
            path: path.to_vec(),
            entry: String::from_utf8_lossy(&entry.path).into_owned(),
            data,
            uid: entry.uid,
            gid: entry.gid,
            mode: entry.mode,
            mtime: entry.mtime,
            xattrs: entry.xattrs.clone(),
            chown,
            chmod,
        };
        match self.pool.as_mut() {
            Some(pool) => pool
                .submit(job)
                .map_err(|(entry, reason)| EntryFail { entry, reason }),
            None => Err(fail(entry, "internal error: no writer threads")),
        }
    }

    /// A hard link to a path beneath the root (possibly from a lower layer).
    fn hardlink(
        &mut self,
        entry: &Entry,
        path: &[u8],
        dir: &[u8],
        name: &[u8],
    ) -> std::result::Result<(), EntryFail> {
        let err = |e: FsError| fail(entry, e.0);
        let target = whiteout::normalize(&entry.link)
            .map_err(|r| fail(entry, format!("hard link target: {r}")))?;
        if target.is_empty() {
            return Err(fail(entry, "hard link to the root directory"));
        }
        if target == path {
            return Ok(());
        }
        let (tdir, tname) = whiteout::split_parent(&target);
        let missing = || {
            fail(
                entry,
                format!(
                    "hard link target `{}` does not exist",
                    String::from_utf8_lossy(&target)
                ),
            )
        };
        let tfd = if tdir == dir {
            None
        } else {
            Some(self.tree.open_dir(tdir).map_err(err)?.ok_or_else(missing)?)
        };
        let parent = self.tree.parent();
        let tparent = tfd.as_ref().map_or(parent, |f| f.as_fd());
        match fsops::make_hardlink(tparent, tname, parent, name, path) {
            Err(_) if rfs::statat(tparent, tname, rfs::AtFlags::SYMLINK_NOFOLLOW).is_err() => {
                Err(missing())
            }
            r => r.map_err(err),
        }
    }
}

/// The process umask without changing it (`umask(2)` can only set it).
fn read_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        name.to_vec()
    } else {
        [dir, b"/", name].concat()
    }
}

/// Streams the entry's data into `file` straight from the read buffer;
/// sparse files get their holes by seeking and a final ftruncate.
fn write_contents<R: Read>(
    tar: &mut TarStream<R>,
    entry: &Entry,
    file: &std::fs::File,
    path: &[u8],
) -> std::result::Result<u64, EntryFail> {
    let wfail = |e: std::io::Error| {
        fail(
            entry,
            format!("failed to write `{}`: {e}", String::from_utf8_lossy(path)),
        )
    };
    let mut out = file;
    let Some(map) = &entry.sparse else {
        let mut written = 0;
        loop {
            let buf = tar.data()?;
            if buf.is_empty() {
                return Ok(written);
            }
            let n = buf.len();
            out.write_all(buf).map_err(wfail)?;
            tar.consume(n);
            written += n as u64;
        }
    };
    let mut written = 0;
    for &(off, len) in &map.chunks {
        out.seek(SeekFrom::Start(off)).map_err(wfail)?;
        let mut left = len;
        while left > 0 {
            let buf = tar.data()?;
            let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            out.write_all(&buf[..n]).map_err(wfail)?;
            tar.consume(n);
            left -= n as u64;
        }
        written += len;
    }
    debug_assert_eq!(tar.remaining(), 0);
    file.set_len(map.real_size).map_err(wfail)?;
    Ok(written)
}
