//! The one fork of a start, and everything the child does after it until
//! execve. The process tree and the sync protocol:
//!
//! ```text
//! runbox (parent)                      child = PID 1 of the new pid namespace
//!   block signals, pipe(O_CLOEXEC)
//!   clone3(NEWNS|NEWPID|NEWUTS|NEWIPC[|NEWNET], PIDFD) ──▶ rootfs::apply (mounts, pivot_root)
//!   poll(sync pipe, pidfd, signalfd)       "T<µs>\n"      ◀── mount time
//!                                          hostname, lo up, stdio, rlimits
//!                                          [nnp] seccomp (before dropping caps unless nnp)
//!                                          bounding set, groups/gid/uid, capset
//!                                          chdir, [nnp: seccomp], PATH lookup
//!   EOF on the pipe = exec succeeded  ◀──  execve (pipe closes on exec)
//!   "E<code> <message>\n" = failure   ◀──  or: report the error and _exit(code)
//! ```
//!
//! With `--init` the child forks once more: the grandchild execs the command
//! and the child stays PID 1, reaping zombies and forwarding signals.
//! The parent reads the pipe with its normal poll loop, so it never waits on
//! it forever: a dead child closes its end too.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};

use crate::rootfs::{self, MountPlan};
use crate::signals;
use crate::syscall::{self, Forked};

/// Exit code when runbox fails before exec (docker's 125).
pub const EXIT_RUNBOX: u8 = 125;
/// The command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// What the child does with stdio.
#[derive(Debug)]
pub enum Stdio {
    /// Inherit the parent's 0/1/2, with stdin replaced by this (/dev/null) when set.
    Inherit { null_stdin: Option<OwnedFd> },
    /// The pty slave becomes the controlling terminal and 0/1/2.
    Pty { slave: OwnedFd },
}

/// Capability sets as bitmasks (bit N = capability N).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapSets {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: Vec<u32>,
    /// Highest capability number of the running kernel.
    pub last_cap: u32,
}

impl CapSets {
    /// The sets a Spec's process asks for, as masks for capset/prctl.
    pub fn from_spec(c: &oci_spec::runtime::LinuxCapabilities) -> CapSets {
        let mask = |s: &Option<oci_spec::runtime::Capabilities>| {
            s.as_ref().map(crate::capabilities::mask).unwrap_or(0)
        };
        CapSets {
            bounding: mask(c.bounding()),
            effective: mask(c.effective()),
            permitted: mask(c.permitted()),
            inheritable: mask(c.inheritable()),
            ambient: c
                .ambient()
                .iter()
                .flatten()
                .map(|cap| crate::capabilities::number(*cap) as u32)
                .collect(),
            last_cap: crate::capabilities::kernel_last_cap() as u32,
        }
    }
}

/// Everything the child needs, prepared by the parent before the clone so the
/// child only performs system calls.
#[derive(Debug)]
pub struct ChildPlan {
    pub mounts: MountPlan,
    pub hostname: Option<String>,
    /// Bring `lo` up (a new network namespace).
    pub loopback: bool,
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    /// PATH from the container's env, for a bare command name.
    pub path_var: Option<String>,
    pub cwd: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    pub caps: Option<CapSets>,
    pub no_new_privileges: bool,
    /// Compiled seccomp filter and its `SECCOMP_FILTER_FLAG_*` flags, loaded
    /// last (before dropping caps when no_new_privs is off).
    pub seccomp: Option<(crate::seccomp::BpfProgram, u32)>,
    pub rlimits: Vec<(nix::sys::resource::Resource, u64, u64)>,
    /// The process umask (the spec's `user.umask`), set right before exec.
    pub umask: Option<u32>,
    pub init: bool,
    /// Signal mask to restore before exec (the parent's original one).
    pub sigmask: SigSet,
    /// v1 cgroups: the child blocks reading this until the parent has moved
    /// it into the container's cgroup (a byte, or EOF), so nothing it execs
    /// escapes the limits. The move overlaps with the child's setup.
    pub cgroup_wait: Option<OwnedFd>,
    /// Set right before the execve. Spawned sharing runbox's memory, the
    /// child sets it there: runbox tells an exec from a death on the way.
    pub exec_reached: std::sync::atomic::AtomicBool,
}

/// A setup failure: the exit code and a one-line message naming the phase.
#[derive(Debug)]
pub struct ChildError {
    pub code: u8,
    pub message: String,
}

impl ChildError {
    pub(crate) fn runbox(phase: &str, detail: impl std::fmt::Display) -> ChildError {
        ChildError {
            code: EXIT_RUNBOX,
            message: format!("{phase}: {detail}"),
        }
    }
}

