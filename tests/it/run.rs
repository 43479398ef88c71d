//! `runbox run`: real containers (root only) over a busybox directory built
//! from the host's /bin/busybox (`--rootfs`). Every test checks afterwards
//! that nothing stayed mounted under its temp dir and that the state dir and
//! the writable layers are gone.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{require_root, stderr, stdout, within_5s, TestEnv};

const APPLETS: &[&str] = &[
    "sh", "true", "false", "id", "env", "cat", "ls", "echo", "sleep", "hostname", "pwd", "touch",
    "grep", "mount", "unshare", "tty", "test", "kill", "stat", "wc", "head",
];

/// A test environment with a busybox rootfs; on drop asserts no leftovers.
struct Box {
    env: TestEnv,
    rootfs: PathBuf,
}

impl Box {
    fn new(test: &str) -> Option<Box> {
        if !require_root(test) {
            return None;
        }
        assert!(
            Path::new("/bin/busybox").exists(),
            "{test}: needs /bin/busybox (busybox-static)"
        );
        let env = TestEnv::new();
        let rootfs = env.dir.path().join("rootfs");
        for d in ["bin", "etc", "tmp", "proc", "sys", "dev"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for app in APPLETS {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(app)).unwrap();
        }
        std::fs::write(
            rootfs.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            rootfs.join("etc/group"),
            "root:x:0:\napp:x:1000:\nextra:x:2000:app\n",
        )
        .unwrap();
        std::fs::write(rootfs.join("etc/data.txt"), "not a program\n").unwrap();
        Some(Box { env, rootfs })
    }

    /// `runbox run --rootfs R ARGS...`
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.env.cmd();
        c.arg("run").arg("--rootfs").arg(&self.rootfs).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.cmd(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn runbox")
    }

    fn mounts_under_me(&self) -> Vec<String> {
        let me = self.env.dir.path().to_string_lossy().into_owned();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&me))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Box {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        assert_eq!(
            self.mounts_under_me(),
            Vec::<String>::new(),
            "mounts leaked on the host"
        );
        let state = self.env.state_entries();
        assert!(state.is_empty(), "state left behind: {state:?}");
        // Writable layers are deleted by a detached process: wait for it (bounded).
        let mut layers: Vec<_> = Vec::new();
        for _ in 0..500 {
            layers = std::fs::read_dir(self.env.root().join("containers"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name())
                        .filter(|n| !n.to_string_lossy().starts_with(".spare-"))
                        .collect()
                })
                .unwrap_or_default();
            if layers.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(layers.is_empty(), "writable layers left behind: {layers:?}");
    }
}

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

