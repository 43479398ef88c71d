//! Docker's seccomp profile format (`--security-opt seccomp=PROFILE.json` and
//! our embedded `default.json`) and its conversion to an OCI
//! [`LinuxSeccomp`], following moby's `setupSeccomp`: a rule group is kept
//! only when its `includes` hold and its `excludes` do not, judged against
//! the container's **bounding** capability set, the native architecture
//! (`amd64`) and the running kernel version.
//!
//! A plain OCI `linux.seccomp` object is also a valid docker profile (the
//! docker fields are a superset), so both load here.

use oci_spec::runtime::{
    Arch, Capabilities, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder,
    LinuxSeccompFilterFlag, LinuxSeccompOperator, LinuxSyscall,
};
use serde::Deserialize;

use crate::capabilities;
use crate::error::{Error, Result};

/// The architecture name docker's profiles use for this build.
const NATIVE_ARCH: &str = "amd64";
/// The libseccomp architecture of this build, as in `archMap`.
const NATIVE_SCMP_ARCH: Arch = Arch::ScmpArchX86_64;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DockerProfile {
    #[serde(default)]
    default_action: Option<LinuxSeccompAction>,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Option<Vec<Arch>>,
    #[serde(default)]
    arch_map: Option<Vec<ArchMap>>,
    #[serde(default)]
    flags: Option<Vec<LinuxSeccompFilterFlag>>,
    #[serde(default)]
    listener_path: Option<String>,
    #[serde(default)]
    syscalls: Option<Vec<DockerSyscall>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMap {
    architecture: Arch,
    #[serde(default)]
    sub_architectures: Option<Vec<Arch>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerSyscall {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Option<Vec<String>>,
    action: LinuxSeccompAction,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    args: Option<Vec<DockerArg>>,
    #[serde(default)]
    includes: Option<Filter>,
    #[serde(default)]
    excludes: Option<Filter>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerArg {
    index: usize,
    value: u64,
    #[serde(default)]
    value_two: Option<u64>,
    op: LinuxSeccompOperator,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    caps: Option<Vec<String>>,
    #[serde(default)]
    arches: Option<Vec<String>>,
    #[serde(default)]
    min_kernel: Option<String>,
}

/// A kernel version as `(major, minor)`.
pub type KernelVersion = (u32, u32);

/// Parses `"6.18.44-foo"` or `"4.8"` into `(6, 18)` / `(4, 8)`.
pub fn parse_kernel_version(release: &str) -> Option<KernelVersion> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// The running kernel's version, `(0, 0)` if uname fails (so `minKernel`
/// rules are dropped, the safe direction).
pub fn running_kernel() -> KernelVersion {
    nix::sys::utsname::uname()
        .ok()
        .and_then(|u| parse_kernel_version(&u.release().to_string_lossy()))
        .unwrap_or((0, 0))
}

impl DockerProfile {
    pub(super) fn parse(json: &str, origin: &std::path::Path) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| Error::InvalidFile {
            what: "seccomp profile",
            path: origin.to_path_buf(),
            reason: e.to_string(),
        })
    }

    /// The OCI profile for a container with `bounding` capabilities on a
    /// kernel `kernel`. `None` when the profile disables seccomp (no default
    /// action and no rules, as moby treats it).
    pub(super) fn to_oci(
        &self,
        bounding: &Capabilities,
        kernel: KernelVersion,
        origin: &std::path::Path,
    ) -> Result<Option<LinuxSeccomp>> {
        let invalid = |reason: String| Error::InvalidFile {
            what: "seccomp profile",
            path: origin.to_path_buf(),
            reason,
        };
        let rules = self.syscalls.as_deref().unwrap_or_default();
        let Some(default_action) = self.default_action else {
            if rules.is_empty() {
                return Ok(None);
            }
            return Err(invalid("missing defaultAction".into()));
        };
        if self.architectures.as_ref().is_some_and(|a| !a.is_empty())
            && self.arch_map.as_ref().is_some_and(|a| !a.is_empty())
        {
            return Err(invalid(
                "'architectures' and 'archMap' were both specified; use one".into(),
            ));
        }
        if self.listener_path.is_some() || default_action == LinuxSeccompAction::ScmpActNotify {
            return Err(invalid(
                "SCMP_ACT_NOTIFY (seccomp agents) is not supported".into(),
            ));
        }
        let mut arches = self.architectures.clone().unwrap_or_default();
        if let Some(map) = self
            .arch_map
            .as_ref()
            .and_then(|m| m.iter().find(|a| a.architecture == NATIVE_SCMP_ARCH))
        {
            arches.push(map.architecture);
            arches.extend(map.sub_architectures.iter().flatten().copied());
        }
        let cap_names: Vec<String> = bounding.iter().map(|c| capabilities::name(*c)).collect();
        let has_cap = |c: &String| cap_names.iter().any(|n| n.eq_ignore_ascii_case(c));
        let newer_or_equal = |v: &str| -> Result<bool> {
            let want = parse_kernel_version(v)
                .ok_or_else(|| invalid(format!("invalid minKernel `{v}`")))?;
            Ok(kernel >= want)
        };

        let mut syscalls = Vec::new();
        for rule in rules {
            if let Some(ex) = &rule.excludes {
                if ex.arches.iter().flatten().any(|a| a == NATIVE_ARCH)
                    || ex.caps.iter().flatten().any(has_cap)
                {
                    continue;
                }
                if let Some(v) = &ex.min_kernel {
                    if newer_or_equal(v)? {
                        continue;
                    }
                }
            }
            if let Some(inc) = &rule.includes {
                if inc.arches.as_ref().is_some_and(|a| !a.is_empty())
                    && !inc.arches.iter().flatten().any(|a| a == NATIVE_ARCH)
                {
                    continue;
                }
                if !inc.caps.iter().flatten().all(has_cap) {
                    continue;
                }
                if let Some(v) = &inc.min_kernel {
                    if !newer_or_equal(v)? {
                        continue;
                    }
                }
            }
            let names = match (&rule.name, &rule.names) {
                (Some(_), Some(n)) if !n.is_empty() => {
                    return Err(invalid(
                        "'name' and 'names' were both specified; use one".into(),
                    ))
                }
                (Some(n), _) => vec![n.clone()],
                (None, Some(n)) => n.clone(),
                (None, None) => Vec::new(),
            };
            if rule.action == LinuxSeccompAction::ScmpActNotify {
                return Err(invalid(
                    "SCMP_ACT_NOTIFY (seccomp agents) is not supported".into(),
                ));
            }
            let mut sc = LinuxSyscall::default();
            sc.set_names(names);
            sc.set_action(rule.action);
            sc.set_errno_ret(rule.errno_ret);
            if let Some(args) = &rule.args {
                let mut out = Vec::with_capacity(args.len());
                for a in args {
                    if a.index > 5 {
                        return Err(invalid(format!(
                            "argument index {} out of range 0-5",
                            a.index
                        )));
                    }
                    let mut arg = LinuxSeccompArgBuilder::default()
                        .index(a.index)
                        .value(a.value)
                        .op(a.op);
                    if let Some(two) = a.value_two {
                        arg = arg.value_two(two);
                    }
                    out.push(arg.build().map_err(|e| invalid(e.to_string()))?);
                }
                if !out.is_empty() {
                    sc.set_args(Some(out));
                }
            }
            syscalls.push(sc);
        }

        let mut profile = LinuxSeccomp::default();
        profile.set_default_action(default_action);
        profile.set_default_errno_ret(self.default_errno_ret);
        profile.set_architectures(Some(arches).filter(|a| !a.is_empty()));
        profile.set_flags(self.flags.clone().filter(|f| !f.is_empty()));
        profile.set_syscalls(Some(syscalls));
        Ok(Some(profile))
    }
}
