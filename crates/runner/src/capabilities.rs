//! Capability sets with docker semantics: the default set (CapBnd
//! `00000000a80425fb`), `--cap-add`/`--cap-drop` (names with or without
//! `CAP_`, any case, and `ALL`), and `--privileged` (every capability the
//! running kernel knows, from `/proc/sys/kernel/cap_last_cap`).
//!
//! The result is the bounding set; [`process_capabilities`] derives the five
//! OCI sets from it and the uid the process runs as.

use std::collections::HashSet;

use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use crate::error::{Error, Result};

/// Every capability with its kernel number and its name without `CAP_`.
const TABLE: &[(u8, &str, Capability)] = &[
    (0, "CHOWN", Capability::Chown),
    (1, "DAC_OVERRIDE", Capability::DacOverride),
    (2, "DAC_READ_SEARCH", Capability::DacReadSearch),
    (3, "FOWNER", Capability::Fowner),
    (4, "FSETID", Capability::Fsetid),
    (5, "KILL", Capability::Kill),
    (6, "SETGID", Capability::Setgid),
    (7, "SETUID", Capability::Setuid),
    (8, "SETPCAP", Capability::Setpcap),
    (9, "LINUX_IMMUTABLE", Capability::LinuxImmutable),
    (10, "NET_BIND_SERVICE", Capability::NetBindService),
    (11, "NET_BROADCAST", Capability::NetBroadcast),
    (12, "NET_ADMIN", Capability::NetAdmin),
    (13, "NET_RAW", Capability::NetRaw),
    (14, "IPC_LOCK", Capability::IpcLock),
    (15, "IPC_OWNER", Capability::IpcOwner),
    (16, "SYS_MODULE", Capability::SysModule),
    (17, "SYS_RAWIO", Capability::SysRawio),
    (18, "SYS_CHROOT", Capability::SysChroot),
    (19, "SYS_PTRACE", Capability::SysPtrace),
    (20, "SYS_PACCT", Capability::SysPacct),
    (21, "SYS_ADMIN", Capability::SysAdmin),
    (22, "SYS_BOOT", Capability::SysBoot),
    (23, "SYS_NICE", Capability::SysNice),
    (24, "SYS_RESOURCE", Capability::SysResource),
    (25, "SYS_TIME", Capability::SysTime),
    (26, "SYS_TTY_CONFIG", Capability::SysTtyConfig),
    (27, "MKNOD", Capability::Mknod),
    (28, "LEASE", Capability::Lease),
    (29, "AUDIT_WRITE", Capability::AuditWrite),
    (30, "AUDIT_CONTROL", Capability::AuditControl),
    (31, "SETFCAP", Capability::Setfcap),
    (32, "MAC_OVERRIDE", Capability::MacOverride),
    (33, "MAC_ADMIN", Capability::MacAdmin),
    (34, "SYSLOG", Capability::Syslog),
    (35, "WAKE_ALARM", Capability::WakeAlarm),
    (36, "BLOCK_SUSPEND", Capability::BlockSuspend),
    (37, "AUDIT_READ", Capability::AuditRead),
    (38, "PERFMON", Capability::Perfmon),
    (39, "BPF", Capability::Bpf),
    (40, "CHECKPOINT_RESTORE", Capability::CheckpointRestore),
];

/// Docker's default capability set (moby `oci/caps` DefaultCapabilities).
pub const DEFAULT: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// The highest capability number this crate knows.
pub const LAST_KNOWN_CAP: u8 = 40;

/// The kernel number of a capability.
pub fn number(cap: Capability) -> u8 {
    TABLE
        .iter()
        .find(|(_, _, c)| *c == cap)
        .map(|(n, _, _)| *n)
        // Every variant of oci-spec 0.7 is in TABLE; a future one sorts last.
        .unwrap_or(u8::MAX)
}

/// The `CAP_`-prefixed name of a capability, as docker and the kernel print it.
pub fn name(cap: Capability) -> String {
    TABLE
        .iter()
        .find(|(_, _, c)| *c == cap)
        .map(|(_, n, _)| format!("CAP_{n}"))
        .unwrap_or_else(|| format!("{cap:?}"))
}

/// Parses `NET_ADMIN`, `CAP_NET_ADMIN`, `net_admin`... (not `ALL`).
pub fn parse(s: &str) -> Result<Capability> {
    let upper = s.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    TABLE
        .iter()
        .find(|(_, n, _)| *n == bare)
        .map(|(_, _, c)| *c)
        .ok_or_else(|| Error::InvalidOption {
            option: "capability",
            value: s.to_string(),
            reason: "unknown capability".into(),
        })
}

/// The bitmask of a set, as in `CapBnd:` of /proc/PID/status.
pub fn mask(caps: &Capabilities) -> u64 {
    caps.iter()
        .map(|c| number(*c))
        .filter(|n| *n < 64)
        .fold(0, |m, n| m | (1u64 << n))
}

/// The highest capability number of the running kernel; falls back to what
/// this crate knows when /proc is unreadable.
pub fn kernel_last_cap() -> u8 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok())
        .unwrap_or(LAST_KNOWN_CAP)
}

/// Every capability known both to this crate and to a kernel whose highest
/// capability is `last_cap`.
pub fn all(last_cap: u8) -> Capabilities {
    TABLE
        .iter()
        .filter(|(n, _, _)| *n <= last_cap)
        .map(|(_, _, c)| *c)
        .collect()
}

fn is_all(s: &str) -> bool {
    let upper = s.trim().to_ascii_uppercase();
    upper == "ALL" || upper == "CAP_ALL"
}

