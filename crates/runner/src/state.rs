//! Container state on disk, one directory per container:
//!
//! ```text
//! <state>/<id>/            flock(LOCK_EX) held by the runbox that runs it
//!     state.json           id, pid, pid start time, image, rootfs, created, status,
//!                          exit code, name, command, log path, cgroup dirs,
//!                          monitor pid, detached, finished, oom_killed
//!     etc-hosts etc-hostname etc-resolv.conf   bind-mounted into the container
//!     config.json          the Spec it was started with (for `runbox exec`)
//! ```
//!
//! ```text
//! <state>/<id>/container.log   stdout+stderr of a detached container
//! <state>/.names/<name>        the id owning <name>, created with O_EXCL
//! ```
//!
//! Names are unique without a global lock: claiming one is an `O_EXCL`
//! create of `.names/<name>` holding the id. An entry whose id has no state
//! dir any more (a run that was SIGKILLed) is stale and may be taken over
//! (`lifecycle::claim_name`). Scanners of the state root skip dot entries.
//!
//! `state.json` is replaced atomically (write a temporary file, rename).
//!
//! A state directory is made as `.new-<id>`, locked, and only then renamed
//! to `<id>`: a `<id>` directory whose lock can be taken was left by a
//! runbox that died (SIGKILL), whatever its state.json says (or lacks).
//! [`reap_stale`] removes it together with its writable layer (see
//! `layers`).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layers;

/// Name prefix of a state directory being made (see [`StateDir::create`]).
const NEW_PREFIX: &str = ".new-";

/// Modified more than a minute ago.
pub(crate) fn is_old(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > std::time::Duration::from_secs(60))
}

/// Largest state.json we read back (it is a few hundred bytes).
const MAX_STATE_JSON: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    #[default]
    Created,
    Running,
    Stopped,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContainerState {
    pub id: String,
    pub pid: i32,
    /// Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat),
    /// to tell the container's process from a later one that reused the pid.
    pub pid_start_time: u64,
    pub image: String,
    pub rootfs: PathBuf,
    /// RFC 3339.
    pub created: String,
    pub status: Status,
    /// Exit code once stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `--name`, unique among containers (see `.names/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The command PID 1 runs (the spec's process args).
    #[serde(default)]
    pub command: Vec<String>,
    /// Where stdout/stderr go (detached containers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<PathBuf>,
    /// The container's cgroup directories, when it was given limits
    /// (`cgroups::Cgroup::open(id)` finds them again); empty without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup: Vec<PathBuf>,
    /// Pid of the runbox process that waits for PID 1 (the foreground
    /// `runbox run`, or a detached container's supervisor).
    #[serde(default)]
    pub monitor_pid: i32,
    /// Detached (`run -d`): the logs are in `log_path`.
    #[serde(default)]
    pub detached: bool,
    /// RFC 3339 time PID 1 exited, once stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// PID 1 was killed because the container exceeded its memory limit.
    #[serde(default)]
    pub oom_killed: bool,
}

/// A container's state directory, locked for as long as this value lives.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    _lock: Flock<File>,
}

