//! Resource limits through cgroups, on cgroup v2, v1 and hybrid hosts. A
//! container gets a cgroup only when the user asked for a limit: moving a
//! process into a cgroup costs 6-15 ms (../shared/NOTES.md).
//!
//! ```text
//! v2      /sys/fs/cgroup/                 subtree_control += memory cpu pids
//!           runbox/                       no processes; subtree_control += ...
//!             <id>/                       memory.max memory.swap.max cpu.max pids.max
//! v1      /sys/fs/cgroup/memory/runbox/<id>/   memory.limit_in_bytes (+ memsw)
//! hybrid  /sys/fs/cgroup/<cpu mount>/runbox/<id>/  cpu.cfs_period_us cpu.cfs_quota_us
//!         /sys/fs/cgroup/pids/runbox/<id>/     pids.max
//! ```
//!
//! Only the hierarchies of the controllers a limit needs are created. On a
//! hybrid host the cgroup2 mount carries no controllers and is left alone.
//!
//! How the container's first process gets in: on v2 the spawn side passes
//! [`Cgroup::clone_into_fd`] to `clone3(CLONE_INTO_CGROUP)` (about 0.1 ms);
//! on v1/hybrid, or when clone3 refuses it, the parent calls
//! [`Cgroup::add_process`] while the child waits on its sync pipe, before it
//! execs. `exec` finds the cgroup with [`Cgroup::open`] and joins it the same
//! way. [`Cgroup::remove`] kills what is left and removes the directories.
//!
//! Memory limits come without extra swap (memory.swap.max 0, memsw equal to
//! the limit) so that exceeding them kills rather than swaps; docker would
//! allow as much swap again.

mod layout;
mod limits;
mod teardown;
mod v1;
mod v2;

#[cfg(test)]
mod tests_root;

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::Pid;

use crate::error::{Error, Result};

pub use layout::{CgroupLayout, CgroupMode};
pub use limits::{
    cpu_quota_us, online_cpus, parse_cpus, parse_cpus_for, parse_memory, parse_pids_limit, Limits,
    CPU_PERIOD_US, MAX_PIDS, MIN_MEMORY,
};

/// The directory under each hierarchy's root holding runbox's cgroups.
pub const PARENT: &str = "runbox";

/// How long [`Cgroup::remove`] waits for killed processes to leave.
pub const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);

/// [`sweep_orphans`] leaves cgroups younger than this alone: a concurrent
/// `runbox run` may have created one before recording its container.
pub const ORPHAN_MIN_AGE: Duration = Duration::from_secs(10);

/// Interface files we read are small; cgroup.procs of a big cgroup is the
/// largest and stays far under this.
const MAX_READ: u64 = 4 << 20;

/// One container's cgroup, in one (v2) or several (v1) hierarchies.
#[derive(Debug)]
pub struct Cgroup {
    id: String,
    mode: CgroupMode,
    /// The container's directory in every hierarchy it uses.
    dirs: Vec<PathBuf>,
    /// Where the memory controller's files are, if it is used.
    memory_dir: Option<PathBuf>,
    /// v2 only: the directory opened O_RDONLY|O_DIRECTORY for clone3.
    dir_fd: Option<OwnedFd>,
    fake: bool,
}

/// What the kernel recorded about memory pressure, for the caller to decide
/// whether a dead container was killed for exceeding its memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OomFacts {
    /// OOM kills in the cgroup (v2 memory.events `oom_kill`, v1
    /// memory.oom_control `oom_kill` on kernels since 4.13); `None` when the
    /// kernel does not count them or no memory limit was set.
    pub oom_kills: Option<u64>,
    /// How often usage hit the limit (v1 the larger of memory.failcnt and
    /// memory.memsw.failcnt; v2 memory.events `max`).
    pub limit_hits: Option<u64>,
}

impl OomFacts {
    /// Whether a container whose init died (by SIGKILL when
    /// `died_by_sigkill`) was most likely killed for exceeding its memory
    /// limit. Without an OOM-kill counter, hitting the limit plus SIGKILL is
    /// the best evidence there is.
    pub fn explains_death(&self, died_by_sigkill: bool) -> bool {
        died_by_sigkill
            && match self.oom_kills {
                Some(kills) => kills > 0,
                None => self.limit_hits.unwrap_or(0) > 0,
            }
    }
}

impl Cgroup {
    /// Creates the cgroup of container `container_id` with `limits` on this host.
    pub fn create(container_id: &str, limits: &Limits) -> Result<Cgroup> {
        Self::create_in(&CgroupLayout::detect()?, container_id, limits)
    }

