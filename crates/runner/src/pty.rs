//! `-t`: a pseudo-terminal for the container. The parent opens it, keeps the
//! master and copies it to and from its own stdio; the child makes the slave
//! its controlling terminal and stdio. The host terminal is put in raw mode
//! for the run and restored by a guard, also on errors.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use nix::sys::termios::{self, SetArg, Termios};

use crate::error::{Error, Result};
use crate::syscall;

/// An open pty pair.
#[derive(Debug)]
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// Host path of the slave (bound at /dev/console in the container).
    pub slave_path: PathBuf,
}

/// Opens a pty whose window size matches `host` when that is a terminal.
pub fn open(host: BorrowedFd<'_>) -> Result<Pty> {
    let ws = syscall::window_size(host).ok();
    let pair = nix::pty::openpty(ws.as_ref(), None)
        .map_err(|e| Error::io("open", "/dev/ptmx", e.into()))?;
    let slave_path = nix::unistd::ttyname(pair.slave.as_fd())
        .map_err(|e| Error::io("find the name of", "pty slave", e.into()))?;
    for fd in [&pair.master, &pair.slave] {
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(|e| Error::io("set close-on-exec on", &slave_path, e.into()))?;
    }
    Ok(Pty {
        master: pair.master,
        slave: pair.slave,
        slave_path,
    })
}

/// Copies the window size of `host` to the pty `master` (SIGWINCH).
pub fn copy_window_size(host: BorrowedFd<'_>, master: BorrowedFd<'_>) {
    if let Ok(ws) = syscall::window_size(host) {
        // A failed resize only affects the display; not worth failing the run.
        let _ = syscall::set_window_size(master, &ws);
    }
}

/// Child side: new session with the slave as controlling terminal and stdio.
pub fn attach_slave(slave: BorrowedFd<'_>) -> nix::Result<()> {
    nix::unistd::setsid()?;
    syscall::set_controlling_tty(slave)?;
    for target in 0..=2 {
        nix::unistd::dup2(slave.as_raw_fd(), target)?;
    }
    Ok(())
}

/// Restores the host terminal's settings when dropped.
pub struct RawMode {
    fd: OwnedFd,
    saved: Termios,
}

impl RawMode {
    /// Puts stdin in raw mode if it is a terminal; `None` otherwise.
    pub fn enter_stdin() -> Option<RawMode> {
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let saved = termios::tcgetattr(&fd).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&fd, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(&self.fd, SetArg::TCSADRAIN, &self.saved);
    }
}

/// Reads what is available on `from` and writes all of it to `to`. Returns
/// the bytes copied; 0 at end of input (EIO on a master whose slave is closed).
pub fn pump(from: BorrowedFd<'_>, to: BorrowedFd<'_>, buf: &mut [u8]) -> nix::Result<usize> {
    let n = match nix::unistd::read(from.as_raw_fd(), buf) {
        Err(nix::errno::Errno::EIO) => 0,
        r => r?,
    };
    let mut rest = &buf[..n];
    while !rest.is_empty() {
        match nix::unistd::write(to, rest) {
            Ok(w) => rest = &rest[w..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                let mut fds = [nix::poll::PollFd::new(to, nix::poll::PollFlags::POLLOUT)];
                nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
