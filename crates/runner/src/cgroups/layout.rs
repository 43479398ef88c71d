//! Where the cgroup hierarchies of this host are mounted, found by parsing
//! `/proc/self/mountinfo` (pure) rather than guessing paths: a v1 `cpu`
//! controller may live at `/sys/fs/cgroup/cpu,cpuacct`, and a hybrid host has
//! an empty cgroup2 at `/sys/fs/cgroup/unified` that must not carry limits.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// mountinfo is a few KiB; refuse pathological sizes rather than read them.
const MAX_MOUNTINFO: u64 = 16 << 20;

/// Which cgroup hierarchies carry the resource controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// One cgroup2 hierarchy holds every controller.
    V2,
    /// Only v1 hierarchies, one per controller group.
    V1,
    /// v1 hierarchies hold the controllers; a cgroup2 mount (usually
    /// `/sys/fs/cgroup/unified`, systemd's "hybrid" mode) exists but is not
    /// used for limits.
    Hybrid,
}

impl CgroupMode {
    /// The mode of this host, from `/proc/self/mountinfo`.
    pub fn detect() -> Result<CgroupMode> {
        Ok(CgroupLayout::detect()?.mode)
    }
}

/// The mount points runbox needs. On v2 only `unified` is set; on v1 and
/// hybrid the three controller mounts are set when the host mounts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    pub mode: CgroupMode,
    /// The cgroup2 mount point (the limits hierarchy only in [`CgroupMode::V2`]).
    pub unified: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub cpu: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    /// Test layouts on a plain directory: interface files do not exist until
    /// written, so writes create them and optional files count as present.
    pub(crate) fake: bool,
}

/// One cgroup-related line of mountinfo.
#[derive(Debug)]
struct CgroupMount {
    root: String,
    mount_point: PathBuf,
    v2: bool,
    /// Controller names from the super options (v1 only).
    controllers: Vec<String>,
}

impl CgroupLayout {
    /// The layout of this host.
    pub fn detect() -> Result<CgroupLayout> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(MOUNTINFO)
            .and_then(|f| f.take(MAX_MOUNTINFO).read_to_string(&mut text))
            .map_err(|e| Error::io("read", MOUNTINFO, e))?;
        Self::from_mountinfo(&text)
    }

    /// Decides the layout from the text of a mountinfo file.
    pub fn from_mountinfo(text: &str) -> Result<CgroupLayout> {
        let mounts: Vec<CgroupMount> = text.lines().filter_map(parse_line).collect();
        // A v1 mount counts only if it carries a real controller:
        // `name=systemd` alone is a named hierarchy without resource control.
        let v1: Vec<&CgroupMount> = mounts
            .iter()
            .filter(|m| !m.v2 && !m.controllers.is_empty())
            .collect();
        // Bind mounts of a sub-cgroup (root other than "/") would make our
        // paths wrong; prefer full mounts and take the first one, as the
        // host's own mounts come before any later bind mount.
        let find = |name: &str| {
            v1.iter()
                .filter(|m| m.controllers.iter().any(|c| c == name))
                .min_by_key(|m| m.root != "/")
                .map(|m| m.mount_point.clone())
        };
        let unified = mounts
            .iter()
            .filter(|m| m.v2)
            .min_by_key(|m| (m.root != "/", m.mount_point != Path::new("/sys/fs/cgroup")))
            .map(|m| m.mount_point.clone());
        let mode = match (v1.is_empty(), &unified) {
            (true, Some(_)) => CgroupMode::V2,
            (false, None) => CgroupMode::V1,
            (false, Some(_)) => CgroupMode::Hybrid,
            (true, None) => {
                return Err(Error::Cgroup {
                    path: MOUNTINFO.into(),
                    reason: "no cgroup filesystem is mounted".into(),
                })
            }
        };
        if mode == CgroupMode::V2 {
            return Ok(CgroupLayout::v2(unified.unwrap_or_default()));
        }
        Ok(CgroupLayout {
            mode,
            unified,
            memory: find("memory"),
            cpu: find("cpu"),
            pids: find("pids"),
            fake: false,
        })
    }

    /// A v2 layout rooted at `unified` (e.g. `/sys/fs/cgroup`).
    pub fn v2(unified: PathBuf) -> CgroupLayout {
        CgroupLayout {
            mode: CgroupMode::V2,
            unified: Some(unified),
            memory: None,
            cpu: None,
            pids: None,
            fake: false,
        }
    }
}