    /// [`Cgroup::create`] on a given layout (tests point it at a tempdir).
    pub fn create_in(layout: &CgroupLayout, container_id: &str, limits: &Limits) -> Result<Cgroup> {
        check_id(container_id)?;
        match layout.mode {
            CgroupMode::V2 => v2::create(layout, container_id, limits),
            CgroupMode::V1 | CgroupMode::Hybrid => v1::create(layout, container_id, limits),
        }
    }

    /// The existing cgroup of container `container_id`, `None` if it has none
    /// (it was started without limits).
    pub fn open(container_id: &str) -> Result<Option<Cgroup>> {
        Self::open_in(&CgroupLayout::detect()?, container_id)
    }

    /// [`Cgroup::open`] on a given layout.
    pub fn open_in(layout: &CgroupLayout, container_id: &str) -> Result<Option<Cgroup>> {
        check_id(container_id)?;
        match layout.mode {
            CgroupMode::V2 => v2::open(layout, container_id),
            CgroupMode::V1 | CgroupMode::Hybrid => Ok(v1::open(layout, container_id)),
        }
    }

    /// The container id this cgroup belongs to.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Which kind of hierarchy holds the limits.
    pub fn mode(&self) -> CgroupMode {
        self.mode
    }

    /// The container's directory in each hierarchy it uses.
    pub fn paths(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// v2 only: the cgroup directory opened `O_RDONLY|O_DIRECTORY|O_CLOEXEC`,
    /// for `clone3`'s `CLONE_INTO_CGROUP` (`clone_args.cgroup = fd`). The
    /// fd stays valid as long as `self`.
    pub fn clone_into_fd(&self) -> Option<BorrowedFd<'_>> {
        self.dir_fd.as_ref().map(|fd| fd.as_fd())
    }

    /// Moves process `pid` (all its threads) into the cgroup, in every
    /// hierarchy. Costs 6-15 ms after idle: prefer clone3 on v2.
    pub fn add_process(&self, pid: Pid) -> Result<()> {
        let value = pid.as_raw().to_string();
        for dir in &self.dirs {
            write_file(&dir.join("cgroup.procs"), &value, self.fake)?;
        }
        Ok(())
    }

    /// The processes now in the cgroup (v1: of the first hierarchy; all
    /// hierarchies hold the same ones unless something moved them).
    pub fn processes(&self) -> Result<Vec<Pid>> {
        match self.dirs.first() {
            Some(dir) => read_procs(dir),
            None => Ok(Vec::new()),
        }
    }

    /// What the memory controller counted; all `None` without a memory limit.
    pub fn oom_facts(&self) -> Result<OomFacts> {
        let Some(dir) = &self.memory_dir else {
            return Ok(OomFacts::default());
        };
        match self.mode {
            CgroupMode::V2 => {
                let events = dir.join("memory.events");
                let text = read_optional(&events)?.unwrap_or_default();
                Ok(OomFacts {
                    oom_kills: flat_key(&text, "oom_kill"),
                    limit_hits: flat_key(&text, "max"),
                })
            }
            CgroupMode::V1 | CgroupMode::Hybrid => {
                let control = read_optional(&dir.join("memory.oom_control"))?.unwrap_or_default();
                // With memsw equal to the limit, memsw is the counter that
                // trips first; memory.failcnt may stay 0.
                let mut limit_hits = None;
                for name in ["memory.failcnt", "memory.memsw.failcnt"] {
                    let count = read_optional(&dir.join(name))?.and_then(|t| t.trim().parse().ok());
                    limit_hits = limit_hits.max(count);
                }
                Ok(OomFacts {
                    oom_kills: flat_key(&control, "oom_kill"),
                    limit_hits,
                })
            }
        }
    }

    /// True when the kernel counted an OOM kill in the cgroup; on old v1
    /// kernels without that counter, true when usage hit the limit (combine
    /// with "init died by SIGKILL": [`OomFacts::explains_death`]). False when
    /// the files cannot be read.
    pub fn oom_killed(&self) -> bool {
        match self.oom_facts() {
            Ok(OomFacts {
                oom_kills: Some(kills),
                ..
            }) => kills > 0,
            Ok(OomFacts {
                oom_kills: None,
                limit_hits,
            }) => limit_hits.unwrap_or(0) > 0,
            Err(_) => false,
        }
    }

    /// Kills every process left in the cgroup (cgroup.kill on v2 when the
    /// kernel has it, else SIGKILL to each pid), waits up to
    /// [`REMOVE_TIMEOUT`] for them to leave, then removes the directories.
    /// The shared `runbox` parents stay. Removing an already removed cgroup
    /// succeeds.
    pub fn remove(self) -> Result<()> {
        teardown::remove_dirs(&self.dirs, REMOVE_TIMEOUT)
    }
}

