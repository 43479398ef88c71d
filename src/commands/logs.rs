//! `runbox logs [-f]`: a detached container's log file, followed until the
//! container stops with `-f`.

use std::process::ExitCode;

use anyhow::{bail, Context};
use runbox_runner::{lifecycle, logs};

use crate::cli::{GlobalArgs, LogsArgs};

pub fn logs(global: &GlobalArgs, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let id = lifecycle::resolve(&global.state, &args.container).context("logs")?;
    let st = lifecycle::load(&global.state, &id).context("logs")?;
    if st.log_path.is_none() {
        bail!(
            "logs: container {} runs in the foreground: its output goes to its terminal",
            &id[..12.min(id.len())]
        );
    }
    let mut out = std::io::stdout().lock();
    logs::copy_log(&global.state.join(&id), &mut out, args.follow).context("logs")?;
    Ok(ExitCode::SUCCESS)
}
