//! The only place in runbox with `unsafe`: thin wrappers over the system calls
//! that neither `nix` nor `std` expose safely (clone3 with namespace flags,
//! fork, a posix_spawn-like shared-memory spawn that can hand back the
//! child's mount namespace, `_exit`, capset, the capability prctls, seccomp,
//! terminal ioctls, bringing `lo` up, close_range, sigpending, getrandom). Each
//! wrapper returns `nix::Result` so callers attach the operation and path to
//! the error; nothing here decides policy.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::pty::Winsize;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

/// Which side of a fork-like call we are on.
#[derive(Debug)]
pub enum Forked {
    Child,
    Parent { pid: Pid, pidfd: Option<OwnedFd> },
}

// The kernel's `struct clone_args` (v0, 64 bytes + set_tid/cgroup = 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// fork(2)-like clone into new namespaces: the child continues on a copy of
/// the caller's stack, like fork, born in the cgroup2 directory `cgroup`
/// (`CLONE_INTO_CGROUP`) when given: no later move into the cgroup. Returns
/// a pidfd for the child in the parent. Must be called while the process is
/// single-threaded (runbox never starts threads before this), for the same
/// reasons as fork.
pub fn clone_into_cgroup(
    namespaces: CloneFlags,
    cgroup: Option<BorrowedFd<'_>>,
) -> nix::Result<Forked> {
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    let mut pidfd: RawFd = -1;
    let args = CloneArgs {
        flags: namespaces.bits() as u64
            | libc::CLONE_PIDFD as u64
            | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.map_or(0, |fd| fd.as_raw_fd() as u64),
        ..CloneArgs::default()
    };
    // SAFETY: `args` is a valid clone_args of the size passed; stack 0 means
    // the child runs on a copy-on-write copy of our stack, like fork(2), so
    // Rust's memory model holds in both processes (single-threaded caller).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        -1 => Err(Errno::last()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: Pid::from_raw(pid as i32),
            // SAFETY: the kernel stored a fresh pidfd we now own.
            pidfd: (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) }),
        }),
    }
}

/// Plain fork(2), used by `--init` inside the container.
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: the caller (the container's PID 1) is single-threaded.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent {
            pid: child,
            pidfd: None,
        }),
    }
}

/// Leaves the process at once without running exit handlers or destructors
/// (they belong to the parent's copy of the state).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and never returns.
    unsafe { libc::_exit(code) }
}

/// Makes `fd` (a terminal) the controlling terminal of this session.
pub fn set_controlling_tty(fd: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: TIOCSCTTY takes an int argument, no memory is passed.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSCTTY, 0) }).map(drop)
}

/// The window size of terminal `fd`.
pub fn window_size(fd: BorrowedFd<'_>) -> nix::Result<Winsize> {
    let mut ws = Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one struct winsize into `ws`.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok(ws)
}

/// Sets the window size of terminal `fd`.
pub fn set_window_size(fd: BorrowedFd<'_>, ws: &Winsize) -> nix::Result<()> {
    // SAFETY: TIOCSWINSZ reads one struct winsize from `ws`.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, ws) }).map(drop)
}

/// Drops capability `cap` from the bounding set.
pub fn cap_bound_drop(cap: u32) -> nix::Result<()> {
    // SAFETY: prctl with integer arguments only.
    Errno::result(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) })
        .map(drop)
}

/// Clears the ambient set, then raises each capability in `caps`.
pub fn set_ambient(caps: &[u32]) -> nix::Result<()> {
    // SAFETY: prctl with integer arguments only.
    Errno::result(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    for &cap in caps {
        // SAFETY: as above.
        Errno::result(unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                cap as libc::c_ulong,
                0,
                0,
            )
        })?;
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Sets this thread's effective, permitted and inheritable sets (bit N = capability N).
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> nix::Result<()> {
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let lo = |v: u64| v as u32;
    let hi = |v: u64| (v >> 32) as u32;
    let data = [
        CapData {
            effective: lo(effective),
            permitted: lo(permitted),
            inheritable: lo(inheritable),
        },
        CapData {
            effective: hi(effective),
            permitted: hi(permitted),
            inheritable: hi(inheritable),
        },
    ];
    // SAFETY: version 3 capset reads one header and two data structs.
    Errno::result(unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) }).map(drop)
}

/// This thread's permitted set (bit N = capability N).
pub fn capget_permitted() -> nix::Result<u64> {
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 capget writes two data structs into `data`.
    Errno::result(unsafe { libc::syscall(libc::SYS_capget, &header, data.as_mut_ptr()) })?;
    Ok(u64::from(data[0].permitted) | (u64::from(data[1].permitted) << 32))
}

