//! The container's filesystem: a mount plan computed as a pure function of
//! the OCI Spec (plus the writable layer and the host files runbox provides),
//! and `apply`, which performs it inside the child's new mount namespace.
//!
//! Order of `apply` (one mount namespace, nothing propagates to the host):
//!
//! ```text
//! / -> rprivate            so no mount below leaks to the host
//! root: overlay (volatile) or bind of the image dir
//! open_tree(host sources)  volumes, /dev nodes, /etc files, console: detached copies
//! pivot_root(root, root) + umount2(old, DETACH)
//! spec mounts (proc, /dev, ...) and binds (move_mount of the detached copies)
//! /dev symlinks, masked paths, read-only paths, root read-only
//! ```
//!
//! After pivot_root every destination is an ordinary path inside the new
//! root: symlinks in the image resolve against the container's `/`, so
//! creating a mountpoint cannot escape it.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::unistd::{Gid, Uid};
use oci_spec::runtime::{LinuxDeviceType, Spec};

use crate::error::{Error, Result};
use crate::syscall;

/// A device node to create in the container's /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub path: PathBuf,
    /// `S_IFCHR`, `S_IFBLK` or `S_IFIFO`.
    pub kind: libc::mode_t,
    pub major: u64,
    pub minor: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Device nodes every container gets (runc's auto-created set): name, major, minor.
pub const DEFAULT_DEVICE_NUMBERS: &[(&str, u64, u64)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

fn default_devices() -> Vec<Device> {
    DEFAULT_DEVICE_NUMBERS
        .iter()
        .map(|(name, major, minor)| Device {
            path: Path::new("/dev").join(name),
            kind: libc::S_IFCHR,
            major: *major,
            minor: *minor,
            mode: 0o666,
            uid: 0,
            gid: 0,
        })
        .collect()
}

/// How the container root is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootfsMode {
    /// overlayfs with the image dir as the only lower layer.
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// The image dir itself, bind-mounted read-only (`--read-only`): missing
    /// mountpoints cannot be created in it (the /etc files are then skipped).
    Bind { dir: PathBuf },
}

/// Files runbox provides from the host, beyond the spec's mounts.
#[derive(Debug, Clone, Default)]
pub struct HostFiles {
    /// (container path, host file): /etc/hosts, /etc/hostname, /etc/resolv.conf.
    pub etc: Vec<(PathBuf, PathBuf)>,
    /// Host path of the pty slave, bound at /dev/console with `-t`.
    pub console: Option<PathBuf>,
}

/// One action after pivot_root. Paths are absolute inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// mount(2) of a filesystem.
    Mount {
        fstype: String,
        source: String,
        dest: PathBuf,
        flags: MsFlags,
        data: Option<String>,
    },
    /// The host's cgroup filesystem, read-only (cgroup2 only; skipped on v1/hybrid).
    Cgroup {
        dest: PathBuf,
        flags: MsFlags,
    },
    /// Attach host path `source` at `dest` (opened before pivot_root).
    Bind {
        source: PathBuf,
        dest: PathBuf,
        recursive: bool,
        readonly: bool,
    },
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    /// mknod in /dev (after the /dev tmpfs).
    Device(Device),
    /// A file runbox provides (/etc/hosts...), bound like `Bind`; skipped when
    /// a read-only root lacks the file and it cannot be created.
    EtcFile {
        source: PathBuf,
        dest: PathBuf,
    },
    /// /dev/null over a file, read-only empty tmpfs over a directory; missing is fine.
    Mask(PathBuf),
    /// Bind onto itself read-only; missing is fine.
    ReadOnly(PathBuf),
    /// Remount `/` read-only (last).
    RootReadOnly,
}

/// Everything `apply` does, decided up front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    pub mode: RootfsMode,
    /// Where the root is assembled on the host (`containers/<id>/merged`).
    pub target: PathBuf,
    pub steps: Vec<Step>,
}

impl MountPlan {
    /// Host paths that must be opened (open_tree) before pivot_root, in step order.
    pub fn bind_sources(&self) -> impl Iterator<Item = (&Path, bool, bool)> {
        self.steps.iter().filter_map(|s| match s {
            Step::Bind {
                source,
                recursive,
                readonly,
                ..
            } => Some((source.as_path(), *recursive, *readonly)),
            Step::EtcFile { source, .. } => Some((source.as_path(), false, false)),
            _ => None,
        })
    }
}

/// Mount options as mount(2) flags plus the filesystem-specific data string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOptions {
    pub flags: MsFlags,
    pub bind: bool,
    pub recursive: bool,
    pub data: Vec<String>,
}

