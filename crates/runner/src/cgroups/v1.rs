//! cgroup v1 (and the v1 side of hybrid hosts): one directory
//! `<mount>/runbox/<id>` per hierarchy whose controller a limit needs, at the
//! mount points mountinfo gives (`cpu` may share `cpu,cpuacct`; co-mounted
//! controllers share one directory).

use std::path::{Path, PathBuf};

use super::{
    make_container_dir, make_dir, needed_controllers, write_file, Cgroup, CgroupLayout, Limits,
    CPU_PERIOD_US, PARENT,
};
use crate::error::{Error, Result};

fn mount_of<'a>(layout: &'a CgroupLayout, controller: &str) -> Option<&'a Path> {
    match controller {
        "memory" => layout.memory.as_deref(),
        "cpu" => layout.cpu.as_deref(),
        "pids" => layout.pids.as_deref(),
        _ => None,
    }
}

pub(super) fn create(layout: &CgroupLayout, id: &str, limits: &Limits) -> Result<Cgroup> {
    // Resolve every mount before creating anything, so a missing controller
    // leaves no directories behind.
    let mut mounts = Vec::new();
    for controller in needed_controllers(limits) {
        let mount = mount_of(layout, controller).ok_or_else(|| Error::Cgroup {
            path: "/proc/self/mountinfo".into(),
            reason: format!("no cgroup v1 hierarchy with the `{controller}` controller is mounted"),
        })?;
        mounts.push((controller, mount));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    let result = (|| {
        for (_, mount) in &mounts {
            let dir = mount.join(PARENT).join(id);
            if dirs.contains(&dir) {
                continue;
            }
            make_dir(&mount.join(PARENT))?;
            make_container_dir(&dir)?;
            dirs.push(dir);
        }
        for (controller, mount) in &mounts {
            write_limit(
                controller,
                mount,
                &mount.join(PARENT).join(id),
                limits,
                layout.fake,
            )?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for dir in dirs.iter().rev() {
            // Keep the setup error; an empty leftover is swept later.
            let _ = std::fs::remove_dir(dir);
        }
        return Err(e);
    }
    let memory_dir = limits
        .memory
        .and(layout.memory.as_ref())
        .map(|m| m.join(PARENT).join(id));
    Ok(Cgroup {
        id: id.to_owned(),
        mode: layout.mode,
        dirs,
        memory_dir,
        dir_fd: None,
        fake: layout.fake,
    })
}

fn write_limit(
    controller: &str,
    mount: &Path,
    dir: &Path,
    limits: &Limits,
    fake: bool,
) -> Result<()> {
    match controller {
        "memory" => {
            let Some(bytes) = limits.memory else {
                return Ok(());
            };
            let bytes = bytes.to_string();
            // memory first: memsw may never be below it, and both start unlimited.
            write_file(&dir.join("memory.limit_in_bytes"), &bytes, fake)?;
            // memsw exists only with swap accounting (swapaccount=1).
            if mount.join("memory.memsw.limit_in_bytes").exists() {
                write_file(&dir.join("memory.memsw.limit_in_bytes"), &bytes, fake)?;
            }
        }
        "cpu" => {
            let Some(quota) = limits.cpu_quota_us() else {
                return Ok(());
            };
            write_file(
                &dir.join("cpu.cfs_period_us"),
                &CPU_PERIOD_US.to_string(),
                fake,
            )?;
            write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string(), fake)?;
        }
        "pids" => {
            let Some(pids) = limits.pids else {
                return Ok(());
            };
            write_file(&dir.join("pids.max"), &pids.to_string(), fake)?;
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn open(layout: &CgroupLayout, id: &str) -> Option<Cgroup> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for mount in [&layout.memory, &layout.cpu, &layout.pids]
        .into_iter()
        .flatten()
    {
        let dir = mount.join(PARENT).join(id);
        if dir.is_dir() && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    if dirs.is_empty() {
        return None;
    }
    // The memory hierarchy has a dir for the container only if it had a limit.
    let memory_dir = layout
        .memory
        .as_ref()
        .map(|m| m.join(PARENT).join(id))
        .filter(|d| d.is_dir());
    Some(Cgroup {
        id: id.to_owned(),
        mode: layout.mode,
        dirs,
        memory_dir,
        dir_fd: None,
        fake: layout.fake,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use nix::unistd::Pid;

    use super::*;
    use crate::cgroups::CgroupMode;

    /// A v1 host with cpu co-mounted with cpuacct, and swap accounting on
    /// when `memsw`.
    fn fake_v1(memsw: bool) -> (tempfile::TempDir, CgroupLayout) {
        let tmp = tempfile::tempdir().unwrap();
        let mount = |name: &str| {
            let p = tmp.path().join(name);
            fs::create_dir(&p).unwrap();
            Some(p)
        };
        let layout = CgroupLayout {
            mode: CgroupMode::V1,
            unified: None,
            memory: mount("memory"),
            cpu: mount("cpu,cpuacct"),
            pids: mount("pids"),
            fake: true,
        };
        if memsw {
            fs::write(tmp.path().join("memory/memory.memsw.limit_in_bytes"), "").unwrap();
        }
        (tmp, layout)
    }

    fn read(path: impl AsRef<Path>) -> String {
        fs::read_to_string(path).unwrap()
    }

    #[test]
    fn each_limit_goes_to_its_hierarchy() {
        let (tmp, layout) = fake_v1(true);
        let limits = Limits {
            memory: Some(64 << 20),
            cpus: Some(0.5),
            pids: Some(20),
        };
        let cg = Cgroup::create_in(&layout, "c1", &limits).unwrap();
        let t = tmp.path();
        assert_eq!(
            cg.paths(),
            [
                t.join("memory/runbox/c1"),
                t.join("cpu,cpuacct/runbox/c1"),
                t.join("pids/runbox/c1")
            ]
        );
        assert_eq!(
            read(t.join("memory/runbox/c1/memory.limit_in_bytes")),
            "67108864"
        );
        assert_eq!(
            read(t.join("memory/runbox/c1/memory.memsw.limit_in_bytes")),
            "67108864"
        );
        assert_eq!(
            read(t.join("cpu,cpuacct/runbox/c1/cpu.cfs_period_us")),
            "100000"
        );
        assert_eq!(
            read(t.join("cpu,cpuacct/runbox/c1/cpu.cfs_quota_us")),
            "50000"
        );
        assert_eq!(read(t.join("pids/runbox/c1/pids.max")), "20");
        assert!(cg.clone_into_fd().is_none(), "no clone3 into v1 cgroups");
        cg.add_process(Pid::from_raw(77)).unwrap();
        for dir in cg.paths() {
            assert_eq!(read(dir.join("cgroup.procs")), "77");
        }
    }

    #[test]
    fn without_swap_accounting_memsw_is_not_written() {
        let (tmp, layout) = fake_v1(false);
        let limits = Limits {
            memory: Some(8 << 20),
            ..Limits::default()
        };
        let cg = Cgroup::create_in(&layout, "c2", &limits).unwrap();
        let dir = tmp.path().join("memory/runbox/c2");
        assert_eq!(cg.paths(), std::slice::from_ref(&dir));
        assert_eq!(read(dir.join("memory.limit_in_bytes")), "8388608");
        assert!(!dir.join("memory.memsw.limit_in_bytes").exists());
        assert!(
            !tmp.path().join("pids/runbox").exists(),
            "unused hierarchies untouched"
        );
        assert!(!tmp.path().join("cpu,cpuacct/runbox").exists());
    }

    #[test]
    fn comounted_controllers_share_one_directory() {
        let (tmp, mut layout) = fake_v1(false);
        layout.pids = layout.memory.clone();
        let limits = Limits {
            memory: Some(8 << 20),
            pids: Some(3),
            ..Limits::default()
        };
        let cg = Cgroup::create_in(&layout, "c3", &limits).unwrap();
        let dir = tmp.path().join("memory/runbox/c3");
        assert_eq!(cg.paths(), std::slice::from_ref(&dir));
        assert_eq!(read(dir.join("pids.max")), "3");
        assert_eq!(read(dir.join("memory.limit_in_bytes")), "8388608");
    }

    #[test]
    fn missing_hierarchy_is_named_before_anything_is_created() {
        let (tmp, mut layout) = fake_v1(false);
        layout.pids = None;
        let limits = Limits {
            memory: Some(8 << 20),
            pids: Some(3),
            ..Limits::default()
        };
        let err = Cgroup::create_in(&layout, "c4", &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`pids` controller") && err.contains("mountinfo"),
            "{err}"
        );
        assert!(!tmp.path().join("memory/runbox").exists());
    }

    #[test]
    fn a_clash_in_a_later_hierarchy_rolls_back_earlier_dirs() {
        let (tmp, layout) = fake_v1(false);
        let limits = Limits {
            memory: Some(8 << 20),
            pids: Some(3),
            ..Limits::default()
        };
        fs::create_dir_all(tmp.path().join("pids/runbox/c5")).unwrap();
        let err = Cgroup::create_in(&layout, "c5", &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pids/runbox/c5") && err.contains("already exists"),
            "{err}"
        );
        assert!(
            !tmp.path().join("memory/runbox/c5").exists(),
            "memory dir rolled back"
        );
        assert!(
            tmp.path().join("pids/runbox/c5").exists(),
            "not ours: left alone"
        );
    }

    #[test]
    fn open_finds_the_hierarchies_in_use() {
        let (tmp, layout) = fake_v1(false);
        let limits = Limits {
            memory: Some(8 << 20),
            cpus: Some(1.0),
            ..Limits::default()
        };
        Cgroup::create_in(&layout, "c6", &limits).unwrap();
        let cg = Cgroup::open_in(&layout, "c6").unwrap().expect("exists");
        let t = tmp.path();
        assert_eq!(
            cg.paths(),
            [t.join("memory/runbox/c6"), t.join("cpu,cpuacct/runbox/c6")]
        );
        fs::write(
            t.join("memory/runbox/c6/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        fs::write(t.join("memory/runbox/c6/memory.failcnt"), "9\n").unwrap();
        let facts = cg.oom_facts().unwrap();
        assert_eq!((facts.oom_kills, facts.limit_hits), (Some(2), Some(9)));
        assert!(cg.oom_killed());
        assert!(Cgroup::open_in(&layout, "c7").unwrap().is_none());
    }
}
