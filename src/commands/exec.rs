//! `runbox exec`: validate the flags, then run a command inside a running
//! container and exit with its code (125 runbox failed, 126 not executable
//! or the container is not running, 127 not found, 128+N killed by signal N).

use std::process::ExitCode;

use anyhow::{bail, Context};
use runbox_runner::container::Exit;
use runbox_runner::exec::ExecConfig;
use runbox_runner::Error;

use crate::cli::{ExecArgs, GlobalArgs};

/// Exit code when the container is not running (podman's).
const EXIT_NOT_RUNNING: u8 = 126;

impl ExecOptions {
    fn from_args(global: &GlobalArgs, args: ExecArgs) -> anyhow::Result<ExecOptions> {
        let mut rest = args.args.into_iter();
        let Some(container) = rest.next() else {
            bail!("exec: a container NAME or ID is required");
        };
        let mut cmd: Vec<String> = rest.collect();
        if cmd.first().is_some_and(|a| a == "--") {
            cmd.remove(0);
        }
        if cmd.is_empty() {
            bail!("exec: a command is required after the container");
        }
        let host = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        let env = args
            .env
            .iter()
            .filter_map(|e| runbox_runner::env::resolve_arg(e, host))
            .collect();
        let config = ExecConfig {
            container,
            state_root: global.state.clone(),
            seccomp_cache: global.root.join("cache").join("seccomp"),
            args: cmd,
            env,
            workdir: args.workdir,
            user: args.user,
            tty: args.tty,
            interactive: args.interactive,
            detach: args.detach,
        };
        config.validate()?;
        Ok(ExecOptions { config })
    }
}

/// The flags of `runbox exec`, validated before any work starts.
#[derive(Debug)]
struct ExecOptions {
    config: ExecConfig,
}

pub fn exec(global: &GlobalArgs, args: ExecArgs) -> anyhow::Result<ExitCode> {
    let opts = ExecOptions::from_args(global, args)?;
    match runbox_runner::exec::exec(&opts.config) {
        Ok(exit) => {
            if let Exit::ExecFailed { message, .. } = &exit {
                eprintln!("runbox: {message}");
            }
            Ok(ExitCode::from(exit.code()))
        }
        Err(e @ Error::NotRunning { .. }) => {
            eprintln!("runbox: exec: {e}");
            Ok(ExitCode::from(EXIT_NOT_RUNNING))
        }
        Err(e) => Err(e).context("exec"),
    }
}
