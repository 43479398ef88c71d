//! `runbox images`.

use std::process::ExitCode;

use crate::cli::{GlobalArgs, ImagesArgs};

pub fn images(global: &GlobalArgs, args: ImagesArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("images: not implemented yet")
}
