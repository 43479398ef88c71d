//! `runbox stop [-t SECONDS]`: SIGTERM to PID 1, SIGKILL after the grace
//! period, and wait until the exit is recorded.

use std::process::ExitCode;
use std::time::Duration;

use runbox_runner::lifecycle;

use crate::cli::{GlobalArgs, StopArgs};

pub fn stop(global: &GlobalArgs, args: StopArgs) -> anyhow::Result<ExitCode> {
    let mut code = ExitCode::SUCCESS;
    for c in &args.containers {
        let res = lifecycle::resolve(&global.state, c)
            .and_then(|id| lifecycle::stop(&global.state, &id, Duration::from_secs(args.time)));
        match res {
            Ok(_) => println!("{c}"),
            Err(e) => {
                eprintln!("runbox: stop {c}: {e}");
                code = ExitCode::from(125);
            }
        }
    }
    Ok(code)
}
