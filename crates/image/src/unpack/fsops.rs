//! The file system side of unpacking: every operation works on directory
//! fds beneath the root fd. Parent directories are opened with openat2
//! (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or component by component with
//! O_NOFOLLOW on kernels without openat2, so no symlink is ever followed
//! and nothing outside the root is touched. Final components are created
//! with *at() calls and O_EXCL/O_NOFOLLOW; an existing entry is unlinked
//! first. Metadata (owner, mode, xattrs, times) is only ever set through an
//! fd of the new node, never by name: a name can be swapped for a symlink
//! or a hard link to a host file between two calls. Nodes that cannot be
//! opened for I/O are opened O_PATH and checked (`open_new_node`). The
//! parent fd of the last entry is cached: tar entries mostly share a
//! parent, and each cache miss costs one openat2.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::Timespec;
use rustix::fs::{
    self as rfs, AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Timestamps, Uid, XattrFlags,
};
use rustix::io::Errno;

/// Why an operation failed, already phrased for the entry error.
#[derive(Debug)]
pub(crate) struct FsError(pub String);

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

pub(crate) fn sys(op: &str, path: &[u8], e: Errno) -> FsError {
    let path = if path.is_empty() {
        "/".into()
    } else {
        lossy(path)
    };
    FsError(format!(
        "failed to {op} `{path}`: {}",
        std::io::Error::from(e)
    ))
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Ownership, mode, times and xattrs to put on a created entry.
pub(crate) struct Meta<'a> {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub xattrs: &'a [(Vec<u8>, Vec<u8>)],
    pub chown: bool,
    /// False when the create call already produced exactly `mode`.
    pub chmod: bool,
}

impl Meta<'_> {
    fn owner(&self) -> (Option<Uid>, Option<Gid>) {
        // u32::MAX is chown's "leave unchanged"; it cannot be stored as an id.
        (
            (self.uid != u32::MAX).then(|| Uid::from_raw(self.uid)),
            (self.gid != u32::MAX).then(|| Gid::from_raw(self.gid)),
        )
    }

    fn times(&self) -> Timestamps {
        let t = Timespec {
            tv_sec: self.mtime.0,
            tv_nsec: i64::from(self.mtime.1),
        };
        Timestamps {
            last_access: t,
            last_modification: t,
        }
    }
}

/// Only these xattrs are restored. `trusted.*` and `user.overlay.*` could
/// steer overlayfs when the rootfs later serves as a lower layer, and
/// `security.selinux` belongs to the host policy.
fn xattr_allowed(name: &[u8]) -> bool {
    name == b"security.capability"
        || (name.starts_with(b"user.") && !name.starts_with(b"user.overlay."))
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
}

/// security.capability must land (a binary without it breaks); others are
/// best effort where the file system refuses them.
fn xattr_result(r: Result<(), Errno>, name: &[u8], path: &[u8]) -> Result<(), FsError> {
    match r {
        Ok(()) => Ok(()),
        Err(Errno::NOTSUP | Errno::PERM | Errno::ACCESS | Errno::INVAL)
            if name != b"security.capability" =>
        {
            Ok(())
        }
        Err(e) => Err(sys(&format!("set xattr {} on", lossy(name)), path, e)),
    }
}

/// fchown, then fchmod (chown clears setuid/setgid), then xattrs (chown
/// clears security.capability), then times.
pub(crate) fn apply_meta_fd(
    fd: BorrowedFd<'_>,
    m: &Meta<'_>,
    path: &[u8],
    times: bool,
) -> Result<(), FsError> {
    if m.chown {
        let (u, g) = m.owner();
        rfs::fchown(fd, u, g).map_err(|e| sys("chown", path, e))?;
    }
    if m.chmod {
        rfs::fchmod(fd, Mode::from_raw_mode(m.mode)).map_err(|e| sys("chmod", path, e))?;
    }
    for (name, value) in m.xattrs.iter().filter(|(n, _)| xattr_allowed(n)) {
        let r = rfs::fsetxattr(fd, name.as_slice(), value, XattrFlags::empty());
        xattr_result(r, name, path)?;
    }
    if times {
        rfs::futimens(fd, &m.times()).map_err(|e| sys("set times of", path, e))?;
    }
    Ok(())
}

