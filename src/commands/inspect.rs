//! `runbox inspect`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, InspectArgs};

pub fn inspect(global: &GlobalArgs, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("inspect: not implemented yet")
}
