//! Runs one container to completion: the orchestration of a `runbox run`.
//!
//! ```text
//! reap debris of killed runs -> state dir (locked) + /etc files -> [cgroup]
//! -> writable layer (a spare, see `layers`)
//! -> [pty, raw mode] -> spawn::spawn_container (runbox sleeps until the
//!    child has exec'd, see spawn; the child hands over its mount namespace)
//! -> fork the deleter (holding that namespace), write config.json and
//!    state.json while the command runs
//! -> poll loop: sync pipe (mount time, setup error), pidfd (exit), signalfd
//!    (forward, or resize the pty), pty master <-> stdio, --timeout deadline
//! -> wait -> remove state dir, layer to the trash, let the deleter go
//!    (unless --keep)
//! ```
//!
//! The overlay is mounted inside the container's mount namespace, so it
//! disappears with the namespace: nothing is ever left mounted on the host.
//! The deleter holds that namespace until runbox is done, so the unmounting
//! happens in the deleter, after runbox has exited, not in the container's
//! exit that runbox waits for.
//! Cleanup runs on every path out (a guard), and a cleanup error never hides
//! the run's own error.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use oci_spec::runtime::{PosixRlimitType, Spec};

use crate::error::{Error, Result};
use crate::layers;
use crate::rootfs::{self, HostFiles, RootfsMode};
use crate::spawn::{self, CapSets, ChildPlan, Stdio};
use crate::state::{self, ContainerState, StateDir, Status};
use crate::{namespaces, pty, signals, watch};

/// What `run` needs besides the Spec.
#[derive(Debug, Clone)]
pub struct ContainerConfig {
    pub id: String,
    /// Image reference or rootfs path, recorded in state.json.
    pub image: String,
    /// The image's plain directory: the overlay's lower layer.
    pub image_dir: PathBuf,
    /// Where writable layers live (`Store::containers_dir()`).
    pub containers_dir: PathBuf,
    /// The state root (`--state`).
    pub state_root: PathBuf,
    /// (container path, content): /etc/hosts, /etc/hostname, /etc/resolv.conf.
    pub etc_files: Vec<(PathBuf, String)>,
    /// Where compiled seccomp programs are cached.
    pub seccomp_cache: PathBuf,
    pub tty: bool,
    pub interactive: bool,
    pub init: bool,
    pub timeout: Option<Duration>,
    /// Keep the stopped container's state and writable layer.
    pub keep: bool,
    /// Name, resource limits, detached logging and readiness report.
    pub lifecycle: crate::lifecycle::RunExtras,
    /// The image pin's descriptor (a shared flock on the image): a deleter
    /// holds a copy until the container's overlay on the image is gone.
    pub image_pin: Option<std::os::fd::RawFd>,
}

/// How the container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// PID 1 exited with this code.
    Code(i32),
    /// PID 1 was killed by this signal.
    Signaled(i32),
    /// `--timeout` expired and the container was killed.
    TimedOut,
    /// The command could not be executed (126) or found (127).
    ExecFailed { code: u8, message: String },
}

impl Exit {
    /// The exit code of `runbox run`, as docker computes it.
    pub fn code(&self) -> u8 {
        match self {
            Exit::Code(c) => (*c & 0xff) as u8,
            Exit::Signaled(s) => (128 + *s).clamp(0, 255) as u8,
            Exit::TimedOut => 124,
            Exit::ExecFailed { code, .. } => *code,
        }
    }
}

/// Phase durations of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Mounts inside the child (overlay to pivot_root and masks).
    pub mount: Duration,
    /// Preparing, cloning and setting up the child, minus `mount`, until exec.
    pub spawn: Duration,
    /// From exec to exit.
    pub run: Duration,
    /// Removing state and the writable layer.
    pub cleanup: Duration,
}

#[derive(Debug)]
pub struct RunReport {
    pub exit: Exit,
    /// PID 1 was killed for exceeding the memory limit.
    pub oom_killed: bool,
    pub timings: Timings,
}

/// Removes the state dir and the writable layer when dropped (all exits).
struct Cleanup<'a> {
    cfg: &'a ContainerConfig,
    state: Option<StateDir>,
    layer: bool,
    /// Removed even when kept: nothing runs in it once PID 1 is gone.
    cgroup: Option<crate::cgroups::Cgroup>,
    /// Forked at the start; let go (dropped) once the layer is in the trash.
    deleter: Option<layers::Deleter>,
}

