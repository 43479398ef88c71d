//! `run -d`: a supervisor per detached container, so that its exit status is
//! recorded although no runbox command waits for it (what conmon does for
//! podman, here part of runbox):
//!
//! ```text
//! runbox run -d                   supervisor (forked, setsid)          container
//!   pipe(ready), fork  ─────────▶ stdin/out/err = /dev/null
//!   read one line                 container::run(log_to_file, ready) ─▶ PID 1
//!                                   state dir, log -> stdout/stderr      inherits the log
//!      "R\n"  ◀────────────────     exec seen on the sync pipe ("running")
//!   print id, exit 0                wait for PID 1 ... record exit status
//!      or "E<code> <msg>\n" ◀──     (setup failed, command not found)
//!   print msg, exit code            unlock the state dir, exit
//! ```
//!
//! The supervisor forks before any thread exists (container::run needs a
//! single-threaded caller). Its own errors travel over the pipe; if it dies
//! without a word the parent sees EOF and fails with 125.

use std::io::Read;

use oci_spec::runtime::Spec;

use crate::container::{self, ContainerConfig, Exit};
use crate::error::{Error, Result};
use crate::lifecycle::ReadyPipe;
use crate::syscall::{self, Forked};

/// What the `run -d` process learns from its supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detached {
    /// The command was executed; the container runs (or already ran).
    Running,
    /// It could not start: the exit code to return and the message.
    Failed { code: u8, message: String },
}

/// Starts `cfg` detached under a supervisor; returns once the command runs
/// or failed. Call from a single-threaded process.
pub fn detach(spec: &Spec, mut cfg: ContainerConfig) -> Result<Detached> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::io("create ready pipe for", &cfg.id, e.into()))?;
    match syscall::fork().map_err(|e| Error::io("fork supervisor of", &cfg.id, e.into()))? {
        Forked::Child => {
            drop(r);
            let ready = ReadyPipe::new(w);
            let code = supervise(spec, &mut cfg, ready);
            syscall::exit_now(code)
        }
        Forked::Parent { pid, .. } => {
            drop(w);
            // One line, not EOF: with --init the container's PID 1 keeps
            // a copy of the write end.
            let mut line = Vec::new();
            let mut f = std::fs::File::from(r);
            let mut byte = [0u8; 1];
            while line.len() < 64 * 1024 && !line.ends_with(b"\n") {
                match f.read(&mut byte) {
                    Ok(0) => break,
                    Ok(_) => line.push(byte[0]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // The supervisor keeps running; it is reparented when we exit.
            let _ = pid;
            Ok(parse_ready(&line))
        }
    }
}

/// The supervisor's life: detach from the terminal, run the container,
/// report a failure to start. Returns its exit code.
fn supervise(spec: &Spec, cfg: &mut ContainerConfig, ready: ReadyPipe) -> i32 {
    crate::syscall::leave_terminal();
    cfg.tty = false;
    cfg.interactive = false;
    cfg.lifecycle.log_to_file = true;
    cfg.lifecycle.ready = Some(ready.clone());
    let line = match container::run(spec, cfg) {
        Ok(report) => match report.exit {
            Exit::ExecFailed { code, message } => format!("E{code} {message}\n"),
            other => format!("E{} container exited before it ran\n", other.code()),
        },
        Err(e) => format!("E125 {}\n", e.to_string().replace('\n', " ")),
    };
    // Only when "running" was not reported yet.
    ready.send(line.as_bytes());
    0
}

fn parse_ready(line: &[u8]) -> Detached {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    if text == "R" {
        return Detached::Running;
    }
    match text.strip_prefix('E') {
        Some(rest) => {
            let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
            Detached::Failed {
                code: code.parse().unwrap_or(125),
                message: message.to_owned(),
            }
        }
        None => Detached::Failed {
            code: 125,
            message: "the container's supervisor exited without reporting".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_parse() {
        assert_eq!(parse_ready(b"R\n"), Detached::Running);
        assert_eq!(
            parse_ready(b"E127 exec: `x`: executable file not found in $PATH\n"),
            Detached::Failed {
                code: 127,
                message: "exec: `x`: executable file not found in $PATH".into()
            }
        );
        assert!(matches!(
            parse_ready(b""),
            Detached::Failed { code: 125, .. }
        ));
    }
}
