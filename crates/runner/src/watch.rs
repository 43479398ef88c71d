//! The one event loop runbox waits in while a process of a container runs
//! (`run`'s PID 1 and `exec`'s command alike): the pidfd (exit), the
//! signalfd (forward to the process, or resize the pty), the sync pipe
//! (what the child reports before its exec; EOF at the exec), the pty master
//! and stdin (`-t`), and an optional deadline (`--timeout`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::{pty, signals};

/// What the child wrote on the sync pipe is capped at this (a few short lines).
const MAX_SYNC: usize = 64 * 1024;

/// A process and the descriptors it is watched through.
pub(crate) struct Watch<'a> {
    pub pid: Pid,
    pub pidfd: &'a OwnedFd,
    pub sigfd: &'a SignalFd,
    /// The pty master (`-t`): its output goes to stdout.
    pub master: Option<&'a OwnedFd>,
    /// Copy stdin to the pty master (`-i -t`).
    pub interactive: bool,
    /// Names the process in errors ("wait for <what>").
    pub what: &'a str,
}

/// The sync pipe as the loop takes it over: still open, or already read to
/// the end (what the child wrote).
pub(crate) struct Sync {
    pub pipe: Option<OwnedFd>,
    pub bytes: Vec<u8>,
}

/// How the wait ended.
pub(crate) struct Ended {
    /// `None` when `on_exec` asked to stop waiting.
    pub status: Option<WaitStatus>,
    /// The deadline passed and the process was killed.
    pub timed_out: bool,
    /// Everything the child wrote on the sync pipe.
    pub sync: Vec<u8>,
}

impl Watch<'_> {
    /// Polls until the process exits. At EOF on the sync pipe (the child's
    /// exec, or its death), `on_exec(what it wrote, exited already)` runs;
    /// `Ok(true)` from it ends the wait at once, without a status. At
    /// `deadline` the process is killed (SIGKILL: for a PID 1 its whole
    /// pid namespace) and waited for.
    pub fn wait(
        &self,
        sync: Sync,
        deadline: Option<Instant>,
        on_exec: &mut dyn FnMut(&[u8], bool) -> Result<bool>,
    ) -> Result<Ended> {
        let Sync {
            pipe: mut sync,
            bytes: mut sync_bytes,
        } = sync;
        let mut timed_out = false;
        let mut stdin_open = self.interactive && self.master.is_some();
        let mut master_open = self.master.is_some();
        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let timeout = match deadline {
                Some(d) if !timed_out => {
                    let left = d.saturating_duration_since(Instant::now());
                    PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32 + 1)
                        .unwrap_or(PollTimeout::MAX)
                }
                _ => PollTimeout::NONE,
            };
            let mut fds = vec![
                PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN),
            ];
            let sync_idx = add(&mut fds, sync.as_ref().map(|s| s.as_fd()));
            let master_idx = add(
                &mut fds,
                self.master.filter(|_| master_open).map(|m| m.as_fd()),
            );
            let stdin_idx = add(&mut fds, stdin_open.then(|| stdin.as_fd()));
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Error::io("poll for", self.what, e.into())),
            }
            let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
            let exited = ready(0);
            let sig_ready = ready(1);
            let sync_ready = sync_idx.is_some_and(ready);
            let master_ready = master_idx.is_some_and(ready);
            let stdin_ready = stdin_idx.is_some_and(ready);
            drop(fds);

            if sync_ready {
                if let Some(s) = &sync {
                    match nix::unistd::read(s.as_raw_fd(), &mut buf) {
                        Ok(0) | Err(_) => {
                            sync = None;
                            if on_exec(&sync_bytes, exited)? {
                                return Ok(Ended {
                                    status: None,
                                    timed_out,
                                    sync: sync_bytes,
                                });
                            }
                        }
                        Ok(n) if sync_bytes.len() < MAX_SYNC => {
                            sync_bytes.extend_from_slice(&buf[..n])
                        }
                        Ok(_) => {}
                    }
                }
            }
            if sig_ready {
                for sig in signals::drain(self.sigfd) {
                    match (sig, self.master) {
                        (Signal::SIGCHLD, _) => {}
                        (Signal::SIGWINCH, Some(m)) => {
                            pty::copy_window_size(stdin.as_fd(), m.as_fd())
                        }
                        (sig, _) => {
                            let _ = kill(self.pid, sig);
                        }
                    }
                }
            }
            if let Some(m) = self.master.filter(|_| master_ready) {
                if !matches!(pty::pump(m.as_fd(), stdout.as_fd(), &mut buf), Ok(1..)) {
                    master_open = false;
                }
            }
            if let Some(m) = self.master.filter(|_| stdin_ready) {
                if !matches!(pty::pump(stdin.as_fd(), m.as_fd(), &mut buf), Ok(1..)) {
                    stdin_open = false;
                }
            }
            if exited {
                if let Some(m) = self.master.filter(|_| master_open) {
                    drain_nonblocking(m.as_fd(), stdout.as_fd(), &mut buf);
                }
                if let Some(s) = sync.take() {
                    // The child is gone: whatever it wrote is complete.
                    read_to_eof(&s, &mut sync_bytes);
                }
                let status = waitpid(self.pid, None)
                    .map_err(|e| Error::io("wait for", self.what, e.into()))?;
                return Ok(Ended {
                    status: Some(status),
                    timed_out,
                    sync: sync_bytes,
                });
            }
            if deadline.is_some_and(|d| !timed_out && Instant::now() >= d) {
                timed_out = true;
                let _ = kill(self.pid, Signal::SIGKILL);
            }
        }
    }
}

/// Adds `fd` (if any) to the poll set; its index there.
fn add<'f>(fds: &mut Vec<PollFd<'f>>, fd: Option<BorrowedFd<'f>>) -> Option<usize> {
    fd.map(|fd| {
        fds.push(PollFd::new(fd, PollFlags::POLLIN));
        fds.len() - 1
    })
}

/// Appends everything left on `pipe` (whose writers are all gone) to
/// `out`, capped like the loop's reads.
pub(crate) fn read_to_eof(pipe: &OwnedFd, out: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    loop {
        match nix::unistd::read(pipe.as_raw_fd(), &mut buf) {
            Ok(0) => return,
            Ok(n) if out.len() < MAX_SYNC => out.extend_from_slice(&buf[..n]),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// Copies what is left on the pty master without blocking.
fn drain_nonblocking(master: BorrowedFd<'_>, out: BorrowedFd<'_>, buf: &mut [u8]) {
    let flags = nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap_or(0);
    let nonblock = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    let _ = nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nonblock));
    while let Ok(1..) = pty::pump(master, out, buf) {}
}