impl Cleanup<'_> {
    fn finish(&mut self) -> Result<()> {
        let mut first = Ok(());
        if let Some(cgroup) = self.cgroup.take() {
            first = cgroup.remove();
        }
        // The layer first: a layer without a state dir would be found by
        // nothing if runbox died in between.
        if self.layer && !self.cfg.keep {
            self.layer = false;
            let (dir, id) = (&self.cfg.containers_dir, &self.cfg.id);
            // The deleter deletes the trash once let go (below).
            first = first.and(if self.deleter.is_some() {
                layers::move_to_trash(dir, id).map(drop)
            } else {
                layers::discard_layer_in_background(dir, id)
            });
        }
        if let Some(dir) = self.state.take() {
            if !self.cfg.keep {
                // With a deleter to finish the job, one rename here.
                first = first.and(if self.deleter.is_some() {
                    dir.discard()
                } else {
                    dir.remove()
                });
            }
        }
        // Let it go even when the layer could not be moved: it still
        // releases the mount namespace.
        self.deleter = None;
        first
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // Errors here would hide the run's own error; finish() reports them on the happy path.
        let _ = self.finish();
    }
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

pub(crate) fn rlimit(t: PosixRlimitType) -> Option<nix::sys::resource::Resource> {
    use nix::sys::resource::Resource as R;
    Some(match t {
        PosixRlimitType::RlimitAs => R::RLIMIT_AS,
        PosixRlimitType::RlimitCore => R::RLIMIT_CORE,
        PosixRlimitType::RlimitCpu => R::RLIMIT_CPU,
        PosixRlimitType::RlimitData => R::RLIMIT_DATA,
        PosixRlimitType::RlimitFsize => R::RLIMIT_FSIZE,
        PosixRlimitType::RlimitLocks => R::RLIMIT_LOCKS,
        PosixRlimitType::RlimitMemlock => R::RLIMIT_MEMLOCK,
        PosixRlimitType::RlimitNofile => R::RLIMIT_NOFILE,
        PosixRlimitType::RlimitNproc => R::RLIMIT_NPROC,
        PosixRlimitType::RlimitRss => R::RLIMIT_RSS,
        PosixRlimitType::RlimitSigpending => R::RLIMIT_SIGPENDING,
        PosixRlimitType::RlimitStack => R::RLIMIT_STACK,
        _ => return None,
    })
}

/// The child's plan from the spec (everything but mounts, stdio and mask).
fn child_plan(
    spec: &Spec,
    mounts: rootfs::MountPlan,
    flags: CloneFlags,
    cfg: &ContainerConfig,
) -> Result<ChildPlan> {
    let process = spec.process().as_ref().ok_or(Error::NoCommand)?;
    let args = process.args().as_deref().unwrap_or(&[]);
    if args.is_empty() {
        return Err(Error::NoCommand);
    }
    let env = process.env().as_deref().unwrap_or(&[]);
    let path_var = env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .map(str::to_string);
    let caps = process.capabilities().as_ref().map(CapSets::from_spec);
    let rlimits = process
        .rlimits()
        .iter()
        .flatten()
        .filter_map(|r| rlimit(r.typ()).map(|res| (res, r.soft(), r.hard())))
        .collect();
    let user = process.user();
    let seccomp = match spec.linux().as_ref().and_then(|l| l.seccomp().as_ref()) {
        Some(profile) => Some((
            crate::seccomp::cached_program(profile, &cfg.seccomp_cache)?,
            crate::seccomp::filter_flags(profile),
        )),
        None => None,
    };
    Ok(ChildPlan {
        mounts,
        hostname: spec
            .hostname()
            .clone()
            .filter(|_| flags.contains(CloneFlags::CLONE_NEWUTS)),
        loopback: flags.contains(CloneFlags::CLONE_NEWNET),
        args: cstrings("command", args.iter().map(String::as_str))?,
        env: cstrings("env", env.iter().map(String::as_str))?,
        path_var,
        cwd: process.cwd().clone(),
        uid: user.uid(),
        gid: user.gid(),
        additional_gids: user.additional_gids().clone().unwrap_or_default(),
        caps,
        no_new_privileges: process.no_new_privileges().unwrap_or(false),
        seccomp,
        rlimits,
        umask: user.umask(),
        init: cfg.init,
        sigmask: nix::sys::signal::SigSet::empty(),
        cgroup_wait: None,
        exec_reached: Default::default(),
    })
}

