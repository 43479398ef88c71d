//! `runbox exec` (root only): each test starts its own long-running
//! container from tests/data/busybox-multi.tar with a foreground
//! `runbox run --entrypoint "" IMAGE sleep 1000` (Env GREETING, WorkingDir
//! /data, user 1000 in /etc/passwd), execs into it, and kills its PID 1 in a
//! Drop guard, which makes the foreground run clean up.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{require_root, stderr, stdout, TestEnv};

fn image() -> String {
    format!(
        "{}/tests/data/busybox-multi.tar",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A running container and the `runbox run` that waits for it.
struct Ctr {
    env: TestEnv,
    run: Child,
    id: String,
    pid: i32,
    /// A pidfd for `pid`, so that stopping never signals a reused pid.
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Ctr {
    /// Starts `sleep 1000` in a container; `extra` are more `run` flags.
    fn start(test: &str, extra: &[&str]) -> Option<Ctr> {
        Self::start_with(test, extra, true)
    }

    /// `until_exec`: also wait until PID 1 runs the command (setup done).
    fn start_with(test: &str, extra: &[&str], until_exec: bool) -> Option<Ctr> {
        let mut ctr = Self::spawn(test, extra)?;
        let (id, pid) = ctr.wait_running(until_exec);
        ctr.id = id;
        ctr.pid = pid;
        // PID 1 runs (wait_running saw it): the pidfd names it from here on.
        ctr.pidfd = Some(
            runbox_runner::syscall::pidfd_open(nix::unistd::Pid::from_raw(pid))
                .expect("pidfd_open of PID 1"),
        );
        Some(ctr)
    }

    /// Starts `runbox run` and returns at once (no id or pid known yet).
    fn spawn(test: &str, extra: &[&str]) -> Option<Ctr> {
        if !require_root(test) {
            return None;
        }
        let env = TestEnv::new();
        let image = image();
        let mut args = vec!["run", "--entrypoint", ""];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&image, "sleep", "1000"]);
        let run = env
            .cmd()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn runbox run");
        Some(Ctr {
            env,
            run,
            id: String::new(),
            pid: 0,
            pidfd: None,
        })
    }

    /// Waits (bounded) until the state dir shows a running container.
    fn wait_running(&mut self, until_exec: bool) -> (String, i32) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(entries) = std::fs::read_dir(self.env.state()) {
                // Dot entries are runbox's bookkeeping (`.new-`, `.trash-`).
                for e in entries
                    .flatten()
                    .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
                {
                    let Ok(text) = std::fs::read_to_string(e.path().join("state.json")) else {
                        continue;
                    };
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let pid = v["pid"].as_i64().unwrap_or(0);
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    // Running, and PID 1 is the command (setup finished).
                    if v["status"] == "running" && (!until_exec || cmdline == b"sleep\x001000\x00")
                    {
                        let id = e.file_name().to_string_lossy().into_owned();
                        return (id, pid as i32);
                    }
                }
            }
            if let Ok(Some(status)) = self.run.try_wait() {
                panic!("runbox run exited early: {status}");
            }
            assert!(Instant::now() < deadline, "container did not start");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn exec_cmd(&self, args: &[&str]) -> Command {
        let mut c = self.env.cmd();
        c.arg("exec").args(args);
        c
    }

    /// `runbox exec ARGS...` with stdin from /dev/null.
    fn exec(&self, args: &[&str]) -> Output {
        self.exec_cmd(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn runbox exec")
    }

    /// `runbox exec ID -- sh -c SCRIPT`, asserting success; returns stdout.
    fn sh(&self, flags: &[&str], script: &str) -> String {
        let mut args: Vec<&str> = flags.to_vec();
        args.extend_from_slice(&[&self.id, "--", "sh", "-c", script]);
        let o = self.exec(&args);
        assert_eq!(code(&o), 0, "exec {args:?}: {}", stderr(&o));
        stdout(&o)
    }

    fn container_mounts(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/mountinfo", self.pid)).unwrap()
    }

    fn host_mounts_under_me(&self) -> Vec<String> {
        let me = self.env.dir.path().to_string_lossy().into_owned();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&me))
            .map(str::to_string)
            .collect()
    }

    /// Host pids of every process in the container's pid namespace.
    fn processes_in_container(&self) -> Vec<i32> {
        let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
        let mine = ns(&self.pid.to_string()).expect("PID 1 alive");
        let mut pids: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|pid: &i32| ns(&pid.to_string()).as_ref() == Some(&mine))
            .collect();
        pids.sort();
        pids
    }

    /// Kills PID 1 and waits for the foreground run to finish.
    fn stop(&mut self) {
        if let Some(fd) = self.pidfd.take() {
            let _ = runbox_runner::syscall::pidfd_send_signal(fd.as_fd(), nix::libc::SIGKILL);
        }
        self.pid = 0;
        let _ = self.run.wait();
    }
}