pub(crate) fn fail(
    phase: &'static str,
    what: impl std::fmt::Display,
) -> impl FnOnce(Errno) -> ChildError {
    move |e| ChildError::runbox(phase, format_args!("failed to {what}: {}", e.desc()))
}

/// Messages on the sync pipe, parsed by the parent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Microseconds the child spent mounting.
    pub mount_us: Option<u64>,
    pub error: Option<(u8, String)>,
}

/// Parses everything the child wrote on the sync pipe.
pub fn parse_sync(bytes: &[u8]) -> SyncReport {
    let mut r = SyncReport::default();
    for line in String::from_utf8_lossy(bytes).lines() {
        if let Some(t) = line.strip_prefix('T') {
            r.mount_us = t.parse().ok();
        } else if let Some(e) = line.strip_prefix('E') {
            let (code, msg) = e.split_once(' ').unwrap_or((e, ""));
            r.error = Some((code.parse().unwrap_or(EXIT_RUNBOX), msg.to_string()));
        }
    }
    r
}

pub(crate) fn write_all(fd: BorrowedFd<'_>, mut buf: &[u8]) {
    while !buf.is_empty() {
        match nix::unistd::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// The container process, as [`spawn_container`] left it.
#[derive(Debug)]
pub struct Spawned {
    pub pid: Pid,
    pub pidfd: Option<OwnedFd>,
    /// The container's mount namespace, when the child handed it over.
    pub mntns: Option<OwnedFd>,
    /// The child has already exec'd (or failed and exited): everything it
    /// reports is on the sync pipe, up to EOF.
    pub settled: bool,
    /// A settled child got as far as its execve (else it died on the way).
    pub exec_reached: bool,
}

/// Starts the container process. In the child this never returns: it sets
/// up the container and execs, or reports the failure on `sync` and exits.
///
/// The usual way shares runbox's memory until the exec (`CLONE_VM |
/// CLONE_VFORK`, see `syscall::spawn_shared_into`): nothing is copied and
/// nothing faults copy-on-write in either process, and the child hands its
/// mount namespace over. runbox sleeps meanwhile. `--init` (PID 1 never
/// execs) and a v1 cgroup move (the parent must act while the child waits)
/// need the child to run beside runbox: a fork-like clone3, also the way
/// into a cgroup2 directory (`cgroup`, `CLONE_INTO_CGROUP`).
pub fn spawn_container(
    flags: nix::sched::CloneFlags,
    plan: ChildPlan,
    stdio: Stdio,
    sync: OwnedFd,
    cgroup: Option<BorrowedFd<'_>>,
) -> nix::Result<Spawned> {
    if plan.init || plan.cgroup_wait.is_some() || cgroup.is_some() {
        return match syscall::clone_into_cgroup(flags, cgroup)? {
            Forked::Parent { pid, pidfd } => Ok(Spawned {
                pid,
                pidfd,
                mntns: None,
                settled: false,
                exec_reached: false,
            }),
            Forked::Child => syscall::exit_now(run_child(&plan, &stdio, sync.as_fd()) as i32),
        };
    }
    let (pid, pidfd, mntns) =
        syscall::spawn_shared_into(flags, &mut || run_child(&plan, &stdio, sync.as_fd()) as i32)?;
    // The child is gone from our memory: its pipe end and stdio copies close here.
    drop((sync, stdio));
    Ok(Spawned {
        pid,
        pidfd: Some(pidfd),
        mntns,
        settled: true,
        // Written by the child in our memory (CLONE_VM).
        exec_reached: plan.exec_reached.load(std::sync::atomic::Ordering::Acquire),
    })
}

/// The child's side: set up and exec, or report the failure on `sync` and
/// return the exit code. Leaves `plan` and `stdio` as they are (their
/// memory may be runbox's, see [`spawn_container`]); what must not reach
/// the command is close-on-exec.
fn run_child(plan: &ChildPlan, stdio: &Stdio, sync: BorrowedFd<'_>) -> u8 {
    match child_setup(plan, stdio, sync) {
        Ok(never) => match never {},
        Err(e) => {
            // Newlines would split the message into protocol lines.
            let msg = format!("E{} {}\n", e.code, e.message.replace('\n', " "));
            write_all(sync, msg.as_bytes());
            e.code
        }
    }
}

pub(crate) enum Never {}

fn child_setup(plan: &ChildPlan, stdio: &Stdio, sync: BorrowedFd<'_>) -> Result<Never, ChildError> {
    // Die with runbox: nothing may outlive a SIGKILLed parent.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(fail("spawn", "set parent-death signal"))?;
    let started = Instant::now();
    rootfs::apply(&plan.mounts).map_err(|e| ChildError::runbox("mount", e))?;
    write_all(
        sync,
        format!("T{}\n", started.elapsed().as_micros()).as_bytes(),
    );

    if let Some(name) = &plan.hostname {
        nix::unistd::sethostname(name)
            .map_err(fail("spawn", format_args!("set hostname `{name}`")))?;
    }
    if plan.loopback {
        syscall::loopback_up().map_err(fail("network", "bring up `lo`"))?;
    }
    match stdio {
        Stdio::Inherit {
            null_stdin: Some(null),
        } => {
            nix::unistd::dup2(null.as_raw_fd(), 0)
                .map_err(fail("stdio", "redirect stdin from /dev/null"))?;
        }
        Stdio::Inherit { null_stdin: None } => {}
        Stdio::Pty { slave } => pty_attach(slave.as_fd())?,
    }
    if matches!(stdio, Stdio::Inherit { .. }) {
        // Out of runbox's process group: a ^C on the terminal reaches the
        // container once, forwarded by runbox (as docker's sig-proxy does).
        nix::unistd::setsid().map_err(fail("spawn", "start a new session"))?;
    }
    // The stdio fds are close-on-exec: not closed here (see run_child).
    for (res, soft, hard) in &plan.rlimits {
        nix::sys::resource::setrlimit(*res, *soft, *hard)
            .map_err(fail("spawn", format_args!("set {res:?}")))?;
    }
    syscall::cloexec_from(3).map_err(fail("spawn", "mark inherited descriptors close-on-exec"))?;
    if !plan.cwd.as_os_str().is_empty() {
        // Like docker, create a missing working directory (as root, before the user switch).
        std::fs::create_dir_all(&plan.cwd).map_err(|e| {
            ChildError::runbox(
                "workdir",
                format_args!("failed to create `{}`: {e}", plan.cwd.display()),
            )
        })?;
    }

    if plan.no_new_privileges {
        nix::sys::prctl::set_no_new_privs().map_err(fail("security", "set no_new_privs"))?;
    } else if let Some((filter, flags)) = &plan.seccomp {
        // Without no_new_privs, loading a filter needs CAP_SYS_ADMIN: load it
        // before the capabilities go (runc does the same).
        syscall::seccomp_load(filter.as_sock_filters(), *flags)
            .map_err(fail("seccomp", "load the filter"))?;
    }
    set_credentials(plan)?;
    nix::unistd::chdir(&plan.cwd).map_err(fail(
        "workdir",
        format_args!("chdir to `{}`", plan.cwd.display()),
    ))?;
    if plan.no_new_privileges {
        if let Some((filter, flags)) = &plan.seccomp {
            syscall::seccomp_load(filter.as_sock_filters(), *flags)
                .map_err(fail("seccomp", "load the filter"))?;
        }
    }

    if let Some(wait) = &plan.cgroup_wait {
        let mut byte = [0u8; 1];
        loop {
            match nix::unistd::read(wait.as_raw_fd(), &mut byte) {
                Err(Errno::EINTR) => {}
                Ok(_) => break,
                Err(e) => return Err(fail("cgroup", "wait to be moved into the cgroup")(e)),
            }
        }
    }
    if plan.init {
        run_init(plan, sync)
    } else {
        exec(plan)
    }
}

pub(crate) fn pty_attach(slave: BorrowedFd<'_>) -> Result<(), ChildError> {
    crate::pty::attach_slave(slave).map_err(fail("tty", "attach the pty as controlling terminal"))
}

pub(crate) fn set_credentials(plan: &ChildPlan) -> Result<(), ChildError> {
    if let Some(caps) = &plan.caps {
        for cap in 0..=caps.last_cap.min(63) {
            if caps.bounding & (1 << cap) == 0 {
                syscall::cap_bound_drop(cap)
                    .map_err(fail("capabilities", format_args!("drop capability {cap}")))?;
            }
        }
    }
    let held =
        syscall::capget_permitted().map_err(fail("capabilities", "read the permitted set"))?;
    // Keep the permitted set across the uid change; capset below sets the real ones.
    nix::sys::prctl::set_keepcaps(true).map_err(fail("user", "set keepcaps"))?;
    let groups: Vec<Gid> = plan
        .additional_gids
        .iter()
        .map(|g| Gid::from_raw(*g))
        .collect();
    nix::unistd::setgroups(&groups).map_err(fail("user", "set supplementary groups"))?;
    let (uid, gid) = (Uid::from_raw(plan.uid), Gid::from_raw(plan.gid));
    nix::unistd::setresgid(gid, gid, gid).map_err(fail("user", format_args!("set gid {gid}")))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(fail("user", format_args!("set uid {uid}")))?;
    nix::sys::prctl::set_keepcaps(false).map_err(fail("user", "clear keepcaps"))?;
    if let Some(caps) = &plan.caps {
        // A set can only shrink: `--privileged` asks for every capability the
        // kernel knows, but runbox may itself run with fewer.
        let held = held & caps.bounding;
        syscall::capset(
            caps.effective & held,
            caps.permitted & held,
            caps.inheritable & held,
        )
        .map_err(fail(
            "capabilities",
            "set effective/permitted/inheritable sets",
        ))?;
        syscall::set_ambient(&caps.ambient).map_err(fail("capabilities", "set the ambient set"))?;
    }
    // Changing credentials cleared the parent-death signal.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(fail("spawn", "set parent-death signal"))?;
    Ok(())
}

/// The executable for `argv0`: itself when it has a slash, else the first
/// regular file with an execute bit along PATH (like runc's LookPath).
pub fn find_executable(argv0: &Path, path_var: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if argv0.as_os_str().as_bytes().contains(&b'/') {
        return Some(argv0.to_path_buf());
    }
    let path = path_var.unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(argv0))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

pub(crate) fn exec(plan: &ChildPlan) -> Result<Never, ChildError> {
    let argv0 = plan
        .args
        .first()
        .ok_or_else(|| ChildError::runbox("exec", "no command"))?;
    let name = Path::new(std::ffi::OsStr::from_bytes(argv0.as_bytes()));
    let Some(exe) = find_executable(name, plan.path_var.as_deref()) else {
        return Err(ChildError {
            code: EXIT_NOT_FOUND,
            message: format!(
                "exec: `{}`: executable file not found in $PATH",
                name.display()
            ),
        });
    };
    let c_exe = CString::new(exe.as_os_str().as_bytes())
        .map_err(|_| ChildError::runbox("exec", "NUL in path"))?;
    if let Some(mask) = plan.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(
            mask as libc::mode_t,
        ));
    }
    syscall::reset_signal_dispositions();
    plan.exec_reached
        .store(true, std::sync::atomic::Ordering::Release);
    signals::restore(&plan.sigmask).map_err(fail("exec", "restore the signal mask"))?;
    let err = nix::unistd::execve(&c_exe, &plan.args, &plan.env).unwrap_err();
    let code = match err {
        Errno::ENOENT | Errno::ENOTDIR => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    };
    Err(ChildError {
        code,
        message: format!("exec: `{}`: {}", exe.display(), err.desc()),
    })
}

