//! `cargo bench`: runbox against docker, runc, crun, bwrap, umoci and tar on
//! the same images (prepared by `scripts/bench-setup.sh` under
//! /var/tmp/runbox-bench, or $RUNBOX_BENCH_DIR). Groups: `run`, `exec`,
//! `load`, `cold_run`, `concurrency` (criterion, wall time of whole
//! processes) and `memory` (peak RSS, printed and written beside criterion's
//! output). A missing peer or a failing runbox command skips that benchmark
//! with a printed reason; nothing here fails because a peer is absent.
//! benches/README.md explains each benchmark and the traps.

use std::path::PathBuf;
use std::process::ExitCode;

use criterion::Criterion;

#[path = "support/harness.rs"]
mod harness;
#[path = "support/images.rs"]
mod images;
#[path = "support/rss.rs"]
mod rss;
#[path = "support/starts.rs"]
mod starts;

use harness::{Ctx, Filter};

/// Where criterion writes (its own rule: $CRITERION_HOME, else
/// $CARGO_TARGET_DIR/criterion, else cargo's target dir, else ./target).
fn criterion_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    let from_cargo = std::env::var_os("CARGO").and_then(|cargo| {
        let out = std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(PathBuf::from(v.get("target_directory")?.as_str()?))
    });
    from_cargo
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

fn main() -> ExitCode {
    if std::env::var_os(rss::MAXRSS_ENV).is_some() {
        return rss::maxrss_child_main();
    }
    let args: Vec<String> = std::env::args().collect();
    let list_only = args.iter().any(|a| a == "--list");
    let filter = Filter::from_args(args.iter().cloned());
    if !list_only && !nix::unistd::geteuid().is_root() {
        eprintln!("bench: every benchmark needs root (namespaces, mounts, dockerd); skipped");
        return ExitCode::SUCCESS;
    }
    let dir = std::env::var_os("RUNBOX_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/runbox-bench"));
    if !list_only && !dir.join("env").is_file() {
        eprintln!(
            "bench: {} is not prepared: run `bash scripts/bench-setup.sh` first (benchmarks that need images are skipped)",
            dir.display()
        );
    }
    // Built by cargo for benches of a package with a bin target (release profile under `cargo bench`).
    let runbox = PathBuf::from(env!("CARGO_BIN_EXE_runbox"));
    let ctx = Ctx::new(dir, runbox, filter, list_only);
    if !list_only {
        ctx.remove_stale_scratch();
    }

    // No HTML plots: slow to draw, and scripts/bench-table reads the JSON.
    let mut c = Criterion::default().without_plots().configure_from_args();
    let out = criterion_dir();
    let started = std::time::Instant::now();
    let lap = |group: &str, t: &mut std::time::Instant| {
        if t.elapsed() > std::time::Duration::from_secs(1) {
            eprintln!(
                "bench: group {group} took {:.0} s",
                t.elapsed().as_secs_f64()
            );
        }
        *t = std::time::Instant::now();
    };
    let mut t = std::time::Instant::now();
    starts::run(&mut c, &ctx);
    lap("run", &mut t);
    starts::exec(&mut c, &ctx);
    lap("exec", &mut t);
    images::load(&mut c, &ctx);
    lap("load", &mut t);
    images::cold_run(&mut c, &ctx);
    lap("cold_run", &mut t);
    starts::concurrency(&mut c, &ctx);
    lap("concurrency", &mut t);
    images::memory(&ctx, &out.join("runbox-memory.json"));
    lap("memory", &mut t);
    c.final_summary();
    if !list_only {
        eprintln!(
            "bench: all groups took {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }

    if !list_only {
        write_runs(&ctx, &out.join("runbox-runs.json"));
        ctx.cleanup();
    }
    ExitCode::SUCCESS
}

/// What ran, what failed and what was skipped, for scripts/bench-table.
fn write_runs(ctx: &Ctx, path: &std::path::Path) {
    let notes = ctx.record.lock().map(|r| r.clone()).unwrap_or_default();
    if notes.is_empty() {
        return;
    }
    // Merge with an earlier run's notes so that `cargo bench -- run` keeps the others.
    let mut merged: Vec<serde_json::Value> = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("benchmarks").and_then(|b| b.as_array().cloned()))
        .unwrap_or_default();
    let new_ids: Vec<&str> = notes.iter().filter_map(|n| n.get("id")?.as_str()).collect();
    merged.retain(|m| {
        m.get("id")
            .and_then(|i| i.as_str())
            .is_none_or(|i| !new_ids.contains(&i))
    });
    merged.extend(notes);
    let doc = serde_json::json!({ "benchmarks": merged });
    let ok = std::fs::create_dir_all(path.parent().unwrap_or(std::path::Path::new(".")))
        .and_then(|_| std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default()));
    if let Err(e) = ok {
        eprintln!("bench: cannot write {}: {e}", path.display());
    }
}