/// Installs a seccomp filter for this thread (and its future children) with
/// `SECCOMP_FILTER_FLAG_*` `flags`. Needs no_new_privs or CAP_SYS_ADMIN.
pub fn seccomp_load(filter: &[libc::sock_filter], flags: u32) -> nix::Result<()> {
    const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
    let len = u16::try_from(filter.len()).map_err(|_| Errno::E2BIG)?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `len` valid instructions that outlive the call;
    // the kernel copies them.
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        )
    })
    .map(drop)
}

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> nix::Result<()> {
    // SAFETY: socket() has no memory arguments; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    Errno::result(raw)?;
    // SAFETY: `raw` is a fresh descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero ifreq is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes ifru_flags of `req`.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    // SAFETY: the union field was just written by the kernel as flags.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the name and flags from `req`.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) }).map(drop)
}

/// Marks every descriptor from `first` up close-on-exec, so nothing the
/// caller of runbox leaked reaches the container.
pub fn cloexec_from(first: u32) -> nix::Result<()> {
    // SAFETY: close_range with integer arguments only.
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })
    .map(drop)
}

/// The signals pending for this thread or process (blocked ones included).
pub fn pending_signals() -> nix::Result<nix::sys::signal::SigSet> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending fills the sigset_t it is given.
    Errno::result(unsafe { libc::sigpending(set.as_mut_ptr()) })?;
    // SAFETY: initialized by the successful call above.
    Ok(unsafe { nix::sys::signal::SigSet::from_sigset_t_unchecked(set.assume_init()) })
}

/// For a helper that outlives runbox: a session of its own (no terminal,
/// out of runbox's process group) and /dev/null as stdin, stdout and
/// stderr, so that whoever reads runbox's output sees EOF when runbox exits.
pub fn leave_terminal() {
    let _ = nix::unistd::setsid();
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..=2 {
            let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
        }
    }
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
pub fn dup_above(fd: RawFd, min: RawFd) -> Option<OwnedFd> {
    let new = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(min)).ok()?;
    // SAFETY: F_DUPFD_CLOEXEC returned a fresh descriptor that we now own.
    Some(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Closes every descriptor from `first` up except those in `keep`.
pub fn close_all_from_except(first: u32, keep: &[RawFd]) -> nix::Result<()> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .filter(|&fd| fd >= first)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = first;
    let close = |lo: u32, hi: u32| {
        // SAFETY: close_range with integer arguments only.
        Errno::result(unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) }).map(drop)
    };
    for fd in keep {
        if fd > from {
            close(from, fd - 1)?;
        }
        from = fd + 1;
    }
    close(from, u32::MAX)
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached copy of the mount tree at `path` (a bind mount not yet
/// attached anywhere), optionally read-only. Taken before pivot_root so host
/// paths can be attached inside the container afterwards.
pub fn open_tree_clone(
    path: &std::ffi::CStr,
    recursive: bool,
    readonly: bool,
) -> nix::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: `path` is a valid NUL-terminated string for the call's duration.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let fd = Errno::result(fd)? as RawFd;
    // SAFETY: the kernel returned a fresh descriptor we now own.
    let tree = unsafe { OwnedFd::from_raw_fd(fd) };
    if readonly {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        let empty = c"";
        let at_flags =
            libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
        // SAFETY: `attr` is a valid mount_attr of the size passed; `empty` is NUL-terminated.
        Errno::result(unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                empty.as_ptr(),
                at_flags,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        })?;
    }
    Ok(tree)
}

/// Attaches a detached tree from [`open_tree_clone`] at `dest`.
pub fn move_mount_to(tree: BorrowedFd<'_>, dest: &std::ffi::CStr) -> nix::Result<()> {
    let empty = c"";
    // SAFETY: both paths are valid NUL-terminated strings for the call's duration.
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dest.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Resets every catchable signal (1..=64, real-time ones included) to its
/// default action. Dispositions set to "ignore" survive execve: without this
/// the container would inherit Rust's ignored SIGPIPE and, when runbox was
/// started in the background by a shell, ignored SIGINT/SIGQUIT (so
/// `trap ... INT` would not work). Raw rt_sigaction: glibc refuses the
/// signals it reserves (32, 33).
pub fn reset_signal_dispositions() {
    // The kernel's struct sigaction on x86_64.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let dfl = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `dfl` is a valid kernel sigaction of the size the kernel
        // expects for an 8-byte mask; SIG_DFL runs no code of ours.
        let _ = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &dfl as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            )
        };
    }
}

