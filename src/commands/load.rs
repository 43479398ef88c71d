//! `runbox load`: an image tarball or layout into the store, with progress
//! on stderr and the image ID on stdout.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use runbox_image::format::{Platform, Selector};
use runbox_image::store::{LoadObserver, LoadOptions, LoadReport, Store};
use runbox_image::unpack::UnpackStats;

use crate::cli::{GlobalArgs, LoadArgs, Timings};
use crate::output::{human_bytes, thousands};

pub fn load(global: &GlobalArgs, args: LoadArgs) -> anyhow::Result<ExitCode> {
    let platform = parse_platform(&args.platform)?;
    let (path, selector) = Selector::parse_path_arg(&args.path);
    if !path.exists() {
        anyhow::bail!("load: `{}`: no such file or directory", args.path);
    }
    for tag in &args.tag {
        runbox_image::store::normalize_name(tag).context("load: --tag")?;
    }
    let store = Store::open(&global.root).context("load: open store")?;
    let opts = LoadOptions {
        selector: selector.clone(),
        platform,
        tags: args.tag.clone(),
    };
    let mut observer: Box<dyn LoadObserver> = if args.quiet {
        Box::new(runbox_image::store::Silent)
    } else if std::io::stderr().is_terminal() {
        Box::new(Bars::default())
    } else {
        Box::new(Lines {
            file: args.path.clone(),
        })
    };
    let report = store
        .load(&path, &opts, observer.as_mut())
        .context("load")?;
    drop(observer);
    println!("{}", report.image.id);
    if !args.quiet {
        eprintln!("{}", summary(&report, &selector));
    }
    match args.timings {
        Some(Timings::Json) => eprintln!("{}", timings_json(&report)),
        Some(Timings::Text) => eprintln!("{}", timings_text(&report)),
        None => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `linux/amd64`, `linux/arm64/v8`.
pub fn parse_platform(s: &str) -> anyhow::Result<Platform> {
    Platform::parse(s).context("--platform")
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// `loaded debian:base (1 layer): 122 MiB, 9,842 files in 0.71 s (172 MiB/s; verify 0.09 s, extract 0.62 s)`
fn summary(r: &LoadReport, selector: &Selector) -> String {
    let name = r
        .image
        .names
        .first()
        .cloned()
        .unwrap_or_else(|| r.image.id.hex()[..12].to_string());
    let layers = match r.layers {
        1 => "1 layer".to_string(),
        n => format!("{n} layers"),
    };
    let _ = selector;
    if !r.unpacked {
        return format!(
            "already stored {name} ({layers}): {}, {} files; checked in {:.3} s",
            human_bytes(r.stats.bytes),
            thousands(r.stats.files),
            r.total.as_secs_f64()
        );
    }
    let rate = r.bytes_read as f64 / r.total.as_secs_f64().max(1e-6);
    format!(
        "loaded {name} ({layers}): {}, {} files in {} ({}/s; verify {}, extract {})",
        human_bytes(r.stats.bytes),
        thousands(r.stats.files),
        secs(r.total),
        human_bytes(rate as u64),
        secs(r.verify),
        secs(r.extract)
    )
}

fn timings_text(r: &LoadReport) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "timings: resolve {:.1} ms, extract {:.1} ms, verify {:.1} ms, commit {:.1} ms, total {:.1} ms",
        ms(r.resolve),
        ms(r.extract),
        ms(r.verify),
        ms(r.commit),
        ms(r.total)
    )
}

fn timings_json(r: &LoadReport) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    serde_json::json!({
        "id": r.image.id.as_str(),
        "unpacked": r.unpacked,
        "layers": r.layers,
        "resolve_ms": ms(r.resolve),
        "extract_ms": ms(r.extract),
        "verify_ms": ms(r.verify),
        "commit_ms": ms(r.commit),
        "total_ms": ms(r.total),
        "bytes_read": r.bytes_read,
        "files": r.stats.files,
        "bytes": r.stats.bytes,
    })
    .to_string()
}

/// Off a terminal: one line per phase.
struct Lines {
    file: String,
}

impl LoadObserver for Lines {
    fn phase(&mut self, what: &str) {
        eprintln!("{what} {}", self.file);
    }
    fn layer_start(&mut self, index: usize, count: usize, size: u64) {
        eprintln!("layer {}/{count}: {}", index + 1, human_bytes(size));
    }
}

/// On a terminal: a progress bar per layer with bytes and rate.
#[derive(Default)]
struct Bars {
    bar: Option<ProgressBar>,
}

impl LoadObserver for Bars {
    fn layer_start(&mut self, index: usize, count: usize, size: u64) {
        let bar = ProgressBar::new(size);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(format!("layer {}/{count}", index + 1));
        self.bar = Some(bar);
    }
    fn layer_progress(&mut self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
    }
    fn layer_done(&mut self, _index: usize, stats: &UnpackStats) {
        if let Some(b) = self.bar.take() {
            b.finish_with_message(format!("{} files", stats.files));
        }
    }
}
