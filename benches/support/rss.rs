//! Peak RSS of one command: a re-executed copy of the bench binary runs it
//! and reports `getrusage(RUSAGE_CHILDREN)`, which there covers only that
//! command and the processes it waited for (no unsafe wait4 needed).

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use crate::harness::{describe, wrap_crun_like, HIDE_CGROUP2_ENV};

/// Set in the environment of the re-executed bench binary that measures one
/// command's peak RSS (see [`max_rss_kib`]).
pub const MAXRSS_ENV: &str = "RUNBOX_BENCH_MAXRSS";

/// Peak RSS in KiB of `cmd` and everything it waited for, measured by a
/// re-executed copy of this binary (getrusage(RUSAGE_CHILDREN) there sees
/// only that one command's tree). Returns an error when the command fails.
pub fn max_rss_kib(cmd: &Command) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut c = Command::new(exe);
    c.env(MAXRSS_ENV, "1")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    // A command started in a mount namespace without the cgroup2 mount
    // (crun on hybrid cgroups) is started that way by the measurer too.
    if cmd.get_envs().any(|(k, _)| k == HIDE_CGROUP2_ENV) {
        c.env(HIDE_CGROUP2_ENV, "1");
    }
    let shown = describe(cmd);
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: cannot start the measurer: {e}"))?;
    if !out.status.success() {
        // The measurer printed the command's own failure on stderr.
        return Err(format!(
            "{shown}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let out = String::from_utf8_lossy(&out.stdout);
    out.trim()
        .strip_prefix("maxrss_kib=")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            format!(
                "{}: unexpected measurer output `{}`",
                describe(cmd),
                out.trim()
            )
        })
}

/// The measurer side of [`max_rss_kib`]: runs argv[1..], then prints the
/// peak RSS of its children. Exits with the command's status.
pub fn maxrss_child_main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let Some((prog, rest)) = args.split_first() else {
        eprintln!("{MAXRSS_ENV}: no command given");
        return std::process::ExitCode::from(2);
    };
    let mut cmd = if std::env::var_os(HIDE_CGROUP2_ENV).is_some() {
        wrap_crun_like(prog, rest)
    } else {
        let mut c = Command::new(prog as &OsStr);
        c.args(rest);
        c
    };
    // stderr stays visible so that a failure says why.
    let status = cmd.stdin(Stdio::null()).stdout(Stdio::null()).status();
    match status {
        Ok(s) if s.success() => {
            let usage =
                nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN);
            match usage {
                Ok(u) => {
                    println!("maxrss_kib={}", u.max_rss());
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("getrusage: {e}");
                    std::process::ExitCode::from(2)
                }
            }
        }
        Ok(s) => {
            eprintln!("{}: {s}", prog.to_string_lossy());
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{}: cannot start: {e}", prog.to_string_lossy());
            std::process::ExitCode::from(1)
        }
    }
}