/// Splits OCI mount options into flags and data (runc's `parseMountOptions`).
pub fn parse_options(options: &[String]) -> ParsedOptions {
    let mut p = ParsedOptions {
        flags: MsFlags::empty(),
        bind: false,
        recursive: false,
        data: Vec::new(),
    };
    for opt in options {
        let (set, clear) = match opt.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME),
            "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
            "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME),
            "bind" => {
                p.bind = true;
                continue;
            }
            "rbind" => {
                p.bind = true;
                p.recursive = true;
                continue;
            }
            // Everything below / is already private; other propagation modes are not offered.
            "private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared" | "unbindable"
            | "runbindable" | "defaults" => continue,
            other => {
                p.data.push(other.to_string());
                continue;
            }
        };
        p.flags.insert(set);
        p.flags.remove(clear);
    }
    p
}

/// Normalizes a container path to an absolute path without `.`/`..` (lexically,
/// clamped at `/`, as the kernel does at a root).
pub fn clean_container_path(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn overlay_safe(p: &Path) -> Result<()> {
    let s = p.to_string_lossy();
    if s.contains([',', ':']) || s.contains('\\') {
        return Err(Error::InvalidOption {
            option: "rootfs",
            value: s.into_owned(),
            reason: "overlayfs cannot use a path containing `,`, `:` or `\\`".into(),
        });
    }
    Ok(())
}

/// The mount plan of `spec`: pure, no system calls.
pub fn plan(spec: &Spec, mode: RootfsMode, target: PathBuf, host: &HostFiles) -> Result<MountPlan> {
    if let RootfsMode::Overlay { lower, upper, work } = &mode {
        for p in [lower, upper, work] {
            overlay_safe(p)?;
        }
    }
    let mut steps = Vec::new();
    for m in spec.mounts().iter().flatten() {
        let dest = clean_container_path(m.destination());
        if dest == Path::new("/") {
            return Err(Error::InvalidOption {
                option: "mount",
                value: "/".into(),
                reason: "cannot mount over the container root".into(),
            });
        }
        let opts = parse_options(m.options().as_deref().unwrap_or(&[]));
        let fstype = m.typ().clone().unwrap_or_default();
        if opts.bind || fstype == "bind" {
            let source = m.source().clone().ok_or_else(|| Error::InvalidOption {
                option: "mount",
                value: dest.display().to_string(),
                reason: "bind mount without a source".into(),
            })?;
            let readonly = opts.flags.contains(MsFlags::MS_RDONLY);
            steps.push(Step::Bind {
                source,
                dest,
                recursive: opts.recursive,
                readonly,
            });
        } else if fstype == "cgroup" || fstype == "cgroup2" {
            steps.push(Step::Cgroup {
                dest,
                flags: opts.flags,
            });
        } else {
            let source = m
                .source()
                .as_ref()
                .map(|s| s.display().to_string())
                .unwrap_or_else(|| fstype.clone());
            let data = (!opts.data.is_empty()).then(|| opts.data.join(","));
            steps.push(Step::Mount {
                fstype,
                source,
                dest,
                flags: opts.flags,
                data,
            });
        }
    }
    // Device nodes are made with mknod in the fresh /dev tmpfs: cheaper than
    // bind mounts of the host's nodes (runc does the same outside userns).
    let mut devices = default_devices();
    if let Some(linux) = spec.linux() {
        for d in linux.devices().iter().flatten() {
            let kind = match d.typ() {
                LinuxDeviceType::C | LinuxDeviceType::U => libc::S_IFCHR,
                LinuxDeviceType::B => libc::S_IFBLK,
                LinuxDeviceType::P => libc::S_IFIFO,
                other => {
                    return Err(Error::InvalidOption {
                        option: "device",
                        value: format!("{} ({other:?})", d.path().display()),
                        reason: "unsupported device type".into(),
                    })
                }
            };
            let dev = Device {
                path: clean_container_path(d.path()),
                kind,
                major: d.major() as u64,
                minor: d.minor() as u64,
                mode: d.file_mode().unwrap_or(0o666) & 0o7777,
                uid: d.uid().unwrap_or(0),
                gid: d.gid().unwrap_or(0),
            };
            devices.retain(|x| x.path != dev.path);
            devices.push(dev);
        }
    }
    steps.extend(devices.into_iter().map(Step::Device));
    if let Some(console) = &host.console {
        steps.push(Step::Bind {
            source: console.clone(),
            dest: "/dev/console".into(),
            recursive: false,
            readonly: false,
        });
    }
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
        ("/dev/ptmx", "pts/ptmx"),
    ] {
        steps.push(Step::Symlink {
            target: target.into(),
            link: link.into(),
        });
    }
    for (dest, source) in &host.etc {
        let dest = clean_container_path(dest);
        steps.push(Step::EtcFile {
            source: source.clone(),
            dest,
        });
    }
    if let Some(linux) = spec.linux() {
        for p in linux.masked_paths().iter().flatten() {
            steps.push(Step::Mask(clean_container_path(Path::new(p))));
        }
        for p in linux.readonly_paths().iter().flatten() {
            steps.push(Step::ReadOnly(clean_container_path(Path::new(p))));
        }
    }
    if spec
        .root()
        .as_ref()
        .and_then(|r| r.readonly())
        .unwrap_or(false)
    {
        steps.push(Step::RootReadOnly);
    }
    Ok(MountPlan {
        mode,
        target,
        steps,
    })
}