/// Parses one mountinfo line; `None` for non-cgroup or malformed lines.
/// Format: `id parent maj:min root mount-point options [optional...] - fstype source superopts`.
fn parse_line(line: &str) -> Option<CgroupMount> {
    let mut fields = line.split(' ');
    let _id = fields.next()?;
    let _parent = fields.next()?;
    let _dev = fields.next()?;
    let root = unescape(fields.next()?);
    let mount_point = unescape(fields.next()?);
    let _options = fields.next()?;
    // Optional fields run up to a lone "-".
    fields.by_ref().find(|f| *f == "-")?;
    let fstype = fields.next()?;
    let _source = fields.next()?;
    let super_options = fields.next().unwrap_or("");
    let v2 = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    let controllers = if v2 {
        Vec::new()
    } else {
        super_options
            .split(',')
            .filter(|o| is_v1_controller(o))
            .map(str::to_owned)
            .collect()
    };
    Some(CgroupMount {
        root,
        mount_point: PathBuf::from(mount_point),
        v2,
        controllers,
    })
}

/// Controller names among v1 super options (the rest are flags such as `rw`,
/// `noprefix`, `xattr`, `release_agent=...` or `name=...`).
fn is_v1_controller(option: &str) -> bool {
    matches!(
        option,
        "cpu"
            | "cpuacct"
            | "cpuset"
            | "memory"
            | "devices"
            | "freezer"
            | "net_cls"
            | "net_prio"
            | "blkio"
            | "perf_event"
            | "hugetlb"
            | "pids"
            | "rdma"
            | "misc"
    )
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\134` for `\`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let (b'\\', Some(d)) = (bytes[i], octal) {
            let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            if let Ok(v) = u8::try_from(value) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine: v1 controllers one per mount plus an empty cgroup2.
    const HYBRID: &str = "\
25 1 254:1 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// CentOS 7 style: cpu and cpuacct co-mounted, no cgroup2 at all.
    const V1: &str = "\
18 60 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw
24 18 0:20 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:7 - tmpfs tmpfs ro,mode=755
25 24 0:21 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
28 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
29 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
33 24 0:29 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
";

    /// A current systemd distribution: everything on cgroup2.
    const V2: &str = "\
22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn hybrid_uses_v1_controller_mounts() {
        let l = CgroupLayout::from_mountinfo(HYBRID).unwrap();
        assert_eq!(l.mode, CgroupMode::Hybrid);
        assert_eq!(
            l.unified.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            l.memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(l.cpu.as_deref(), Some(Path::new("/sys/fs/cgroup/cpu")));
        assert_eq!(l.pids.as_deref(), Some(Path::new("/sys/fs/cgroup/pids")));
    }

    #[test]
    fn v1_follows_comounted_cpu_and_ignores_named_hierarchy() {
        let l = CgroupLayout::from_mountinfo(V1).unwrap();
        assert_eq!(l.mode, CgroupMode::V1);
        assert_eq!(l.unified, None);
        assert_eq!(
            l.cpu.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            l.memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(l.pids.as_deref(), Some(Path::new("/sys/fs/cgroup/pids")));
    }

    #[test]
    fn v2_has_only_the_unified_mount() {
        let l = CgroupLayout::from_mountinfo(V2).unwrap();
        assert_eq!(l, CgroupLayout::v2("/sys/fs/cgroup".into()));
    }

    #[test]
    fn named_v1_hierarchy_alone_does_not_make_a_hybrid() {
        // systemd "unified" mode with a legacy name=systemd mount for old tools.
        let text = format!(
            "{V2}27 26 0:24 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
        );
        assert_eq!(
            CgroupLayout::from_mountinfo(&text).unwrap().mode,
            CgroupMode::V2
        );
    }

    #[test]
    fn full_mount_preferred_over_bind_of_a_subgroup() {
        let text = "\
50 1 0:32 /docker/abc /mnt/memory rw - cgroup cgroup rw,memory
51 1 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let l = CgroupLayout::from_mountinfo(text).unwrap();
        assert_eq!(
            l.memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(l.mode, CgroupMode::V1);
        assert_eq!(l.pids, None);
    }

    #[test]
    fn no_cgroup_mount_is_an_error_naming_mountinfo() {
        let err = CgroupLayout::from_mountinfo("25 1 254:1 / / rw - ext4 /dev/vda rw\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/proc/self/mountinfo") && err.contains("no cgroup"),
            "{err}"
        );
    }

    #[test]
    fn escaped_mount_points_and_garbage_lines() {
        let text = "garbage\n\n60 1 0:40 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        let l = CgroupLayout::from_mountinfo(text).unwrap();
        assert_eq!(l.unified.as_deref(), Some(Path::new("/mnt/my cg")));
        assert_eq!(unescape("a\\134b\\"), "a\\b\\");
    }

    #[test]
    fn detect_on_this_host_returns_a_mode() {
        // Every Linux host running these tests has some cgroup mount.
        let l = CgroupLayout::detect().unwrap();
        match l.mode {
            CgroupMode::V2 => assert!(l.unified.is_some()),
            CgroupMode::V1 | CgroupMode::Hybrid => {
                assert!(l.memory.is_some() || l.cpu.is_some() || l.pids.is_some())
            }
        }
    }
}
