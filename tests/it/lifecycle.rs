//! Containers that outlive the command (root only): `run -d`, `--name`, `ps`,
//! `logs [-f]`, `stop`, `kill`, `rm`, and the resource limits. Every test
//! removes its containers with `rm -f` even when it fails, and checks that
//! no mount, state or cgroup is left.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{require_root, stderr, stdout, TestEnv};

const APPLETS: &[&str] = &[
    "sh", "true", "echo", "sleep", "cat", "dd", "head", "tail", "seq", "test", "[",
];

struct Lbox {
    env: TestEnv,
    rootfs: PathBuf,
    /// A directory the container sees as /ctl.
    ctl: PathBuf,
    /// Container ids seen, for the cgroup leak check.
    ids: Vec<String>,
}

impl Lbox {
    fn new(test: &str) -> Option<Lbox> {
        if !require_root(test) {
            return None;
        }
        let env = TestEnv::new();
        let rootfs = env.dir.path().join("rootfs");
        for d in ["bin", "etc", "tmp", "proc", "sys", "dev"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for app in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(app)).unwrap();
        }
        std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        let ctl = env.dir.path().join("ctl");
        std::fs::create_dir(&ctl).unwrap();
        Some(Lbox {
            env,
            rootfs,
            ctl,
            ids: Vec::new(),
        })
    }

    fn runbox(&self, args: &[&str]) -> Output {
        self.env
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn runbox")
    }

    /// `runbox run --rootfs R -v CTL:/ctl ARGS...`
    fn run(&self, args: &[&str]) -> Output {
        let v = format!("{}:/ctl", self.ctl.display());
        let mut all = vec!["run", "--rootfs", self.rootfs.to_str().unwrap(), "-v", &v];
        all.extend_from_slice(args);
        self.runbox(&all)
    }

    /// `run -d`, returning the id.
    fn detach(&mut self, args: &[&str]) -> String {
        let mut all = vec!["-d"];
        all.extend_from_slice(args);
        let o = self.run(&all);
        assert_eq!(o.status.code(), Some(0), "run -d: {}", stderr(&o));
        let id = stdout(&o).trim().to_string();
        assert_eq!(id.len(), 64, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        self.ids.push(id.clone());
        id
    }

    /// `logs -f` as a child whose stdout we read line by line.
    fn follow(&self, name: &str) -> (Child, BufReader<std::process::ChildStdout>) {
        let mut child = self
            .env
            .cmd()
            .args(["logs", "-f", name])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        (child, out)
    }

    fn ps_json(&self, all: bool) -> Vec<serde_json::Value> {
        let mut args = vec!["ps", "--format", "json"];
        if all {
            args.push("-a");
        }
        let o = self.runbox(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    fn go(&self) {
        std::fs::write(self.ctl.join("go"), "").unwrap();
    }
}

fn line(r: &mut impl BufRead) -> String {
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    s
}

fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Ok(hier) = std::fs::read_dir("/sys/fs/cgroup") {
        for h in hier.flatten() {
            for p in [
                h.path().join("runbox").join(id),
                PathBuf::from("/sys/fs/cgroup/runbox").join(id),
            ] {
                if p.exists() && !found.contains(&p) {
                    found.push(p);
                }
            }
        }
    }
    found
}

impl Drop for Lbox {
    fn drop(&mut self) {
        // Remove everything, even after a failure.
        let o = self.runbox(&["ps", "-aq"]);
        for id in stdout(&o).lines() {
            let _ = self.runbox(&["rm", "-f", id]);
        }
        if std::thread::panicking() {
            return;
        }
        let me = self.env.dir.path().to_string_lossy().into_owned();
        let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&me))
            .map(str::to_string)
            .collect();
        assert!(mounts.is_empty(), "mounts leaked: {mounts:?}");
        let state = self.env.state_entries();
        assert!(state.is_empty(), "state left behind: {state:?}");
        for id in &self.ids {
            assert_eq!(cgroup_dirs(id), Vec::<PathBuf>::new(), "cgroup leaked");
        }
    }
}

