//! `runbox images`: the stored images, one row per name (as docker), or JSON.

use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::Context;
use runbox_image::store::Store;

use crate::cli::{Format, GlobalArgs, ImagesArgs};
use crate::output::human_bytes;

pub fn images(global: &GlobalArgs, args: ImagesArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open(&global.root).context("images: open store")?;
    let mut records = store.records().context("images")?;
    if args.quiet {
        for r in &records {
            println!("{}", r.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    match args.format {
        Format::Json => {
            // The config is `inspect`'s business; keep the listing small.
            for r in &mut records {
                r.config = serde_json::Value::Null;
            }
            let list: Vec<serde_json::Value> = records
                .iter()
                .map(|r| {
                    let mut v = serde_json::to_value(r).expect("record serialises");
                    v.as_object_mut().map(|o| o.remove("config"));
                    v["names"] = serde_json::json!(r.names);
                    v
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        Format::Table => {
            println!(
                "{:<30} {:<12} {:<14} {:<16} {:>10}  LAST USED",
                "NAME", "TAG", "IMAGE ID", "LOADED", "SIZE"
            );
            for r in &records {
                let names = if r.names.is_empty() {
                    vec!["<none>:<none>".to_string()]
                } else {
                    r.names.clone()
                };
                for n in names {
                    let (repo, tag) = n.rsplit_once(':').unwrap_or((&n, ""));
                    println!(
                        "{:<30} {:<12} {:<14} {:<16} {:>10}  {}",
                        repo,
                        tag,
                        &r.id.hex()[..12],
                        ago(r.loaded),
                        human_bytes(r.size),
                        ago(r.last_used)
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// "3 minutes ago".
pub fn ago(t: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(t)
        .unwrap_or_default()
        .as_secs();
    let (n, unit) = match secs {
        0..=59 => (secs, "second"),
        60..=3599 => (secs / 60, "minute"),
        3600..=86399 => (secs / 3600, "hour"),
        _ => (secs / 86400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}
