//! Writable layers of containers: `containers/<id>/{upper,work,merged}` in
//! the store, made before a start and deleted after it, both off the start's
//! critical path.
//!
//! ```text
//! containers/<id>/          a container's layer (upper, work, merged)
//! containers/.spare-<pid>/  an empty layer made ahead of time; a start
//!                           renames it to <id> instead of making directories
//! containers/.trash-<id>/   a layer being deleted (never mistaken for a live one)
//! ```
//!
//! A foreground run forks a [`Deleter`] while its container sets up its
//! mounts (the parent is idle then). The deleter holds the container's mount
//! namespace, so the exiting container does not pay for unmounting its
//! overlay and the other mounts: the deleter does, once `runbox` has
//! renamed the layer to the trash and lets it go. It then deletes every
//! `.trash-*` dir and leaves one spare. If runbox is killed instead, the
//! deleter finds the state dir still in place and reaps the container
//! itself. A deleter that is killed leaves trash, emptied by the next
//! run's deleter (a kept run looks at start: [`empty_trash_if_any`]), and
//! a killed runbox's state, which the next start reaps
//! (`state::reap_stale`) into the trash.
//!
//! A spare's upper dir already holds `etc/hosts`, `etc/hostname` and
//! `etc/resolv.conf` (empty): [`provide_etc`] writes runbox's content into
//! them, where the image allows. Bound from the state dir instead, each
//! would cost a create there, a mountpoint made through the overlay (a
//! copy-up of /etc first) and two mount calls on every start.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::syscall::{self, Forked};

/// Name prefix of ready-made empty writable layers.
pub const SPARE_PREFIX: &str = ".spare-";

/// Name prefix of layers being deleted.
pub const TRASH_PREFIX: &str = ".trash-";

/// The files a spare's upper dir provides as mountpoints, under `etc/`.
pub const ETC_MOUNTPOINTS: [&str; 3] = ["hosts", "hostname", "resolv.conf"];

/// A forked process waiting to delete the trash; dropping this lets it go.
#[derive(Debug)]
pub struct Deleter {
    _go: OwnedFd,
}

/// What a [`Deleter`] holds and does besides emptying the trash.
#[derive(Default)]
pub struct DeleterPlan<'a> {
    /// Kept open until the deleter is let go, then closed in this order:
    /// the container's mount namespace (its last reference: the mounts go
    /// away there, not in the container's exit), then the image pin that
    /// must outlive the overlay on the image.
    pub hold: Vec<OwnedFd>,
    /// Runs first, beside runbox (writing the container's state, say). On
    /// an error the deleter prints it on runbox's stderr and kills
    /// `victim` (the container's pidfd): a container must not run unseen.
    pub first: Option<&'a mut dyn FnMut() -> std::result::Result<(), String>>,
    pub victim: Option<BorrowedFd<'a>>,
    /// Its `.trash-*` dirs are deleted too (state dirs runbox renamed there).
    pub state_root: Option<&'a Path>,
    /// The container's id, when runbox owns a state dir for it in
    /// `state_root`: if that dir is still there when runbox lets go, runbox
    /// died before its cleanup (SIGKILL) or the cleanup failed, and the
    /// deleter kills `victim` and reaps the state dir and layer itself
    /// (`state::reap_dir`) rather than leave them to the next command.
    pub id: Option<&'a str>,
}