#[test]
fn detached_run_shows_in_ps_and_its_logs_follow_until_exit() {
    let Some(mut b) = Lbox::new("detached_run_shows_in_ps_and_its_logs_follow_until_exit") else {
        return;
    };
    let script = "echo one; while [ ! -e /ctl/go ]; do sleep 0.05; done; echo two >&2; exit 3";
    let id = b.detach(&["--name", "lc-web", "sh", "-c", script]);
    let (mut logs, mut out) = b.follow("lc-web");
    assert_eq!(line(&mut out), "one\n");

    let o = b.runbox(&["ps"]);
    let table = stdout(&o);
    let row = table.lines().find(|l| l.contains("lc-web")).expect(&table);
    assert!(row.starts_with(&id[..12]) && row.contains("Up "), "{row}");
    let listed = b.ps_json(false);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["name"], "lc-web");
    assert_eq!(listed[0]["status"], "running");
    assert!(listed[0]["pid"].as_i64().unwrap() > 0);
    assert_eq!(listed[0]["command"][0], "sh");
    assert_eq!(stdout(&b.runbox(&["ps", "-q"])).trim(), id);

    b.go();
    assert_eq!(line(&mut out), "two\n");
    assert_eq!(line(&mut out), "", "logs -f ends when the container exits");
    assert!(logs.wait().unwrap().success());

    assert!(b.ps_json(false).is_empty(), "ps without -a: running only");
    let all = b.ps_json(true);
    assert_eq!(all[0]["status"], "exited");
    assert_eq!(all[0]["exit_code"], 3);
    let table = stdout(&b.runbox(&["ps", "-a"]));
    assert!(table.contains("Exited (3)"), "{table}");
    assert_eq!(stdout(&b.runbox(&["logs", &id[..10]])), "one\ntwo\n");

    let o = b.runbox(&["rm", "lc-web"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(b.ps_json(true).is_empty());
    let o = b.runbox(&["logs", "lc-web"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("no such container"), "{}", stderr(&o));
}

#[test]
fn stop_waits_for_a_trap_and_kills_a_pid1_without_one() {
    let Some(mut b) = Lbox::new("stop_waits_for_a_trap_and_kills_a_pid1_without_one") else {
        return;
    };
    b.detach(&[
        "--name",
        "lc-trap",
        "sh",
        "-c",
        "trap 'exit 7' TERM; echo ready; while true; do sleep 0.05; done",
    ]);
    let (mut logs, mut out) = b.follow("lc-trap");
    assert_eq!(line(&mut out), "ready\n");
    let t = Instant::now();
    let o = b.runbox(&["stop", "-t", "10", "lc-trap"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(logs.wait().unwrap().success());
    let st = b.ps_json(true);
    assert_eq!(
        (st[0]["status"].as_str(), st[0]["exit_code"].as_i64()),
        (Some("exited"), Some(7))
    );

    // PID 1 of a pid namespace ignores SIGTERM without a handler.
    b.detach(&["--name", "lc-deaf", "sleep", "60"]);
    let t = Instant::now();
    let o = b.runbox(&["stop", "-t", "1", "lc-deaf"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    let st = b.ps_json(true);
    let deaf = st.iter().find(|c| c["name"] == "lc-deaf").unwrap();
    assert_eq!(deaf["exit_code"], 137);
    // Stopping a stopped container is fine.
    assert!(b.runbox(&["stop", "lc-deaf"]).status.success());
    assert!(b.runbox(&["rm", "lc-trap", "lc-deaf"]).status.success());
}

#[test]
fn kill_sends_the_signal_and_rm_needs_force_while_running() {
    let Some(mut b) = Lbox::new("kill_sends_the_signal_and_rm_needs_force_while_running") else {
        return;
    };
    b.detach(&[
        "--name",
        "lc-usr",
        "sh",
        "-c",
        "trap 'exit 5' USR1; echo ready; while true; do sleep 0.05; done",
    ]);
    let (mut logs, mut out) = b.follow("lc-usr");
    assert_eq!(line(&mut out), "ready\n");
    let o = b.runbox(&["kill", "-s", "SIGUSR1", "lc-usr"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(logs.wait().unwrap().success());
    let o = b.runbox(&["stop", "lc-usr"]); // waits until the exit is recorded
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(b.ps_json(true)[0]["exit_code"], 5);
    let o = b.runbox(&["kill", "lc-usr"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("is not running"), "{}", stderr(&o));
    assert_eq!(
        b.runbox(&["kill", "-s", "BOGUS", "lc-usr"]).status.code(),
        Some(125)
    );

    let id = b.detach(&["--name", "lc-busy", "sleep", "60"]);
    let o = b.runbox(&["rm", "lc-busy"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("is running"), "{}", stderr(&o));
    let o = b.runbox(&["rm", "-f", &id[..12], "lc-usr"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(b.ps_json(true).is_empty());
}

#[test]
fn names_are_unique_and_freed_by_foreground_runs() {
    let Some(mut b) = Lbox::new("names_are_unique_and_freed_by_foreground_runs") else {
        return;
    };
    let id = b.detach(&["--name", "lc-db", "sleep", "60"]);
    let o = b.run(&["-d", "--name", "lc-db", "true"]);
    assert_eq!(o.status.code(), Some(125));
    let err = stderr(&o);
    assert!(
        err.contains("name `lc-db` is already in use") && err.contains(&id[..12]),
        "{err}"
    );
    let o = b.run(&["--name", "lc-db", "true"]);
    assert_eq!(o.status.code(), Some(125), "foreground too");
    assert_eq!(
        b.run(&["--name", "bad/name", "true"]).status.code(),
        Some(125)
    );

    // A foreground run shows in ps while it runs and frees its name after.
    let v = format!("{}:/ctl", b.ctl.display());
    let mut fg = b
        .env
        .cmd()
        .args([
            "run",
            "--rootfs",
            b.rootfs.to_str().unwrap(),
            "-v",
            &v,
            "--name",
            "lc-fg",
        ])
        .args([
            "sh",
            "-c",
            "touch /ctl/up; while [ ! -e /ctl/go ]; do sleep 0.05; done",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !b.ctl.join("up").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "foreground run did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let running = b.ps_json(false);
    assert!(running.iter().any(|c| c["name"] == "lc-fg"), "{running:?}");
    b.go();
    assert!(fg.wait().unwrap().success());
    assert!(b.run(&["--name", "lc-fg", "true"]).status.success());
    assert!(b.runbox(&["rm", "-f", "lc-db"]).status.success());
}

fn cgroup_file(id: &str, names: &[&str]) -> Option<(PathBuf, String)> {
    for dir in cgroup_dirs(id) {
        for n in names {
            if let Ok(v) = std::fs::read_to_string(dir.join(n)) {
                return Some((dir.join(n), v.trim().to_string()));
            }
        }
    }
    None
}

#[test]
fn memory_limit_kills_with_137_and_says_so() {
    let Some(b) = Lbox::new("memory_limit_kills_with_137_and_says_so") else {
        return;
    };
    let o = b.run(&[
        "--memory",
        "32m",
        "dd",
        "if=/dev/zero",
        "bs=100M",
        "count=1",
        "of=/dev/null",
    ]);
    assert_eq!(o.status.code(), Some(137), "{}", stderr(&o));
    assert!(stderr(&o).contains("memory limit"), "{}", stderr(&o));
    // Under the limit it runs normally.
    let o = b.run(&[
        "--memory",
        "64m",
        "dd",
        "if=/dev/zero",
        "bs=1M",
        "count=8",
        "of=/dev/null",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        b.run(&["--memory", "lots", "true"]).status.code(),
        Some(125)
    );
}

#[test]
fn pids_and_cpu_limits_are_written_and_enforced() {
    let Some(mut b) = Lbox::new("pids_and_cpu_limits_are_written_and_enforced") else {
        return;
    };
    let id = b.detach(&[
        "--name",
        "lc-fork",
        "--pids-limit",
        "10",
        "--cpus",
        "0.5",
        "sh",
        "-c",
        // A subshell per sleep: the forks that fail kill a subshell, not PID 1.
        "for i in $(seq 20); do (sleep 60 &); done; echo spawned; exec sleep 60",
    ]);
    let (mut logs, mut out) = b.follow("lc-fork");
    // stderr ("can't fork") shares the log: read up to our marker.
    for _ in 0..40 {
        if line(&mut out) == "spawned\n" {
            break;
        }
    }
    let (_, max) = cgroup_file(&id, &["pids.max"]).expect("pids cgroup");
    assert_eq!(max, "10");
    let (_, current) = cgroup_file(&id, &["pids.current"]).unwrap();
    let current: u32 = current.parse().unwrap();
    assert!(
        (2..=10).contains(&current),
        "{current} tasks under a limit of 10"
    );
    let log = stdout(&b.runbox(&["logs", "lc-fork"]));
    assert!(log.contains("can't fork"), "the loop hit the limit: {log}");
    match cgroup_file(&id, &["cpu.max", "cpu.cfs_quota_us"]) {
        Some((p, v)) if p.ends_with("cpu.max") => assert_eq!(v, "50000 100000"),
        Some((_, v)) => assert_eq!(v, "50000"),
        None => panic!("no cpu cgroup for {id}"),
    }
    let o = b.runbox(&["rm", "-f", "lc-fork"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = logs.wait();
    assert_eq!(cgroup_dirs(&id), Vec::<PathBuf>::new());
    // Without limits, no cgroup at all.
    let plain = b.detach(&["sleep", "60"]);
    assert_eq!(cgroup_dirs(&plain), Vec::<PathBuf>::new());
    assert!(b.runbox(&["rm", "-f", &plain]).status.success());
}

#[test]
fn cgroup_of_a_sigkilled_runbox_is_reaped_by_the_next_run() {
    let Some(lb) = Lbox::new("cgroup_of_a_sigkilled_runbox_is_reaped_by_the_next_run") else {
        return;
    };
    let rootfs = lb.rootfs.to_str().unwrap().to_string();
    let mut child: Child = lb
        .env
        .cmd()
        .args([
            "run", "--memory", "64m", "--rootfs", &rootfs, "sleep", "100",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until the container runs and its cgroup exists.
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let running = std::fs::read_dir(lb.env.state())
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| {
                !e.file_name().as_encoded_bytes().starts_with(b".")
                    && std::fs::read_to_string(e.path().join("state.json"))
                        .is_ok_and(|s| s.contains("\"running\""))
            });
        if let Some(e) = running {
            break e.file_name().to_string_lossy().into_owned();
        }
        assert!(Instant::now() < deadline, "container never ran");
        std::thread::yield_now();
    };
    assert!(!cgroup_dirs(&id).is_empty(), "no cgroup for --memory");
    // Killed with its deleter, the deleter first: a live deleter would reap
    // the container itself (tests/it/run.rs), racing the next command.
    lb.env.kill_deleters();
    child.kill().unwrap();
    child.wait().unwrap();
    // The next runbox command reaps what the killed one left.
    let out = lb.runbox(&["run", "--rootfs", &rootfs, "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        cgroup_dirs(&id).is_empty(),
        "cgroup left: {:?}",
        cgroup_dirs(&id)
    );
    assert!(!lb.env.state().join(&id).exists(), "state dir left");
}
