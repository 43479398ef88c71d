//! cgroup v2: one directory `<root>/runbox/<id>` holding every limit. The
//! controllers must be enabled in `cgroup.subtree_control` of the root and of
//! `runbox`; `runbox` itself never holds processes, since a cgroup with
//! enabled children's controllers cannot (the "no internal processes" rule).

use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::{
    make_container_dir, make_dir, needed_controllers, read_file, write_file, Cgroup, CgroupLayout,
    CgroupMode, Limits, CPU_PERIOD_US, PARENT,
};
use crate::error::{Error, Result};

pub(super) fn create(layout: &CgroupLayout, id: &str, limits: &Limits) -> Result<Cgroup> {
    let root = unified_root(layout)?;
    let controllers = needed_controllers(limits);
    if !controllers.is_empty() {
        check_available(root, &controllers)?;
        enable(root, &controllers, layout.fake)?;
    }
    let parent = root.join(PARENT);
    make_dir(&parent)?;
    if !controllers.is_empty() {
        enable(&parent, &controllers, layout.fake)?;
    }
    let dir = parent.join(id);
    make_container_dir(&dir)?;
    let opened = write_limits(&dir, limits, layout.fake).and_then(|()| open_dir(&dir));
    match opened {
        Ok(fd) => Ok(Cgroup {
            id: id.to_owned(),
            mode: CgroupMode::V2,
            memory_dir: limits.memory.map(|_| dir.clone()),
            dirs: vec![dir],
            dir_fd: Some(fd),
            fake: layout.fake,
        }),
        Err(e) => {
            // The setup error is the one to report; a failed rmdir of the
            // fresh, empty directory is left for sweep_orphans.
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
    }
}

pub(super) fn open(layout: &CgroupLayout, id: &str) -> Result<Option<Cgroup>> {
    let dir = unified_root(layout)?.join(PARENT).join(id);
    if !dir.is_dir() {
        return Ok(None);
    }
    let fd = open_dir(&dir)?;
    // The memory files exist only when the controller is enabled for it.
    let has_memory = dir.join("memory.max").exists();
    Ok(Some(Cgroup {
        id: id.to_owned(),
        mode: CgroupMode::V2,
        memory_dir: has_memory.then(|| dir.clone()),
        dirs: vec![dir],
        dir_fd: Some(fd),
        fake: layout.fake,
    }))
}

fn unified_root(layout: &CgroupLayout) -> Result<&Path> {
    layout.unified.as_deref().ok_or_else(|| Error::Cgroup {
        path: "/sys/fs/cgroup".into(),
        reason: "no cgroup2 hierarchy is mounted".into(),
    })
}

/// Fails naming the first controller the hierarchy does not offer.
fn check_available(root: &Path, controllers: &[&str]) -> Result<()> {
    let path = root.join("cgroup.controllers");
    let text = read_file(&path)?;
    let available: Vec<&str> = text.split_whitespace().collect();
    match controllers.iter().find(|c| !available.contains(c)) {
        None => Ok(()),
        Some(missing) => Err(Error::Cgroup {
            path,
            reason: format!("the `{missing}` controller is not available"),
        }),
    }
}

/// Enables `controllers` for the children of `dir`, writing only the missing
/// ones (a write that changes nothing still takes the cgroup mutex).
fn enable(dir: &Path, controllers: &[&str], fake: bool) -> Result<()> {
    let path = dir.join("cgroup.subtree_control");
    let current = match read_file(&path) {
        Ok(text) => text,
        Err(_) if fake => String::new(),
        Err(e) => return Err(e),
    };
    let enabled: Vec<&str> = current.split_whitespace().collect();
    let missing: Vec<String> = controllers
        .iter()
        .filter(|c| !enabled.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    write_file(&path, &missing.join(" "), fake)
}

fn write_limits(dir: &Path, limits: &Limits, fake: bool) -> Result<()> {
    if let Some(bytes) = limits.memory {
        write_file(&dir.join("memory.max"), &bytes.to_string(), fake)?;
        // Absent without swap accounting; then there is no swap to limit.
        let swap = dir.join("memory.swap.max");
        if fake || swap.exists() {
            write_file(&swap, "0", fake)?;
        }
    }
    if let Some(quota) = limits.cpu_quota_us() {
        write_file(
            &dir.join("cpu.max"),
            &format!("{quota} {CPU_PERIOD_US}"),
            fake,
        )?;
    }
    if let Some(pids) = limits.pids {
        write_file(&dir.join("pids.max"), &pids.to_string(), fake)?;
    }
    Ok(())
}

/// CLONE_INTO_CGROUP wants a directory fd opened for reading (an O_PATH fd
/// is refused with EBADF).
fn open_dir(dir: &Path) -> Result<std::os::fd::OwnedFd> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open cgroup", dir, e.into()))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use nix::unistd::Pid;

    use super::*;

    fn fake_root(controllers: &str) -> (tempfile::TempDir, CgroupLayout) {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("cgroup.controllers"), controllers).unwrap();
        fs::write(tmp.path().join("cgroup.subtree_control"), "").unwrap();
        let mut layout = CgroupLayout::v2(tmp.path().to_owned());
        layout.fake = true;
        (tmp, layout)
    }

    fn read(path: impl AsRef<Path>) -> String {
        fs::read_to_string(path).unwrap()
    }

    #[test]
    fn all_limits_land_in_one_directory() {
        let (tmp, layout) = fake_root("cpuset cpu io memory hugetlb pids rdma misc\n");
        let limits = Limits {
            memory: Some(64 << 20),
            cpus: Some(0.5),
            pids: Some(20),
        };
        let cg = Cgroup::create_in(&layout, "c1", &limits).unwrap();
        let dir = tmp.path().join("runbox/c1");
        assert_eq!(cg.paths(), std::slice::from_ref(&dir));
        assert_eq!(cg.mode(), CgroupMode::V2);
        assert_eq!(
            read(tmp.path().join("cgroup.subtree_control")),
            "+memory +cpu +pids"
        );
        assert_eq!(
            read(tmp.path().join("runbox/cgroup.subtree_control")),
            "+memory +cpu +pids"
        );
        assert_eq!(read(dir.join("memory.max")), "67108864");
        assert_eq!(read(dir.join("memory.swap.max")), "0");
        assert_eq!(read(dir.join("cpu.max")), "50000 100000");
        assert_eq!(read(dir.join("pids.max")), "20");
        assert!(cg.clone_into_fd().is_some(), "v2 hands out a directory fd");
        cg.add_process(Pid::from_raw(4242)).unwrap();
        assert_eq!(read(dir.join("cgroup.procs")), "4242");
    }

    #[test]
    fn only_needed_controllers_are_enabled_and_written() {
        let (tmp, layout) = fake_root("cpu memory pids");
        // Already enabled at the root: not written again.
        fs::write(tmp.path().join("cgroup.subtree_control"), "memory pids\n").unwrap();
        let limits = Limits {
            pids: Some(7),
            ..Limits::default()
        };
        let cg = Cgroup::create_in(&layout, "c2", &limits).unwrap();
        let dir = tmp.path().join("runbox/c2");
        assert_eq!(
            read(tmp.path().join("cgroup.subtree_control")),
            "memory pids\n"
        );
        assert_eq!(
            read(tmp.path().join("runbox/cgroup.subtree_control")),
            "+pids"
        );
        assert_eq!(read(dir.join("pids.max")), "7");
        assert!(!dir.join("memory.max").exists());
        assert!(!dir.join("cpu.max").exists());
        assert_eq!(cg.oom_facts().unwrap(), crate::cgroups::OomFacts::default());
    }

    #[test]
    fn missing_controller_is_named_and_nothing_is_created() {
        let (tmp, layout) = fake_root("cpuset io memory pids");
        let limits = Limits {
            cpus: Some(1.0),
            ..Limits::default()
        };
        let err = Cgroup::create_in(&layout, "c3", &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cgroup.controllers") && err.contains("`cpu` controller"),
            "{err}"
        );
        assert!(!tmp.path().join("runbox").exists());
    }

    #[test]
    fn existing_container_cgroup_is_an_error_and_open_finds_it() {
        let (tmp, layout) = fake_root("cpu memory pids");
        let limits = Limits {
            memory: Some(8 << 20),
            ..Limits::default()
        };
        Cgroup::create_in(&layout, "c4", &limits).unwrap();
        let err = Cgroup::create_in(&layout, "c4", &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("runbox/c4") && err.contains("already exists"),
            "{err}"
        );

        let opened = Cgroup::open_in(&layout, "c4")
            .unwrap()
            .expect("cgroup exists");
        assert_eq!(opened.paths(), [tmp.path().join("runbox/c4")]);
        assert!(opened.clone_into_fd().is_some());
        fs::write(
            tmp.path().join("runbox/c4/memory.events"),
            "max 5\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(
            opened.oom_facts().unwrap(),
            crate::cgroups::OomFacts {
                oom_kills: Some(1),
                limit_hits: Some(5)
            }
        );
        assert!(opened.oom_killed());
        assert!(Cgroup::open_in(&layout, "absent").unwrap().is_none());
    }

    #[test]
    fn failed_write_names_file_and_value() {
        let (tmp, layout) = fake_root("cpu memory pids");
        fs::remove_file(tmp.path().join("cgroup.subtree_control")).unwrap();
        fs::create_dir(tmp.path().join("cgroup.subtree_control")).unwrap();
        let limits = Limits {
            pids: Some(7),
            ..Limits::default()
        };
        let err = Cgroup::create_in(&layout, "c6", &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`+pids`") && err.contains("cgroup.subtree_control"),
            "{err}"
        );
    }

    #[test]
    fn no_cgroup2_mount_is_an_error() {
        let layout = CgroupLayout {
            unified: None,
            ..CgroupLayout::v2("/".into())
        };
        let err = Cgroup::create_in(&layout, "c5", &Limits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no cgroup2"), "{err}");
    }
}
