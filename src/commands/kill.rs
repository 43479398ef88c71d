//! `runbox kill [-s SIGNAL]`: one signal to each container's PID 1, through
//! a pidfd verified against the recorded start time.

use std::process::ExitCode;

use runbox_runner::lifecycle;

use crate::cli::{GlobalArgs, KillArgs};

pub fn kill(global: &GlobalArgs, args: KillArgs) -> anyhow::Result<ExitCode> {
    let sig = lifecycle::parse_signal(&args.signal)?;
    let mut code = ExitCode::SUCCESS;
    for c in &args.containers {
        let res = lifecycle::resolve(&global.state, c)
            .and_then(|id| lifecycle::kill(&global.state, &id, sig));
        match res {
            Ok(()) => println!("{c}"),
            Err(e) => {
                eprintln!("runbox: kill {c}: {e}");
                code = ExitCode::from(125);
            }
        }
    }
    Ok(code)
}
