//! `runbox rmi`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, RmiArgs};

pub fn rmi(global: &GlobalArgs, args: RmiArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("rmi: not implemented yet")
}