/// Opens, without following, the node just created as `name` (symlink,
/// device or fifo: nothing that may be opened for I/O) as an O_PATH fd and
/// checks that it is still the node made here: the type asked for, a single
/// link, and for devices the device number. Someone who can write in the
/// parent could swap the name between the create call and this open (for a
/// symlink to a host file, or a hard link to one); such a swap is refused,
/// and all metadata then goes through the fd, never by name again.
pub(crate) fn open_new_node(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    kind: FileType,
    dev: Option<rfs::Dev>,
) -> Result<OwnedFd, FsError> {
    let fd = rfs::openat(
        dirfd,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sys("open the new node", path, e))?;
    let st = rfs::fstat(&fd).map_err(|e| sys("inspect", path, e))?;
    let same = FileType::from_raw_mode(st.st_mode) == kind
        && st.st_nlink == 1
        && dev.is_none_or(|d| st.st_rdev == d);
    if !same {
        return Err(FsError(format!(
            "`{}` was replaced by something else right after it was created; refusing to touch it",
            lossy(path)
        )));
    }
    Ok(fd)
}

/// `/proc/self/fd/N`: a magic link that resolves to the fd's inode itself
/// (not by name), so calls that follow it act on exactly that node; for an
/// O_PATH fd of a symlink that is the symlink, not its target.
fn proc_fd_path(fd: BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Metadata of a node that cannot be opened for I/O (symlink, device,
/// fifo), through the O_PATH fd from `open_new_node`: chown and times with
/// AT_EMPTY_PATH, chmod and xattrs through `/proc/self/fd/N` (fchmod and
/// fsetxattr refuse O_PATH fds). `chmod` is false for symlinks (their mode
/// cannot be changed on Linux).
pub(crate) fn apply_meta_path_fd(
    fd: BorrowedFd<'_>,
    m: &Meta<'_>,
    path: &[u8],
    chmod: bool,
) -> Result<(), FsError> {
    if m.chown {
        let (u, g) = m.owner();
        rfs::chownat(fd, "", u, g, AtFlags::EMPTY_PATH).map_err(|e| sys("chown", path, e))?;
    }
    let proc = proc_fd_path(fd);
    if chmod {
        rfs::chmod(proc.as_str(), Mode::from_raw_mode(m.mode))
            .map_err(|e| proc_error("chmod", path, e))?;
    }
    for (name, value) in m.xattrs.iter().filter(|(n, _)| xattr_allowed(n)) {
        let r = rfs::setxattr(proc.as_str(), name.as_slice(), value, XattrFlags::empty());
        xattr_result(r, name, path)?;
    }
    let times = m.times();
    match rfs::utimensat(fd, "", &times, AtFlags::EMPTY_PATH) {
        // Kernels without AT_EMPTY_PATH for utimensat: the magic link.
        Err(Errno::INVAL | Errno::NOENT | Errno::BADF) => {
            rfs::utimensat(rfs::CWD, proc.as_str(), &times, AtFlags::empty())
                .map_err(|e| proc_error("set times of", path, e))
        }
        r => r.map_err(|e| sys("set times of", path, e)),
    }
}

/// A failure of a call through `/proc/self/fd/N`: a missing /proc is named.
fn proc_error(op: &str, path: &[u8], e: Errno) -> FsError {
    let mut err = sys(op, path, e);
    if e == Errno::NOENT && std::fs::metadata("/proc/self/fd").is_err() {
        err.0.push_str(" (this needs /proc mounted)");
    }
    err
}

/// Removes `name` in `dirfd` (`full` is its root-relative path) unless
/// `keep` says this layer made it; a directory is emptied recursively of
/// everything not kept and removed when nothing in it is kept. Returns
/// whether anything was kept. Nothing is followed: symlinks are unlinked.
pub(crate) fn remove_unless_kept(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    full: &mut Vec<u8>,
    keep: &dyn Fn(&[u8]) -> bool,
) -> Result<bool, FsError> {
    let kept_self = keep(full);
    if !kept_self {
        match rfs::unlinkat(dirfd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => return Ok(false),
            Err(Errno::ISDIR | Errno::PERM) => {}
            Err(e) => return Err(sys("remove", full, e)),
        }
    }
    let sub = match rfs::openat(dirfd, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOTDIR | Errno::LOOP) if kept_self => return Ok(true),
        Err(Errno::NOENT) => return Ok(kept_self),
        Err(e) => return Err(sys("open directory", full, e)),
    };
    let mut kept_child = false;
    let base = full.len();
    for child in list_dir(sub.as_fd(), full)? {
        if base > 0 {
            full.push(b'/');
        }
        full.extend_from_slice(&child);
        let r = remove_unless_kept(sub.as_fd(), &child, full, keep);
        full.truncate(base);
        kept_child |= r?;
    }
    if kept_self || kept_child {
        return Ok(true);
    }
    match rfs::unlinkat(dirfd, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(sys("remove directory", full, e)),
    }
}

/// Names in a directory, without `.` and `..`, collected before any removal.
pub(crate) fn list_dir(fd: BorrowedFd<'_>, path: &[u8]) -> Result<Vec<Vec<u8>>, FsError> {
    let mut dir = rfs::Dir::read_from(fd).map_err(|e| sys("read directory", path, e))?;
    let mut names = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = ent.map_err(|e| sys("read directory", path, e))?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(n.to_vec());
        }
    }
    Ok(names)
}