fn parse_list(list: &[String], last_cap: u8) -> Result<(bool, HashSet<Capability>)> {
    let mut all_given = false;
    let mut caps = HashSet::new();
    for s in list {
        if is_all(s) {
            all_given = true;
            continue;
        }
        let cap = parse(s)?;
        if number(cap) > last_cap {
            return Err(Error::InvalidOption {
                option: "capability",
                value: s.clone(),
                reason: format!("not supported by the running kernel (cap_last_cap {last_cap})"),
            });
        }
        caps.insert(cap);
    }
    Ok((all_given, caps))
}

/// The bounding set for a container, following moby's TweakCapabilities:
/// privileged gives all; `--cap-add ALL` gives all minus the drops;
/// `--cap-drop ALL` gives only the adds; otherwise default minus drops plus adds.
pub fn bounding_set(
    cap_add: &[String],
    cap_drop: &[String],
    privileged: bool,
    last_cap: u8,
) -> Result<Capabilities> {
    let (add_all, adds) = parse_list(cap_add, last_cap)?;
    let (drop_all, drops) = parse_list(cap_drop, last_cap)?;
    if privileged {
        return Ok(all(last_cap));
    }
    let caps = if add_all {
        all(last_cap)
            .into_iter()
            .filter(|c| !drops.contains(c))
            .collect()
    } else if drop_all {
        adds
    } else {
        DEFAULT
            .iter()
            .copied()
            .filter(|c| !drops.contains(c))
            .chain(adds)
            .collect()
    };
    Ok(caps)
}

/// The OCI process capabilities for a bounding set: root gets it as
/// effective and permitted too; any other uid gets empty effective and
/// permitted sets (as docker does), so only file capabilities or setuid
/// binaries can raise privileges up to the bounding set. Inheritable and
/// ambient stay empty (moby since CVE-2022-24769).
pub fn process_capabilities(bounding: &Capabilities, uid: u32) -> LinuxCapabilities {
    let granted = if uid == 0 {
        bounding.clone()
    } else {
        Capabilities::new()
    };
    let mut caps = LinuxCapabilities::default();
    caps.set_bounding(Some(bounding.clone()));
    caps.set_effective(Some(granted.clone()));
    caps.set_permitted(Some(granted));
    caps.set_inheritable(Some(Capabilities::new()));
    caps.set_ambient(Some(Capabilities::new()));
    caps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn table_is_complete_and_numbered_in_order() {
        for (i, (n, _, _)) in TABLE.iter().enumerate() {
            assert_eq!(usize::from(*n), i);
        }
        assert_eq!(all(40).len(), 41);
        assert_eq!(all(37).len(), 38);
    }

    #[test]
    fn default_set_matches_docker_capbnd() {
        let b = bounding_set(&[], &[], false, 40).unwrap();
        assert_eq!(mask(&b), 0xa80425fb);
        assert_eq!(b.len(), 14);
    }

    #[test]
    fn parse_accepts_docker_spellings() {
        for v in ["NET_ADMIN", "CAP_NET_ADMIN", "net_admin", "cap_net_admin"] {
            assert_eq!(parse(v).unwrap(), Capability::NetAdmin, "{v}");
        }
        let e = parse("NET_FOO").unwrap_err().to_string();
        assert!(e.contains("unknown capability"), "{e}");
        assert_eq!(name(Capability::SysAdmin), "CAP_SYS_ADMIN");
    }

    #[test]
    fn add_and_drop() {
        let b = bounding_set(&s(&["net_admin"]), &s(&["CAP_CHOWN", "kill"]), false, 40).unwrap();
        assert_eq!(mask(&b), (0xa80425fb_u64 | (1 << 12)) & !(1 | (1 << 5)));
        assert!(b.contains(&Capability::NetAdmin));
        assert!(!b.contains(&Capability::Chown));
    }

    #[test]
    fn add_all_minus_drops_and_drop_all_plus_adds() {
        let b = bounding_set(&s(&["ALL"]), &s(&["SYS_ADMIN"]), false, 40).unwrap();
        assert_eq!(mask(&b), ((1u64 << 41) - 1) & !(1 << 21));
        let b = bounding_set(&s(&["NET_BIND_SERVICE"]), &s(&["all"]), false, 40).unwrap();
        assert_eq!(mask(&b), 1 << 10);
        let b = bounding_set(&[], &s(&["ALL"]), false, 40).unwrap();
        assert!(b.is_empty());
    }

    #[test]
    fn privileged_is_everything_the_kernel_knows() {
        let b = bounding_set(&[], &s(&["ALL"]), true, 40).unwrap();
        assert_eq!(mask(&b), (1u64 << 41) - 1);
        let b = bounding_set(&[], &[], true, 37).unwrap();
        assert_eq!(mask(&b), (1u64 << 38) - 1);
    }

    #[test]
    fn unknown_or_unsupported_cap_is_an_error() {
        assert!(bounding_set(&s(&["FOO"]), &[], false, 40).is_err());
        let e = bounding_set(&s(&["BPF"]), &[], false, 37)
            .unwrap_err()
            .to_string();
        assert!(e.contains("running kernel"), "{e}");
    }

    #[test]
    fn non_root_gets_empty_effective_and_permitted() {
        let b = bounding_set(&[], &[], false, 40).unwrap();
        let root = process_capabilities(&b, 0);
        assert_eq!(root.effective().as_ref().map(mask), Some(0xa80425fb));
        assert_eq!(root.permitted().as_ref().map(mask), Some(0xa80425fb));
        assert_eq!(root.inheritable().as_ref().map(mask), Some(0));
        assert_eq!(root.ambient().as_ref().map(mask), Some(0));
        let user = process_capabilities(&b, 1000);
        assert_eq!(user.bounding().as_ref().map(mask), Some(0xa80425fb));
        assert_eq!(user.effective().as_ref().map(mask), Some(0));
        assert_eq!(user.permitted().as_ref().map(mask), Some(0));
    }
}
