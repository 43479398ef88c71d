//! The lifecycle side of `runbox run`: `--name` (claimed before the start,
//! freed after a foreground run), `--memory/--cpus/--pids-limit`, and `-d`
//! (hand the container to a supervisor, print its ID).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use runbox_runner::cgroups::{self, Limits};
use runbox_runner::container::ContainerConfig;
use runbox_runner::lifecycle::{self, RunExtras};
use runbox_runner::supervisor::{self, Detached};

use crate::cli::RunArgs;

/// `run`'s lifecycle flags, validated.
#[derive(Debug, Default)]
pub struct RunLifecycle {
    pub detach: bool,
    /// `--rm` was given (detached containers are kept without it).
    pub rm: bool,
    pub name: Option<String>,
    pub limits: Limits,
}

impl RunLifecycle {
    pub fn from_args(args: &RunArgs) -> anyhow::Result<RunLifecycle> {
        if args.detach && args.tty {
            bail!("run: -d cannot be combined with -t");
        }
        if let Some(name) = &args.name {
            lifecycle::validate_name(name)?;
        }
        let limits = Limits {
            memory: args
                .memory
                .as_deref()
                .map(cgroups::parse_memory)
                .transpose()?,
            cpus: args.cpus.as_deref().map(cgroups::parse_cpus).transpose()?,
            pids: args
                .pids_limit
                .as_deref()
                .map(cgroups::parse_pids_limit)
                .transpose()?,
        };
        Ok(RunLifecycle {
            detach: args.detach,
            rm: args.rm,
            name: args.name.clone(),
            limits,
        })
    }

    /// Whether the stopped container is kept (detached: unless --rm).
    pub fn keep(&self, keep_flag: bool) -> bool {
        keep_flag || (self.detach && !self.rm)
    }

    pub fn extras(&self) -> RunExtras {
        RunExtras {
            name: self.name.clone(),
            limits: self.limits,
            ..RunExtras::default()
        }
    }

    /// Claims the name for `id`; the guard frees it unless the container
    /// is kept or detached (then `rm` frees it).
    pub fn claim_name(&self, state_root: &Path, id: &str, keep: bool) -> anyhow::Result<NameGuard> {
        if let Some(name) = &self.name {
            lifecycle::claim_name(state_root, name, id).context("run")?;
        }
        Ok(NameGuard {
            root: state_root.to_owned(),
            name: self.name.clone().filter(|_| !keep && !self.detach),
            id: id.to_owned(),
        })
    }
}

/// Frees a foreground run's name when dropped.
pub struct NameGuard {
    root: PathBuf,
    name: Option<String>,
    id: String,
}

impl Drop for NameGuard {
    fn drop(&mut self) {
        if let Some(name) = &self.name {
            lifecycle::release_name(&self.root, name, &self.id);
        }
    }
}

/// Starts the container under a supervisor and prints its ID once it runs.
pub fn detach(spec: &oci_spec::runtime::Spec, cfg: ContainerConfig) -> anyhow::Result<ExitCode> {
    let id = cfg.id.clone();
    match supervisor::detach(spec, cfg).context("run -d")? {
        Detached::Running => {
            println!("{id}");
            Ok(ExitCode::SUCCESS)
        }
        Detached::Failed { code, message } => {
            eprintln!("runbox: {message}");
            Ok(ExitCode::from(code))
        }
    }
}
