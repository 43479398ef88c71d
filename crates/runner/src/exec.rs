//! `runbox exec`: one more process inside a running container, with the
//! container's namespaces, root, user, environment, working directory,
//! capabilities, seccomp filter, no_new_privs and cgroup. Only the state
//! directory is read (`state.json`, and `config.json`: the Spec the container
//! was started with); the image store is never touched.
//!
//! ```text
//! runbox exec (parent)                          child
//!   NAME|ID -> <state>/<id>/state.json
//!   pidfd_open(pid), THEN compare /proc/<pid>/stat start time with state.json
//!   config.json, cached seccomp BPF, open the cgroup (dirs from state.json)
//!   setns(pidfd, MNT|PID|UTS|IPC[|NET|CGROUP])   (root and cwd: the container's /)
//!   -u: the container's /etc/passwd; -t: a pty from the container's /dev/ptmx
//!   block signals, pipe(O_CLOEXEC)
//!   clone(VM|VFORK|PIDFD) ──────────────────▶ in the container's pid namespace,
//!     (v2 cgroup: clone3(INTO_CGROUP|PIDFD))    sharing runbox's memory until exec:
//!   poll(sync pipe, pidfd, signalfd, pty)       v1: write "0" to cgroup.procs (join)
//!                                               stdio, setsid, rlimits
//!                                               [nnp] seccomp, bounding set, ids, capset
//!                                               chdir, [nnp: seccomp], PATH lookup
//!   EOF on the pipe = exec succeeded     ◀──  execve (the pipe closes on exec)
//!   "E<code> <message>\n" = failure      ◀──  or: report the error and _exit(code)
//! ```
//!
//! PID reuse cannot redirect an exec: the pidfd is opened before the start
//! time is checked, so it names the container's PID 1 or the check fails; a
//! setns through the pidfd then joins that very process, or fails with ESRCH
//! once it is gone. setns with `CLONE_NEWPID` only moves future children, so
//! the parent joins everything and clones once: the child is born inside.
//! The child shares runbox's memory until it execs (like posix_spawn), so
//! nothing is copied; it only borrows what the parent owns.
//! runbox must be single-threaded here (joining a mount namespace requires it).

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use oci_spec::runtime::{Linux, LinuxNamespace, LinuxSeccomp, Process, Spec};

use crate::container::Exit;
use crate::error::{Error, Result};
use crate::rootfs::{MountPlan, RootfsMode};
use crate::spawn::{self, CapSets, ChildError, ChildPlan, Never};
use crate::user::ResolvedUser;
use crate::{namespaces, pty, signals, syscall};

/// The Spec a container was started with, in its state directory.
pub const CONFIG_JSON: &str = "config.json";

/// Largest config.json we read (docker's seccomp profile makes it ~30 KiB).
const MAX_CONFIG_JSON: u64 = 4 << 20;

/// What to run and how, from `runbox exec`'s flags.
#[derive(Debug, Clone, Default)]
pub struct ExecConfig {
    /// Name, full id or unique id prefix.
    pub container: String,
    /// The state root (`--state`).
    pub state_root: PathBuf,
    /// Where compiled seccomp programs are cached.
    pub seccomp_cache: PathBuf,
    /// The command and its arguments.
    pub args: Vec<String>,
    /// `KEY=VALUE` entries replacing or extending the container's environment.
    pub env: Vec<String>,
    /// Absolute working directory instead of the container's.
    pub workdir: Option<String>,
    /// `USER[:GROUP]` instead of the container's, resolved in its /etc/passwd.
    pub user: Option<String>,
    pub tty: bool,
    pub interactive: bool,
    /// Return once the command runs, without waiting; its stdio is /dev/null.
    pub detach: bool,
}

impl ExecConfig {
    /// Checks what can be checked before touching the container.
    pub fn validate(&self) -> Result<()> {
        let bad = |option: &'static str, value: &str, reason: &str| Error::InvalidOption {
            option,
            value: value.to_string(),
            reason: reason.into(),
        };
        if self.args.is_empty() {
            return Err(Error::NoCommand);
        }
        for e in &self.env {
            crate::env::validate_entry(e)?;
        }
        if let Some(w) = &self.workdir {
            if !w.starts_with('/') {
                return Err(bad("--workdir", w, "must be an absolute path"));
            }
            if w.contains('\0') {
                return Err(bad("--workdir", w, "contains a NUL byte"));
            }
        }
        if self.detach && self.tty {
            return Err(bad("--detach", "-t", "cannot be combined with a tty"));
        }
        Ok(())
    }
}

