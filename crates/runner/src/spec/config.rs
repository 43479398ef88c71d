//! [`RunConfig`]: the validated options of one `runbox run`, and the parsers
//! that turn raw flags (`-v`, `--tmpfs`, `--network`, `--security-opt`,
//! `--entrypoint`) into it. Pure: nothing here touches the system except
//! [`RunConfig::parse_env_file`] and the lexical absolutizing of relative
//! volume sources against the current directory.

use std::path::{Path, PathBuf};

use crate::env;
use crate::error::{Error, Result};

/// `--network`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Network {
    /// Share the host's network namespace (the default).
    #[default]
    Host,
    /// A private network namespace with only loopback.
    None,
}

impl Network {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "host" => Ok(Network::Host),
            "none" => Ok(Network::None),
            _ => Err(Error::InvalidOption {
                option: "--network",
                value: s.to_string(),
                reason: "supported modes are `host` and `none`".into(),
            }),
        }
    }
}

/// `--security-opt seccomp=...`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SeccompChoice {
    /// docker's default profile.
    #[default]
    Default,
    /// No seccomp filter.
    Unconfined,
    /// A docker-format profile file.
    Profile(PathBuf),
}

/// `-v SRC:DST[:ro|rw]`: a recursive bind mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Absolute host path.
    pub src: PathBuf,
    /// Absolute container path.
    pub dst: String,
    pub read_only: bool,
}

/// `--tmpfs DST[:OPTIONS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmpfs {
    /// Absolute container path.
    pub dst: String,
    /// Mount options as given (`size=64m`, `mode=1777`, `ro`, `exec`...).
    pub options: Vec<String>,
}

/// The validated options of one run. See [`super::build_spec`] for how each
/// field maps to the OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// `--entrypoint`: `Some(vec![])` clears the image's (`--entrypoint ""`).
    pub entrypoint: Option<Vec<String>>,
    /// The command after IMAGE; empty means the image's CMD.
    pub cmd: Vec<String>,
    /// Resolved `KEY=VALUE` entries from `-e`/`--env-file`, in command-line order.
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub hostname: Option<String>,
    pub network: Network,
    pub read_only: bool,
    pub volumes: Vec<Volume>,
    pub tmpfs: Vec<Tmpfs>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub privileged: bool,
    pub no_new_privileges: bool,
    pub seccomp: SeccompChoice,
    pub tty: bool,
    pub interactive: bool,
    /// 64 lowercase hex digits.
    pub container_id: String,
}