/// `--init`: fork the command, then reap zombies and forward signals until it exits.
fn run_init(plan: &ChildPlan, sync: BorrowedFd<'_>) -> Result<Never, ChildError> {
    let sigfd = signals::signal_fd().map_err(fail("init", "create a signalfd"))?;
    let child = match syscall::fork().map_err(fail("init", "fork the command"))? {
        Forked::Child => {
            drop(sigfd);
            return exec(plan);
        }
        Forked::Parent { pid, .. } => pid,
    };
    // The command's copy of the pipe reports its exec; ours must not keep it open.
    let _ = nix::unistd::close(sync.as_raw_fd());
    loop {
        let mut fds = [nix::poll::PollFd::new(
            sigfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => syscall::exit_now(EXIT_RUNBOX as i32),
        }
        for sig in signals::drain(&sigfd) {
            if sig != Signal::SIGCHLD {
                let _ = nix::sys::signal::kill(child, sig);
            }
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => syscall::exit_now(code),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => {
                    syscall::exit_now(128 + sig as i32)
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_messages_parse() {
        let r = parse_sync(b"T1234\nE127 exec: `x`: executable file not found in $PATH\n");
        assert_eq!(r.mount_us, Some(1234));
        assert_eq!(
            r.error,
            Some((
                127,
                "exec: `x`: executable file not found in $PATH".to_string()
            ))
        );
        assert_eq!(parse_sync(b""), SyncReport::default());
    }

    #[test]
    fn executables_are_found_along_path() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("tool"), "").unwrap(); // not executable: skipped
        std::fs::write(b.join("tool"), "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", a.display(), b.display());
        assert_eq!(
            find_executable(Path::new("tool"), Some(&path)),
            Some(b.join("tool"))
        );
        assert_eq!(find_executable(Path::new("nope"), Some(&path)), None);
        assert_eq!(
            find_executable(Path::new("./rel/x"), Some(&path)),
            Some(PathBuf::from("./rel/x"))
        );
    }
}
