//! Containers that outlive a command, without a daemon: names, the `ps`
//! listing, signals, stop, kill and rm, and the cgroup of a run with limits.
//!
//! Everything works from the state root alone (layout in [`crate::state`]):
//! no shared database. Who may act on a container is decided by its state
//! dir's flock: the runbox that waits for PID 1 (a foreground `run` or a
//! detached container's supervisor) holds it until the exit status is
//! recorded, so "lock free" means "no live monitor".
//!
//! Signals go through a pidfd opened *before* the pid's start time is
//! checked against state.json: once the check passes, the pidfd names that
//! very process, so a reused pid is never signalled.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use oci_spec::runtime::Spec;

use crate::cgroups::{Cgroup, Limits};
use crate::container::ContainerConfig;
use crate::error::{Error, Result};
use crate::state::{self, ContainerState, Status};
use crate::syscall;

/// Directory of the state root holding one file per name.
pub const NAMES_DIR: &str = ".names";

/// How long commands wait for a monitor to record an exit after PID 1 died.
const RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a run needs beyond the plain container: name, limits, detached logs.
#[derive(Debug, Clone, Default)]
pub struct RunExtras {
    pub name: Option<String>,
    pub limits: Limits,
    /// Detached: stdout/stderr go to `<state dir>/container.log`.
    pub log_to_file: bool,
    /// Detached: told once the command has been executed.
    pub ready: Option<ReadyPipe>,
}

impl RunExtras {
    /// Reports "running" to whoever waits for it (the `run -d` process).
    pub fn report_running(&self) {
        if let Some(r) = &self.ready {
            r.send(b"R\n");
        }
    }
}

/// The supervisor's end of the pipe its `run -d` parent reads: one line,
/// `R` (running) or `E<code> <message>`, then closed.
#[derive(Debug, Clone)]
pub struct ReadyPipe(Arc<Mutex<Option<OwnedFd>>>);

impl ReadyPipe {
    pub fn new(fd: OwnedFd) -> ReadyPipe {
        ReadyPipe(Arc::new(Mutex::new(Some(fd))))
    }

    /// Writes `line` and closes the pipe; later calls do nothing.
    pub fn send(&self, line: &[u8]) {
        let fd = self.0.lock().ok().and_then(|mut g| g.take());
        if let Some(fd) = fd {
            let _ = File::from(fd).write_all(line);
        }
    }

    /// True once a line was sent.
    pub fn sent(&self) -> bool {
        self.0.lock().map(|g| g.is_none()).unwrap_or(true)
    }
}

/// The cgroup of a run, only when a limit was asked for.
pub fn create_cgroup(id: &str, limits: &Limits) -> Result<Option<Cgroup>> {
    if limits.is_empty() {
        return Ok(None);
    }
    Cgroup::create(id, limits).map(Some)
}

/// Whether the OOM killer explains how the container ended: a counted OOM
/// kill in its cgroup (PID 1 may be a shell that reports its killed child
/// as 137), or without that counter, a hit limit and a SIGKILL/137 ending.
pub fn oom_explains(cgroup: &Cgroup, exit: &crate::container::Exit) -> bool {
    let Ok(facts) = cgroup.oom_facts() else {
        return false;
    };
    match facts.oom_kills {
        Some(kills) => kills > 0,
        None => facts.explains_death(exit.code() == 137),
    }
}

/// Points this process's stdout and stderr at `<dir>/container.log` (the
/// supervisor does this; the container inherits them).
pub fn redirect_output_to_log(dir: &Path) -> Result<()> {
    crate::logs::redirect_output(&crate::logs::log_path(dir))
}

/// The state.json fields beyond the basic ones, for [`crate::container::run`].
pub fn state_fields(
    spec: &Spec,
    cfg: &ContainerConfig,
    dir: &Path,
    cgroup: Option<&Cgroup>,
) -> ContainerState {
    let command = spec
        .process()
        .as_ref()
        .and_then(|p| p.args().clone())
        .unwrap_or_default();
    ContainerState {
        name: cfg.lifecycle.name.clone(),
        command,
        log_path: cfg
            .lifecycle
            .log_to_file
            .then(|| crate::logs::log_path(dir)),
        cgroup: cgroup.map(|c| c.paths().to_vec()).unwrap_or_default(),
        monitor_pid: std::process::id() as i32,
        detached: cfg.lifecycle.log_to_file,
        ..ContainerState::default()
    }
}

