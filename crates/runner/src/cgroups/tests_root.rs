//! Tests against the host's real cgroups (root only): limits land in the
//! kernel's files, a memory hog is OOM-killed, a fork bomb stops at the pids
//! limit, removal kills and cleans up, and the v2 mechanics work on the
//! host's cgroup2 mount (the empty `unified` one on a hybrid host).
//!
//! Each test uses its own container id and a Drop guard that kills its
//! processes and removes its cgroup directories even when an assert fails.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::unistd::Pid;

use super::*;

/// Skips (returns false) without root unless RUNBOX_TESTS_MUST_RUN=1.
fn have_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("RUNBOX_TESTS_MUST_RUN").as_deref() != Ok("1"),
        "{test}: needs root (RUNBOX_TESTS_MUST_RUN=1 forbids skipping)"
    );
    eprintln!("skipping {test}: needs root to create cgroups");
    false
}

fn unique_id(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{test}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kills the test's processes and removes its cgroup dirs on drop.
struct Guard {
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Guard {
    fn of(cg: &Cgroup) -> Guard {
        Guard {
            dirs: cg.paths().to_vec(),
            children: Vec::new(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = teardown::remove_dirs(&self.dirs, Duration::from_secs(2));
    }
}

fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("read {}: {e}", path.as_ref().display()))
}

fn procs(dir: &Path) -> Vec<Pid> {
    read_procs(dir).unwrap()
}

/// A shell that waits for a line on stdin before running `script`, so the
/// test can move it into the cgroup first (as spawn does with its sync pipe).
fn held_shell(script: &str, stderr: Stdio) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("read go && {script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn release(child: &mut Child) {
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
}

#[test]
fn limits_are_written_and_a_process_joins() {
    if !have_root("limits_are_written_and_a_process_joins") {
        return;
    }
    let id = unique_id("limits");
    let limits = Limits {
        memory: Some(64 << 20),
        cpus: Some(0.5),
        pids: Some(20),
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let mut guard = Guard::of(&cg);
    guard
        .children
        .push(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = pid_of(&guard.children[0]);
    cg.add_process(pid).unwrap();

    for dir in cg.paths() {
        assert!(dir.ends_with(format!("runbox/{id}")), "{}", dir.display());
        assert_eq!(procs(dir), [pid], "in {}", dir.display());
    }
    match cg.mode() {
        CgroupMode::V2 => {
            let dir = &cg.paths()[0];
            assert_eq!(read(dir.join("memory.max")).trim(), "67108864");
            assert_eq!(read(dir.join("cpu.max")).trim(), "50000 100000");
            assert_eq!(read(dir.join("pids.max")).trim(), "20");
            assert!(cg.clone_into_fd().is_some());
        }
        CgroupMode::V1 | CgroupMode::Hybrid => {
            let layout = CgroupLayout::detect().unwrap();
            let dir = |mount: &Option<PathBuf>| mount.as_ref().unwrap().join(PARENT).join(&id);
            let memory = dir(&layout.memory);
            assert_eq!(
                read(memory.join("memory.limit_in_bytes")).trim(),
                "67108864"
            );
            if memory.join("memory.memsw.limit_in_bytes").exists() {
                assert_eq!(
                    read(memory.join("memory.memsw.limit_in_bytes")).trim(),
                    "67108864"
                );
            }
            assert_eq!(
                read(dir(&layout.cpu).join("cpu.cfs_period_us")).trim(),
                "100000"
            );
            assert_eq!(
                read(dir(&layout.cpu).join("cpu.cfs_quota_us")).trim(),
                "50000"
            );
            assert_eq!(read(dir(&layout.pids).join("pids.max")).trim(), "20");
            assert!(cg.clone_into_fd().is_none());
            let own = read(format!("/proc/{pid}/cgroup"));
            assert!(own.contains(&format!(":memory:/runbox/{id}\n")), "{own}");
            assert!(own.contains(&format!(":pids:/runbox/{id}\n")), "{own}");
        }
    }

    // exec's path: find the same cgroup by id.
    let opened = Cgroup::open(&id).unwrap().expect("the cgroup exists");
    assert_eq!(opened.paths(), cg.paths());
    assert_eq!(opened.processes().unwrap(), [pid]);
    assert!(!opened.oom_killed());

    let paths = cg.paths().to_vec();
    cg.remove().unwrap();
    let status = guard.children[0].wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "remove kills what is left"
    );
    for dir in &paths {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    assert!(Cgroup::open(&id).unwrap().is_none());
}

#[test]
fn memory_hog_is_oom_killed() {
    if !have_root("memory_hog_is_oom_killed") {
        return;
    }
    let id = unique_id("oom");
    let limits = Limits {
        memory: Some(64 << 20),
        ..Limits::default()
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let mut guard = Guard::of(&cg);
    // dd's 200 MiB buffer is filled by read(2) from /dev/zero: every page
    // is touched, so it is charged to the cgroup for sure.
    guard.children.push(held_shell(
        "exec dd if=/dev/zero of=/dev/null bs=200M count=1",
        Stdio::null(),
    ));
    cg.add_process(pid_of(&guard.children[0])).unwrap();
    assert!(!cg.oom_killed(), "nothing ran yet");
    release(&mut guard.children[0]);
    let status = guard.children[0].wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let facts = cg.oom_facts().unwrap();
    assert!(cg.oom_killed(), "{facts:?}");
    assert!(facts.explains_death(true), "{facts:?}");
    // limit_hits is not asserted: kernel 6.18's v1 failcnt stays 0 here.
    let paths = cg.paths().to_vec();
    cg.remove().unwrap();
    assert!(paths.iter().all(|p| !p.exists()));
}

#[test]
fn fork_bomb_stops_at_the_pids_limit() {
    if !have_root("fork_bomb_stops_at_the_pids_limit") {
        return;
    }
    let id = unique_id("pids");
    let limits = Limits {
        pids: Some(20),
        ..Limits::default()
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let _guard = Guard::of(&cg);
    // The sleeps drop the stderr pipe so reading it ends when sh exits.
    let mut child = held_shell(
        "for i in $(seq 50); do sleep 30 >/dev/null 2>&1 & done; echo finished",
        Stdio::piped(),
    );
    cg.add_process(pid_of(&child)).unwrap();
    release(&mut child);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
    assert!(
        stderr.contains("fork"),
        "the shell must have failed to fork: {stderr:?}"
    );

    let dir = &cg.paths()[0];
    let sleeping = procs(dir).len();
    assert!((1..=20).contains(&sleeping), "{sleeping} sleeps inside");
    if let Some(events) = read_optional(&dir.join("pids.events")).unwrap() {
        assert!(flat_key(&events, "max").unwrap_or(0) > 0, "{events}");
    }
    // The sleeps are not our children: remove must still get rid of them.
    let paths = cg.paths().to_vec();
    cg.remove().unwrap();
    assert!(paths.iter().all(|p| !p.exists()));
}

#[test]
fn cpu_hog_is_throttled_to_its_quota() {
    if !have_root("cpu_hog_is_throttled_to_its_quota") {
        return;
    }
    let id = unique_id("cpu");
    // A tenth of a CPU: even on a loaded 2-core machine a busy loop gets
    // more than that, so the quota, not the load, is what holds it back.
    let limits = Limits {
        cpus: Some(0.1),
        ..Limits::default()
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let mut guard = Guard::of(&cg);
    guard.children.push(held_shell(
        "exec timeout 0.5 sh -c 'while :; do :; done'",
        Stdio::null(),
    ));
    cg.add_process(pid_of(&guard.children[0])).unwrap();
    release(&mut guard.children[0]);
    let status = guard.children[0].wait().unwrap();
    assert_eq!(status.code(), Some(124), "timeout ends the hog: {status:?}");
    let stat = read(cg.paths()[0].join("cpu.stat"));
    let throttled = flat_key(&stat, "nr_throttled").unwrap_or(0);
    assert!(
        throttled >= 2,
        "the quota must have throttled the hog: {stat}"
    );
    if let Some(usage_us) = flat_key(&stat, "usage_usec") {
        // v2 reports the usage itself: 10 ms per period plus one period's slack.
        assert!(usage_us <= 160_000, "{stat}");
    }
    cg.remove().unwrap();
}

#[test]
fn v2_mechanics_on_the_hosts_cgroup2() {
    if !have_root("v2_mechanics_on_the_hosts_cgroup2") {
        return;
    }
    let detected = CgroupLayout::detect().unwrap();
    let Some(unified) = detected.unified.clone() else {
        eprintln!("skipping v2_mechanics_on_the_hosts_cgroup2: no cgroup2 mount on this host");
        return;
    };
    // On a hybrid host the cgroup2 mount has no controllers: no limits,
    // but directory, fd, cgroup.procs, cgroup.kill and rmdir are the same.
    let layout = CgroupLayout::v2(unified.clone());
    let id = unique_id("v2");
    let cg = Cgroup::create_in(&layout, &id, &Limits::default()).unwrap();
    let mut guard = Guard::of(&cg);
    assert_eq!(cg.paths(), [unified.join(PARENT).join(&id)]);
    let fd = cg.clone_into_fd().expect("v2 has a clone3 fd");
    let fd_target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    assert_eq!(fd_target, cg.paths()[0]);

    guard
        .children
        .push(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = pid_of(&guard.children[0]);
    cg.add_process(pid).unwrap();
    let own = read(format!("/proc/{pid}/cgroup"));
    assert!(own.contains(&format!("0::/runbox/{id}\n")), "{own}");
    let opened = Cgroup::open_in(&layout, &id).unwrap().expect("exists");
    assert_eq!(opened.processes().unwrap(), [pid]);

    let dir = cg.paths()[0].clone();
    cg.remove().unwrap();
    assert_eq!(
        guard.children[0].wait().unwrap().signal(),
        Some(libc::SIGKILL)
    );
    assert!(!dir.exists());
}

#[test]
fn sweep_removes_an_orphan_and_its_processes() {
    if !have_root("sweep_removes_an_orphan_and_its_processes") {
        return;
    }
    let id = unique_id("sweep");
    let limits = Limits {
        pids: Some(5),
        memory: Some(32 << 20),
        ..Limits::default()
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let mut guard = Guard::of(&cg);
    guard
        .children
        .push(Command::new("sleep").arg("30").spawn().unwrap());
    cg.add_process(pid_of(&guard.children[0])).unwrap();
    let paths = cg.paths().to_vec();
    drop(cg);
    // Only our id counts as dead: other runbox cgroups on this host (other
    // tests, real containers) must not be touched.
    let layout = CgroupLayout::detect().unwrap();
    let removed = teardown::sweep(&layout, |candidate, _| candidate == id).unwrap();
    assert_eq!(removed, [id.as_str()]);
    assert_eq!(
        guard.children[0].wait().unwrap().signal(),
        Some(libc::SIGKILL)
    );
    assert!(paths.iter().all(|p| !p.exists()));
    // The age seen on cgroupfs is real: a fresh cgroup is young. (The
    // public sweep_orphans is not called: it would remove every runbox
    // cgroup of this host not listed.)
    let young = Cgroup::create(&id, &limits).unwrap();
    guard.dirs = young.paths().to_vec();
    let removed = teardown::sweep(&layout, |c, age| c == id && age >= ORPHAN_MIN_AGE).unwrap();
    assert!(removed.is_empty(), "a fresh cgroup is not an orphan yet");
    young.remove().unwrap();
}

#[test]
fn create_refuses_an_existing_container_cgroup() {
    if !have_root("create_refuses_an_existing_container_cgroup") {
        return;
    }
    let id = unique_id("clash");
    let limits = Limits {
        pids: Some(10),
        ..Limits::default()
    };
    let cg = Cgroup::create(&id, &limits).unwrap();
    let _guard = Guard::of(&cg);
    let err = Cgroup::create(&id, &limits).unwrap_err().to_string();
    assert!(err.contains(&id) && err.contains("already exists"), "{err}");
    cg.remove().unwrap();
}