/// Reads the Spec saved in a container's state directory: its process and
/// its namespaces and seccomp profile (nothing else is kept).
pub fn load_config(dir: &Path) -> Result<Spec> {
    let p = dir.join(CONFIG_JSON);
    let f = File::open(&p).map_err(|e| Error::io("open", &p, e))?;
    let hint = f.metadata().map_or(0, |m| m.len().min(MAX_CONFIG_JSON));
    let mut buf = Vec::with_capacity(hint as usize + 1);
    f.take(MAX_CONFIG_JSON + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read", &p, e))?;
    if buf.len() as u64 > MAX_CONFIG_JSON {
        return Err(Error::InvalidFile {
            what: "container config",
            path: p,
            reason: format!("larger than {MAX_CONFIG_JSON} bytes"),
        });
    }
    let saved: SavedSpec = serde_json::from_slice(&buf).map_err(|e| Error::InvalidFile {
        what: "container config",
        path: p,
        reason: e.to_string(),
    })?;
    let mut spec = Spec::default();
    spec.set_process(saved.process);
    spec.set_linux(saved.linux.map(|l| {
        let mut linux = Linux::default();
        linux.set_namespaces(l.namespaces);
        linux.set_seccomp(l.seccomp);
        linux
    }));
    Ok(spec)
}

/// The parts of config.json an exec uses; the rest (mounts, devices, masked
/// paths) is skipped unbuilt, which halves the parse.
#[derive(serde::Deserialize)]
struct SavedSpec {
    process: Option<Process>,
    linux: Option<SavedLinux>,
}

#[derive(serde::Deserialize)]
struct SavedLinux {
    namespaces: Option<Vec<LinuxNamespace>>,
    seccomp: Option<LinuxSeccomp>,
}

/// The process to exec: the container's own with the exec's overrides (pure).
/// `who` is the `-u` user resolved in the container. Like docker: `-u` also
/// sets HOME (unless `-e HOME=` is given) and gives a non-root user empty
/// effective and permitted capability sets; `-t` adds TERM=xterm when unset.
pub fn exec_process(spec: &Spec, cfg: &ExecConfig, who: Option<&ResolvedUser>) -> Result<Process> {
    let mut p = spec.process().clone().ok_or(Error::NoCommand)?;
    p.set_args(Some(cfg.args.clone()));
    let mut env = p.env().clone().unwrap_or_default();
    if let Some(who) = who {
        let mut user = p.user().clone();
        user.set_uid(who.uid);
        user.set_gid(who.gid);
        user.set_additional_gids(Some(who.additional_gids.clone()).filter(|g| !g.is_empty()));
        p.set_user(user);
        let home = format!("HOME={}", who.home.as_deref().unwrap_or("/"));
        crate::env::replace_or_append(&mut env, &home);
        if let Some(caps) = p.capabilities() {
            let bounding = caps.bounding().clone().unwrap_or_default();
            p.set_capabilities(Some(crate::capabilities::process_capabilities(
                &bounding, who.uid,
            )));
        }
    }
    if cfg.tty && !crate::env::has(&env, "TERM") {
        env.push("TERM=xterm".into());
    }
    for e in &cfg.env {
        crate::env::replace_or_append(&mut env, e);
    }
    p.set_env(Some(env));
    if let Some(w) = &cfg.workdir {
        p.set_cwd(PathBuf::from(w));
    }
    p.set_terminal(Some(cfg.tty));
    Ok(p)
}

fn cstrings<'a>(what: &'static str, items: impl Iterator<Item = &'a str>) -> Result<Vec<CString>> {
    items
        .map(|s| {
            CString::new(s).map_err(|_| Error::InvalidOption {
                option: what,
                value: s.to_string(),
                reason: "contains a NUL byte".into(),
            })
        })
        .collect()
}