impl Deleter {
    /// Forks the deleter. It keeps nothing else of this process (no lock,
    /// no pipe, no terminal). None when the fork fails (the caller then
    /// deletes through [`discard_layer_in_background`]).
    ///
    /// Call with the signals runbox forwards blocked (the deleter keeps them
    /// blocked for life: a ^C aimed at runbox's process group must not stop
    /// it) and single-threaded, as for any fork.
    pub fn spawn(containers_dir: &Path, plan: DeleterPlan<'_>) -> Option<Deleter> {
        let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        match syscall::fork() {
            Ok(Forked::Child) => {
                drop(go_w);
                let DeleterPlan {
                    hold,
                    mut first,
                    victim,
                    state_root,
                    id,
                } = plan;
                // Above 0-2 before those become /dev/null: runbox may have
                // been started with a standard descriptor closed.
                let go = syscall::dup_above(go_r.as_raw_fd(), 3);
                let hold: Vec<OwnedFd> = hold
                    .iter()
                    .filter_map(|h| syscall::dup_above(h.as_raw_fd(), 3))
                    .collect();
                let err = first.is_some().then(|| syscall::dup_above(2, 3)).flatten();
                let victim = victim.and_then(|v| syscall::dup_above(v.as_raw_fd(), 3));
                let mut keep: Vec<RawFd> = hold.iter().map(|h| h.as_raw_fd()).collect();
                keep.extend(go.iter().chain(&err).chain(&victim).map(|f| f.as_raw_fd()));
                detach_from_caller(&keep);
                // What `ps` shows for it (its command line stays runbox's).
                let _ = nix::sys::prctl::set_name(c"runbox-deleter");
                if let Some(first) = first.as_mut() {
                    if let Err(message) = first() {
                        if let Some(err) = &err {
                            let line = format!("runbox: {message}; stopping the container\n");
                            crate::spawn::write_all(err.as_fd(), line.as_bytes());
                        }
                        if let Some(v) = &victim {
                            let _ = syscall::pidfd_send_signal(v.as_fd(), libc::SIGKILL);
                        }
                    }
                }
                drop(err);
                // True on EOF: runbox let go (or died).
                let let_go = go.as_ref().is_some_and(|go| {
                    let mut byte = [0u8; 1];
                    loop {
                        match nix::unistd::read(go.as_raw_fd(), &mut byte) {
                            Err(nix::errno::Errno::EINTR) => continue,
                            other => break other == Ok(0),
                        }
                    }
                });
                // Runbox renames its state dir away before it lets go: if
                // the dir is still there, runbox was killed (or its cleanup
                // failed). Its container dies of its parent-death signal;
                // make sure, and reap. Never without that EOF: runbox may be
                // alive.
                if let (true, Some(root), Some(id)) = (let_go, state_root, id) {
                    if root.join(id).exists() {
                        if let Some(v) = &victim {
                            let _ = syscall::pidfd_send_signal(v.as_fd(), libc::SIGKILL);
                        }
                        // Runbox's lock goes with its last descriptors, which
                        // the kernel may close just after the pipe's.
                        let patience = std::time::Duration::from_secs(2);
                        crate::state::reap_dir(root, id, containers_dir, patience);
                    }
                }
                drop(victim);
                // In order: the namespace (the mounts go away), then the pin.
                for h in hold {
                    drop(h);
                }
                if let Some(root) = state_root {
                    remove_trash(root);
                }
                empty_trash(containers_dir);
                syscall::exit_now(0)
            }
            Ok(Forked::Parent { .. }) => Some(Deleter { _go: go_w }),
            Err(_) => None,
        }
    }
}

/// In a freshly forked helper: a session of its own, /dev/null as stdio (so
/// whoever reads runbox's output sees EOF when runbox exits), and every
/// other descriptor closed but `keep` (all >= 3).
fn detach_from_caller(keep: &[RawFd]) {
    syscall::leave_terminal();
    let _ = syscall::close_all_from_except(3, keep);
}

/// Where `dir` goes to be deleted: `.trash-<its name>` beside it (scanners
/// skip dot entries, and a deleter empties them).
pub fn trash_path(dir: &Path) -> std::path::PathBuf {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    dir.with_file_name(format!("{TRASH_PREFIX}{name}"))
}

/// Renames a writable layer to `.trash-<id>`; false when there is none.
pub fn move_to_trash(containers_dir: &Path, id: &str) -> Result<bool> {
    let dir = containers_dir.join(id);
    let trash = trash_path(&dir);
    match std::fs::rename(&dir, &trash) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("move to trash", &dir, e)),
    }
}