/// Checks a `--name`: docker's `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, at most 128 bytes.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            option: "--name",
            value: name.to_owned(),
            reason: "expected letters, digits, `_`, `.` or `-`, starting with a letter or digit (at most 128)".into(),
        })
    }
}

fn name_file(root: &Path, name: &str) -> PathBuf {
    root.join(NAMES_DIR).join(name)
}

fn read_name(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.trim();
    (!id.is_empty() && id.len() <= 128).then(|| id.to_owned())
}

/// Claims `name` for container `id` (an `O_EXCL` create: atomic without a
/// global lock). A name whose owner has no state dir any more is stale and
/// taken over.
pub fn claim_name(root: &Path, name: &str, id: &str) -> Result<()> {
    validate_name(name)?;
    let dir = root.join(NAMES_DIR);
    let path = dir.join(name);
    for _ in 0..3 {
        // Inside the loop: a release may remove the emptied dir meanwhile.
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                return f
                    .write_all(id.as_bytes())
                    .map_err(|e| Error::io("write", &path, e));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                match read_name(&path) {
                    Some(owner) if root.join(&owner).exists() => {
                        return Err(Error::NameInUse {
                            name: name.to_owned(),
                            id: owner[..owner.len().min(12)].to_owned(),
                        })
                    }
                    // Stale, or young: a claimant writes right after creating
                    // the file, and creates its state dir a little later.
                    _ if young(&path) => {
                        return Err(Error::NameInUse {
                            name: name.to_owned(),
                            id: "(being created)".into(),
                        })
                    }
                    _ => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("create", &path, e)),
        }
    }
    Err(Error::NameInUse {
        name: name.to_owned(),
        id: "(contended)".into(),
    })
}

fn young(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < Duration::from_secs(5))
}

/// Frees `name` if it still belongs to `id`.
pub fn release_name(root: &Path, name: &str, id: &str) {
    let path = name_file(root, name);
    if read_name(&path).as_deref() == Some(id) {
        let _ = std::fs::remove_file(&path);
        // Fails while other names exist; keeps the state root tidy otherwise.
        let _ = std::fs::remove_dir(root.join(NAMES_DIR));
    }
}

/// The id of the container called `name_or_id`: a name, a full id or a
/// unique id prefix.
pub fn resolve(root: &Path, name_or_id: &str) -> Result<String> {
    if validate_name(name_or_id).is_ok() {
        let path = name_file(root, name_or_id);
        // A run claims its name before it makes its state dir: wait (up
        // to SETUP_WAIT) for a claim that young to get its dir.
        let deadline = Instant::now() + SETUP_WAIT;
        loop {
            let id = read_name(&path);
            if let Some(id) = &id {
                if root.join(id).is_dir() {
                    return Ok(id.clone());
                }
            }
            if Instant::now() >= deadline || !path.exists() || !young(&path) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let hex = !name_or_id.is_empty() && name_or_id.bytes().all(|b| b.is_ascii_hexdigit());
    if hex {
        let mut found = Vec::new();
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if !n.starts_with('.') && n.starts_with(name_or_id) {
                    found.push(n);
                }
            }
        }
        match found.len() {
            1 => return Ok(found.remove(0)),
            0 => {}
            _ if found.iter().any(|f| f == name_or_id) => return Ok(name_or_id.to_owned()),
            count => {
                return Err(Error::AmbiguousContainer {
                    prefix: name_or_id.to_owned(),
                    count,
                })
            }
        }
    }
    Err(Error::NoSuchContainer(name_or_id.to_owned()))
}

/// One row of `ps`.
#[derive(Debug, Clone)]
pub struct Listed {
    pub state: ContainerState,
    /// PID 1 is alive (its start time matches).
    pub running: bool,
}