/// What `Tree::lookup_dir` found.
pub(crate) enum Lookup {
    Dir(OwnedFd),
    Missing,
    /// The path or one of its parents is a non-directory (not a symlink).
    NotDir,
}

/// Which component stopped a directory walk.
enum Blocker {
    Symlink,
    NotDir,
    Other,
}

/// The root directory fd plus the cached parent directory of the last entry.
pub(crate) struct Tree {
    root: Arc<OwnedFd>,
    cache_path: Vec<u8>,
    /// The root's fd itself when the cached parent is the root.
    cache_fd: Arc<OwnedFd>,
    /// New files in a setgid directory take its group, not ours.
    cache_setgid: bool,
    root_setgid: bool,
    openat2: bool,
}

impl Tree {
    pub(crate) fn open(root: &Path) -> std::io::Result<Tree> {
        let root = rfs::open(root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())?;
        // Kernels before 5.6 lack openat2: fall back to walking by hand.
        let openat2 = match rfs::openat2(&root, ".", DIR_FLAGS, Mode::empty(), resolve_flags()) {
            Ok(_) => true,
            Err(Errno::NOSYS | Errno::INVAL | Errno::PERM) => false,
            Err(e) => return Err(e.into()),
        };
        let root_setgid = rfs::fstat(&root)?.st_mode & 0o2000 != 0;
        let root = Arc::new(root);
        Ok(Tree {
            cache_setgid: root_setgid,
            root_setgid,
            cache_fd: Arc::clone(&root),
            root,
            cache_path: Vec::new(),
            openat2,
        })
    }

