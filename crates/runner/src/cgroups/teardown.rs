//! Removing cgroups: kill what is left inside, wait (bounded) until the
//! cgroup is empty, rmdir. Also the sweep of cgroups whose container is gone.
//!
//! Killed processes leave cgroup.procs when they exit, not when they are
//! reaped, so waiting never depends on whoever is their parent.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{read_procs, write_file, CgroupLayout, CgroupMode, PARENT};
use crate::error::{Error, Result};

/// A container that made nested cgroups could nest them this deep at most
/// before we stop descending (the kernel's default max depth is unlimited,
/// but runbox mounts cgroupfs read-only in containers).
const MAX_DEPTH: usize = 8;

/// Removes each directory (and any sub-cgroups), sharing one deadline.
/// Every directory is attempted; the first error is returned.
pub(super) fn remove_dirs(dirs: &[PathBuf], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut first_error = None;
    for dir in dirs {
        if let Err(e) = remove_tree(dir, deadline, timeout, 0) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn remove_tree(dir: &Path, deadline: Instant, timeout: Duration, depth: usize) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list cgroup", dir, e)),
    };
    if depth < MAX_DEPTH {
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list cgroup", dir, e))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path(), deadline, timeout, depth + 1)?;
            }
        }
    }
    kill_all(dir, deadline, timeout)?;
    rmdir_when_free(dir, deadline, timeout)
}

/// Kills every process in `dir` and waits until cgroup.procs is empty.
fn kill_all(dir: &Path, deadline: Instant, timeout: Duration) -> Result<()> {
    // cgroup.kill (v2, Linux 5.14+) also catches processes forked while we
    // kill: one write, no race with a fork bomb.
    let kill_file = dir.join("cgroup.kill");
    let killed_by_kernel = kill_file.exists() && write_file(&kill_file, "1", false).is_ok();
    let me = nix::unistd::getpid();
    let mut pause = Duration::from_millis(1);
    loop {
        let pids = match read_procs(dir) {
            Ok(pids) => pids,
            // Removed under us (a concurrent remove): nothing left to kill.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        // Never kill ourselves: if we are inside, rmdir fails with a clear error.
        let others: Vec<Pid> = pids.into_iter().filter(|&p| p != me).collect();
        if others.is_empty() {
            return Ok(());
        }
        if !killed_by_kernel {
            for &pid in &others {
                // ESRCH: it exited between the read and the kill.
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::Cgroup {
                path: dir.to_owned(),
                reason: format!(
                    "{} processes still inside {:?} after SIGKILL (first: {})",
                    others.len(),
                    timeout,
                    others[0]
                ),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// rmdir can report EBUSY for a moment after the last task left (exit is
/// not instantaneous); retry until the deadline.
fn rmdir_when_free(dir: &Path, deadline: Instant, timeout: Duration) -> Result<()> {
    let mut pause = Duration::from_millis(1);
    loop {
        let result =
            std::fs::remove_dir(dir).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)));
        match result {
            Ok(()) | Err(Errno::ENOENT) => return Ok(()),
            Err(Errno::EBUSY) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                let reason = format!("failed to remove (after up to {timeout:?}): {e}");
                return Err(Error::Cgroup {
                    path: dir.to_owned(),
                    reason,
                });
            }
        }
    }
}

/// Removes the runbox cgroups for which `is_orphan(id, age)` holds, in every
/// hierarchy of `layout`; returns their ids. All are attempted; the first
/// error is returned after.
pub(super) fn sweep(
    layout: &CgroupLayout,
    is_orphan: impl Fn(&str, Duration) -> bool,
) -> Result<Vec<String>> {
    let roots: Vec<&PathBuf> = match layout.mode {
        CgroupMode::V2 => layout.unified.iter().collect(),
        CgroupMode::V1 | CgroupMode::Hybrid => {
            let mut roots: Vec<&PathBuf> = Vec::new();
            for mount in [&layout.memory, &layout.cpu, &layout.pids]
                .into_iter()
                .flatten()
            {
                if !roots.contains(&mount) {
                    roots.push(mount);
                }
            }
            roots
        }
    };
    let now = SystemTime::now();
    let mut orphans: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for root in roots {
        let parent = root.join(PARENT);
        let entries = match std::fs::read_dir(&parent) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("list cgroups", &parent, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list cgroups", &parent, e))?;
            let Ok(meta) = entry.metadata() else { continue };
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !meta.is_dir() || super::check_id(&id).is_err() {
                continue;
            }
            // A clock step backwards makes a cgroup look new: keep it for now.
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok());
            if !is_orphan(&id, age.unwrap_or(Duration::ZERO)) {
                continue;
            }
            match orphans.iter_mut().find(|(known, _)| *known == id) {
                Some((_, dirs)) => dirs.push(entry.path()),
                None => orphans.push((id, vec![entry.path()])),
            }
        }
    }
    let mut first_error = None;
    let mut removed = Vec::new();
    for (id, dirs) in orphans {
        match remove_dirs(&dirs, super::REMOVE_TIMEOUT) {
            Ok(()) => removed.push(id),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(removed), Err)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn removing_a_missing_cgroup_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        remove_dirs(&[tmp.path().join("gone")], Duration::from_millis(10)).unwrap();
    }

    fn fake_layout(tmp: &Path) -> CgroupLayout {
        CgroupLayout {
            mode: CgroupMode::V1,
            unified: None,
            memory: Some(tmp.join("memory")),
            cpu: Some(tmp.join("cpu")),
            pids: None,
            fake: true,
        }
    }

    #[test]
    fn sweep_sees_each_id_in_every_hierarchy_with_its_age() {
        let tmp = tempfile::tempdir().unwrap();
        for dir in [
            "memory/runbox/dead",
            "cpu/runbox/dead",
            "memory/runbox/live",
            "memory/runbox/.x",
        ] {
            fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        fs::write(tmp.path().join("cpu/runbox/file"), "").unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let removed = sweep(&fake_layout(tmp.path()), |id, age| {
            seen.borrow_mut().push(id.to_owned());
            assert!(
                age < Duration::from_secs(600),
                "fresh dirs are young: {age:?}"
            );
            false
        })
        .unwrap();
        assert!(removed.is_empty());
        let mut seen = seen.into_inner();
        seen.sort();
        assert_eq!(seen, ["dead", "dead", "live"], "no files, no invalid names");
        assert!(tmp.path().join("memory/runbox/dead").exists());
    }

    #[test]
    fn sweep_removes_orphans_everywhere_and_keeps_live_ones() {
        // Empty plain directories stand for emptied cgroups (no cgroup.procs
        // reads as "already gone", and rmdir works on them).
        let tmp = tempfile::tempdir().unwrap();
        for dir in [
            "memory/runbox/dead",
            "cpu/runbox/dead",
            "memory/runbox/live",
        ] {
            fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        let removed = sweep(&fake_layout(tmp.path()), |id, _| id != "live").unwrap();
        assert_eq!(removed, ["dead"]);
        assert!(!tmp.path().join("memory/runbox/dead").exists());
        assert!(!tmp.path().join("cpu/runbox/dead").exists());
        assert!(tmp.path().join("memory/runbox/live").exists());
    }

    #[test]
    fn remove_reports_the_directory_it_cannot_remove() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("busy");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
        // A plain directory with a file in it: rmdir says ENOTEMPTY.
        let err = remove_dirs(std::slice::from_ref(&dir), Duration::from_millis(10))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&dir.display().to_string()) && err.contains("failed to remove"),
            "{err}"
        );
    }
}
