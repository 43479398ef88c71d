//! Seccomp: docker's default profile (embedded `seccomp/default.json`, in
//! docker's profile format, x86_64 entries only), user profiles from
//! `--security-opt seccomp=FILE`, their conversion to OCI
//! [`LinuxSeccomp`] for the container's capabilities, compilation to a
//! classic BPF program, and an on-disk cache of compiled programs so that a
//! start does not recompile.
//!
//! Installing the program (`seccomp(2)`/`prctl(PR_SET_SECCOMP)` in the
//! child, after `no_new_privs` or with CAP_SYS_ADMIN) is the spawn side's job
//! (`syscall.rs`); it takes [`BpfProgram::as_sock_filters`] and
//! [`filter_flags`].
//!
//! Only x86_64 is supported: i386 and x32-ABI system calls are killed
//! (docker would filter them through the same allowlist).

mod bpf;
mod cache;
mod profile;
mod syscalls;

use std::path::Path;

use oci_spec::runtime::{Capabilities, LinuxSeccomp, LinuxSeccompFilterFlag};

use crate::error::{Error, Result};

pub use cache::cached_program;
pub use profile::{parse_kernel_version, running_kernel, KernelVersion};

/// Docker's default profile, in docker's format.
const DEFAULT_PROFILE_JSON: &str = include_str!("seccomp/default.json");

/// Larger profile files than this are refused.
const MAX_PROFILE_FILE: u64 = 8 << 20;

/// A compiled classic BPF seccomp program.
#[derive(Clone)]
pub struct BpfProgram {
    insns: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for BpfProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BpfProgram({} instructions)", self.insns.len())
    }
}

impl PartialEq for BpfProgram {
    fn eq(&self, other: &Self) -> bool {
        self.to_bytes() == other.to_bytes()
    }
}

impl BpfProgram {
    /// The instructions, ready for a `sock_fprog`.
    pub fn as_sock_filters(&self) -> &[libc::sock_filter] {
        &self.insns
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether the program is empty (never true for a compiled program).
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// The program as raw bytes in the kernel's layout (8 bytes per
    /// instruction: code u16, jt u8, jf u8, k u32, native endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.insns.len() * 8);
        for i in &self.insns {
            out.extend_from_slice(&i.code.to_ne_bytes());
            out.push(i.jt);
            out.push(i.jf);
            out.extend_from_slice(&i.k.to_ne_bytes());
        }
        out
    }

    /// Parses [`BpfProgram::to_bytes`] output.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() || !bytes.len().is_multiple_of(8) || bytes.len() / 8 > bpf::MAX_INSNS {
            return Err(Error::Seccomp(format!(
                "invalid BPF program of {} bytes",
                bytes.len()
            )));
        }
        let insns = bytes
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Ok(BpfProgram { insns })
    }
}

/// Docker's default profile for a container whose bounding set is
/// `bounding` (moby keys the capability-gated rules on the bounding set),
/// on the running kernel.
pub fn default_profile(bounding: &Capabilities) -> Result<LinuxSeccomp> {
    default_profile_for(bounding, running_kernel())
}

/// [`default_profile`] for a given kernel version (pure, for tests).
pub fn default_profile_for(bounding: &Capabilities, kernel: KernelVersion) -> Result<LinuxSeccomp> {
    let origin = Path::new("<built-in default seccomp profile>");
    profile::DockerProfile::parse(DEFAULT_PROFILE_JSON, origin)?
        .to_oci(bounding, kernel, origin)?
        .ok_or_else(|| Error::Seccomp("built-in profile is empty".into()))
}

/// Loads a docker-format (or plain OCI) seccomp profile from `path`.
/// `Ok(None)` when the profile disables seccomp (no defaultAction, no rules).
pub fn load_profile(path: &Path, bounding: &Capabilities) -> Result<Option<LinuxSeccomp>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io("open seccomp profile", path, e))?;
    let mut json = String::new();
    file.take(MAX_PROFILE_FILE + 1)
        .read_to_string(&mut json)
        .map_err(|e| Error::io("read seccomp profile", path, e))?;
    if json.len() as u64 > MAX_PROFILE_FILE {
        return Err(Error::InvalidFile {
            what: "seccomp profile",
            path: path.to_path_buf(),
            reason: format!("larger than {MAX_PROFILE_FILE} bytes"),
        });
    }
    profile::DockerProfile::parse(&json, path)?.to_oci(bounding, running_kernel(), path)
}

/// Compiles a profile to a BPF program for x86_64.
pub fn compile(profile: &LinuxSeccomp) -> Result<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return Err(Error::Seccomp(
            "seccomp filters are only supported on x86_64".into(),
        ));
    }
    Ok(BpfProgram {
        insns: bpf::compile_insns(profile)?,
    })
}

/// The `SECCOMP_FILTER_FLAG_*` bits for `seccomp(SECCOMP_SET_MODE_FILTER)`
/// that the profile asks for.
pub fn filter_flags(profile: &LinuxSeccomp) -> u32 {
    // linux/seccomp.h
    const TSYNC: u32 = 1;
    const LOG: u32 = 2;
    const SPEC_ALLOW: u32 = 4;
    profile
        .flags()
        .iter()
        .flatten()
        .map(|f| match f {
            LinuxSeccompFilterFlag::SeccompFilterFlagTsync => TSYNC,
            LinuxSeccompFilterFlag::SeccompFilterFlagLog => LOG,
            LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => SPEC_ALLOW,
        })
        .fold(0, |a, b| a | b)
}

#[cfg(test)]
mod tests;
