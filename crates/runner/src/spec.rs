//! Builds the one OCI runtime [`Spec`] of a run from the image config and the
//! user's [`RunConfig`], with docker's semantics. Pure apart from reading the
//! image's /etc/passwd and /etc/group (beneath the rootfs, see [`crate::user`]),
//! the host's hostname, `cap_last_cap`, the RLIMIT_NOFILE hard limit and the
//! kernel version (for seccomp `minKernel`).
//!
//! What the Spec holds, and what is left to the spawn side:
//!
//! - `process`: args (ENTRYPOINT+CMD), env, cwd, user (uid, gid,
//!   additionalGids, umask 022), capabilities, RLIMIT_NOFILE, noNewPrivileges,
//!   terminal. The cwd may not exist in the image: the spawn side creates it
//!   (as docker does).
//! - `mounts`: /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys,
//!   /sys/fs/cgroup (runc/moby defaults), then `-v` binds (`rbind`, `ro` on
//!   request) and `--tmpfs` mounts, parents before children. A user mount
//!   over a default destination replaces the default.
//! - `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf` are **not** in the
//!   Spec: they are bind mounts of files the spawn side writes into the
//!   container's state dir, with the content of [`etc_files`] (which skips a
//!   destination the user mounted over).
//! - `linux.devices`: null, zero, full, random, urandom, tty. The spawn side
//!   adds /dev/console (with a tty), the symlinks /dev/fd -> /proc/self/fd,
//!   /dev/stdin|stdout|stderr -> /proc/self/fd/0|1|2, /dev/ptmx -> pts/ptmx.
//! - `linux.namespaces`: mount, pid, uts, ipc, and network for `--network none`.
//! - `linux.maskedPaths`/`readonlyPaths`: moby's defaults, none when privileged.
//! - `linux.seccomp`: docker's default profile for the bounding set, a user
//!   profile, or none (`unconfined`, `--privileged`).

mod config;
mod etc;

use std::path::Path;

use oci_spec::runtime::{
    LinuxBuilder, LinuxDeviceBuilder, LinuxDeviceType, LinuxNamespaceBuilder, LinuxNamespaceType,
    Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType, ProcessBuilder, RootBuilder, Spec,
    SpecBuilder, UserBuilder,
};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::{capabilities, env, seccomp, user};

pub use config::{Network, RunConfig, SeccompChoice, Tmpfs, Volume};
pub use etc::{etc_files, etc_files_from};

/// docker's default RLIMIT_NOFILE (containerd's), capped by our hard limit.
pub const DEFAULT_NOFILE: u64 = 1_048_576;

/// moby's default masked paths (plus /sys/devices/virtual/powercap).
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// moby's default read-only paths.
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The fields of an image config that a run uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

impl ImageConfig {
    /// Reads a docker/OCI image config: either the whole config blob (with
    /// a `config` object) or that inner object itself.
    pub fn from_json(v: &Value) -> Result<Self> {
        let c = match v.get("config") {
            Some(inner) if inner.is_object() => inner,
            Some(Value::Null) | None => v,
            Some(_) => return Err(Error::ImageConfig("`config` is not an object".into())),
        };
        if !c.is_object() {
            return Err(Error::ImageConfig("not a JSON object".into()));
        }
        let strings = |field: &str| -> Result<Vec<String>> {
            match c.get(field) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|s| {
                        s.as_str().map(String::from).ok_or_else(|| {
                            Error::ImageConfig(format!("`{field}` holds a non-string"))
                        })
                    })
                    .collect(),
                Some(_) => Err(Error::ImageConfig(format!("`{field}` is not an array"))),
            }
        };
        let string = |field: &str| -> Result<Option<String>> {
            match c.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(Error::ImageConfig(format!("`{field}` is not a string"))),
            }
        };
        Ok(ImageConfig {
            env: strings("Env")?,
            entrypoint: strings("Entrypoint")?,
            cmd: strings("Cmd")?,
            working_dir: string("WorkingDir")?,
            user: string("User")?,
        })
    }
}

