//! `runbox run`: validate the flags, resolve the image (or `--rootfs DIR`),
//! build the OCI Spec, run the container to completion and exit with its code
//! (125 runbox failed, 126 not executable, 127 not found, 124 timeout,
//! 128+N killed by signal N).

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use runbox_image::format::Platform;
use runbox_image::store::Store;
use runbox_runner::container::{self, ContainerConfig, Exit};
use runbox_runner::spec::{Network, RunConfig};

use crate::cli::{GlobalArgs, RunArgs, Timings};

/// The flags of `runbox run`, validated before any work starts.
#[derive(Debug)]
pub struct RunOptions {
    /// IMAGE argument, or None with --rootfs.
    pub image: Option<String>,
    pub rootfs: Option<PathBuf>,
    pub config: RunConfig,
    pub timeout: Option<Duration>,
    pub platform: Platform,
    pub init: bool,
    pub keep: bool,
}

impl RunOptions {
    pub fn from_args(args: RunArgs, id: &str) -> anyhow::Result<RunOptions> {
        let mut rest = args.args;
        let image = if args.rootfs.is_some() {
            None
        } else {
            if rest.is_empty() {
                bail!("run: an IMAGE (or --rootfs DIR) is required");
            }
            Some(rest.remove(0))
        };
        if rest.first().is_some_and(|a| a == "--") {
            rest.remove(0);
        }
        // docker's order: --env-file entries first, then -e (later wins).
        let mut env = Vec::new();
        for f in &args.env_file {
            env.extend(RunConfig::parse_env_file(f)?);
        }
        for e in &args.env {
            let host = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
            env.extend(runbox_runner::env::resolve_arg(e, host));
        }
        let volumes = args
            .volume
            .iter()
            .map(|v| RunConfig::parse_volume(v))
            .collect::<Result<_, _>>()?;
        let tmpfs = args
            .tmpfs
            .iter()
            .map(|t| RunConfig::parse_tmpfs(t))
            .collect::<Result<_, _>>()?;
        let (no_new_privileges, seccomp) = RunConfig::parse_security_opts(&args.security_opt)?;
        let config = RunConfig {
            entrypoint: RunConfig::parse_entrypoint(args.entrypoint.as_deref()),
            cmd: rest,
            env,
            workdir: args.workdir,
            user: args.user,
            hostname: args.hostname,
            network: Network::parse(&args.network)?,
            read_only: args.read_only,
            volumes,
            tmpfs,
            cap_add: args.cap_add,
            cap_drop: args.cap_drop,
            privileged: args.privileged,
            no_new_privileges,
            seccomp,
            tty: args.tty,
            interactive: args.interactive,
            container_id: id.to_string(),
        };
        config.validate()?;
        let timeout = args
            .timeout
            .as_deref()
            .map(|t| humantime::parse_duration(t).with_context(|| format!("--timeout `{t}`")))
            .transpose()?;
        if timeout == Some(Duration::ZERO) {
            bail!("--timeout must be longer than 0");
        }
        let platform = Platform::parse(&args.platform)
            .with_context(|| format!("--platform `{}`", args.platform))?;
        Ok(RunOptions {
            image,
            rootfs: args.rootfs,
            config,
            timeout,
            platform,
            init: args.init,
            keep: args.keep,
        })
    }
}

pub fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let timings = args.timings;
    let id = container::new_id();
    let life = super::detach::RunLifecycle::from_args(&args)?;
    let opts = RunOptions::from_args(args, &id)?;
    let store = Store::open(&global.root).context("run: open store")?;
    // Held (a shared flock) for as long as this process, or the supervisor
    // it forks with -d, lives: `rmi` and `prune` leave the image alone.
    let mut _pin = None;
    let (label, image_dir, image_config) = match (&opts.rootfs, &opts.image) {
        (Some(dir), _) => {
            let dir = container::check_rootfs_dir(dir)?;
            (dir.display().to_string(), dir, serde_json::json!({}))
        }
        (None, Some(image)) => {
            let rec = store
                .resolve_or_load(image, &opts.platform)
                .with_context(|| format!("run: image `{image}`"))?;
            _pin = Some(
                store
                    .pin(&rec)
                    .with_context(|| format!("run: image `{image}`"))?,
            );
            (image.clone(), rec.rootfs, rec.config)
        }
        (None, None) => bail!("run: an IMAGE (or --rootfs DIR) is required"),
    };
    let spec = runbox_runner::spec::build_spec(&image_config, &image_dir, &opts.config)?;
    let hostname = spec
        .hostname()
        .clone()
        .unwrap_or_else(|| id[..12].to_string());
    let etc_files = runbox_runner::spec::etc_files(&opts.config, &hostname)
        .into_iter()
        .map(|(dst, content)| (PathBuf::from(dst), content))
        .collect();
    let cfg = ContainerConfig {
        id,
        image: label,
        image_dir,
        containers_dir: store.containers_dir(),
        state_root: global.state.clone(),
        etc_files,
        seccomp_cache: global.root.join("cache").join("seccomp"),
        tty: opts.config.tty,
        interactive: opts.config.interactive,
        init: opts.init,
        timeout: opts.timeout,
        keep: life.keep(opts.keep),
        lifecycle: life.extras(),
        image_pin: _pin.as_ref().map(|p| p.as_raw_fd()),
    };
    let _name = life.claim_name(&global.state, &cfg.id, cfg.keep)?;
    if life.detach {
        return super::detach::detach(&spec, cfg);
    }
    let resolve = t0.elapsed();
    let report = container::run(&spec, &cfg).context("run")?;
    if let Exit::ExecFailed { message, .. } = &report.exit {
        eprintln!("runbox: {message}");
    }
    if report.oom_killed {
        eprintln!("runbox: the container was killed: it hit its memory limit (--memory)");
    }
    let t = &report.timings;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    match timings {
        Some(Timings::Text) => eprintln!(
            "timings: resolve {:.2} ms, mount {:.2} ms, spawn {:.2} ms, run {:.2} ms, cleanup {:.2} ms",
            ms(resolve),
            ms(t.mount),
            ms(t.spawn),
            ms(t.run),
            ms(t.cleanup)
        ),
        Some(Timings::Json) => eprintln!(
            "{}",
            serde_json::json!({
                "resolve_ms": ms(resolve),
                "mount_ms": ms(t.mount),
                "spawn_ms": ms(t.spawn),
                "run_ms": ms(t.run),
                "cleanup_ms": ms(t.cleanup),
                "exit_code": report.exit.code(),
            })
        ),
        None => {}
    }
    Ok(ExitCode::from(report.exit.code()))
}