/// A failed step: the phase, the path and the errno, for the one-line error.
#[derive(Debug)]
pub struct StepError {
    pub op: &'static str,
    pub path: PathBuf,
    pub errno: Errno,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "failed to {} `{}`: {}",
            self.op,
            self.path.display(),
            self.errno.desc()
        )
    }
}

fn err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> StepError + 'a {
    move |errno| StepError {
        op,
        path: path.to_path_buf(),
        errno,
    }
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn cstr(path: &Path) -> std::result::Result<CString, StepError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).map_err(|_| StepError {
        op: "use path",
        path: path.to_path_buf(),
        errno: Errno::EINVAL,
    })
}

/// Creates `dest` (a directory, or an empty file when `file`) if missing.
/// Runs after pivot_root, so the path resolves inside the container only.
/// Tries the create first: on a fresh tmpfs (/dev) that is one system call.
fn ensure_mountpoint(dest: &Path, file: bool) -> std::result::Result<(), StepError> {
    let create = || {
        if file {
            std::fs::OpenOptions::new()
                // create_new: an existing file is not opened for writing, which
                // on overlayfs would copy it up.
                .write(true)
                .create_new(true)
                .open(dest)
                .map(drop)
        } else {
            std::fs::create_dir(dest)
        }
    };
    let made = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = dest.parent().unwrap_or(Path::new("/"));
            std::fs::create_dir_all(parent)
                .map_err(|e| err("create mountpoint", parent)(io_errno(e)))?;
            create()
        }
        r => r,
    };
    match made {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        // An existing file opened for writing on a read-only root, or a directory opened as a file.
        Err(_) if std::fs::metadata(dest).is_ok() => Ok(()),
        Err(e) => Err(err("create mountpoint", dest)(io_errno(e))),
    }
}

/// Refuses destinations that resolve (through symlinks in the image) into
/// /proc or /sys, unless the mount is that filesystem itself. Paths in our
/// fresh /dev tmpfs hold no image symlinks and skip the walk.
fn check_destination(
    dest: &Path,
    fstype: Option<&str>,
    fresh_dev: bool,
) -> std::result::Result<(), StepError> {
    if fresh_dev && dest.starts_with("/dev") {
        return Ok(());
    }
    if matches!(fstype, Some("proc" | "sysfs")) {
        return Ok(());
    }
    let resolved = std::fs::canonicalize(dest).unwrap_or_else(|_| dest.to_path_buf());
    for dir in ["/proc", "/sys"] {
        if resolved.starts_with(dir) && resolved != dest {
            return Err(StepError {
                op: "mount over (symlink into procfs/sysfs)",
                path: dest.into(),
                errno: Errno::EPERM,
            });
        }
    }
    Ok(())
}