impl StateDir {
    /// Creates and locks `<root>/<id>`.
    pub fn create(root: &Path, id: &str) -> Result<StateDir> {
        use nix::fcntl::{renameat2, RenameFlags};
        std::fs::create_dir_all(root).map_err(|e| Error::io("create state directory", root, e))?;
        // Made and locked under a name scanners skip, then renamed into
        // place: a `<id>` directory whose lock is free has no live owner.
        let path = root.join(id);
        let fresh = root.join(format!("{NEW_PREFIX}{id}"));
        std::fs::create_dir(&fresh).map_err(|e| Error::io("create state directory", &path, e))?;
        let locked = File::open(&fresh)
            .map_err(|e| Error::io("open state directory", &path, e))
            .and_then(|dir| {
                Flock::lock(dir, FlockArg::LockExclusiveNonblock)
                    .map_err(|(_, e)| Error::io("lock state directory", &path, e.into()))
            })
            .and_then(|lock| {
                renameat2(None, &fresh, None, &path, RenameFlags::RENAME_NOREPLACE)
                    .map_err(|e| Error::io("create state directory", &path, e.into()))?;
                Ok(lock)
            });
        match locked {
            Ok(lock) => Ok(StateDir { path, _lock: lock }),
            Err(e) => {
                let _ = std::fs::remove_dir(&fresh);
                Err(e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` in the directory (the /etc files).
    pub fn write_file(&self, name: &str, content: &[u8]) -> Result<PathBuf> {
        let p = self.path.join(name);
        std::fs::write(&p, content).map_err(|e| Error::io("write", &p, e))?;
        Ok(p)
    }

    /// Replaces state.json atomically. An existing one is swapped out
    /// (`RENAME_EXCHANGE`) and then unlinked rather than renamed over: ext4
    /// starts writing a file to disk when it replaces another by rename
    /// (`auto_da_alloc`), and the unlink at the end of the run would wait
    /// for that write.
    pub fn save(&self, state: &ContainerState) -> Result<()> {
        use nix::fcntl::{renameat2, RenameFlags};
        let tmp = self.path.join(".state.json.tmp");
        let dst = self.path.join("state.json");
        let json =
            serde_json::to_vec_pretty(state).map_err(|e| Error::io("encode", &dst, e.into()))?;
        let mut f = File::create(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        f.write_all(&json)
            .map_err(|e| Error::io("write", &tmp, e))?;
        match renameat2(None, &tmp, None, &dst, RenameFlags::RENAME_EXCHANGE) {
            Ok(()) => std::fs::remove_file(&tmp).map_err(|e| Error::io("remove", &tmp, e)),
            // The first save (ENOENT), or a filesystem without exchange.
            Err(_) => {
                std::fs::rename(&tmp, &dst).map_err(|e| Error::io("rename into place", &dst, e))
            }
        }
    }

    /// Records that the container stopped and is kept: saves `state` and
    /// marks the directory read-only (mode 0555) so [`reap_stale`] skips it
    /// with one stat.
    pub fn mark_stopped(&self, state: &ContainerState) -> Result<()> {
        self.save(state)?;
        std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o555))
            .map_err(|e| Error::io("mark stopped", &self.path, e))
    }

    /// Renames the directory to `<root>/.trash-<id>` (scanners skip it) for
    /// a deleter to remove (see `layers::DeleterPlan::state_root`), and releases
    /// the lock. Deletes it at once when the rename fails.
    pub fn discard(self) -> Result<()> {
        let trash = layers::trash_path(&self.path);
        match std::fs::rename(&self.path, &trash) {
            Ok(()) => Ok(()),
            Err(_) => self.remove(),
        }
    }

    /// Deletes the directory (and releases the lock).
    pub fn remove(self) -> Result<()> {
        std::fs::remove_dir_all(&self.path)
            .map_err(|e| Error::io("remove state directory", &self.path, e))
    }
}

/// Reads `<dir>/state.json`.
pub fn load(dir: &Path) -> Result<ContainerState> {
    use std::io::Read;
    let p = dir.join("state.json");
    let f = File::open(&p).map_err(|e| Error::io("open", &p, e))?;
    let mut buf = Vec::new();
    f.take(MAX_STATE_JSON)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read", &p, e))?;
    serde_json::from_slice(&buf).map_err(|e| Error::InvalidFile {
        what: "container state",
        path: p,
        reason: e.to_string(),
    })
}

/// Start time of `pid` in clock ticks since boot, `None` if it is gone
/// (a zombie counts as gone: it is dead, only not yet reaped).
pub fn pid_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// True when the process recorded in `state` still runs.
pub fn is_alive(state: &ContainerState) -> bool {
    state.pid > 0 && pid_start_time(state.pid) == Some(state.pid_start_time)
}

/// Removes what SIGKILLed runs left: unlocked `running`/`created` state dirs
/// whose process is gone. Their writable layers go to the trash, for
/// whoever empties it next (a run's deleter at its end, or
/// `layers::empty_trash_if_any`). Returns the ids reaped. Errors are
/// skipped: this is best effort.
pub fn reap_stale(state_root: &Path, containers_dir: &Path) -> Vec<String> {
    let mut reaped = Vec::new();
    if let Ok(entries) = std::fs::read_dir(state_root) {
        for entry in entries.flatten() {
            // `.names/` and other bookkeeping, never a container; a state
            // dir being made (`.new-<id>`) or deleted by a deleter
            // (`.trash-<id>`) is only debris once it is old.
            let name = entry.file_name();
            let name = name.as_encoded_bytes();
            if name.starts_with(b".") {
                if (name.starts_with(NEW_PREFIX.as_bytes())
                    || name.starts_with(layers::TRASH_PREFIX.as_bytes()))
                    && is_old(&entry.path())
                {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
                continue;
            }
            // Stopped (kept) containers are marked read-only: one stat, not a
            // lock and a read, per kept container on every start.
            if entry
                .metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o200 == 0)
            {
                continue;
            }
            let id = entry.file_name().to_string_lossy().into_owned();
            if reap_dir(state_root, &id, containers_dir, std::time::Duration::ZERO) {
                reaped.push(id);
            }
        }
    }
    reaped
}

/// Reaps the state dir `<state_root>/<id>` when its owner is gone: its lock
/// is free and it is not a stopped (kept) container. Kills what is left of
/// the container (checked against its start time, never a reused pid),
/// removes its cgroup, moves its layer to the trash and deletes the state
/// dir. True when it was reaped. Used by [`reap_stale`] (no `patience`) and
/// by a run's deleter that outlives a killed runbox (which waits up to
/// `patience` for the lock).
pub(crate) fn reap_dir(
    state_root: &Path,
    id: &str,
    containers_dir: &Path,
    patience: std::time::Duration,
) -> bool {
    let path = state_root.join(id);
    let Ok(dir) = File::open(&path) else {
        return false;
    };
    // Locked: a live runbox owns it (or one being killed: its lock goes
    // with its last descriptors, possibly just after the deleter's pipe).
    let mut dir = dir;
    let deadline = std::time::Instant::now() + patience;
    let lock = loop {
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => break lock,
            Err((d, _)) if std::time::Instant::now() < deadline => {
                dir = d;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return false,
        }
    };
    let mut name = None;
    match load(&path) {
        Ok(st) if st.status == Status::Stopped => return false,
        Ok(st) => {
            name = st.name.clone();
            // Its runbox is gone (the lock was free), so the container is
            // dying from its parent-death signal; make sure.
            if let Ok(fd) = crate::syscall::pidfd_open(nix::unistd::Pid::from_raw(st.pid)) {
                if is_alive(&st) {
                    let _ = crate::syscall::pidfd_send_signal(
                        std::os::fd::AsFd::as_fd(&fd),
                        libc::SIGKILL,
                    );
                }
            }
            // Its cgroup (limits were asked for) goes with it.
            if !st.cgroup.is_empty() {
                if let Ok(Some(cg)) = crate::cgroups::Cgroup::open(&st.id) {
                    let _ = cg.remove();
                }
            }
        }
        // No (complete) state.json: its runbox died before saving it.
        // Directories appear already locked (see StateDir::create), so a
        // free lock means a dead owner.
        Err(_) => {}
    }
    let _ = layers::move_to_trash(containers_dir, id);
    // Out of the way first: a killed run's deleter may still be writing
    // state.json into it by path (see `layers::DeleterPlan::first`), and a
    // file it makes during the delete would leave the directory behind.
    // Renamed, its writes fail; a file that lands anyway is in a `.trash-`
    // dir, which that deleter empties when it is done (or a later start,
    // once old).
    let trash = layers::trash_path(&path);
    let doomed = if std::fs::rename(&path, &trash).is_ok() {
        &trash
    } else {
        &path
    };
    let _ = std::fs::remove_dir_all(doomed);
    // Its `--name` is free again (a claim without a state dir would hold
    // it, and make lookups of it wait, for a while).
    if let Some(name) = name {
        crate::lifecycle::release_name(state_root, &name, id);
    }
    drop(lock);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(id: &str, pid: i32, start: u64, status: Status) -> ContainerState {
        ContainerState {
            id: id.into(),
            pid,
            pid_start_time: start,
            image: "img".into(),
            rootfs: "/r".into(),
            created: "2024-01-01T00:00:00Z".into(),
            status,
            ..ContainerState::default()
        }
    }

    #[test]
    fn save_load_roundtrip_and_lock_is_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(tmp.path(), "c1").unwrap();
        let st = state("c1", 1, 2, Status::Running);
        dir.save(&st).unwrap();
        assert_eq!(load(dir.path()).unwrap(), st);
        let f = File::open(dir.path()).unwrap();
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_err());
        dir.remove().unwrap();
        assert!(!tmp.path().join("c1").exists());
    }

    #[test]
    fn own_pid_is_alive_and_stale_dirs_are_reaped() {
        let me = std::process::id() as i32;
        let start = pid_start_time(me).unwrap();
        assert!(is_alive(&state("x", me, start, Status::Running)));
        assert!(!is_alive(&state("x", me, start + 1, Status::Running)));

        let tmp = tempfile::tempdir().unwrap();
        let (root, layers) = (tmp.path().join("state"), tmp.path().join("containers"));
        std::fs::create_dir_all(layers.join("dead/upper/a")).unwrap();
        std::fs::create_dir_all(layers.join(".trash-old/x")).unwrap();
        std::fs::create_dir_all(layers.join("kept")).unwrap();
        for (id, st) in [
            ("dead", state("dead", me, start + 1, Status::Running)),
            ("kept", state("kept", me, start + 1, Status::Stopped)),
        ] {
            let d = StateDir::create(&root, id).unwrap();
            if st.status == Status::Stopped {
                d.mark_stopped(&st).unwrap();
            } else {
                d.save(&st).unwrap();
            }
        }
        let live = StateDir::create(&root, "live").unwrap();
        // Died before its first save; another is being made right now.
        std::fs::create_dir(root.join("unsaved")).unwrap();
        std::fs::create_dir(root.join(".new-starting")).unwrap();
        let mut reaped = reap_stale(&root, &layers);
        layers::empty_trash_if_any(&layers);
        reaped.sort();
        assert_eq!(reaped, ["dead", "unsaved"]);
        assert!(root.join(".new-starting").exists());
        assert!(!root.join(".new-live").exists(), "renamed into place");
        assert!(!root.join("dead").exists() && !layers.join("dead").exists());
        // The trash is emptied by a detached process: wait for it (bounded).
        for _ in 0..500 {
            if !layers.join(".trash-old").exists() && !layers.join(".trash-dead").exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!layers.join(".trash-old").exists() && !layers.join(".trash-dead").exists());
        assert!(root.join("kept").exists() && layers.join("kept").exists());
        assert!(live.path().exists());
    }
}