/// Writes the /etc files that can live in the writable layer there (see
/// `layers::provide_etc`); returns their names. None with a read-only root,
/// or when the spec mounts something at /etc (it would hide them).
fn etc_files_in_layer<'a>(
    spec: &Spec,
    cfg: &'a ContainerConfig,
    mode: &RootfsMode,
) -> Result<Vec<&'a str>> {
    let files: Vec<(&str, &[u8])> = cfg
        .etc_files
        .iter()
        .filter(|(dst, _)| dst.parent() == Some(Path::new("/etc")))
        .filter_map(|(dst, content)| Some((dst.file_name()?.to_str()?, content.as_bytes())))
        .collect();
    let etc_mounted = spec
        .mounts()
        .iter()
        .flatten()
        .any(|m| rootfs::clean_container_path(m.destination()) == Path::new("/etc"));
    match mode {
        RootfsMode::Overlay { lower, upper, .. } if !etc_mounted => {
            layers::provide_etc(upper, lower, &files)
        }
        RootfsMode::Overlay { lower, upper, .. } => {
            // Clear a spare's ready-made files.
            layers::provide_etc(upper, lower, &[])
        }
        RootfsMode::Bind { .. } => Ok(Vec::new()),
    }
}

/// Runs `spec` as container `cfg.id` until its PID 1 exits.
///
/// Call it from a single-threaded process (the `runbox` binary is): the
/// container process is made with a raw clone (see `spawn`), which, unlike
/// glibc's fork, does not reset locks another thread may hold (malloc,
/// stdio). Real containers are therefore tested through the binary
/// (tests/it/run.rs).
///
/// The forwarded signals are blocked from the first step to the last: a ^C
/// (SIGINT, SIGTERM, SIGHUP, SIGQUIT) before the container exists ends the
/// run through the cleanup guard (exit 128+N, nothing left behind); once it
/// exists, the signal is forwarded to it.
pub fn run(spec: &Spec, cfg: &ContainerConfig) -> Result<RunReport> {
    let t0 = Instant::now();
    let flags = namespaces::clone_flags(spec)?;
    let old_mask =
        signals::block().map_err(|e| Error::io("block signals for", "runbox", e.into()))?;
    let result = run_blocked(spec, cfg, flags, t0, old_mask);
    let restored = signals::restore(&old_mask);
    let report = result?;
    restored.map_err(|e| Error::io("restore signal mask of", "runbox", e.into()))?;
    Ok(report)
}

/// A pending signal that ends runbox by default, if any. Looked at, not
/// taken: the others (SIGWINCH, SIGUSR1...) stay for the wait loop.
fn pending_termination() -> Option<Signal> {
    let pending = crate::syscall::pending_signals().ok()?;
    [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ]
    .into_iter()
    .find(|s| pending.contains(*s))
}