/// The child's plan for `process`. Nothing is mounted: the container's root
/// is already there, so the mount plan stays empty and is never applied.
fn child_plan(
    process: &Process,
    seccomp: Option<(crate::seccomp::BpfProgram, u32)>,
) -> Result<ChildPlan> {
    let args = process.args().as_deref().unwrap_or(&[]);
    let env = process.env().as_deref().unwrap_or(&[]);
    let user = process.user();
    Ok(ChildPlan {
        mounts: MountPlan {
            mode: RootfsMode::Bind { dir: "/".into() },
            target: "/".into(),
            steps: Vec::new(),
        },
        hostname: None,
        loopback: false,
        args: cstrings("command", args.iter().map(String::as_str))?,
        env: cstrings("env", env.iter().map(String::as_str))?,
        path_var: env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix("PATH="))
            .map(str::to_string),
        cwd: process.cwd().clone(),
        uid: user.uid(),
        gid: user.gid(),
        additional_gids: user.additional_gids().clone().unwrap_or_default(),
        caps: process.capabilities().as_ref().map(CapSets::from_spec),
        no_new_privileges: process.no_new_privileges().unwrap_or(false),
        seccomp,
        rlimits: process
            .rlimits()
            .iter()
            .flatten()
            .filter_map(|r| crate::container::rlimit(r.typ()).map(|res| (res, r.soft(), r.hard())))
            .collect(),
        umask: user.umask(),
        init: false,
        sigmask: nix::sys::signal::SigSet::empty(),
        // The exec joins the cgroup itself, first thing in the child.
        cgroup_wait: None,
        exec_reached: Default::default(),
    })
}

/// A running container, verified: `pidfd` names its PID 1.
struct Target {
    pidfd: OwnedFd,
    spec: Spec,
    /// The container's cgroup directories (state.json; empty without limits).
    cgroup: Vec<PathBuf>,
}

fn open_target(state_root: &Path, id: &str) -> Result<Target> {
    let st = crate::lifecycle::load_started(state_root, id)?;
    // Still setting up after the wait: not enterable (yet).
    let running = st.status == crate::state::Status::Running;
    let Some(pidfd) = crate::lifecycle::open_pid1(&st).filter(|_| running) else {
        return Err(Error::NotRunning {
            id: id[..id.len().min(12)].to_string(),
        });
    };
    wait_for_container_root(st.pid, id)?;
    let spec = load_config(&state_root.join(id))?;
    Ok(Target {
        pidfd,
        spec,
        cgroup: st.cgroup,
    })
}

use crate::lifecycle::SETUP_WAIT;

