//! Shared helpers: the runbox binary, temp stores, root checks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of the built `runbox` binary.
pub fn runbox_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_runbox"))
}

/// True when tests that need root may run. Without root: prints why and
/// returns false, or panics under RUNBOX_TESTS_MUST_RUN=1 (a skip is a failure there).
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let reason = format!("{test}: skipped: needs root (namespaces, mounts, chown)");
    if std::env::var_os("RUNBOX_TESTS_MUST_RUN").is_some_and(|v| v == "1") {
        panic!("{reason}, and RUNBOX_TESTS_MUST_RUN=1");
    }
    eprintln!("{reason}");
    false
}

/// A private store root and state dir, removed on drop.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

impl Drop for TestEnv {
    /// runbox deletes writable layers in a detached process that may still
    /// be writing (a spare layer) while the directory is removed: retry,
    /// bounded, until it is gone.
    fn drop(&mut self) {
        let path = self.dir.path().to_path_buf();
        for _ in 0..100 {
            let _ = std::fs::remove_dir_all(&path);
            if !path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        // Under the store's usual filesystem (not /tmp, which may be tmpfs) so overlay works.
        let base = Path::new("/var/tmp");
        let dir = tempfile::Builder::new()
            .prefix("runbox-it-")
            .tempdir_in(base)
            .expect("tempdir");
        TestEnv { dir }
    }
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("store")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    /// `runbox --root R --state S ARGS...`
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(runbox_bin());
        c.arg("--root")
            .arg(self.root())
            .arg("--state")
            .arg(self.state());
        c
    }
    /// The state root's entries as they are now.
    pub fn state_entries_now(&self) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(self.state())
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default()
    }

    /// The entries of the state dir once runbox's background deleters are
    /// done: a finished run renames its state dir to `.trash-<id>` and its
    /// deleter removes it a moment later. Waits (bounded) for that.
    pub fn state_entries(&self) -> Vec<std::ffi::OsString> {
        let list = || self.state_entries_now();
        for _ in 0..250 {
            if !list()
                .iter()
                .any(|n| n.as_encoded_bytes().starts_with(b".trash-"))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        list()
    }
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("spawn runbox")
    }

    /// Pids of the deleters of runs in this environment, once one has
    /// detached and named itself (a run forks it right after its
    /// container's exec, so it may take a moment to appear).
    pub fn deleters(&self) -> Vec<i32> {
        let me = self.dir.path().to_string_lossy().into_owned();
        let mut deleters = Vec::new();
        let found = within_5s(|| {
            deleters = std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c == "runbox-deleter\n")
                        && std::fs::read(format!("/proc/{pid}/cmdline"))
                            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&me))
                })
                .collect();
            !deleters.is_empty()
        });
        assert!(found, "no deleter for the run");
        deleters
    }

    /// SIGKILLs this environment's deleters (see [`TestEnv::deleters`]), as a
    /// kill of a CI job's whole cgroup would.
    pub fn kill_deleters(&self) {
        for pid in self.deleters() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Polls `done` every 10 ms for up to 5 s; true once it held.
pub fn within_5s(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    done()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