/// Performs `plan` in the current (new, unshared) mount namespace, ending with
/// the process's root and cwd at the container root.
pub fn apply(plan: &MountPlan) -> std::result::Result<(), StepError> {
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(err("make private", Path::new("/")))?;
    let target = &plan.target;
    match &plan.mode {
        RootfsMode::Overlay { lower, upper, work } => {
            let data = format!(
                "lowerdir={},upperdir={},workdir={},volatile",
                lower.display(),
                upper.display(),
                work.display()
            );
            mount(
                Some("overlay"),
                target,
                Some("overlay"),
                MsFlags::empty(),
                Some(data.as_str()),
            )
            .map_err(err("mount overlay on", target))?;
        }
        RootfsMode::Bind { dir } => {
            mount(
                Some(dir.as_path()),
                target,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                none,
            )
            .map_err(err("bind-mount rootfs", dir))?;
            // Read-only from the start: the image dir is shared and must never change.
            let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
            mount(none, target, none, ro, none).map_err(err("remount read-only", target))?;
        }
    }
    // Host sources, detached before they become unreachable.
    let mut trees: Vec<(OwnedFd, bool)> = Vec::new();
    for (source, recursive, readonly) in plan.bind_sources() {
        let c = cstr(source)?;
        let tree = syscall::open_tree_clone(&c, recursive, readonly)
            .map_err(err("open bind source", source))?;
        let is_dir = nix::sys::stat::fstat(tree.as_raw_fd())
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map_err(err("stat bind source", source))?;
        trees.push((tree, is_dir));
    }
    let cgroup2 = plan.steps.iter().any(|s| matches!(s, Step::Cgroup { .. }))
        && nix::sys::statfs::statfs("/sys/fs/cgroup")
            .map(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
            .unwrap_or(false);

    nix::unistd::chdir(target).map_err(err("chdir to", target))?;
    nix::unistd::pivot_root(".", ".").map_err(err("pivot_root to", target))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err("unmount old root", Path::new("/")))?;
    nix::unistd::chdir("/").map_err(err("chdir to", Path::new("/")))?;

    let mut trees = trees.into_iter();
    let mut fresh_dev = false;
    for step in &plan.steps {
        match step {
            Step::Mount {
                fstype,
                source,
                dest,
                flags,
                data,
            } => {
                check_destination(dest, Some(fstype), fresh_dev)?;
                ensure_mountpoint(dest, false)?;
                mount(
                    Some(source.as_str()),
                    dest,
                    Some(fstype.as_str()),
                    *flags,
                    data.as_deref(),
                )
                .map_err(err("mount", dest))?;
                fresh_dev |= dest == Path::new("/dev") && fstype == "tmpfs";
            }
            Step::Cgroup { dest, flags } => {
                if cgroup2 {
                    ensure_mountpoint(dest, false)?;
                    mount(
                        Some("cgroup2"),
                        dest,
                        Some("cgroup2"),
                        *flags | MsFlags::MS_RDONLY,
                        none,
                    )
                    .map_err(err("mount cgroup2 on", dest))?;
                }
            }
            Step::Bind { dest, .. } | Step::EtcFile { dest, .. } => {
                let (tree, is_dir) = trees.next().ok_or(StepError {
                    op: "bind",
                    path: dest.clone(),
                    errno: Errno::EINVAL,
                })?;
                check_destination(dest, None, fresh_dev)?;
                match ensure_mountpoint(dest, !is_dir) {
                    Err(e) if e.errno == Errno::EROFS && matches!(step, Step::EtcFile { .. }) => {
                        continue
                    }
                    r => r?,
                }
                syscall::move_mount_to(tree.as_fd(), &cstr(dest)?)
                    .map_err(err("bind-mount onto", dest))?;
            }
            Step::Device(d) => make_device(d)?,
            Step::Symlink { target, link } => match std::os::unix::fs::symlink(target, link) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(err("create symlink", link)(io_errno(e)))
                }
                _ => {}
            },
            Step::Mask(path) => mask(path)?,
            Step::ReadOnly(path) => {
                if std::fs::symlink_metadata(path).is_err() {
                    continue;
                }
                mount(
                    Some(path.as_path()),
                    path,
                    none,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    none,
                )
                .map_err(err("bind read-only path", path))?;
                let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
                mount(
                    none,
                    path,
                    none,
                    ro | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                    none,
                )
                .or_else(|_| mount(none, path, none, ro, none))
                .map_err(err("remount read-only", path))?;
            }
            Step::RootReadOnly => {
                let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
                mount(none, "/", none, flags, none)
                    .map_err(err("remount read-only", Path::new("/")))?;
            }
        }
    }
    Ok(())
}

fn make_device(d: &Device) -> std::result::Result<(), StepError> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    if let Some(parent) = d.path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err("create", parent)(io_errno(e)))?;
    }
    let kind = SFlag::from_bits_truncate(d.kind);
    let mode = Mode::from_bits_truncate(d.mode as libc::mode_t);
    match mknod(&d.path, kind, mode, makedev(d.major, d.minor)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(err("create device", &d.path)(e)),
    }
    // mknod applies the umask; the spec's mode is exact.
    nix::sys::stat::fchmodat(
        None,
        &d.path,
        mode,
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(err("chmod device", &d.path))?;
    if d.uid != 0 || d.gid != 0 {
        nix::unistd::chown(
            &d.path,
            Some(Uid::from_raw(d.uid)),
            Some(Gid::from_raw(d.gid)),
        )
        .map_err(err("chown device", &d.path))?;
    }
    Ok(())
}

fn mask(path: &Path) -> std::result::Result<(), StepError> {
    let none: Option<&str> = None;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    if meta.is_dir() {
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::MS_RDONLY,
            Some("size=0"),
        )
        .map_err(err("mask directory", path))
    } else {
        match mount(Some("/dev/null"), path, none, MsFlags::MS_BIND, none) {
            // Gone meanwhile (a process entry): nothing to hide.
            Err(Errno::ENOENT) => Ok(()),
            r => r.map_err(err("mask file", path)),
        }
    }
}

#[cfg(test)]
mod tests;