/// Renames a writable layer to `.trash-<id>` and deletes every `.trash-*`
/// dir in a detached process, so runbox exits without waiting for the
/// filesystem (removing even a small overlay upper/work dir costs
/// milliseconds on a busy ext4). Deletes inline when the fork fails.
pub fn discard_layer_in_background(containers_dir: &Path, id: &str) -> Result<()> {
    if move_to_trash(containers_dir, id)? && !empty_trash_in_background(containers_dir) {
        let trash = trash_path(&containers_dir.join(id));
        std::fs::remove_dir_all(&trash).map_err(|e| Error::io("remove", &trash, e))?;
    }
    Ok(())
}

/// Deletes every `.trash-*` dir of `containers_dir` in a forked process
/// that runbox does not wait for (it is reparented when runbox exits, a
/// moment later); false when it could not be started.
pub fn empty_trash_in_background(containers_dir: &Path) -> bool {
    use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
    let mut block = SigSet::empty();
    for sig in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGQUIT,
    ] {
        block.add(sig);
    }
    let mut old = SigSet::empty();
    let blocked = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&block), Some(&mut old)).is_ok();
    let deleter = Deleter::spawn(containers_dir, DeleterPlan::default());
    if blocked {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    // Dropped: it starts at once.
    deleter.is_some()
}

/// Empties the trash in the background when there is some (a layer a
/// killed deleter left, or one `state::reap_stale` moved there).
pub fn empty_trash_if_any(containers_dir: &Path) {
    let has_trash = std::fs::read_dir(containers_dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .as_encoded_bytes()
                .starts_with(TRASH_PREFIX.as_bytes())
        })
    });
    if has_trash && !empty_trash_in_background(containers_dir) {
        empty_trash(containers_dir);
    }
}

/// Deletes the `.trash-*` dirs of `dir`.
pub fn remove_trash(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(TRASH_PREFIX.as_bytes())
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Empties the trash, then leaves one spare writable layer for the next run.
pub fn empty_trash(containers_dir: &Path) {
    let mut spares = 0;
    if let Ok(entries) = std::fs::read_dir(containers_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // An old `.tmp` spare was left by a killed deleter (a young one
            // may be in the making by a concurrent deleter: leave it).
            let stale_tmp = name.ends_with(".tmp") && crate::state::is_old(&entry.path());
            if name.starts_with(TRASH_PREFIX) || stale_tmp {
                let _ = std::fs::remove_dir_all(entry.path());
            } else if name.starts_with(SPARE_PREFIX) && !name.contains(".tmp") {
                spares += 1;
            }
        }
    }
    if spares == 0 {
        let _ = make_spare(containers_dir);
    }
}

/// Creates `.spare-<pid>` with empty `upper` (holding the /etc
/// mountpoints), `work` and `merged`, built under a temporary name and
/// renamed so it appears complete.
fn make_spare(containers_dir: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    let tmp = containers_dir.join(format!("{SPARE_PREFIX}{pid}.tmp"));
    // Never create parents: if the store went away meanwhile, so does the spare.
    std::fs::create_dir(&tmp)?;
    for sub in ["upper", "upper/etc", "work", "merged"] {
        std::fs::create_dir(tmp.join(sub))?;
    }
    for name in ETC_MOUNTPOINTS {
        std::fs::File::create(tmp.join("upper/etc").join(name))?;
    }
    std::fs::rename(&tmp, containers_dir.join(format!("{SPARE_PREFIX}{pid}")))
}

/// Moves a spare writable layer (made in the background after an earlier
/// run) to `containers/<id>`, sparing the start its mkdirs, which are slow
/// on ext4 right after deletions. False when there is none to take.
pub fn take_spare_layer(containers_dir: &Path, id: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(containers_dir) else {
        return false;
    };
    let dst = containers_dir.join(id);
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Another run may take the same spare first: rename decides.
        if name.starts_with(SPARE_PREFIX)
            && !name.ends_with(".tmp")
            && std::fs::rename(entry.path(), &dst).is_ok()
        {
            return true;
        }
    }
    false
}

