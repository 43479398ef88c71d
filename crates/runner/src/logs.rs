//! A detached container's log: `<state>/<id>/container.log`, stdout and
//! stderr interleaved as written (both are the same file, opened
//! `O_APPEND`). `logs -f` follows it with inotify until the container's
//! state says it stopped (or its state dir goes away).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::error::{Error, Result};
use crate::state::{self, Status};

/// The log file of the container whose state dir is `dir`.
pub fn log_path(dir: &Path) -> PathBuf {
    dir.join("container.log")
}

/// Opens (creating) `path` for appending and makes it this process's stdout
/// and stderr.
pub fn redirect_output(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| Error::io("create log", path, e))?;
    for fd in [1, 2] {
        nix::unistd::dup2(f.as_raw_fd(), fd)
            .map_err(|e| Error::io("redirect output to", path, e.into()))?;
    }
    Ok(())
}

/// Copies what is new in `log` to `out`; the number of bytes.
fn drain(log: &mut File, out: &mut dyn Write, path: &Path) -> Result<u64> {
    let n = std::io::copy(log, out).map_err(|e| Error::io("read log", path, e))?;
    out.flush()
        .map_err(|e| Error::io("write log of", path, e))?;
    Ok(n)
}

/// Writes container `dir`'s log to `out`; with `follow`, keeps writing
/// what is appended until the container has stopped.
pub fn copy_log(dir: &Path, out: &mut dyn Write, follow: bool) -> Result<()> {
    let path = log_path(dir);
    let mut log = File::open(&path).map_err(|e| Error::io("open log", &path, e))?;
    if !follow {
        return drain(&mut log, out, &path).map(drop);
    }
    // Watches first, then the liveness check: an exit after the check
    // still wakes us (state.json is renamed into place).
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
        .map_err(|e| Error::io("watch", &path, e.into()))?;
    inotify
        .add_watch(&path, AddWatchFlags::IN_MODIFY)
        .map_err(|e| Error::io("watch", &path, e.into()))?;
    inotify
        .add_watch(
            dir,
            AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_ATTRIB,
        )
        .map_err(|e| Error::io("watch", dir, e.into()))?;
    loop {
        drain(&mut log, out, &path)?;
        let running =
            state::load(dir).is_ok_and(|st| st.status == Status::Running && state::is_alive(&st));
        if !running {
            drain(&mut log, out, &path)?;
            return Ok(());
        }
        // The timeout only matters if the supervisor died without a word.
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::io("wait for log of", dir, e.into())),
        }
        while let Ok(events) = inotify.read_events() {
            if events.is_empty() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_containers_log_is_copied_whole_even_when_following() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::StateDir::create(tmp.path(), "c").unwrap();
        dir.save(&crate::state::ContainerState {
            id: "c".into(),
            status: Status::Stopped,
            ..Default::default()
        })
        .unwrap();
        std::fs::write(log_path(dir.path()), "one\ntwo\n").unwrap();
        for follow in [false, true] {
            let mut out = Vec::new();
            copy_log(dir.path(), &mut out, follow).unwrap();
            assert_eq!(out, b"one\ntwo\n");
        }
        let err = copy_log(tmp.path(), &mut Vec::new(), false).unwrap_err();
        assert!(err.to_string().contains("failed to open log"), "{err}");
    }
}
