//! `runbox prune`: images not used within `--until` (unnamed images without
//! it), debris of killed loads and runs, orphaned directories, the trash.

use std::process::ExitCode;

use anyhow::Context;
use runbox_image::gc::{prune as gc_prune, PruneOptions};
use runbox_image::store::Store;

use crate::cli::{GlobalArgs, PruneArgs};
use crate::output::human_bytes;

pub fn prune(global: &GlobalArgs, args: PruneArgs) -> anyhow::Result<ExitCode> {
    let until = args
        .until
        .as_deref()
        .map(humantime::parse_duration)
        .transpose()
        .with_context(|| {
            format!(
                "prune: invalid --until `{}`",
                args.until.as_deref().unwrap_or("")
            )
        })?;
    let store = Store::open(&global.root).context("prune: open store")?;
    let report = gc_prune(
        &store,
        &PruneOptions {
            until,
            dry_run: args.dry_run,
        },
    )
    .context("prune")?;
    let verb = if args.dry_run {
        "Would delete"
    } else {
        "Deleted"
    };
    let stopped = runbox_runner::lifecycle::prune_stopped(
        &global.state,
        &store.containers_dir(),
        until,
        args.dry_run,
    );
    for id in &stopped {
        println!("{verb}: container {id}");
    }
    let mut bytes = 0;
    for rec in &report.images {
        bytes += rec.size;
        let names = if rec.names.is_empty() {
            String::new()
        } else {
            format!(" ({})", rec.names.join(", "))
        };
        println!("{verb}: {}{names}", rec.id);
    }
    for path in &report.debris {
        println!("{verb}: {}", path.display());
    }
    for rec in &report.in_use {
        eprintln!(
            "kept {}: in use by a running container",
            &rec.id.hex()[..12]
        );
    }
    eprintln!(
        "{} {} image(s), {} leftover director{}; {} of image content",
        if args.dry_run {
            "would remove"
        } else {
            "removed"
        },
        report.images.len(),
        report.debris.len(),
        if report.debris.len() == 1 { "y" } else { "ies" },
        human_bytes(bytes)
    );
    Ok(ExitCode::SUCCESS)
}
