//! `runbox run`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, RunArgs};

pub fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("run: not implemented yet")
}