    pub(crate) fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The fd of the cached parent (see `enter`).
    pub(crate) fn parent(&self) -> BorrowedFd<'_> {
        self.cache_fd.as_fd()
    }

    pub(crate) fn root_setgid(&self) -> bool {
        self.root_setgid
    }

    /// After a layer changed the root's mode.
    pub(crate) fn set_root_setgid(&mut self, setgid: bool) {
        self.root_setgid = setgid;
        if self.cache_path.is_empty() {
            self.cache_setgid = setgid;
        }
    }

    pub(crate) fn parent_setgid(&self) -> bool {
        self.cache_setgid
    }

    /// Makes `dir` the cached parent. Missing directories are created (0755)
    /// when `create`; returns false when missing and not created.
    pub(crate) fn enter(&mut self, dir: &[u8], create: bool) -> Result<bool, FsError> {
        if dir == self.cache_path.as_slice() {
            return Ok(true);
        }
        let fd = if dir.is_empty() {
            None
        } else {
            match self.open_dir(dir)? {
                Some(fd) => Some(fd),
                None if create => Some(self.make_parents(dir)?),
                None => return Ok(false),
            }
        };
        let setgid = match &fd {
            Some(fd) => rfs::fstat(fd).map_err(|e| sys("inspect", dir, e))?.st_mode & 0o2000 != 0,
            None => self.root_setgid,
        };
        self.set_cache(dir, fd, setgid);
        Ok(true)
    }

    /// Caches a directory fd just opened for `path` (None: the root).
    pub(crate) fn set_cache(&mut self, path: &[u8], fd: Option<OwnedFd>, setgid: bool) {
        self.cache_setgid = setgid;
        self.cache_path.clear();
        self.cache_path.extend_from_slice(path);
        self.cache_fd = match fd {
            Some(fd) => Arc::new(fd),
            None => Arc::clone(&self.root),
        };
    }

    /// Drops the cached parent when it lies at or below `removed` (a path
    /// just removed by a whiteout), or strictly below it when `children`
    /// (an opaque marker removed the children of `removed`): a cached fd of
    /// a removed directory would take new entries nowhere (ENOENT).
    pub(crate) fn forget_removed(&mut self, removed: &[u8], children: bool) {
        let cached = self.cache_path.as_slice();
        let below = if removed.is_empty() {
            !cached.is_empty()
        } else {
            cached.len() > removed.len()
                && cached.starts_with(removed)
                && cached[removed.len()] == b'/'
        };
        if below || (!children && cached == removed) {
            self.set_cache(b"", None, self.root_setgid);
        }
    }

    /// Like `open_dir`, but tells a missing directory from one that cannot
    /// exist because it or a parent is a non-directory (a file, a device):
    /// whiteouts have nothing to remove there. A symlink on the way is
    /// still an error, never followed.
    pub(crate) fn lookup_dir(&self, dir: &[u8]) -> Result<Lookup, FsError> {
        match self.open_dir_raw(dir) {
            Ok(fd) => Ok(Lookup::Dir(fd)),
            Err(Errno::NOENT) => Ok(Lookup::Missing),
            Err(Errno::NOTDIR) => match self.explain_not_dir(dir) {
                (_, Blocker::NotDir) => Ok(Lookup::NotDir),
                (e, _) => Err(e),
            },
            Err(e) => Err(parent_error(dir, e)),
        }
    }

    /// Opens an existing directory beneath the root; Ok(None) if it is
    /// missing; an error if any component is a symlink or not a directory.
    pub(crate) fn open_dir(&self, dir: &[u8]) -> Result<Option<OwnedFd>, FsError> {
        match self.open_dir_raw(dir) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::NOTDIR) => Err(self.explain_not_dir(dir).0),
            Err(e) => Err(parent_error(dir, e)),
        }
    }

    fn open_dir_raw(&self, dir: &[u8]) -> Result<OwnedFd, Errno> {
        if dir.is_empty() {
            return rfs::openat(&*self.root, ".", DIR_FLAGS, Mode::empty());
        }
        if self.openat2 {
            let mut tries = 0;
            loop {
                match rfs::openat2(&*self.root, dir, DIR_FLAGS, Mode::empty(), resolve_flags()) {
                    // EAGAIN: a concurrent rename somewhere; retry a few times.
                    Err(Errno::AGAIN) if tries < 16 => tries += 1,
                    r => break r,
                }
            }
        } else {
            self.walk(dir, false)
        }
    }

    /// O_NOFOLLOW|O_DIRECTORY reports a symlink as ENOTDIR: find the
    /// offending component to say which it is (error path only).
    fn explain_not_dir(&self, dir: &[u8]) -> (FsError, Blocker) {
        let other = |e| (e, Blocker::Other);
        let mut cur = match rfs::openat(&*self.root, ".", DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return other(sys("open directory", dir, e)),
        };
        let mut end = 0;
        for comp in dir.split(|&b| b == b'/') {
            end += comp.len();
            let prefix = &dir[..end];
            end += 1;
            match rfs::statat(&cur, comp, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    return (parent_error(prefix, Errno::LOOP), Blocker::Symlink)
                }
                Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                    return (parent_error(prefix, Errno::NOTDIR), Blocker::NotDir)
                }
                Ok(_) => {}
                Err(e) => return other(sys("inspect", prefix, e)),
            }
            cur = match rfs::openat(&cur, comp, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) => return other(parent_error(prefix, e)),
            };
        }
        other(parent_error(dir, Errno::NOTDIR))
    }

    /// Component-by-component open with O_NOFOLLOW, creating missing
    /// directories when `create`.
    fn walk(&self, dir: &[u8], create: bool) -> Result<OwnedFd, Errno> {
        let mut cur = rfs::openat(&*self.root, ".", DIR_FLAGS, Mode::empty())?;
        for comp in dir.split(|&b| b == b'/') {
            cur = match rfs::openat(&cur, comp, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rfs::mkdirat(&cur, comp, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(e),
                    }
                    let fd = rfs::openat(&cur, comp, DIR_FLAGS, Mode::empty())?;
                    // mkdirat applied the umask; implicit parents are 0755.
                    rfs::fchmod(&fd, Mode::from_raw_mode(0o755))?;
                    fd
                }
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    /// Opens `dir`, creating missing directories (0755) on the way.
    pub(crate) fn make_parents(&self, dir: &[u8]) -> Result<OwnedFd, FsError> {
        self.walk(dir, true).map_err(|e| match e {
            Errno::NOTDIR | Errno::LOOP => self.explain_not_dir(dir).0,
            e => parent_error(dir, e),
        })
    }
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn parent_error(dir: &[u8], e: Errno) -> FsError {
    match e {
        Errno::LOOP => FsError(format!(
            "parent directory `{}` is or passes through a symlink; refusing to follow it",
            lossy(dir)
        )),
        Errno::NOTDIR => FsError(format!("parent `{}` is not a directory", lossy(dir))),
        Errno::XDEV => FsError(format!("parent `{}` escapes the root", lossy(dir))),
        e => sys("open directory", dir, e),
    }
}

/// Frees the slot `name` for a new entry: unlinks a file or symlink, or
/// removes a directory tree.
pub(crate) fn clear_slot(dirfd: BorrowedFd<'_>, name: &[u8], path: &[u8]) -> Result<(), FsError> {
    let mut full = path.to_vec();
    remove_unless_kept(dirfd, name, &mut full, &|_| false).map(|_| ())
}

/// Runs a create call; on EEXIST clears the slot and tries once more.
pub(crate) fn create_replacing<T>(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    op: &str,
    mut create: impl FnMut() -> Result<T, Errno>,
) -> Result<T, FsError> {
    match create() {
        Err(Errno::EXIST) => {
            clear_slot(dirfd, name, path)?;
            create().map_err(|e| sys(op, path, e))
        }
        r => r.map_err(|e| sys(op, path, e)),
    }
}

/// Creates a new regular file (replacing whatever was there).
pub(crate) fn create_file(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    mode: u32,
) -> Result<File, FsError> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    create_replacing(dirfd, name, path, "create", || {
        rfs::openat(dirfd, name, flags, Mode::from_raw_mode(mode & 0o777))
    })
    .map(File::from)
}

/// Creates or reuses the directory `name`; a non-directory there is replaced.
pub(crate) fn make_dir(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
) -> Result<OwnedFd, FsError> {
    match rfs::mkdirat(dirfd, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(sys("create directory", path, e)),
    }
    match rfs::openat(dirfd, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOTDIR | Errno::LOOP) => {
            clear_slot(dirfd, name, path)?;
            rfs::mkdirat(dirfd, name, Mode::from_raw_mode(0o700))
                .map_err(|e| sys("create directory", path, e))?;
            rfs::openat(dirfd, name, DIR_FLAGS, Mode::empty())
                .map_err(|e| sys("open directory", path, e))
        }
        Err(e) => Err(sys("open directory", path, e)),
    }
}

pub(crate) fn make_symlink(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    target: &[u8],
) -> Result<(), FsError> {
    create_replacing(dirfd, name, path, "create symlink", || {
        rfs::symlinkat(target, dirfd, name)
    })
}

pub(crate) fn make_node(
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    kind: FileType,
    dev: rfs::Dev,
) -> Result<(), FsError> {
    create_replacing(dirfd, name, path, "create node", || {
        rfs::mknodat(dirfd, name, kind, Mode::from_raw_mode(0o600), dev)
    })
}

/// Hard link `name` in `dirfd` to `tname` in `tdir` (both beneath the root).
pub(crate) fn make_hardlink(
    tdir: BorrowedFd<'_>,
    tname: &[u8],
    dirfd: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
) -> Result<(), FsError> {
    create_replacing(dirfd, name, path, "create hard link", || {
        rfs::linkat(tdir, tname, dirfd, name, AtFlags::empty())
    })
}
