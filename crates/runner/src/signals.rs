//! Signals around a container: the set runbox forwards to the container's
//! PID 1, blocked before the clone (so none is lost between clone and the
//! wait loop; youki lost SIGCHLD exactly there) and read through a signalfd.
//! The child restores an empty mask right before exec.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Forwarded to the container's PID 1 (docker's sig-proxy set plus SIGWINCH,
/// which is handled by resizing the pty instead when there is one).
pub const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// The set blocked in the parent: the forwarded signals plus SIGCHLD.
pub fn blocked_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(*s);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Blocks `blocked_set()` and returns the previous mask, to restore later.
pub fn block() -> nix::Result<SigSet> {
    let mut old = SigSet::empty();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked_set()), Some(&mut old))?;
    Ok(old)
}

/// Restores a mask saved by [`block`].
pub fn restore(old: &SigSet) -> nix::Result<()> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(old), None)
}

/// A non-blocking, close-on-exec signalfd for `blocked_set()`.
pub fn signal_fd() -> nix::Result<SignalFd> {
    SignalFd::with_flags(
        &blocked_set(),
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )
}

/// Every pending signal on `fd`, oldest first.
pub fn drain(fd: &SignalFd) -> Vec<Signal> {
    let mut out = Vec::new();
    while let Ok(Some(info)) = fd.read_signal() {
        if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
            out.push(sig);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_signals_arrive_on_the_signalfd() {
        // The mask is per thread: this test thread only.
        let old = block().unwrap();
        let fd = signal_fd().unwrap();
        nix::sys::pthread::pthread_kill(nix::sys::pthread::pthread_self(), Signal::SIGUSR2)
            .unwrap();
        let got = drain(&fd);
        restore(&old).unwrap();
        assert_eq!(got, vec![Signal::SIGUSR2]);
    }
}
