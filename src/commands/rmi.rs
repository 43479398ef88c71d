//! `runbox rmi`: removes images (their rootfs too when no other image shares it).

use std::process::ExitCode;

use anyhow::Context;
use runbox_image::store::Store;

use crate::cli::{GlobalArgs, RmiArgs};

pub fn rmi(global: &GlobalArgs, args: RmiArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open(&global.root).context("rmi: open store")?;
    for reference in &args.images {
        let rec = store
            .remove(reference)
            .with_context(|| format!("rmi {reference}"))?;
        for n in &rec.names {
            println!("Untagged: {n}");
        }
        println!("Deleted: {}", rec.id);
    }
    runbox_image::gc::empty_trash(&store, std::time::Duration::from_secs(600));
    Ok(ExitCode::SUCCESS)
}
