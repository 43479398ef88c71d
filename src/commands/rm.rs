//! `runbox rm [-f]`: removes stopped containers (state, log, writable
//! layer, cgroup, name); `-f` kills running ones first.

use std::process::ExitCode;

use anyhow::Context;
use runbox_image::store::Store;
use runbox_runner::lifecycle;

use crate::cli::{GlobalArgs, RmArgs};

pub fn rm(global: &GlobalArgs, args: RmArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open(&global.root).context("rm: open store")?;
    let layers = store.containers_dir();
    let mut code = ExitCode::SUCCESS;
    for c in &args.containers {
        let res = lifecycle::resolve(&global.state, c)
            .and_then(|id| lifecycle::remove(&global.state, &layers, &id, args.force));
        match res {
            Ok(()) => println!("{c}"),
            Err(e) => {
                eprintln!("runbox: rm {c}: {e}");
                code = ExitCode::from(125);
            }
        }
    }
    Ok(code)
}