fn run_blocked(
    spec: &Spec,
    cfg: &ContainerConfig,
    flags: CloneFlags,
    t0: Instant,
    old_mask: nix::sys::signal::SigSet,
) -> Result<RunReport> {
    let sigfd =
        signals::signal_fd().map_err(|e| Error::io("create signalfd for", "runbox", e.into()))?;
    state::reap_stale(&cfg.state_root, &cfg.containers_dir);
    // A run that is not kept empties the trash at its end (its deleter, or
    // `Cleanup`): only a kept one looks now, an extra process otherwise
    // forked while the previous run's deleter is still at it.
    if cfg.keep {
        layers::empty_trash_if_any(&cfg.containers_dir);
    }
    let mut cleanup = Cleanup {
        cfg,
        state: None,
        layer: false,
        cgroup: None,
        deleter: None,
    };
    // In the guard at once: an error below must not leave the dir behind.
    cleanup.state = Some(StateDir::create(&cfg.state_root, &cfg.id)?);
    let dir = cleanup.state.as_ref().expect("just set");
    if cfg.lifecycle.log_to_file {
        crate::lifecycle::redirect_output_to_log(dir.path())?;
    }
    cleanup.cgroup = crate::lifecycle::create_cgroup(&cfg.id, &cfg.lifecycle.limits)?;

    let layer = cfg.containers_dir.join(&cfg.id);
    let target = layer.join("merged");
    let readonly = spec
        .root()
        .as_ref()
        .and_then(|r| r.readonly())
        .unwrap_or(false);
    let mode = if readonly {
        RootfsMode::Bind {
            dir: cfg.image_dir.clone(),
        }
    } else {
        RootfsMode::Overlay {
            lower: cfg.image_dir.clone(),
            upper: layer.join("upper"),
            work: layer.join("work"),
        }
    };
    cleanup.layer = true;
    // A spare saves the mkdirs (create_dir_all then only checks) and
    // brings the /etc files, see `layers`.
    layers::take_spare_layer(&cfg.containers_dir, &cfg.id);
    let mut mk = vec![target.clone()];
    if let RootfsMode::Overlay { upper, work, .. } = &mode {
        mk.extend([upper.clone(), work.clone()]);
    }
    for d in &mk {
        std::fs::create_dir_all(d).map_err(|e| Error::io("create", d, e))?;
    }
    let mut host = HostFiles::default();
    let in_layer = etc_files_in_layer(spec, cfg, &mode)?;
    for (dst, content) in &cfg.etc_files {
        let name = dst
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if dst.parent() == Some(Path::new("/etc")) && in_layer.contains(&name.as_str()) {
            continue;
        }
        let src = dir.write_file(&format!("etc-{name}"), content.as_bytes())?;
        host.etc.push((dst.clone(), src));
    }

    let pty = if cfg.tty {
        Some(pty::open(std::io::stdin().as_fd())?)
    } else {
        None
    };
    host.console = pty.as_ref().map(|p| p.slave_path.clone());
    let mounts = rootfs::plan(spec, mode, target, &host)?;
    let mut plan = child_plan(spec, mounts, flags, cfg)?;
    plan.sigmask = old_mask;

    let (stdio, master) = match pty {
        Some(p) => (Stdio::Pty { slave: p.slave }, Some(p.master)),
        None => {
            let null_stdin = if cfg.interactive {
                None
            } else {
                let f = std::fs::File::open("/dev/null")
                    .map_err(|e| Error::io("open", "/dev/null", e))?;
                Some(OwnedFd::from(f))
            };
            (Stdio::Inherit { null_stdin }, None)
        }
    };
    let _raw = if master.is_some() {
        pty::RawMode::enter_stdin()
    } else {
        None
    };

    let (sync_r, sync_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| Error::io("create sync pipe for", &cfg.id, e.into()))?;
    let cgroup = cleanup.cgroup.as_ref();
    let into_fd = cgroup.and_then(|c| c.clone_into_fd());
    let cgroup_go = match cgroup {
        Some(_) if into_fd.is_none() => {
            let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
                .map_err(|e| Error::io("create cgroup pipe for", &cfg.id, e.into()))?;
            plan.cgroup_wait = Some(r);
            Some(w)
        }
        _ => None,
    };
    // The last moment to give up without a container to kill.
    if let Some(sig) = pending_termination() {
        return Ok(RunReport {
            exit: Exit::Signaled(sig as i32),
            oom_killed: false,
            timings: Timings::default(),
        });
    }
    // Host paths bound into the container (volumes, the console) must be
    // let go when runbox exits: held in the container's namespace, their
    // filesystems would stay alive (a USB stick not yet released after its
    // umount). The deleter then does not hold the namespace.
    let host_binds = plan
        .mounts
        .steps
        .iter()
        .any(|s| matches!(s, rootfs::Step::Bind { .. }));
    let spawned_at = Instant::now();
    let spawned = spawn::spawn_container(flags, plan, stdio, sync_w, into_fd)
        .map_err(|e| Error::io("clone container process", &cfg.image_dir, e.into()))?;
    let pid = spawned.pid;
    // With host binds nobody holds the namespace: closed now, so that no
    // fork (the deleter, before it closes what it inherited) keeps it.
    let mntns = spawned.mntns.filter(|_| !host_binds);
    let waited = (|| {
        let pidfd = spawned
            .pidfd
            .ok_or_else(|| Error::io("get pidfd of", &cfg.id, std::io::Error::other("none")))?;
        if let (Some(cg), Some(go)) = (cgroup, cgroup_go) {
            cg.add_process(pid)?;
            let _ = nix::unistd::write(&go, b"g");
        }
        // A settled child has exec'd or failed: all it had to say is there.
        let (sync, sync_bytes, exec_at) = if spawned.settled {
            let mut bytes = Vec::new();
            watch::read_to_eof(&sync_r, &mut bytes);
            if !spawned.exec_reached && spawn::parse_sync(&bytes).error.is_none() {
                // Died before reaching its exec without a word (a signal).
                bytes.extend_from_slice(
                    format!(
                        "E{} spawn: the container process died during setup\n",
                        spawn::EXIT_RUNBOX
                    )
                    .as_bytes(),
                );
            }
            (None, bytes, Some(Instant::now()))
        } else {
            (Some(sync_r), Vec::new(), None)
        };
        let execed = exec_at.is_some() && spawn::parse_sync(&sync_bytes).error.is_none();
        let st = ContainerState {
            id: cfg.id.clone(),
            pid: pid.as_raw(),
            pid_start_time: state::pid_start_time(pid.as_raw()).unwrap_or(0),
            image: cfg.image.clone(),
            rootfs: cfg.image_dir.clone(),
            created: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            // `running` once the command was executed (see the wait below):
            // before that its mounts and masks are not all in place.
            status: if execed {
                Status::Running
            } else {
                Status::Created
            },
            ..crate::lifecycle::state_fields(spec, cfg, dir.path(), cgroup)
        };
        // What `runbox exec` needs to enter the container the same way,
        // then the state that makes it visible.
        let write_state = || -> Result<()> {
            let config = serde_json::to_vec(spec)
                .map_err(|e| Error::io("encode", "config.json", e.into()))?;
            dir.write_file(crate::exec::CONFIG_JSON, &config)?;
            dir.save(&st)
        };
        // The deleter holds the child's mount namespace, so the container's
        // exit does not unmount (the deleter does, later), and the image
        // pin until then. Once the command runs, its state is final: the
        // deleter writes it, beside runbox, while the command runs (unless
        // `run -d` waits to report it).
        let mut written = false;
        if !cfg.keep {
            let mut hold = Vec::new();
            if !host_binds {
                hold.extend(mntns.or_else(|| {
                    std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
                        .ok()
                        .map(OwnedFd::from)
                }));
            }
            hold.extend(
                cfg.image_pin
                    .and_then(|fd| crate::syscall::dup_above(fd, 3)),
            );
            let background = execed && cfg.lifecycle.ready.is_none();
            let mut first = || match write_state() {
                // The run ended first: its state dir went to the trash.
                Err(_) if !dir.path().exists() => Ok(()),
                r => r.map_err(|e| format!("container {}: {e}", &cfg.id[..12])),
            };
            cleanup.deleter = layers::Deleter::spawn(
                &cfg.containers_dir,
                layers::DeleterPlan {
                    hold,
                    first: background.then_some(
                        &mut first as &mut dyn FnMut() -> std::result::Result<(), String>,
                    ),
                    victim: Some(pidfd.as_fd()),
                    state_root: Some(&cfg.state_root),
                    id: Some(&cfg.id),
                },
            );
            written = background && cleanup.deleter.is_some();
        }
        if !written {
            write_state()?;
        }
        if execed {
            cfg.lifecycle.report_running();
        }
        let mut exec_at = exec_at;
        let mut state = (!execed).then_some((dir, st));
        let watch = watch::Watch {
            pid,
            pidfd: &pidfd,
            sigfd: &sigfd,
            master: master.as_ref(),
            interactive: cfg.interactive,
            what: &cfg.id,
        };
        let sync = watch::Sync {
            pipe: sync,
            bytes: sync_bytes,
        };
        let deadline = cfg.timeout.map(|t| spawned_at + t);
        let ended = watch.wait(sync, deadline, &mut |said, _| {
            exec_at = Some(Instant::now());
            if spawn::parse_sync(said).error.is_none() {
                if let Some((dir, st)) = state.take() {
                    mark_running(dir, st)?;
                }
                cfg.lifecycle.report_running();
            }
            Ok(false)
        })?;
        Ok((ended, exec_at))
    })();
    let (ended, exec_at) = match waited {
        Ok(waited) => waited,
        Err(e) => {
            // Never leave a container behind an error: kill and reap it.
            let _ = kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, None);
            return Err(e);
        }
    };
    let report = spawn::parse_sync(&ended.sync);
    let status = match (ended.timed_out, ended.status) {
        (true, _) => Waited::TimedOut,
        (false, Some(status)) => Waited::Status(status),
        (false, None) => unreachable!("the run's wait only ends with the process"),
    };

    let exited = Instant::now();
    let mount = Duration::from_micros(report.mount_us.unwrap_or(0));
    let exec_at = exec_at.unwrap_or(exited);
    let exit = match (report.error, status) {
        (Some((code, message)), _)
            if code == spawn::EXIT_NOT_FOUND || code == spawn::EXIT_NOT_EXECUTABLE =>
        {
            Exit::ExecFailed { code, message }
        }
        (Some((_, message)), _) => {
            return Err(Error::ContainerSetup {
                id: cfg.id.clone(),
                message,
            })
        }
        (None, Waited::TimedOut) => Exit::TimedOut,
        (None, Waited::Status(WaitStatus::Signaled(_, sig, _))) => Exit::Signaled(sig as i32),
        (None, Waited::Status(WaitStatus::Exited(_, code))) => Exit::Code(code),
        (None, Waited::Status(other)) => {
            return Err(Error::ContainerSetup {
                id: cfg.id.clone(),
                message: format!("unexpected wait status {other:?} of {pid}"),
            })
        }
    };
    let oom_killed = cleanup
        .cgroup
        .as_ref()
        .is_some_and(|cg| crate::lifecycle::oom_explains(cg, &exit));
    if cfg.keep {
        if let Some(dir) = &cleanup.state {
            if let Ok(mut st) = state::load(dir.path()) {
                st.status = Status::Stopped;
                st.exit_code = Some(exit.code() as i32);
                st.finished =
                    Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
                st.oom_killed = oom_killed;
                dir.mark_stopped(&st)?;
            }
        }
    }
    // The command ran: its exit code is the answer. What cleanup could not
    // remove is reaped by the next runbox command.
    if let Err(e) = cleanup.finish() {
        eprintln!(
            "runbox: warning: cleanup of container {}: {e}",
            &cfg.id[..12]
        );
    }
    let spawn = exec_at.saturating_duration_since(t0).saturating_sub(mount);
    Ok(RunReport {
        exit,
        oom_killed,
        timings: Timings {
            mount,
            spawn,
            run: exited.saturating_duration_since(exec_at),
            cleanup: exited.elapsed(),
        },
    })
}