#[test]
fn exit_codes_follow_docker() {
    let Some(b) = Box::new("exit_codes_follow_docker") else {
        return;
    };
    assert_eq!(code(&b.run(&["/bin/true"])), 0);
    assert_eq!(code(&b.run(&["--", "sh", "-c", "exit 3"])), 3);
    let o = b.run(&["no-such-command"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-command"), "{}", stderr(&o));
    let o = b.run(&["/etc/data.txt"]);
    assert_eq!(code(&o), 126, "{}", stderr(&o));
    // A child killed by SIGINT: the shell reports 128+2.
    assert_eq!(
        code(&b.run(&["sh", "-c", "sh -c 'kill -INT $$'; exit $?"])),
        130
    );
    // With --init, the command is not PID 1 and dies of its own signal.
    assert_eq!(code(&b.run(&["--init", "sh", "-c", "kill -INT $$"])), 130);
    let o = b.run(&["--network", "bogus", "true"]);
    assert_eq!(code(&o), 125, "{}", stderr(&o));
    assert_eq!(code(&b.run(&["--timeout", "soon", "true"])), 125);
    let o = b.run(&["--timeout", "300ms", "sleep", "30"]);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
}

#[test]
fn env_user_workdir_hostname() {
    let Some(b) = Box::new("env_user_workdir_hostname") else {
        return;
    };
    let env_file = b.env.dir.path().join("env.list");
    std::fs::write(&env_file, "# comment\nA=from-file\nB=from-file\n").unwrap();
    let o = b
        .cmd(&[
            "-e",
            "A=from-flag",
            "--env-file",
            env_file.to_str().unwrap(),
            "-e",
            "RUNBOX_IT_HOST",
            "env",
        ])
        .env("RUNBOX_IT_HOST", "from-host")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(out.lines().any(|l| l == "A=from-flag"), "{out}");
    assert!(out.lines().any(|l| l == "B=from-file"), "{out}");
    assert!(
        out.lines().any(|l| l == "RUNBOX_IT_HOST=from-host"),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("PATH=")), "{out}");

    let o = b.run(&["-u", "1000:1000", "id"]);
    assert_eq!(
        stdout(&o).trim(),
        "uid=1000(app) gid=1000(app)",
        "{}",
        stderr(&o)
    );
    let o = b.run(&["-u", "app", "id", "-G"]);
    assert_eq!(stdout(&o).trim(), "1000 2000", "{}", stderr(&o));

    let o = b.run(&["sh", "-c", "umask"]);
    assert_eq!(stdout(&o).trim(), "0022", "docker's umask: {}", stderr(&o));
    let o = b.run(&["-w", "/new/work/dir", "pwd"]);
    assert_eq!(stdout(&o).trim(), "/new/work/dir", "{}", stderr(&o));
    let o = b.run(&[
        "--hostname",
        "boxy",
        "sh",
        "-c",
        "hostname; cat /etc/hostname",
    ]);
    assert_eq!(stdout(&o), "boxy\nboxy\n", "{}", stderr(&o));
}

#[test]
fn signals_are_forwarded_to_the_container() {
    let Some(b) = Box::new("signals_are_forwarded_to_the_container") else {
        return;
    };
    let mut child = b
        .cmd(&[
            "sh",
            "-c",
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(42));

    // Signals ignored by runbox (Rust ignores SIGPIPE; a shell ignores INT for
    // background jobs) are back to default in the container.
    let o = b.run(&["grep", "SigIgn", "/proc/self/status"]);
    assert_eq!(
        stdout(&o).trim(),
        "SigIgn:\t0000000000000000",
        "{}",
        stderr(&o)
    );
}

#[test]
fn stdin_only_with_interactive() {
    let Some(b) = Box::new("stdin_only_with_interactive") else {
        return;
    };
    for (flags, expected) in [(&["-i", "cat"][..], "hello\n"), (&["cat"][..], "")] {
        let mut child = b
            .cmd(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), 0);
        assert_eq!(stdout(&o), expected, "{flags:?}");
    }
}

#[test]
fn tty_gives_a_terminal() {
    let Some(b) = Box::new("tty_gives_a_terminal") else {
        return;
    };
    let inner = format!(
        "{} --root {} --state {} run --rootfs {} -t sh -c 'test -t 0 && test -t 1 && test -c /dev/console && echo is-a-tty; exit 5'",
        crate::common::runbox_bin().display(),
        b.env.root().display(),
        b.env.state().display(),
        b.rootfs.display()
    );
    // `script` gives runbox a terminal as stdin/stdout.
    let o = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("is-a-tty"),
        "{} {}",
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(code(&o), 5, "{}", stderr(&o));
}

#[test]
fn volumes_tmpfs_and_read_only() {
    let Some(b) = Box::new("volumes_tmpfs_and_read_only") else {
        return;
    };
    let host = b.env.dir.path().join("vol");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("in.txt"), "from host\n").unwrap();
    let ro = format!("{}:/data:ro", host.display());
    let o = b.run(&[
        "-v",
        &ro,
        "sh",
        "-c",
        "cat /data/in.txt; touch /data/x && echo wrote",
    ]);
    assert_eq!(stdout(&o), "from host\n", "{}", stderr(&o));
    assert!(!host.join("x").exists());
    let rw = format!("{}:/deep/data", host.display());
    let o = b.run(&["-v", &rw, "sh", "-c", "echo out > /deep/data/out.txt"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(host.join("out.txt")).unwrap(),
        "out\n"
    );

    let o = b.run(&[
        "--tmpfs",
        "/scratch",
        "sh",
        "-c",
        "grep ' /scratch ' /proc/mounts && touch /scratch/f",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("tmpfs /scratch tmpfs"),
        "{}",
        stdout(&o)
    );

    let o = b.run(&["--read-only", "sh", "-c", "touch /x"]);
    assert_ne!(code(&o), 0);
    assert!(!b.rootfs.join("x").exists());
    // Existing mountpoints work on a read-only root; the image dir is never changed.
    let o = b.run(&[
        "--read-only",
        "--tmpfs",
        "/tmp",
        "sh",
        "-c",
        "touch /tmp/ok && echo ok",
    ]);
    assert_eq!(stdout(&o), "ok\n", "{}", stderr(&o));
    let o = b.run(&["--read-only", "-v", &rw, "true"]);
    assert_eq!(
        code(&o),
        125,
        "a missing mountpoint cannot be created: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("/deep"), "{}", stderr(&o));
    for p in ["deep", "etc/hostname", "etc/hosts", "etc/resolv.conf"] {
        assert!(
            !b.rootfs.join(p).exists(),
            "--read-only created {p} in the image"
        );
    }
    // Without --read-only writes land in the writable layer, not in the image.
    let o = b.run(&["sh", "-c", "touch /y && echo ok"]);
    assert_eq!(stdout(&o), "ok\n", "{}", stderr(&o));
    assert!(!b.rootfs.join("y").exists());
}

#[test]
fn network_none_has_only_loopback() {
    let Some(b) = Box::new("network_none_has_only_loopback") else {
        return;
    };
    let o = b.run(&["--network", "none", "cat", "/proc/net/dev"]);
    let ifaces: Vec<String> = stdout(&o)
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|s| s.trim().to_string())
        .collect();
    assert_eq!(ifaces, vec!["lo".to_string()], "{}", stderr(&o));
    let o = b.run(&["--network", "none", "cat", "/sys/class/net/lo/operstate"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn default_sandbox_caps_seccomp_masks() {
    let Some(b) = Box::new("default_sandbox_caps_seccomp_masks") else {
        return;
    };
    let o = b.run(&[
        "grep",
        "-E",
        "^(CapBnd|CapEff|Seccomp|NoNewPrivs):",
        "/proc/self/status",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains("CapBnd:\t00000000a80425fb"),
        "{out}{}",
        stderr(&o)
    );
    assert!(out.contains("CapEff:\t00000000a80425fb"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
    assert!(out.contains("NoNewPrivs:\t0"), "{out}");
    // Even as root: no CAP_SYS_ADMIN and seccomp forbids new namespaces.
    let o = b.run(&["unshare", "-m", "true"]);
    assert_ne!(code(&o), 0);
    let o = b.run(&["sh", "-c", "cat /proc/keys; echo end"]);
    assert_eq!(stdout(&o), "end\n", "{}", stderr(&o));
    let o = b.run(&["sh", "-c", "echo 1 > /proc/sys/kernel/ns_last_pid"]);
    assert_ne!(code(&o), 0);

    let o = b.run(&["--cap-drop", "ALL", "grep", "CapBnd", "/proc/self/status"]);
    assert!(
        stdout(&o).contains("CapBnd:\t0000000000000000"),
        "{}",
        stdout(&o)
    );
    let o = b.run(&[
        "--security-opt",
        "no-new-privileges",
        "grep",
        "NoNewPrivs",
        "/proc/self/status",
    ]);
    assert!(
        stdout(&o).contains("NoNewPrivs:\t1"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = b.run(&["--privileged", "grep", "Seccomp:", "/proc/self/status"]);
    assert!(
        stdout(&o).contains("Seccomp:\t0"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn container_sees_its_own_pid_namespace_and_dev() {
    let Some(b) = Box::new("container_sees_its_own_pid_namespace_and_dev") else {
        return;
    };
    let o = b.run(&["sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'; ls /dev"]);
    let out = stdout(&o);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1"), "{out}{}", stderr(&o));
    let pids: u32 = lines.next().unwrap().parse().unwrap();
    assert!(
        (1..=3).contains(&pids),
        "only the container's processes: {pids}"
    );
    let devs: Vec<&str> = lines.collect();
    for d in [
        "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "mqueue", "fd",
        "stdin",
    ] {
        assert!(devs.contains(&d), "/dev lacks {d}: {devs:?}");
    }
    assert!(!devs.contains(&"console"), "console only with -t");
    let o = b.run(&[
        "sh",
        "-c",
        "echo hi > /dev/null && head -c 4 /dev/zero | wc -c",
    ]);
    assert_eq!(stdout(&o).trim(), "4", "{}", stderr(&o));
}

fn test_image() -> String {
    format!(
        "{}/tests/data/busybox-multi.tar",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn image_entrypoint_cmd_env_and_workdir() {
    let Some(b) = Box::new("image_entrypoint_cmd_env_and_workdir") else {
        return;
    };
    let img = test_image();
    let run = |args: &[&str]| {
        let o = b
            .env
            .cmd()
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    // ENTRYPOINT ["/bin/sh","-c"] + CMD ["echo $GREETING"], env from the image.
    assert_eq!(run(&[&img]), "hello from runbox\n");
    // Arguments replace CMD and keep ENTRYPOINT.
    assert_eq!(run(&[&img, "--", "echo $RUNBOX_TEST; pwd"]), "1\n/data\n");
    // --entrypoint replaces ENTRYPOINT and drops the image's CMD.
    assert_eq!(
        run(&["--entrypoint", "/bin/cat", &img, "/hello.txt"]),
        "added in layer 2\n"
    );
    assert_eq!(
        run(&["--entrypoint", "", &img, "cat", "/data/new.txt"]),
        "new data\n"
    );
    // -e overrides the image's env; the image is found by name once loaded.
    assert_eq!(
        run(&["-e", "GREETING=over", "runbox-test/busybox-multi"]),
        "over\n"
    );
    assert_eq!(run(&["-u", "1000", &img, "id -u; id -g"]), "1000\n1000\n");
}

#[test]
fn keep_leaves_a_stopped_container() {
    let Some(b) = Box::new("keep_leaves_a_stopped_container") else {
        return;
    };
    let o = b.run(&["--keep", "sh", "-c", "echo kept > /marker; exit 4"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let dirs: Vec<PathBuf> = b
        .env
        .state_entries()
        .into_iter()
        .map(|n| b.env.state().join(n))
        .collect();
    assert_eq!(dirs.len(), 1);
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dirs[0].join("state.json")).unwrap()).unwrap();
    assert_eq!(state["status"], "stopped");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dirs[0]).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o555,
        "a kept container's state dir is marked read-only"
    );
    assert_eq!(state["exit_code"], 4);
    let id = state["id"].as_str().unwrap().to_string();
    let layer = b.env.root().join("containers").join(&id);
    assert_eq!(
        std::fs::read_to_string(layer.join("upper/marker")).unwrap(),
        "kept\n"
    );
    // A later run must not reap a stopped, kept container.
    assert_eq!(code(&b.run(&["true"])), 0);
    assert!(layer.exists() && dirs[0].exists());
    std::fs::remove_dir_all(&dirs[0]).unwrap();
    std::fs::remove_dir_all(&layer).unwrap();
}

/// Pids of live processes whose command line is exactly `args`.
fn pids_running(args: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// A runbox process, killed if a test fails while it runs.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `sleep SECONDS` in a container and returns the runbox process once
/// the command runs.
fn start_sleeper(b: &Box, flags: &[&str], seconds: &str) -> Running {
    let script = format!("echo ready; exec sleep {seconds}");
    let mut args = flags.to_vec();
    args.extend(["sh", "-c", &script]);
    let mut child = b
        .cmd(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let child = Running(child);
    assert_eq!(line, "ready\n");
    child
}

#[test]
fn a_killed_runbox_leaves_nothing_behind() {
    let Some(b) = Box::new("a_killed_runbox_leaves_nothing_behind") else {
        return;
    };
    // A number no other test sleeps, to find the container's process.
    let mut child = start_sleeper(&b, &["--name", "killed"], "3011");
    assert!(within_5s(|| pids_running(&["sleep", "3011"]).len() == 1));
    let deleters = b.env.deleters();
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // Without any other runbox command: the container dies with runbox
    // (parent-death signal) and the run's deleter reaps what runbox left.
    // (Killed before its deleter was forked, a run leaves it to the next
    // command: the test below.)
    assert!(
        within_5s(|| pids_running(&["sleep", "3011"]).is_empty()),
        "the container outlived runbox"
    );
    assert!(
        within_5s(|| b.env.state_entries_now().is_empty()),
        "state left: {:?}",
        b.env.state_entries()
    );
    assert!(
        within_5s(|| deleters
            .iter()
            .all(|pid| state_of(*pid).is_none_or(|s| s == 'Z'))),
        "the deleter did not end"
    );
    // Its name is free again, at once.
    assert!(!b.env.state().join(".names/killed").exists());
    let o = b.run(&["--name", "killed", "true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// The state letter of a process (`R`, `S`, `Z`...), None once it is gone.
fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[test]
fn debris_of_a_killed_runbox_is_reaped_by_the_next_run() {
    let Some(b) = Box::new("debris_of_a_killed_runbox_is_reaped_by_the_next_run") else {
        return;
    };
    let mut child = start_sleeper(&b, &[], "3012");
    // Killed with its deleter (as when a CI job's whole cgroup is killed),
    // the deleter first so that it cannot reap.
    b.env.kill_deleters();
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert_eq!(
        b.env.state_entries().len(),
        1,
        "the killed run left its state"
    );
    // The next run reaps it.
    let o = b.run(&["true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        within_5s(|| pids_running(&["sleep", "3012"]).is_empty()),
        "the container outlived runbox"
    );
}

#[test]
fn timings_are_reported_as_text_or_json() {
    let Some(b) = Box::new("timings_are_reported_as_text_or_json") else {
        return;
    };
    let o = b.run(&["--timings=json", "true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let line = stderr(&o).lines().last().unwrap_or_default().to_string();
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    for k in ["resolve_ms", "mount_ms", "spawn_ms", "run_ms", "cleanup_ms"] {
        assert!(v[k].as_f64().is_some_and(|ms| ms >= 0.0), "{k} in {line}");
    }
    assert!(
        v["mount_ms"].as_f64().unwrap() > 0.0,
        "the child reports its mount time: {line}"
    );
    let o = b.run(&["--timings", "true"]);
    let err = stderr(&o);
    for k in ["resolve", "mount", "spawn", "run", "cleanup"] {
        assert!(err.contains(&format!("{k} ")), "{err}");
    }
}

#[test]
fn a_volume_is_released_when_the_run_ends() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let Some(b) = Box::new("a_volume_is_released_when_the_run_ends") else {
        return;
    };
    // A mount of its own, as a USB stick or a CI cache volume would be.
    let src = b.env.dir.path().join("stick");
    std::fs::create_dir_all(&src).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &src,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    // Detached if the test fails before its own umount below.
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _unmount = Unmount(&src);
    // IN_UNMOUNT comes when the filesystem itself goes: when the last mount
    // of it, in any mount namespace, is gone.
    let watch = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    watch.add_watch(&src, AddWatchFlags::IN_OPEN).unwrap();
    let vol = format!("{}:/stick", src.display());
    let script = "echo data > /stick/f; while [ ! -e /stick/go ]; do sleep 0.01; done";
    let mut run = Running(
        b.cmd(&["-v", &vol, "sh", "-c", script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        within_5s(|| src.join("f").exists()),
        "the run did not start"
    );
    // Its deleter must not hold the container's mount namespace (and the
    // volume with it) beyond the run.
    for pid in b.env.deleters() {
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
        {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            assert!(
                !target.to_string_lossy().starts_with("mnt:"),
                "the deleter holds a mount namespace: {target:?}"
            );
        }
    }
    std::fs::write(src.join("go"), "").unwrap();
    let status = run.0.wait().unwrap();
    let umounted = nix::mount::umount(&src);
    assert_eq!(status.code(), Some(0));
    assert_eq!(umounted, Ok(()));
    // Then the filesystem goes: at once, unless a container that another
    // test started at that moment copied the host's mounts into its new
    // namespace (until it drops its old root): wait for that, bounded.
    assert!(
        within_5s(|| watch
            .read_events()
            .unwrap_or_default()
            .iter()
            .any(|e| e.mask.contains(AddWatchFlags::IN_UNMOUNT))),
        "the volume's filesystem is still mounted somewhere after the run ended"
    );
}