/// Puts the /etc files runbox provides (`files`: name under /etc, content)
/// into the writable layer's `upper/etc`, where the image allows it: its
/// `/etc` is a directory (or missing, as runbox would create it) and its
/// file of that name is missing or a regular file. Returns the names
/// written; the caller binds the others from the state dir. A spare's
/// ready-made files that are not written are removed, and an `upper/etc`
/// left empty too, so the container sees the image's. `upper/etc` gets the
/// image's mode and owner: a merged directory shows the upper one's.
///
/// Written in place, the files cost no create on the start's path (the
/// spare has them) and no bind mount; they go with the layer.
pub fn provide_etc<'a>(
    upper: &Path,
    lower: &Path,
    files: &[(&'a str, &[u8])],
) -> Result<Vec<&'a str>> {
    let etc = upper.join("etc");
    let theirs = std::fs::symlink_metadata(lower.join("etc"));
    let usable = match &theirs {
        Ok(m) => m.is_dir(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    let fits = |name: &str| {
        usable
            && match std::fs::symlink_metadata(lower.join("etc").join(name)) {
                Ok(m) => m.is_file(),
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            }
    };
    let written: Vec<&str> = files
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| fits(name))
        .collect();
    let spare = std::fs::symlink_metadata(&etc).ok();
    for name in ETC_MOUNTPOINTS {
        if spare.is_some() && !written.contains(&name) {
            let p = etc.join(name);
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io("remove", &p, e))
                }
                _ => {}
            }
        }
    }
    if written.is_empty() {
        if spare.is_some() {
            std::fs::remove_dir(&etc).map_err(|e| Error::io("remove", &etc, e))?;
        }
        return Ok(written);
    }
    if spare.is_none() {
        std::fs::create_dir(&etc).map_err(|e| Error::io("create", &etc, e))?;
    }
    if let Ok(m) = &theirs {
        let ours = std::fs::symlink_metadata(&etc).map_err(|e| Error::io("stat", &etc, e))?;
        if (m.mode(), m.uid(), m.gid()) != (ours.mode(), ours.uid(), ours.gid()) {
            use std::os::unix::fs::PermissionsExt;
            std::os::unix::fs::lchown(&etc, Some(m.uid()), Some(m.gid()))
                .map_err(|e| Error::io("chown", &etc, e))?;
            std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(m.mode() & 0o7777))
                .map_err(|e| Error::io("chmod", &etc, e))?;
        }
    }
    for (name, content) in files.iter().filter(|(n, _)| written.contains(n)) {
        let p = etc.join(name);
        write_in_place(&p, content).map_err(|e| Error::io("write", &p, e))?;
    }
    Ok(written)
}