/// The command was executed: exec, stop and kill may now reach it. The
/// state saved at the clone is at hand: no need to read it back.
fn mark_running(dir: &StateDir, mut st: ContainerState) -> Result<()> {
    st.status = Status::Running;
    dir.save(&st)
}

enum Waited {
    Status(WaitStatus),
    TimedOut,
}

/// A fresh random container id (64 hex digits, like docker's).
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    if crate::syscall::random_bytes(&mut bytes).is_err() {
        // A kernel without getrandom(2).
        use rand::RngCore;
        rand::thread_rng().fill_bytes(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The image dir of a `--rootfs` run must exist and be a directory.
pub fn check_rootfs_dir(dir: &Path) -> Result<PathBuf> {
    let abs = std::fs::canonicalize(dir).map_err(|e| Error::io("resolve rootfs", dir, e))?;
    if !abs.is_dir() {
        return Err(Error::io(
            "use rootfs",
            dir,
            std::io::Error::from(std::io::ErrorKind::NotADirectory),
        ));
    }
    Ok(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_docker() {
        assert_eq!(Exit::Code(3).code(), 3);
        assert_eq!(Exit::Code(256 + 4).code(), 4);
        assert_eq!(Exit::Signaled(9).code(), 137);
        assert_eq!(Exit::TimedOut.code(), 124);
        assert_eq!(
            Exit::ExecFailed {
                code: 127,
                message: String::new()
            }
            .code(),
            127
        );
    }

    #[test]
    fn ids_are_64_hex_digits_and_distinct() {
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