/// Every container of the state root, newest first. Reads state.json files
/// only (one open+read per container, one /proc stat per running one), and
/// waits (one [`SETUP_WAIT`] in all) for a runbox about to write one.
pub fn list(root: &Path) -> Vec<Listed> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    // A run writes its state.json while its command already runs (or just
    // before): wait for those being written, all within one SETUP_WAIT.
    let deadline = Instant::now() + SETUP_WAIT;
    for e in entries.flatten() {
        if e.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        // Waits while there is no state.json yet, or it says `running`
        // when PID 1 has just exited (the exit is recorded next).
        let listed = load_waiting(
            root,
            &e.file_name().to_string_lossy(),
            deadline,
            |st| Listed {
                running: st.status == Status::Running && state::is_alive(&st),
                state: st,
            },
            |loaded| match loaded {
                Err(Error::NoSuchContainer(_)) => true,
                Ok(l) => l.state.status == Status::Running && !l.running,
                Err(_) => false,
            },
        );
        if let Ok(listed) = listed {
            out.push(listed);
        }
    }
    out.sort_by(|a, b| b.state.created.cmp(&a.state.created));
    out
}

/// Loads the state of container `id`.
pub fn load(root: &Path, id: &str) -> Result<ContainerState> {
    match state::load(&root.join(id)) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::NoSuchContainer(id.to_owned()))
        }
        other => other,
    }
}