/// A pidfd for process `pid` (pidfd_open(2)); it keeps naming that process
/// even if the pid is reused later.
pub fn pidfd_open(pid: Pid) -> nix::Result<OwnedFd> {
    // SAFETY: integer arguments only; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    let fd = Errno::result(fd)? as RawFd;
    // SAFETY: the kernel returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process of `pidfd` (pidfd_send_signal(2)).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: i32) -> nix::Result<()> {
    // SAFETY: a null siginfo means "as kill(2) would"; other arguments are integers.
    Errno::result(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

/// Runs `child` in a new process that shares this one's memory until it
/// execs (`CLONE_VM | CLONE_VFORK`, as posix_spawn does), on a stack of its
/// own: nothing is copied, and the caller sleeps until the child has exec'd
/// or exited. Returns the child's pid and a pidfd for it.
///
/// `child` must end in execve or [`exit_now`] (its return value becomes the
/// exit code). Because memory is shared, it must not drop or move anything
/// the caller owns, and it runs in the caller's thread context: the caller
/// must be single-threaded with the signals it cares about blocked.
pub fn spawn_shared(child: &mut dyn FnMut() -> i32) -> nix::Result<(Pid, OwnedFd)> {
    let (pid, pidfd, _) = spawn_shared_into(CloneFlags::empty(), child)?;
    Ok((pid, pidfd))
}

/// [`spawn_shared`] into new `namespaces`. With a new mount namespace, the
/// child first opens it in the descriptor table it still shares with the
/// caller (`CLONE_FILES`), then takes a private copy of the table before
/// running `child`: the caller gets that namespace back (the third value),
/// so it can keep the container's mounts alive after its exit.
pub fn spawn_shared_into(
    namespaces: CloneFlags,
    child: &mut dyn FnMut() -> i32,
) -> nix::Result<(Pid, OwnedFd, Option<OwnedFd>)> {
    struct Arg<'a> {
        child: &'a mut dyn FnMut() -> i32,
        share_ns: bool,
        mntns: RawFd,
    }
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `Arg` passed below, alive because the parent
        // is suspended until the child execs or exits.
        let arg = unsafe { &mut *(arg as *mut Arg<'_>) };
        if arg.share_ns {
            // SAFETY: open with a NUL-terminated literal path.
            arg.mntns = unsafe {
                libc::open(
                    c"/proc/self/ns/mnt".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            };
            // SAFETY: unshare with a flag argument only.
            if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
                // The caller's table must not change under it: give up.
                exit_now(crate::spawn::EXIT_RUNBOX as i32);
            }
        }
        exit_now((arg.child)())
    }
    let stack = SharedStack::new()?;
    let mut pidfd: libc::c_int = -1;
    let share_ns = namespaces.contains(CloneFlags::CLONE_NEWNS);
    let mut arg = Arg {
        child,
        share_ns,
        mntns: -1,
    };
    let files = if share_ns { libc::CLONE_FILES } else { 0 };
    // SAFETY: the stack is ours and outlives the child's use of it (CLONE_VFORK
    // returns only after the child exec'd or exited); its top is 16-aligned.
    // CLONE_PIDFD stores the pidfd through the parent_tid argument.
    let ret = unsafe {
        libc::clone(
            trampoline,
            stack.top(),
            namespaces.bits()
                | files
                | libc::CLONE_VM
                | libc::CLONE_VFORK
                | libc::CLONE_PIDFD
                | libc::SIGCHLD,
            &mut arg as *mut Arg<'_> as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        )
    };
    let pid = Errno::result(ret);
    drop(stack);
    let pid = pid?;
    // SAFETY: the kernel stored a fresh pidfd we now own, and the child
    // opened `mntns` (if >= 0) in our shared table, for us.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mntns = (arg.mntns >= 0).then(|| unsafe { OwnedFd::from_raw_fd(arg.mntns) });
    Ok((Pid::from_raw(pid), pidfd, mntns))
}

/// The stack of a [`spawn_shared`] child: 1 MiB with a guard page below,
/// so an overflow faults instead of writing over runbox's memory.
struct SharedStack {
    base: std::ptr::NonNull<libc::c_void>,
    len: usize,
}

impl SharedStack {
    const LEN: usize = 1024 * 1024;
    const GUARD: usize = 4096;

    fn new() -> nix::Result<SharedStack> {
        use nix::sys::mman::{mmap_anonymous, mprotect, MapFlags, ProtFlags};
        let len = std::num::NonZeroUsize::new(Self::LEN + Self::GUARD).expect("non-zero");
        // SAFETY: a fresh private anonymous mapping, no existing memory involved.
        let base = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_STACK,
            )
        }?;
        // Owned (unmapped on drop) before anything else can fail.
        let stack = SharedStack {
            base,
            len: len.get(),
        };
        // SAFETY: the lowest page of the mapping made above.
        unsafe { mprotect(stack.base, Self::GUARD, ProtFlags::PROT_NONE) }?;
        Ok(stack)
    }

    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, 16-aligned (page-aligned length).
        unsafe { self.base.as_ptr().byte_add(self.len) }
    }
}

impl Drop for SharedStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child exec'd or exited).
        let _ = unsafe { nix::sys::mman::munmap(self.base, self.len) };
    }
}

/// Restores the default SIGPIPE action (Rust ignores it), so that a command
/// whose output pipe closes (`runbox images | head -1`) ends quietly, as
/// `cat` does, instead of panicking in `println!`.
pub fn default_sigpipe() {
    // SAFETY: installs SIG_DFL, no handler code runs; called at startup
    // before any thread exists.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
}

/// Fills `buf` from the kernel's random pool (getrandom(2)), blocking only
/// until the pool is initialized at boot. Cheaper at startup than a seeded
/// userspace generator, which a `runbox run` would build for one id.
pub fn random_bytes(buf: &mut [u8]) -> nix::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match Errno::result(n) {
            Ok(n) => filled += n as usize,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