/// Removes the cgroups of runbox containers not in `live_ids` (left behind
/// when runbox was SIGKILLed), killing their processes; returns the ids
/// removed. Cgroups younger than [`ORPHAN_MIN_AGE`] are kept, so a container
/// being created concurrently is not mistaken for an orphan; still, callers
/// should record a container before creating its cgroup.
pub fn sweep_orphans(live_ids: &[String]) -> Result<Vec<String>> {
    let layout = CgroupLayout::detect()?;
    teardown::sweep(&layout, |id, age| {
        age >= ORPHAN_MIN_AGE && !live_ids.iter().any(|live| live == id)
    })
}

/// Container ids become directory names: allow only what is safe there.
fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            option: "container id",
            value: id.to_owned(),
            reason: "expected 1-128 letters, digits, `_`, `-` or `.`, not starting with `.`".into(),
        })
    }
}

/// Which controllers `limits` needs, in the order their files are written.
fn needed_controllers(limits: &Limits) -> Vec<&'static str> {
    let mut controllers = Vec::new();
    if limits.memory.is_some() {
        controllers.push("memory");
    }
    if limits.cpus.is_some() {
        controllers.push("cpu");
    }
    if limits.pids.is_some() {
        controllers.push("pids");
    }
    controllers
}

/// Writes `value` to an interface file in one write(2) (the kernel parses
/// each write on its own). `fake` layouts create the file.
fn write_file(path: &Path, value: &str, fake: bool) -> Result<()> {
    let error = |source| Error::CgroupWrite {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(fake)
        .truncate(fake)
        .open(path)
        .map_err(error)?;
    file.write_all(value.as_bytes()).map_err(error)
}

fn read_file(path: &Path) -> Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_READ).read_to_string(&mut text))
        .map_err(|e| Error::io("read", path, e))?;
    Ok(text)
}

/// Reads a file the kernel may not provide (older kernels, disabled
/// accounting): `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match read_file(path) {
        Ok(text) => Ok(Some(text)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The pids listed in `dir/cgroup.procs`.
fn read_procs(dir: &Path) -> Result<Vec<Pid>> {
    let path = dir.join("cgroup.procs");
    let text = read_file(&path)?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .map(Pid::from_raw)
        .collect())
}

/// The value of `key` in a flat-keyed file ("key value" lines, as
/// memory.events and memory.oom_control).
fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Creates a directory, `Ok(false)` if it already existed.
fn make_dir(path: &Path) -> Result<bool> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io("create cgroup", path, e)),
    }
}

/// Creates a container's own cgroup directory; an existing one is an error
/// (ids are unique, so it belongs to another container or a crashed run).
fn make_container_dir(path: &Path) -> Result<()> {
    if make_dir(path)? {
        Ok(())
    } else {
        Err(Error::Cgroup {
            path: path.to_owned(),
            reason: "already exists".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_are_not_plain_names_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a b",
            &"x".repeat(129),
        ] {
            let err = check_id(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid container id"), "{bad}: {err}");
        }
        for good in ["abc123", "my-db_1", "x.y", &"f".repeat(64)] {
            check_id(good).unwrap();
        }
    }

    #[test]
    fn flat_keys_of_memory_files() {
        let events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(flat_key(events, "oom_kill"), Some(1));
        assert_eq!(flat_key(events, "max"), Some(12));
        assert_eq!(flat_key(events, "oom"), Some(1));
        assert_eq!(
            flat_key("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"),
            None
        );
    }

    #[test]
    fn oom_facts_decide_with_the_exit_signal() {
        let counted = OomFacts {
            oom_kills: Some(1),
            limit_hits: Some(3),
        };
        assert!(counted.explains_death(true));
        assert!(!counted.explains_death(false));
        let none = OomFacts {
            oom_kills: Some(0),
            limit_hits: Some(3),
        };
        assert!(!none.explains_death(true), "a counter of 0 beats failcnt");
        let old_kernel = OomFacts {
            oom_kills: None,
            limit_hits: Some(3),
        };
        assert!(old_kernel.explains_death(true));
        assert!(!OomFacts::default().explains_death(true));
    }

    #[test]
    fn controllers_follow_the_limits() {
        assert!(needed_controllers(&Limits::default()).is_empty());
        let all = Limits {
            memory: Some(MIN_MEMORY),
            cpus: Some(1.0),
            pids: Some(5),
        };
        assert_eq!(needed_controllers(&all), ["memory", "cpu", "pids"]);
        let pids = Limits {
            pids: Some(5),
            ..Limits::default()
        };
        assert_eq!(needed_controllers(&pids), ["pids"]);
    }
}
