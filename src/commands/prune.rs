//! `runbox prune`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, PruneArgs};

pub fn prune(global: &GlobalArgs, args: PruneArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("prune: not implemented yet")
}