/// ENTRYPOINT + CMD as docker combines them: a CMD given after IMAGE
/// replaces the image's CMD; `--entrypoint` replaces the image's ENTRYPOINT
/// and also drops the image's CMD.
pub fn command_args(image: &ImageConfig, cfg: &RunConfig) -> Result<Vec<String>> {
    let entrypoint = cfg.entrypoint.as_ref().unwrap_or(&image.entrypoint);
    let cmd = if !cfg.cmd.is_empty() {
        &cfg.cmd
    } else if cfg.entrypoint.is_some() {
        &Vec::new()
    } else {
        &image.cmd
    };
    let args: Vec<String> = entrypoint.iter().chain(cmd).cloned().collect();
    if args.is_empty() {
        return Err(Error::NoCommand);
    }
    Ok(args)
}

/// The container's hostname: `--hostname`, else the host's with host
/// networking, else the first 12 hex digits of the container id.
pub fn hostname(cfg: &RunConfig, host_hostname: impl FnOnce() -> Option<String>) -> String {
    if let Some(h) = &cfg.hostname {
        return h.clone();
    }
    if cfg.network == Network::Host {
        if let Some(h) = host_hostname() {
            return h;
        }
    }
    cfg.container_id.chars().take(12).collect()
}

fn host_hostname() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
}

fn spec_err(what: &'static str) -> impl Fn(oci_spec::OciSpecError) -> Error {
    move |e| Error::Spec {
        what,
        reason: e.to_string(),
    }
}

fn mount(dst: &str, typ: &str, src: &str, opts: &[&str]) -> Result<Mount> {
    MountBuilder::default()
        .destination(dst)
        .typ(typ)
        .source(src)
        .options(opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .map_err(spec_err("mount"))
}

/// The default mounts, then user volumes and tmpfs (parents first).
pub fn mounts(cfg: &RunConfig) -> Result<Vec<Mount>> {
    let sys_mode = if cfg.privileged { "rw" } else { "ro" };
    let mut out = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"])?,
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        )?,
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        )?,
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        )?,
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        )?,
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &[sys_mode, "nosuid", "noexec", "nodev"],
        )?,
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &[sys_mode, "nosuid", "noexec", "nodev"],
        )?,
    ];
    let user_dsts: Vec<&str> = cfg
        .volumes
        .iter()
        .map(|v| v.dst.as_str())
        .chain(cfg.tmpfs.iter().map(|t| t.dst.as_str()))
        .collect();
    out.retain(|m| !user_dsts.iter().any(|d| m.destination() == Path::new(d)));

    let mut user: Vec<Mount> = Vec::new();
    for v in &cfg.volumes {
        let rw = if v.read_only { "ro" } else { "rw" };
        user.push(
            MountBuilder::default()
                .destination(&v.dst)
                .typ("bind")
                .source(&v.src)
                .options(vec![
                    "rbind".to_string(),
                    rw.to_string(),
                    "rprivate".to_string(),
                ])
                .build()
                .map_err(spec_err("volume mount"))?,
        );
    }
    for t in &cfg.tmpfs {
        let mut opts = vec![
            "nosuid".to_string(),
            "nodev".to_string(),
            "noexec".to_string(),
        ];
        opts.extend(t.options.iter().cloned());
        user.push(
            MountBuilder::default()
                .destination(&t.dst)
                .typ("tmpfs")
                .source("tmpfs")
                .options(opts)
                .build()
                .map_err(spec_err("tmpfs mount"))?,
        );
    }
    // Parents before children, as docker sorts by path depth (stable).
    user.sort_by_key(|m| m.destination().components().count());
    out.extend(user);
    Ok(out)
}

fn nofile_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(_, hard)| hard.min(DEFAULT_NOFILE))
        .unwrap_or(DEFAULT_NOFILE)
}

/// Builds the OCI spec of a run; see the module doc for what it holds.
pub fn build_spec(image_config: &Value, rootfs: &Path, cfg: &RunConfig) -> Result<Spec> {
    build_spec_with(image_config, rootfs, cfg, &HostFacts::probe())
}

/// Facts about the host a spec depends on; probed by [`build_spec`], set by
/// hand in tests.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub hostname: Option<String>,
    pub last_cap: u8,
    pub nofile: u64,
    pub kernel: seccomp::KernelVersion,
}

impl HostFacts {
    pub fn probe() -> Self {
        HostFacts {
            hostname: host_hostname(),
            last_cap: capabilities::kernel_last_cap(),
            nofile: nofile_limit(),
            kernel: seccomp::running_kernel(),
        }
    }
}

