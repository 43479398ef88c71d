//! Unit tests of `exec`: the process an exec runs (pure), option checks,
//! the cgroup join and the PID-reuse refusal.

use super::*;
use crate::state;
use oci_spec::runtime::{ProcessBuilder, SpecBuilder, UserBuilder};

fn spec() -> Spec {
    let bounding = crate::capabilities::bounding_set(&[], &[], false, 40).unwrap();
    let process = ProcessBuilder::default()
        .args(vec!["sleep".to_string(), "1000".to_string()])
        .env(vec![
            "PATH=/bin".to_string(),
            "GREETING=hello".to_string(),
            "HOME=/root".to_string(),
        ])
        .cwd("/data")
        .user(UserBuilder::default().uid(0u32).gid(0u32).build().unwrap())
        .capabilities(crate::capabilities::process_capabilities(&bounding, 0))
        .build()
        .unwrap();
    SpecBuilder::default().process(process).build().unwrap()
}

fn cfg(args: &[&str]) -> ExecConfig {
    ExecConfig {
        container: "c".into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        ..ExecConfig::default()
    }
}

#[test]
fn exec_process_keeps_container_defaults() {
    let p = exec_process(&spec(), &cfg(&["env"]), None).unwrap();
    assert_eq!(p.args().as_deref(), Some(&["env".to_string()][..]));
    assert_eq!(p.cwd(), Path::new("/data"));
    assert_eq!(p.user().uid(), 0);
    assert!(p
        .env()
        .as_ref()
        .unwrap()
        .contains(&"GREETING=hello".to_string()));
    let caps = p.capabilities().as_ref().unwrap();
    assert_eq!(
        crate::capabilities::mask(caps.effective().as_ref().unwrap()),
        0xa80425fb
    );
}

#[test]
fn exec_process_applies_overrides() {
    let mut c = cfg(&["id"]);
    c.env = vec!["GREETING=over".into(), "NEW=1".into()];
    c.workdir = Some("/tmp".into());
    c.tty = true;
    let who = ResolvedUser {
        uid: 1000,
        gid: 1000,
        additional_gids: vec![2000],
        home: Some("/home/app".into()),
        name: Some("app".into()),
    };
    let p = exec_process(&spec(), &c, Some(&who)).unwrap();
    let env = p.env().clone().unwrap();
    assert_eq!(
        env,
        [
            "PATH=/bin",
            "GREETING=over",
            "HOME=/home/app",
            "TERM=xterm",
            "NEW=1"
        ]
    );
    assert_eq!(p.cwd(), Path::new("/tmp"));
    assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
    assert_eq!(p.user().additional_gids().as_deref(), Some(&[2000u32][..]));
    let caps = p.capabilities().as_ref().unwrap();
    // A non-root user keeps the bounding set but holds nothing.
    assert_eq!(
        crate::capabilities::mask(caps.bounding().as_ref().unwrap()),
        0xa80425fb
    );
    assert_eq!(
        crate::capabilities::mask(caps.effective().as_ref().unwrap()),
        0
    );
    assert_eq!(
        crate::capabilities::mask(caps.permitted().as_ref().unwrap()),
        0
    );
}

#[test]
fn validate_rejects_bad_options() {
    assert!(matches!(cfg(&[]).validate(), Err(Error::NoCommand)));
    let mut c = cfg(&["true"]);
    c.workdir = Some("rel".into());
    assert!(c.validate().is_err());
    let mut c = cfg(&["true"]);
    c.env = vec!["=x".into()];
    assert!(c.validate().is_err());
    let mut c = cfg(&["true"]);
    c.detach = true;
    c.tty = true;
    assert!(c.validate().is_err());
    assert!(cfg(&["true"]).validate().is_ok());
}

#[test]
fn cgroup_join_opens_procs_and_uses_clone_only_on_cgroup2() {
    assert!(JoinCgroup::open(&[]).unwrap().procs.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = ["memory", "pids"].map(|d| tmp.path().join(d)).into();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("cgroup.procs"), "").unwrap();
    }
    let join = JoinCgroup::open(&dirs).unwrap();
    assert_eq!((join.procs.len(), join.dir.is_some()), (2, false));
    // A single directory that is not on cgroup2 is joined by cgroup.procs too.
    let join = JoinCgroup::open(&dirs[..1]).unwrap();
    assert_eq!((join.procs.len(), join.dir.is_some()), (1, false));
    std::fs::remove_file(dirs[1].join("cgroup.procs")).unwrap();
    assert!(matches!(
        JoinCgroup::open(&dirs),
        Err(Error::Io { op: "open", .. })
    ));
}

#[test]
fn open_target_refuses_a_reused_pid() {
    // A live process whose start time differs from the recorded one.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c1");
    std::fs::create_dir_all(&dir).unwrap();
    let me = std::process::id() as i32;
    let st = serde_json::json!({
        "id": "c1",
        "pid": me,
        "pid_start_time": state::pid_start_time(me).unwrap() + 1,
        "image": "i",
        "rootfs": "/r",
        "created": "2024-01-01T00:00:00Z",
        "status": "running",
    });
    std::fs::write(dir.join("state.json"), serde_json::to_vec(&st).unwrap()).unwrap();
    assert!(matches!(
        open_target(tmp.path(), "c1"),
        Err(Error::NotRunning { .. })
    ));
}
