//! `runbox load`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, LoadArgs};

pub fn load(global: &GlobalArgs, args: LoadArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("load: not implemented yet")
}