/// Writes `content` as the whole of file `p` without O_TRUNC: truncating a
/// file to zero makes ext4 write it to disk at close (`auto_da_alloc`), and
/// a spare's file is empty anyway.
fn write_in_place(p: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)?;
    f.write_all(content)?;
    if f.metadata()?.len() > content.len() as u64 {
        f.set_len(content.len() as u64)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn spare(tmp: &Path) -> std::path::PathBuf {
        make_spare(tmp).unwrap();
        assert!(take_spare_layer(tmp, "c"));
        tmp.join("c/upper")
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn a_spare_has_the_etc_mountpoints_and_is_taken_once() {
        let tmp = tempfile::tempdir().unwrap();
        let upper = spare(tmp.path());
        assert_eq!(
            names(&upper.join("etc")),
            ["hostname", "hosts", "resolv.conf"]
        );
        assert!(tmp.path().join("c/work").is_dir() && tmp.path().join("c/merged").is_dir());
        assert!(!take_spare_layer(tmp.path(), "d"));
    }

    #[test]
    fn etc_files_go_into_the_layer_only_where_the_image_allows_them() {
        let tmp = tempfile::tempdir().unwrap();
        let lower = tmp.path().join("lower");
        std::fs::create_dir_all(lower.join("etc")).unwrap();
        std::fs::write(lower.join("etc/hosts"), "x").unwrap();
        std::os::unix::fs::symlink("/run/resolv.conf", lower.join("etc/resolv.conf")).unwrap();
        std::fs::set_permissions(lower.join("etc"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        let layers = tmp.path().join("layers");
        std::fs::create_dir(&layers).unwrap();
        let upper = spare(&layers);
        // hostname is not provided (say, bound by the user); resolv.conf is
        // a symlink in the image: the caller binds it.
        let files: [(&str, &[u8]); 2] = [("hosts", b"127.0.0.1 h\n"), ("resolv.conf", b"r")];
        let written = provide_etc(&upper, &lower, &files).unwrap();
        assert_eq!(written, ["hosts"]);
        assert_eq!(names(&upper.join("etc")), ["hosts"]);
        assert_eq!(
            std::fs::read(upper.join("etc/hosts")).unwrap(),
            b"127.0.0.1 h\n"
        );
        let mode = std::fs::metadata(upper.join("etc")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o750);
    }

    #[test]
    fn without_a_spare_the_files_are_created() {
        let tmp = tempfile::tempdir().unwrap();
        let (lower, upper) = (tmp.path().join("lower"), tmp.path().join("upper"));
        std::fs::create_dir_all(&lower).unwrap();
        std::fs::create_dir_all(&upper).unwrap();
        let files: [(&str, &[u8]); 1] = [("hostname", b"c1\n")];
        assert_eq!(provide_etc(&upper, &lower, &files).unwrap(), ["hostname"]);
        assert_eq!(std::fs::read(upper.join("etc/hostname")).unwrap(), b"c1\n");
    }

    #[test]
    fn an_image_whose_etc_is_not_a_directory_gets_no_upper_etc() {
        let tmp = tempfile::tempdir().unwrap();
        let lower = tmp.path().join("lower");
        std::fs::create_dir_all(lower.join("usr/etc")).unwrap();
        std::os::unix::fs::symlink("usr/etc", lower.join("etc")).unwrap();
        let layers = tmp.path().join("layers");
        std::fs::create_dir(&layers).unwrap();
        let upper = spare(&layers);
        let files: [(&str, &[u8]); 1] = [("hosts", b"h")];
        assert!(provide_etc(&upper, &lower, &files).unwrap().is_empty());
        assert!(names(&upper).is_empty());
        // Nothing to provide: nothing kept, even over a plain /etc.
        make_spare(&layers).unwrap();
        assert!(take_spare_layer(&layers, "e"));
        let upper = layers.join("e/upper");
        std::fs::remove_file(lower.join("etc")).unwrap();
        std::fs::create_dir(lower.join("etc")).unwrap();
        assert!(provide_etc(&upper, &lower, &[]).unwrap().is_empty());
        assert!(names(&upper).is_empty());
    }

    #[test]
    fn the_deleter_waits_to_be_let_go_then_empties_the_trash() {
        let tmp = tempfile::tempdir().unwrap();
        let layers = tmp.path();
        std::fs::create_dir_all(layers.join("c1/upper/x")).unwrap();
        // Not in the test harness's threads' way: fork is fine here because
        // the child only touches the filesystem and exits.
        let deleter = Deleter::spawn(layers, DeleterPlan::default()).expect("fork");
        assert!(move_to_trash(layers, "c1").unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            layers.join(".trash-c1").exists(),
            "deleted before it was let go"
        );
        drop(deleter);
        for _ in 0..500 {
            if !layers.join(".trash-c1").exists()
                && names(layers)
                    .iter()
                    .any(|n| n.starts_with(SPARE_PREFIX) && !n.ends_with(".tmp"))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!layers.join(".trash-c1").exists());
        assert!(!move_to_trash(layers, "c1").unwrap());
        let spares: Vec<_> = names(layers)
            .into_iter()
            .filter(|n| n.starts_with(SPARE_PREFIX))
            .collect();
        assert_eq!(spares.len(), 1, "{spares:?}");
    }
}