/// [`load`] seen through `view`, waiting until `deadline` while `pending`
/// says the state is about to change and the state dir's runbox (it holds
/// the lock) is alive to change it.
fn load_waiting<T>(
    root: &Path,
    id: &str,
    deadline: Instant,
    view: impl Fn(ContainerState) -> T,
    pending: impl Fn(&Result<T>) -> bool,
) -> Result<T> {
    loop {
        let loaded = load(root, id).map(&view);
        if !pending(&loaded) || Instant::now() >= deadline || !is_locked(&root.join(id)) {
            return loaded;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long exec, stop, kill and rm wait for a container that is still
/// being set up (see [`load_started`]).
pub const SETUP_WAIT: Duration = Duration::from_secs(2);

/// [`load`], waiting (up to [`SETUP_WAIT`]) while the container is still
/// being set up: its state dir is there, locked by its runbox, but holds no
/// state.json yet (written once the command runs), or says `created`.
pub fn load_started(root: &Path, id: &str) -> Result<ContainerState> {
    let deadline = Instant::now() + SETUP_WAIT;
    load_waiting(
        root,
        id,
        deadline,
        |st| st,
        |loaded| match loaded {
            Ok(st) => st.status == Status::Created && state::is_alive(st),
            Err(Error::NoSuchContainer(_)) => true,
            Err(_) => false,
        },
    )
}

/// The directory exists and another process holds its lock.
fn is_locked(dir: &Path) -> bool {
    File::open(dir).is_ok_and(|d| Flock::lock(d, FlockArg::LockExclusiveNonblock).is_err())
}

/// A pidfd for the container's PID 1, verified against the recorded start
/// time; `None` when it is no longer running. A `created` container (still
/// setting up) has its PID 1 too, for SIGKILL: the callers that send other
/// signals wait for `running` first ([`load_started`]), as a signal with no
/// handler reaches a namespace's PID 1 only once its command installed one.
pub fn open_pid1(st: &ContainerState) -> Option<OwnedFd> {
    if st.pid <= 0 || st.status == Status::Stopped {
        return None;
    }
    let fd = syscall::pidfd_open(Pid::from_raw(st.pid)).ok()?;
    // Checked after opening: the pidfd now pins the process we verified.
    (state::pid_start_time(st.pid) == Some(st.pid_start_time)).then_some(fd)
}

/// Parses a signal: `KILL`, `SIGKILL`, `kill` or `9`.
pub fn parse_signal(s: &str) -> Result<Signal> {
    let bad = || Error::InvalidOption {
        option: "signal",
        value: s.to_owned(),
        reason: "expected a signal name (TERM, SIGKILL) or number".into(),
    };
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| bad());
    }
    let upper = s.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse::<Signal>().map_err(|_| bad())
}

/// Sends `sig` to container `id`'s PID 1; an error when it is not running.
pub fn kill(root: &Path, id: &str, sig: Signal) -> Result<()> {
    let st = load_started(root, id)?;
    let fd = open_pid1(&st).ok_or_else(|| not_running(id))?;
    syscall::pidfd_send_signal(fd.as_fd(), sig as i32)
        .map_err(|e| Error::io("signal container", root.join(id), e.into()))
}

fn not_running(id: &str) -> Error {
    Error::ContainerState {
        id: id[..id.len().min(12)].to_owned(),
        reason: "is not running".into(),
    }
}

/// Waits up to `timeout` for the process of `pidfd` to exit; true if it did.
fn wait_exit(pidfd: &OwnedFd, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(n) if n > 0 => return true,
            Ok(_) => return false,
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Takes container `id`'s state dir lock, waiting up to `timeout` for its
/// monitor to finish recording the exit. `None` when the dir is gone (the
/// container was removed on exit).
fn lock_when_recorded(root: &Path, id: &str, timeout: Duration) -> Result<Option<Flock<File>>> {
    let path = root.join(id);
    let deadline = Instant::now() + timeout;
    loop {
        let dir = match File::open(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("open state directory", &path, e)),
        };
        match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => {
                // Removed while we waited: the lock is on a dead directory.
                return Ok(path.join("state.json").exists().then_some(lock));
            }
            Err(_) if Instant::now() < deadline => {
                // PID 1 is already dead here: the monitor needs milliseconds.
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((_, e)) => return Err(Error::io("lock state directory", &path, e.into())),
        }
    }
}

/// `stop`: SIGTERM to PID 1, SIGKILL after `grace`, then waits until the
/// exit is recorded. Returns the final state (`None` if it was removed on
/// exit). A stopped container is left as it is.
pub fn stop(root: &Path, id: &str, grace: Duration) -> Result<Option<ContainerState>> {
    let st = load_started(root, id)?;
    if let Some(fd) = open_pid1(&st) {
        let _ = syscall::pidfd_send_signal(fd.as_fd(), libc::SIGTERM);
        if !wait_exit(&fd, grace) {
            let _ = syscall::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
            if !wait_exit(&fd, RECORD_TIMEOUT) {
                return Err(Error::ContainerState {
                    id: id.to_owned(),
                    reason: "did not exit after SIGKILL".into(),
                });
            }
        }
    }
    let lock = lock_when_recorded(root, id, RECORD_TIMEOUT)?;
    match lock {
        Some(_lock) => load(root, id).map(Some),
        None => Ok(None),
    }
}

/// `rm`: removes a stopped container: its state dir (and log), writable
/// layer, cgroup and name. A running one is an error unless `force`, which
/// kills it first.
pub fn remove(root: &Path, containers_dir: &Path, id: &str, force: bool) -> Result<()> {
    let st = load_started(root, id)?;
    let alive = open_pid1(&st);
    let monitored = st.monitor_pid > 0 && is_locked(&root.join(id));
    if alive.is_some() || monitored {
        if !force {
            return Err(Error::ContainerState {
                id: id[..id.len().min(12)].to_owned(),
                reason: "is running: stop it first or use rm -f".into(),
            });
        }
        if let Some(fd) = &alive {
            let _ = syscall::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
            wait_exit(fd, RECORD_TIMEOUT);
        }
    }
    let Some(lock) = lock_when_recorded(root, id, RECORD_TIMEOUT)? else {
        // Its monitor removed it on exit (--rm): only the name may remain.
        if let Some(name) = &st.name {
            release_name(root, name, id);
        }
        return Ok(());
    };
    let st = load(root, id).unwrap_or(st);
    remove_locked(root, containers_dir, &st, lock)
}

fn remove_locked(
    root: &Path,
    containers_dir: &Path,
    st: &ContainerState,
    lock: Flock<File>,
) -> Result<()> {
    let id = &st.id;
    let mut first = Ok(());
    if !st.cgroup.is_empty() {
        if let Ok(Some(cg)) = Cgroup::open(id) {
            first = cg.remove();
        }
    }
    first = first.and(crate::layers::discard_layer_in_background(
        containers_dir,
        id,
    ));
    let dir = root.join(id);
    let removed =
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io("remove state directory", &dir, e));
    drop(lock);
    if let Some(name) = &st.name {
        release_name(root, name, id);
    }
    removed.and(first)
}

