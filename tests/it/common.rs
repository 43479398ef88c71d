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
    /// The entries of the state dir once runbox's background deleters are
    /// done: a finished run renames its state dir to `.trash-<id>` and its
    /// deleter removes it a moment later. Waits (bounded) for that.
    pub fn state_entries(&self) -> Vec<std::ffi::OsString> {
        let list = || -> Vec<std::ffi::OsString> {
            std::fs::read_dir(self.state())
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default()
        };
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
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