fn invalid(option: &'static str, value: &str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Checks a container path: absolute, not `/`, no NUL, no `..` component.
fn container_path(option: &'static str, whole: &str, p: &str) -> Result<String> {
    if !p.starts_with('/') {
        return Err(invalid(
            option,
            whole,
            format!("`{p}` is not an absolute container path"),
        ));
    }
    if p.contains('\0') || p.split('/').any(|c| c == "..") {
        return Err(invalid(
            option,
            whole,
            format!("`{p}` must not contain `..` or NUL"),
        ));
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err(invalid(option, whole, "cannot mount over `/`"));
    }
    Ok(trimmed.to_string())
}

/// Options accepted in `--tmpfs`, beyond `key=value` ones below.
const TMPFS_FLAGS: &[&str] = &[
    "ro",
    "rw",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "sync",
    "async",
    "dirsync",
    "atime",
    "noatime",
    "diratime",
    "nodiratime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
];
const TMPFS_KEYS: &[&str] = &[
    "size",
    "mode",
    "uid",
    "gid",
    "nr_inodes",
    "nr_blocks",
    "huge",
    "mpol",
];

impl RunConfig {
    /// Parses `-v SRC:DST[:OPTS]`. SRC must be a host path (absolute, or
    /// starting with `.`, made absolute against the current directory);
    /// named volumes are not supported. OPTS: `ro`, `rw`, and the
    /// propagation/SELinux options docker accepts, which are ignored.
    pub fn parse_volume(s: &str) -> Result<Volume> {
        let parts: Vec<&str> = s.split(':').collect();
        let (src, dst, opts) = match parts.as_slice() {
            [src, dst] => (*src, *dst, ""),
            [src, dst, opts] => (*src, *dst, *opts),
            _ => return Err(invalid("--volume", s, "expected SRC:DST[:ro|rw]")),
        };
        if src.is_empty() || src.contains('\0') {
            return Err(invalid("--volume", s, "empty source"));
        }
        let src_path = if src.starts_with('/') {
            PathBuf::from(src)
        } else if src.starts_with('.') {
            std::path::absolute(src)
                .map_err(|e| invalid("--volume", s, format!("cannot make `{src}` absolute: {e}")))?
        } else {
            return Err(invalid(
                "--volume",
                s,
                "named volumes are not supported; the source must be a host path (absolute or starting with `.`)",
            ));
        };
        let dst = container_path("--volume", s, dst)?;
        let mut read_only = false;
        for o in opts.split(',').filter(|o| !o.is_empty()) {
            match o {
                "ro" => read_only = true,
                "rw" => read_only = false,
                "z" | "Z" | "private" | "rprivate" | "shared" | "rshared" | "slave" | "rslave"
                | "nocopy" => {}
                other => return Err(invalid("--volume", s, format!("unknown option `{other}`"))),
            }
        }
        Ok(Volume {
            src: src_path,
            dst,
            read_only,
        })
    }

    /// Parses `--tmpfs DST[:OPT,OPT...]`, e.g. `/run:size=64m,mode=1777`.
    pub fn parse_tmpfs(s: &str) -> Result<Tmpfs> {
        let (dst, opts) = s.split_once(':').unwrap_or((s, ""));
        let dst = container_path("--tmpfs", s, dst)?;
        let mut options = Vec::new();
        for o in opts.split(',').filter(|o| !o.is_empty()) {
            match o.split_once('=') {
                None if TMPFS_FLAGS.contains(&o) => {}
                Some((k, v)) if TMPFS_KEYS.contains(&k) && !v.is_empty() => {
                    let ok = match k {
                        "mode" => u32::from_str_radix(v, 8).is_ok_and(|m| m <= 0o7777),
                        "uid" | "gid" => v.parse::<u32>().is_ok(),
                        "size" | "nr_inodes" | "nr_blocks" => parse_size(v).is_some(),
                        _ => true,
                    };
                    if !ok {
                        return Err(invalid("--tmpfs", s, format!("invalid value in `{o}`")));
                    }
                }
                _ => return Err(invalid("--tmpfs", s, format!("unknown option `{o}`"))),
            }
            options.push(o.to_string());
        }
        Ok(Tmpfs { dst, options })
    }

    /// Reads an `--env-file` (docker format; bare keys come from the host).
    pub fn parse_env_file(path: &Path) -> Result<Vec<String>> {
        env::parse_env_file(path)
    }

    /// `--entrypoint`: one executable (not split, as docker); `""` clears it.
    pub fn parse_entrypoint(s: Option<&str>) -> Option<Vec<String>> {
        s.map(|s| {
            if s.is_empty() {
                Vec::new()
            } else {
                vec![s.to_string()]
            }
        })
    }

    /// Parses `--security-opt` values into (no_new_privileges, seccomp).
    /// Accepts `no-new-privileges[=true|false]`, `seccomp=unconfined`,
    /// `seccomp=FILE` (and docker's legacy `:` separator).
    pub fn parse_security_opts(opts: &[String]) -> Result<(bool, SeccompChoice)> {
        let mut nnp = false;
        let mut seccomp = SeccompChoice::Default;
        for o in opts {
            let (k, v) = match o.split_once(['=', ':']) {
                Some((k, v)) => (k, Some(v)),
                None => (o.as_str(), None),
            };
            match (k, v) {
                ("no-new-privileges", None) => nnp = true,
                ("no-new-privileges", Some(v)) => {
                    nnp = v.parse::<bool>().map_err(|_| {
                        invalid("--security-opt", o, "no-new-privileges takes true or false")
                    })?
                }
                ("seccomp", Some("unconfined")) => seccomp = SeccompChoice::Unconfined,
                ("seccomp", Some(p)) if !p.is_empty() => {
                    seccomp = SeccompChoice::Profile(PathBuf::from(p))
                }
                _ => {
                    return Err(invalid(
                        "--security-opt",
                        o,
                        "supported: no-new-privileges[=BOOL], seccomp=unconfined|PROFILE.json",
                    ))
                }
            }
        }
        Ok((nnp, seccomp))
    }

    /// Checks the fields that parsing did not (they may have been filled
    /// in by hand): id, env entries, workdir, hostname, mounts.
    pub fn validate(&self) -> Result<()> {
        let id = &self.container_id;
        if id.len() != 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(invalid(
                "container id",
                id,
                "expected 64 lowercase hex digits",
            ));
        }
        for e in &self.env {
            env::validate_entry(e)?;
        }
        if let Some(w) = &self.workdir {
            validate_workdir(w)?;
        }
        if let Some(h) = &self.hostname {
            validate_hostname(h)?;
        }
        if let Some(u) = &self.user {
            if u.contains('\0') || u.split(':').count() > 2 {
                return Err(invalid("--user", u, "expected USER[:GROUP]"));
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        let dsts = self
            .volumes
            .iter()
            .map(|v| (v.dst.as_str(), "--volume"))
            .chain(self.tmpfs.iter().map(|t| (t.dst.as_str(), "--tmpfs")));
        for (d, option) in dsts {
            container_path(option, d, d)?;
            if seen.contains(&d) {
                return Err(invalid(option, d, "duplicate mount point"));
            }
            seen.push(d);
        }
        for v in &self.volumes {
            if !v.src.is_absolute() {
                return Err(invalid(
                    "--volume",
                    &v.src.display().to_string(),
                    "source must be absolute",
                ));
            }
        }
        Ok(())
    }
}

/// docker: "the working directory 'x' is invalid, it needs to be an absolute path".
pub(super) fn validate_workdir(w: &str) -> Result<()> {
    if !w.starts_with('/') || w.contains('\0') {
        return Err(invalid(
            "working directory",
            w,
            "it needs to be an absolute path",
        ));
    }
    Ok(())
}

/// A hostname the kernel accepts (at most 64 bytes) and resolvers like:
/// letters, digits, `-`, `.`, `_`, not starting with `-` or `.`.
fn validate_hostname(h: &str) -> Result<()> {
    let ok = !h.is_empty()
        && h.len() <= 64
        && !h.starts_with(['-', '.'])
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "--hostname",
            h,
            "use at most 64 letters, digits, `-`, `.` or `_`",
        ))
    }
}

/// `64m`, `1g`, `65536k`, `4096`, `50%` -> a number (the unit is checked, not applied).
fn parse_size(v: &str) -> Option<u64> {
    let digits = v.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G', '%']);
    if digits.len() + 1 < v.len() {
        return None;
    }
    digits.parse().ok()
}
