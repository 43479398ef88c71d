//! `runbox inspect`: stored images as a JSON array (as `docker inspect`).

use std::process::ExitCode;

use anyhow::Context;
use runbox_image::store::Store;

use crate::cli::{GlobalArgs, InspectArgs};

pub fn inspect(global: &GlobalArgs, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open(&global.root).context("inspect: open store")?;
    let mut out = Vec::new();
    for reference in &args.images {
        let rec = store
            .lookup(reference)
            .with_context(|| format!("inspect {reference}"))?;
        let mut v = serde_json::to_value(&rec)?;
        // Names are derived, so always present, even when empty.
        v["names"] = serde_json::json!(rec.names);
        out.push(v);
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