/// [`build_spec`] with given host facts.
pub fn build_spec_with(
    image_config: &Value,
    rootfs: &Path,
    cfg: &RunConfig,
    host: &HostFacts,
) -> Result<Spec> {
    cfg.validate()?;
    let image = ImageConfig::from_json(image_config)?;
    let args = command_args(&image, cfg)?;

    let user_spec = cfg.user.as_deref().or(image.user.as_deref()).unwrap_or("");
    let who = user::resolve_in_rootfs(user_spec, rootfs)?;

    let cwd = cfg
        .workdir
        .as_deref()
        .or(image.working_dir.as_deref())
        .unwrap_or("/");
    config::validate_workdir(cwd)?;

    let hostname = hostname(cfg, || host.hostname.clone());
    let envs = env::merge(
        &image.env,
        &cfg.env,
        &hostname,
        cfg.tty,
        who.home.as_deref(),
    );

    let bounding =
        capabilities::bounding_set(&cfg.cap_add, &cfg.cap_drop, cfg.privileged, host.last_cap)?;
    let caps = capabilities::process_capabilities(&bounding, who.uid);

    let mut user = UserBuilder::default()
        .uid(who.uid)
        .gid(who.gid)
        .umask(0o022u32);
    if !who.additional_gids.is_empty() {
        user = user.additional_gids(who.additional_gids.clone());
    }
    let process = ProcessBuilder::default()
        .terminal(cfg.tty)
        .user(user.build().map_err(spec_err("user"))?)
        .args(args)
        .env(envs)
        .cwd(cwd)
        .capabilities(caps)
        .rlimits(vec![PosixRlimitBuilder::default()
            .typ(PosixRlimitType::RlimitNofile)
            .soft(host.nofile)
            .hard(host.nofile)
            .build()
            .map_err(spec_err("rlimit"))?])
        .no_new_privileges(cfg.no_new_privileges)
        .build()
        .map_err(spec_err("process"))?;

    let mut namespaces = Vec::new();
    let mut ns_types = vec![
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Ipc,
    ];
    if cfg.network == Network::None {
        ns_types.push(LinuxNamespaceType::Network);
    }
    for t in ns_types {
        namespaces.push(
            LinuxNamespaceBuilder::default()
                .typ(t)
                .build()
                .map_err(spec_err("namespace"))?,
        );
    }

    let mut devices = Vec::new();
    for (path, major, minor) in [
        ("/dev/null", 1, 3),
        ("/dev/zero", 1, 5),
        ("/dev/full", 1, 7),
        ("/dev/random", 1, 8),
        ("/dev/urandom", 1, 9),
        ("/dev/tty", 5, 0),
    ] {
        devices.push(
            LinuxDeviceBuilder::default()
                .path(path)
                .typ(LinuxDeviceType::C)
                .major(major)
                .minor(minor)
                .file_mode(0o666u32)
                .uid(0u32)
                .gid(0u32)
                .build()
                .map_err(spec_err("device"))?,
        );
    }

    let seccomp = if cfg.privileged {
        None
    } else {
        match &cfg.seccomp {
            SeccompChoice::Unconfined => None,
            SeccompChoice::Default => Some(seccomp::default_profile_for(&bounding, host.kernel)?),
            SeccompChoice::Profile(p) => seccomp::load_profile(p, &bounding)?,
        }
    };
    let (masked, readonly): (Vec<String>, Vec<String>) = if cfg.privileged {
        (Vec::new(), Vec::new())
    } else {
        (
            MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
            READONLY_PATHS.iter().map(|s| s.to_string()).collect(),
        )
    };
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .devices(devices)
        .masked_paths(masked)
        .readonly_paths(readonly);
    if let Some(s) = seccomp {
        linux = linux.seccomp(s);
    }

    SpecBuilder::default()
        .version(oci_spec::runtime::version())
        .root(
            RootBuilder::default()
                .path(rootfs)
                .readonly(cfg.read_only)
                .build()
                .map_err(spec_err("root"))?,
        )
        .hostname(hostname)
        .process(process)
        .mounts(mounts(cfg)?)
        .linux(linux.build().map_err(spec_err("linux"))?)
        .build()
        .map_err(spec_err("spec"))
}

#[cfg(test)]
mod tests;