/// Waits until PID 1 has left the host's root (pivot_root done): `run`
/// records the pid right after its clone, and an exec that joined the mount
/// namespace before the pivot would see the host's filesystem.
fn wait_for_container_root(pid: i32, id: &str) -> Result<()> {
    let host = std::fs::metadata("/").map_err(|e| Error::io("stat", "/", e))?;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let started = Instant::now();
    loop {
        let Ok(theirs) = std::fs::metadata(&root) else {
            return Err(Error::NotRunning {
                id: id[..id.len().min(12)].to_string(),
            });
        };
        if (theirs.dev(), theirs.ino()) != (host.dev(), host.ino()) {
            return Ok(());
        }
        if started.elapsed() > SETUP_WAIT {
            return Err(Error::ContainerState {
                id: id[..id.len().min(12)].to_string(),
                reason: "is still being set up (its root is the host's)".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the child does with stdio.
enum ExecStdio {
    /// runbox's own 0/1/2, stdin replaced by /dev/null when set.
    Inherit {
        null_stdin: Option<OwnedFd>,
    },
    Pty {
        slave: OwnedFd,
    },
    /// -d: all three on /dev/null.
    Null(OwnedFd),
}

/// Runs `cfg.args` in the running container `cfg.container` and waits for it
/// (returns at once with `Exit::Code(0)` when detached and the exec worked).
/// Call it from a single-threaded process: it joins a mount namespace and clones.
pub fn exec(cfg: &ExecConfig) -> Result<Exit> {
    cfg.validate()?;
    let id = crate::lifecycle::resolve(&cfg.state_root, &cfg.container)?;
    let target = open_target(&cfg.state_root, &id)?;
    let flags = namespaces::clone_flags(&target.spec)?;
    let seccomp = match target
        .spec
        .linux()
        .as_ref()
        .and_then(|l| l.seccomp().as_ref())
    {
        Some(profile) => Some((
            crate::seccomp::cached_program(profile, &cfg.seccomp_cache)?,
            crate::seccomp::filter_flags(profile),
        )),
        None => None,
    };
    // Host paths: opened before setns hides them.
    let cgroup = JoinCgroup::open(&target.cgroup)?;
    let null = if cfg.detach || !cfg.interactive {
        let f = File::open("/dev/null").map_err(|e| Error::io("open", "/dev/null", e))?;
        Some(OwnedFd::from(f))
    } else {
        None
    };

    match nix::sched::setns(&target.pidfd, flags) {
        Ok(()) => {}
        Err(Errno::ESRCH) => {
            return Err(Error::NotRunning {
                id: id[..id.len().min(12)].to_string(),
            })
        }
        Err(e) => return Err(Error::io("join the namespaces of container", &id, e.into())),
    }
    // From here on, paths are the container's.
    let who = match &cfg.user {
        Some(u) => Some(crate::user::resolve_in_rootfs(u, Path::new("/"))?),
        None => None,
    };
    let process = exec_process(&target.spec, cfg, who.as_ref())?;
    let mut plan = child_plan(&process, seccomp)?;

    let (stdio, master) = if cfg.tty {
        let p = pty::open(std::io::stdin().as_fd())?;
        (ExecStdio::Pty { slave: p.slave }, Some(p.master))
    } else if cfg.detach {
        (ExecStdio::Null(null.expect("opened for detach")), None)
    } else {
        (ExecStdio::Inherit { null_stdin: null }, None)
    };
    let _raw = master.as_ref().and_then(|_| pty::RawMode::enter_stdin());

    let old_mask =
        signals::block().map_err(|e| Error::io("block signals for", "runbox", e.into()))?;
    let result = (|| {
        plan.sigmask = old_mask;
        let sigfd = signals::signal_fd()
            .map_err(|e| Error::io("create signalfd for", "runbox", e.into()))?;
        let (sync_r, sync_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| Error::io("create sync pipe for", &id, e.into()))?;
        let child = |procs: &[File]| -> i32 {
            match child_setup(&plan, &stdio, procs, cfg.detach) {
                Ok(never) => match never {},
                Err(e) => {
                    let msg = format!("E{} {}\n", e.code, e.message.replace('\n', " "));
                    spawn::write_all(sync_w.as_fd(), msg.as_bytes());
                    i32::from(e.code)
                }
            }
        };
        let fork_err = |e: Errno| Error::io("fork exec process in container", &id, e.into());
        // v2: born in the cgroup (clone3 INTO_CGROUP, a fork-like copy);
        // otherwise (or if clone3 refuses) a process sharing our memory
        // until exec, which spares copying runbox, and it joins by cgroup.procs.
        let into = match cgroup.dir.as_ref().map(|d| d.as_fd()) {
            Some(dir) => match syscall::clone_into_cgroup(CloneFlags::empty(), Some(dir)) {
                Ok(syscall::Forked::Child) => syscall::exit_now(child(&[])),
                Ok(syscall::Forked::Parent { pid, pidfd }) => pidfd.map(|fd| (pid, fd)),
                Err(_) => None,
            },
            None => None,
        };
        let (pid, pidfd) = match into {
            Some(spawned) => spawned,
            None => syscall::spawn_shared(&mut || child(&cgroup.procs)).map_err(fork_err)?,
        };
        drop(sync_w);
        drop(stdio);
        let what = format!("exec in {id}");
        let watch = crate::watch::Watch {
            pid,
            pidfd: &pidfd,
            sigfd: &sigfd,
            master: master.as_ref(),
            interactive: cfg.interactive,
            what: &what,
        };
        let sync = crate::watch::Sync {
            pipe: Some(sync_r),
            bytes: Vec::new(),
        };
        // Detached: return once the command runs (its exec closed the pipe).
        let detach = cfg.detach;
        match watch.wait(sync, None, &mut |_, exited| Ok(detach && !exited)) {
            Ok(ended) => Ok((ended.status, spawn::parse_sync(&ended.sync))),
            Err(e) => {
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, None);
                Err(e)
            }
        }
    })();
    let restored = signals::restore(&old_mask);
    let (status, report) = result?;
    restored.map_err(|e| Error::io("restore signal mask of", "runbox", e.into()))?;
    match (report.error, status) {
        (Some((code, message)), _)
            if code == spawn::EXIT_NOT_FOUND || code == spawn::EXIT_NOT_EXECUTABLE =>
        {
            Ok(Exit::ExecFailed { code, message })
        }
        (Some((_, message)), _) => Err(Error::ContainerSetup { id, message }),
        (None, None) => Ok(Exit::Code(0)),
        (None, Some(WaitStatus::Exited(_, code))) => Ok(Exit::Code(code)),
        (None, Some(WaitStatus::Signaled(_, sig, _))) => Ok(Exit::Signaled(sig as i32)),
        (None, Some(other)) => Err(Error::ContainerSetup {
            id,
            message: format!("unexpected wait status {other:?} of exec process"),
        }),
    }
}

/// How the exec joins the container's cgroup, opened before setns.
#[derive(Default)]
struct JoinCgroup {
    /// v2: the cgroup directory, for clone3's `CLONE_INTO_CGROUP` (~0.1 ms).
    dir: Option<OwnedFd>,
    /// `cgroup.procs` of every hierarchy (v1/hybrid: one per controller), for
    /// the child to write "0" to (a move: 6-15 ms, ../shared/NOTES.md).
    procs: Vec<File>,
}

impl JoinCgroup {
    /// `dirs` as recorded by `run` in state.json (none: no cgroup, nothing to join).
    fn open(dirs: &[PathBuf]) -> Result<JoinCgroup> {
        let mut join = JoinCgroup::default();
        for dir in dirs {
            let p = dir.join("cgroup.procs");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .map_err(|e| Error::io("open", &p, e))?;
            join.procs.push(f);
        }
        if let [dir] = dirs {
            let fd = File::open(dir).map_err(|e| Error::io("open", dir, e))?;
            let v2 = nix::sys::statfs::fstatfs(&fd)
                .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
            if v2 {
                join.dir = Some(fd.into());
            }
        }
        Ok(join)
    }
}

/// Child side, in the container's namespaces: join the cgroup, then set up
/// the process as spawn does for PID 1 (minus mounts, hostname and network).
fn child_setup(
    plan: &ChildPlan,
    stdio: &ExecStdio,
    cgroup_procs: &[File],
    detach: bool,
) -> Result<Never, ChildError> {
    use spawn::fail;
    for mut f in cgroup_procs {
        // "0" is the writer itself: no pid translation across namespaces.
        f.write_all(b"0").map_err(|e| {
            ChildError::runbox(
                "cgroup",
                format_args!("failed to join the container's cgroup: {e}"),
            )
        })?;
    }
    if !detach {
        // An exec dies with its runbox, as a foreground run does.
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
            .map_err(fail("exec", "set parent-death signal"))?;
    }
    match &stdio {
        ExecStdio::Inherit {
            null_stdin: Some(null),
        } => {
            nix::unistd::dup2(null.as_raw_fd(), 0)
                .map_err(fail("stdio", "redirect stdin from /dev/null"))?;
        }
        ExecStdio::Inherit { null_stdin: None } => {}
        ExecStdio::Pty { slave } => spawn::pty_attach(slave.as_fd())?,
        ExecStdio::Null(null) => {
            for fd in 0..=2 {
                nix::unistd::dup2(null.as_raw_fd(), fd)
                    .map_err(fail("stdio", "redirect stdio to /dev/null"))?;
            }
        }
    }
    if !matches!(stdio, ExecStdio::Pty { .. }) {
        // Signals reach the command once, forwarded by runbox.
        nix::unistd::setsid().map_err(fail("exec", "start a new session"))?;
    }
    // The stdio fds are close-on-exec; they are not dropped here, as the
    // memory they live in is shared with runbox (spawn_shared).
    for (res, soft, hard) in &plan.rlimits {
        nix::sys::resource::setrlimit(*res, *soft, *hard)
            .map_err(fail("exec", format_args!("set {res:?}")))?;
    }
    syscall::cloexec_from(3).map_err(fail("exec", "mark inherited descriptors close-on-exec"))?;
    if plan.no_new_privileges {
        nix::sys::prctl::set_no_new_privs().map_err(fail("security", "set no_new_privs"))?;
    } else if let Some((filter, flags)) = &plan.seccomp {
        // Without no_new_privs, loading needs CAP_SYS_ADMIN: before the caps go.
        syscall::seccomp_load(filter.as_sock_filters(), *flags)
            .map_err(fail("seccomp", "load the filter"))?;
    }
    spawn::set_credentials(plan)?;
    if detach {
        // set_credentials re-arms the parent-death signal; a detached exec outlives runbox.
        nix::sys::prctl::set_pdeathsig(None).map_err(fail("exec", "clear parent-death signal"))?;
    }
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
    spawn::exec(plan)
}

#[cfg(test)]
mod tests;