/// Removes stopped containers that exited more than `until` ago (all
/// stopped ones without it); returns their ids. Running ones are left.
pub fn prune_stopped(
    root: &Path,
    containers_dir: &Path,
    until: Option<Duration>,
    dry_run: bool,
) -> Vec<String> {
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for c in list(root) {
        if c.running || c.state.status != Status::Stopped {
            continue;
        }
        let finished = c
            .state
            .finished
            .as_deref()
            .and_then(|f| humantime::parse_rfc3339(f).ok());
        let old_enough = match (until, finished) {
            (None, _) => true,
            (Some(u), Some(f)) => now.duration_since(f).is_ok_and(|age| age >= u),
            (Some(_), None) => false,
        };
        if !old_enough {
            continue;
        }
        let Ok(dir) = File::open(root.join(&c.state.id)) else {
            continue;
        };
        let Ok(lock) = Flock::lock(dir, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        if dry_run || remove_locked(root, containers_dir, &c.state, lock).is_ok() {
            removed.push(c.state.id);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_claimed_once_and_stale_ones_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("aaaa")).unwrap();
        claim_name(root, "db", "aaaa").unwrap();
        let err = claim_name(root, "db", "bbbb").unwrap_err().to_string();
        assert!(
            err.contains("`db` is already in use by container aaaa"),
            "{err}"
        );
        assert_eq!(resolve(root, "db").unwrap(), "aaaa");
        // The owner's state dir is gone but the claim is young: the owner
        // may be about to create it, so the name stays taken.
        std::fs::remove_dir(root.join("aaaa")).unwrap();
        std::fs::create_dir(root.join("bbbb")).unwrap();
        assert!(claim_name(root, "db", "bbbb").is_err());
        // An old claim without a state dir is stale and free.
        let old = std::time::SystemTime::now() - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(root.join(".names").join("db"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        claim_name(root, "db", "bbbb").unwrap();
        assert_eq!(resolve(root, "db").unwrap(), "bbbb");
        release_name(root, "db", "aaaa");
        assert_eq!(resolve(root, "db").unwrap(), "bbbb", "not aaaa's to free");
        release_name(root, "db", "bbbb");
        assert!(!root.join(".names").exists(), "emptied and removed");
        assert!(claim_name(root, "../x", "c").is_err());
        assert!(claim_name(root, "-x", "c").is_err());
    }

    #[test]
    fn ids_resolve_by_unique_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for id in ["abc123", "abd456"] {
            std::fs::create_dir(root.join(id)).unwrap();
        }
        assert_eq!(resolve(root, "abc").unwrap(), "abc123");
        assert_eq!(resolve(root, "abd456").unwrap(), "abd456");
        assert!(matches!(
            resolve(root, "ab"),
            Err(Error::AmbiguousContainer { count: 2, .. })
        ));
        assert!(matches!(
            resolve(root, "ff"),
            Err(Error::NoSuchContainer(_))
        ));
    }

    #[test]
    fn signals_parse_by_name_and_number() {
        assert_eq!(parse_signal("TERM").unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal("sigkill").unwrap(), Signal::SIGKILL);
        assert_eq!(parse_signal("15").unwrap(), Signal::SIGTERM);
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("999").is_err());
    }

    #[test]
    fn a_reused_pid_is_not_running() {
        let me = std::process::id() as i32;
        let start = state::pid_start_time(me).unwrap();
        let mut st = ContainerState {
            id: "x".into(),
            pid: me,
            pid_start_time: start,
            status: Status::Running,
            ..ContainerState::default()
        };
        assert!(open_pid1(&st).is_some());
        // Setting up: stop and kill reach it; stopped: nothing to reach.
        st.status = Status::Created;
        assert!(open_pid1(&st).is_some());
        st.status = Status::Stopped;
        assert!(open_pid1(&st).is_none());
        st.status = Status::Running;
        st.pid_start_time = start + 1;
        assert!(
            open_pid1(&st).is_none(),
            "another process with the same pid"
        );
    }
}