impl Drop for Ctr {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn env_user_and_workdir_come_from_the_container() {
    let Some(c) = Ctr::start("env_user_and_workdir_come_from_the_container", &[]) else {
        return;
    };
    assert_eq!(
        c.sh(&[], "echo $GREETING; id -u; pwd; echo $HOME"),
        "hello from runbox\n0\n/data\n/root\n"
    );
    assert_eq!(
        c.sh(
            &[
                "-e",
                "GREETING=over",
                "-e",
                "NEW=1",
                "-u",
                "1000",
                "-w",
                "/tmp"
            ],
            "echo $GREETING $NEW $RUNBOX_TEST; id -u; pwd"
        ),
        "over 1 1\n1000\n/tmp\n"
    );
    // A name from the container's /etc/passwd, with its group.
    let o = c.exec(&["-u", "nobody", &c.id, "id"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("uid=65534(nobody)"),
        "{}",
        stdout(&o)
    );
    let o = c.exec(&["-u", "nosuchuser", &c.id, "id"]);
    assert_eq!(code(&o), 125);
    assert!(stderr(&o).contains("nosuchuser"), "{}", stderr(&o));
}

#[test]
fn exit_codes_follow_run() {
    let Some(c) = Ctr::start("exit_codes_follow_run", &[]) else {
        return;
    };
    assert_eq!(code(&c.exec(&[&c.id, "true"])), 0);
    assert_eq!(code(&c.exec(&[&c.id, "--", "sh", "-c", "exit 3"])), 3);
    assert_eq!(code(&c.exec(&[&c.id, "sh", "-c", "kill -9 $$"])), 137);
    let o = c.exec(&[&c.id, "/hello.txt"]);
    assert_eq!(code(&o), 126, "{}", stderr(&o));
    assert!(stderr(&o).contains("/hello.txt"), "{}", stderr(&o));
    let o = c.exec(&[&c.id, "no-such-command"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    assert!(stderr(&o).contains("not found"), "{}", stderr(&o));
    let o = c.exec(&["no-such-container", "true"]);
    assert_eq!(code(&o), 125);
    assert!(stderr(&o).contains("no such container"), "{}", stderr(&o));
}

#[test]
fn stdin_only_with_i_and_a_pty_with_t() {
    let Some(c) = Ctr::start("stdin_only_with_i_and_a_pty_with_t", &[]) else {
        return;
    };
    let mut child = c
        .exec_cmd(&["-i", &c.id, "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"through stdin\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!((code(&o), stdout(&o).as_str()), (0, "through stdin\n"));
    // Without -i, stdin is /dev/null even when runbox's has data.
    let mut child = c
        .exec_cmd(&[&c.id, "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"ignored\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!((code(&o), stdout(&o).as_str()), (0, ""));

    let o = c.exec(&["-t", &c.id, "busybox", "tty"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.trim_end().starts_with("/dev/pts/"), "{out:?}");
    let o = c.exec(&["-t", &c.id, "sh", "-c", "echo $TERM; exit 4"]);
    assert_eq!((code(&o), stdout(&o).trim_end()), (4, "xterm"));
}

#[test]
fn same_pid_namespace_capabilities_and_seccomp() {
    let Some(c) = Ctr::start(
        "same_pid_namespace_capabilities_and_seccomp",
        &["--hostname", "exec-uts"],
    ) else {
        return;
    };
    assert_eq!(
        c.sh(&[], "tr '\\0' ' ' < /proc/1/cmdline; echo; hostname"),
        "sleep 1000 \nexec-uts\n"
    );
    let status = c.sh(
        &[],
        "grep -E '^(CapBnd|CapEff|Seccomp|NoNewPrivs):' /proc/self/status",
    );
    for (key, want) in [
        ("CapBnd", "00000000a80425fb"),
        ("CapEff", "00000000a80425fb"),
        ("Seccomp", "2"),
        ("NoNewPrivs", "0"),
    ] {
        let line = status
            .lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} missing in {status}"));
        assert_eq!(line.split_whitespace().nth(1), Some(want), "{line}");
    }
    // The container's PID 1's view matches the exec's.
    let pid1 = std::fs::read_to_string(format!("/proc/{}/status", c.pid)).unwrap();
    assert!(pid1.contains("CapBnd:\t00000000a80425fb"));
    // A non-root user keeps the bounding set and holds nothing, as in run.
    assert_eq!(
        c.sh(
            &["-u", "1000"],
            "grep -E '^Cap(Eff|Bnd):' /proc/self/status"
        ),
        "CapEff:\t0000000000000000\nCapBnd:\t00000000a80425fb\n"
    );
    // no_new_privileges from the container's Spec.
    drop(c);
    let Some(c) = Ctr::start(
        "same_pid_namespace_capabilities_and_seccomp",
        &["--security-opt", "no-new-privileges"],
    ) else {
        return;
    };
    assert_eq!(
        c.sh(&[], "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"),
        "NoNewPrivs:\t1\nSeccomp:\t2\n"
    );
}

#[test]
fn names_and_id_prefixes_reach_the_container() {
    let Some(c) = Ctr::start(
        "names_and_id_prefixes_reach_the_container",
        &["--name", "exec-web"],
    ) else {
        return;
    };
    for target in ["exec-web", &c.id[..8], &c.id] {
        let o = c.exec(&[target, "cat", "/data/new.txt"]);
        assert_eq!(
            (code(&o), stdout(&o).as_str()),
            (0, "new data\n"),
            "{target}"
        );
    }
}

#[test]
fn detached_exec_returns_at_once_and_keeps_running() {
    let Some(c) = Ctr::start("detached_exec_returns_at_once_and_keeps_running", &[]) else {
        return;
    };
    let o = c.exec(&[
        "-d",
        &c.id,
        "sh",
        "-c",
        "sleep 0.2; echo done > /tmp/detached",
    ]);
    assert_eq!((code(&o), stdout(&o).as_str()), (0, ""), "{}", stderr(&o));
    assert_eq!(code(&c.exec(&[&c.id, "test", "-e", "/tmp/detached"])), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = c.exec(&[&c.id, "cat", "/tmp/detached"]);
        if code(&o) == 0 {
            assert_eq!(stdout(&o), "done\n");
            break;
        }
        assert!(Instant::now() < deadline, "detached command never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = c.exec(&["-d", &c.id, "no-such-command"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
}

#[test]
fn exec_into_an_exited_container_fails_with_126() {
    let Some(mut c) = Ctr::start("exec_into_an_exited_container_fails_with_126", &["--keep"])
    else {
        return;
    };
    c.stop();
    let o = c.exec(&[&c.id, "true"]);
    assert_eq!(code(&o), 126, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("container {} is not running", &c.id[..12])),
        "{}",
        stderr(&o)
    );
}

/// A state.json whose pid now belongs to an unrelated host process (a
/// reused pid) must not make exec enter that process's namespaces.
#[test]
fn a_reused_pid_cannot_redirect_exec() {
    if !require_root("a_reused_pid_cannot_redirect_exec") {
        return;
    }
    let env = TestEnv::new();
    // An unrelated process outside the host's root (as a container's PID 1 would be).
    let root = env.dir.path().join("chroot");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    // Until it runs busybox: its exec fails with ETXTBSY while a process
    // forked by another test thread still holds the copy's write descriptor.
    let mut sleeper = None;
    for _ in 0..100 {
        let mut child = Command::new("chroot")
            .arg(&root)
            .args(["/bin/busybox", "sleep", "1000"])
            .spawn()
            .unwrap();
        let ran = loop {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
            if cmdline == b"/bin/busybox\0sleep\x001000\0" {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if ran {
            sleeper = Some(child);
            break;
        }
    }
    let mut sleeper = sleeper.expect("chroot busybox sleep never ran");
    struct Reap<'a>(&'a mut Child);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = sleeper.id() as i32;
    let _reap = Reap(&mut sleeper);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let id = "00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee";
    let dir = env.state().join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let state = serde_json::json!({
        "id": id, "pid": pid, "pid_start_time": start - 1, "image": "x",
        "rootfs": "/nonexistent", "created": "2024-01-01T00:00:00Z", "status": "running",
    });
    std::fs::write(dir.join("state.json"), state.to_string()).unwrap();
    // A config that would be accepted if the pid check were missing.
    std::fs::write(
        dir.join("config.json"),
        r#"{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["sh"],"cwd":"/"},
            "linux":{"namespaces":[{"type":"mount"},{"type":"pid"}]}}"#,
    )
    .unwrap();
    let witness = env.dir.path().join("witness");
    let script = format!("echo ran > {}", witness.display());
    let o = env
        .cmd()
        .args(["exec", id, "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&o), 126, "{}", stderr(&o));
    assert!(stderr(&o).contains("is not running"), "{}", stderr(&o));
    assert!(
        !witness.exists(),
        "exec ran in the wrong process's namespaces"
    );
    // The same state with the right start time is accepted (the check is what refused).
    let state = serde_json::json!({
        "id": id, "pid": pid, "pid_start_time": start, "image": "x",
        "rootfs": "/nonexistent", "created": "2024-01-01T00:00:00Z", "status": "running",
    });
    std::fs::write(dir.join("state.json"), state.to_string()).unwrap();
    let o = env
        .cmd()
        .args(["exec", id, "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(witness.exists());
}

#[test]
fn concurrent_execs_leave_no_mounts_and_the_container_intact() {
    let Some(c) = Ctr::start(
        "concurrent_execs_leave_no_mounts_and_the_container_intact",
        &[],
    ) else {
        return;
    };
    let before = c.container_mounts();
    let outputs: Vec<(usize, Output)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let c = &c;
                s.spawn(move || {
                    let n = format!("N={i}");
                    let o = c.exec(&["-e", &n, &c.id, "sh", "-c", "echo $N $GREETING; pwd"]);
                    (i, o)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, o) in outputs {
        assert_eq!(code(&o), 0, "exec {i}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("{i} hello from runbox\n/data\n"));
    }
    // A pty and a failed exec must not leave anything either.
    assert_eq!(code(&c.exec(&["-t", &c.id, "true"])), 0);
    assert_eq!(code(&c.exec(&[&c.id, "no-such-command"])), 127);
    assert_eq!(
        c.container_mounts(),
        before,
        "exec changed the container's mounts"
    );
    assert_eq!(c.host_mounts_under_me(), Vec::<String>::new());
    // The container still runs its PID 1, and no exec'd process is left.
    assert_eq!(c.processes_in_container(), vec![c.pid]);
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(c.env.state().join(&c.id).join("state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["status"], "running");
    assert!(Path::new(&format!("/proc/{}", c.pid)).exists());
}

#[test]
fn exec_joins_the_container_cgroup() {
    let Some(c) = Ctr::start("exec_joins_the_container_cgroup", &["--pids-limit", "64"]) else {
        return;
    };
    let pid1 = std::fs::read_to_string(format!("/proc/{}/cgroup", c.pid)).unwrap();
    assert!(
        pid1.contains(&c.id),
        "PID 1 is not in the container's cgroup: {pid1}"
    );
    assert_eq!(c.sh(&[], "cat /proc/self/cgroup"), pid1);
    assert_eq!(c.sh(&["-u", "1000"], "cat /proc/self/cgroup"), pid1);
}

/// run records PID 1 right after its clone, before the mounts: an exec
/// arriving then must still land in the finished container, never on the
/// host's root.
#[test]
fn exec_right_after_start_sees_the_container_root() {
    // Many mounts make the setup window wide enough to hit.
    let tmpfs: Vec<String> = (0..60).map(|i| format!("--tmpfs=/mnt/t{i}")).collect();
    let tmpfs: Vec<&str> = tmpfs.iter().map(String::as_str).collect();
    for _ in 0..5 {
        let Some(c) = Ctr::start_with(
            "exec_right_after_start_sees_the_container_root",
            &tmpfs,
            false,
        ) else {
            return;
        };
        let o = c.exec(&[&c.id, "cat", "/hello.txt"]);
        assert_eq!(
            (code(&o), stdout(&o).as_str()),
            (0, "added in layer 2\n"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn exec_by_name_right_after_the_run_started_waits_for_it() {
    let Some(c) = Ctr::spawn(
        "exec_by_name_right_after_the_run_started_waits_for_it",
        &["--name", "early"],
    ) else {
        return;
    };
    // As soon as the name is claimed (before the container is set up, and
    // before its state is written): exec must wait for it, not fail.
    let name = c.env.state().join(".names/early");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !name.exists() {
        assert!(Instant::now() < deadline, "the name was never claimed");
        std::thread::sleep(Duration::from_micros(200));
    }
    let o = c.exec(&["early", "cat", "/etc/hostname"]);
    let _ = c.env.run(&["rm", "-f", "early"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stdout(&o).is_empty());
}
