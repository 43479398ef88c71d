//! Tests of spec building: docker's ENTRYPOINT/CMD table, env, user, workdir,
//! hostname, namespaces, capabilities, mounts, masks, seccomp choice, and the
//! option parsers.

use std::path::PathBuf;

use oci_spec::runtime::{LinuxNamespaceType, Spec};
use serde_json::json;

use super::*;

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn cfg() -> RunConfig {
    RunConfig {
        container_id: ID.into(),
        ..Default::default()
    }
}

fn host() -> HostFacts {
    HostFacts {
        hostname: Some("hosty".into()),
        last_cap: 40,
        nofile: 20000,
        kernel: (6, 18),
    }
}

/// A rootfs with /etc/passwd and /etc/group.
fn rootfs() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    std::fs::write(
        d.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nwww:x:33:33:www:/var/www:/bin/false\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("etc/group"),
        "root:x:0:\nwww:x:33:\nlog:x:4:www\n",
    )
    .unwrap();
    d
}

fn image() -> Value {
    json!({
        "architecture": "amd64",
        "config": {
            "Env": ["PATH=/usr/bin:/bin", "LANG=C"],
            "Entrypoint": null,
            "Cmd": ["sh"],
            "WorkingDir": "",
        }
    })
}

fn build(img: &Value, c: &RunConfig) -> Result<Spec> {
    let root = rootfs();
    build_spec_with(img, root.path(), c, &host())
}

fn process_env(s: &Spec) -> Vec<String> {
    s.process().as_ref().unwrap().env().clone().unwrap()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn entrypoint_and_cmd_follow_docker() {
    struct Case {
        ep: &'static [&'static str],
        cmd: &'static [&'static str],
        ep_flag: Option<&'static str>,
        args: &'static [&'static str],
        want: Option<&'static [&'static str]>,
    }
    let cases = [
        // image CMD only
        Case {
            ep: &[],
            cmd: &["sh"],
            ep_flag: None,
            args: &[],
            want: Some(&["sh"]),
        },
        // CMD after IMAGE replaces the image CMD
        Case {
            ep: &[],
            cmd: &["sh"],
            ep_flag: None,
            args: &["ls", "-l"],
            want: Some(&["ls", "-l"]),
        },
        // ENTRYPOINT + image CMD
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: None,
            args: &[],
            want: Some(&["/init", "--x"]),
        },
        // ENTRYPOINT + CMD from the command line
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: None,
            args: &["--y"],
            want: Some(&["/init", "--y"]),
        },
        // --entrypoint drops the image CMD
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: Some("/bin/echo"),
            args: &[],
            want: Some(&["/bin/echo"]),
        },
        // --entrypoint with args
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: Some("/bin/echo"),
            args: &["hi"],
            want: Some(&["/bin/echo", "hi"]),
        },
        // --entrypoint "" clears it; the args run as the command
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: Some(""),
            args: &["ls"],
            want: Some(&["ls"]),
        },
        // --entrypoint "" and nothing else: no command
        Case {
            ep: &["/init"],
            cmd: &["--x"],
            ep_flag: Some(""),
            args: &[],
            want: None,
        },
        // an image without ENTRYPOINT or CMD and no args: no command
        Case {
            ep: &[],
            cmd: &[],
            ep_flag: None,
            args: &[],
            want: None,
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let img = ImageConfig {
            entrypoint: s(c.ep),
            cmd: s(c.cmd),
            ..Default::default()
        };
        let rc = RunConfig {
            entrypoint: RunConfig::parse_entrypoint(c.ep_flag),
            cmd: s(c.args),
            ..cfg()
        };
        match (command_args(&img, &rc), c.want) {
            (Ok(got), Some(want)) => assert_eq!(got, s(want), "case {i}"),
            (Err(Error::NoCommand), None) => {}
            (got, want) => panic!("case {i}: got {got:?}, want {want:?}"),
        }
    }
    let e = build(&json!({"config": {}}), &cfg())
        .unwrap_err()
        .to_string();
    assert_eq!(e, "no command specified");
}

#[test]
fn image_config_accepts_inner_object_and_rejects_bad_types() {
    let inner =
        ImageConfig::from_json(&json!({"Cmd": ["a"], "User": "www", "WorkingDir": "/w"})).unwrap();
    assert_eq!(inner.cmd, s(&["a"]));
    assert_eq!(inner.user.as_deref(), Some("www"));
    assert!(ImageConfig::from_json(&json!({"config": {"Cmd": "sh"}})).is_err());
    assert!(ImageConfig::from_json(&json!({"config": {"Env": [1]}})).is_err());
    assert!(ImageConfig::from_json(&json!([1])).is_err());
}

#[test]
fn env_precedence_path_hostname_home() {
    let c = RunConfig {
        env: s(&["LANG=C.UTF-8", "X=1"]),
        ..cfg()
    };
    let spec = build(&image(), &c).unwrap();
    assert_eq!(
        process_env(&spec),
        s(&[
            "PATH=/usr/bin:/bin",
            "HOSTNAME=hosty",
            "LANG=C.UTF-8",
            "X=1",
            "HOME=/root"
        ])
    );
    // No PATH in the image: docker's default; non-root user's HOME; tty TERM.
    let img = json!({"config": {"Cmd": ["sh"], "User": "www"}});
    let c = RunConfig {
        tty: true,
        network: Network::None,
        ..cfg()
    };
    let spec = build(&img, &c).unwrap();
    assert_eq!(
        process_env(&spec),
        s(&[
            &format!("PATH={}", env::DEFAULT_PATH),
            "HOSTNAME=0123456789ab",
            "TERM=xterm",
            "HOME=/var/www"
        ])
    );
    assert_eq!(spec.process().as_ref().unwrap().terminal(), Some(true));
}

#[test]
fn user_resolution_in_spec() {
    let spec = build(
        &image(),
        &RunConfig {
            user: Some("www".into()),
            ..cfg()
        },
    )
    .unwrap();
    let u = spec.process().as_ref().unwrap().user().clone();
    assert_eq!((u.uid(), u.gid()), (33, 33));
    assert_eq!(u.additional_gids(), &Some(vec![4]));
    assert_eq!(u.umask(), Some(0o022));

    let spec = build(
        &image(),
        &RunConfig {
            user: Some("1000:1000".into()),
            ..cfg()
        },
    )
    .unwrap();
    let p = spec.process().as_ref().unwrap();
    assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
    assert!(process_env(&spec).contains(&"HOME=/".to_string()));

    let e = build(
        &image(),
        &RunConfig {
            user: Some("xyz".into()),
            ..cfg()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "unable to find user xyz: no matching entries in passwd file"
    );

    // -u overrides the image's User.
    let img = json!({"config": {"Cmd": ["sh"], "User": "www"}});
    let spec = build(
        &img,
        &RunConfig {
            user: Some("0".into()),
            ..cfg()
        },
    )
    .unwrap();
    assert_eq!(spec.process().as_ref().unwrap().user().uid(), 0);
}

#[test]
fn workdir_rules() {
    let cwd = |img: Value, w: Option<&str>| {
        build(
            &img,
            &RunConfig {
                workdir: w.map(String::from),
                ..cfg()
            },
        )
        .map(|s| s.process().as_ref().unwrap().cwd().clone())
    };
    assert_eq!(cwd(image(), None).unwrap(), PathBuf::from("/"));
    let img = json!({"config": {"Cmd": ["sh"], "WorkingDir": "/app"}});
    assert_eq!(cwd(img.clone(), None).unwrap(), PathBuf::from("/app"));
    assert_eq!(cwd(img, Some("/tmp")).unwrap(), PathBuf::from("/tmp"));
    let e = cwd(image(), Some("rel")).unwrap_err().to_string();
    assert!(e.contains("absolute path"), "{e}");
    let img = json!({"config": {"Cmd": ["sh"], "WorkingDir": "rel/dir"}});
    assert!(cwd(img, None).is_err());
}

#[test]
fn hostname_rules() {
    assert_eq!(hostname(&cfg(), || Some("h".into())), "h");
    assert_eq!(hostname(&cfg(), || None), "0123456789ab");
    let none = RunConfig {
        network: Network::None,
        ..cfg()
    };
    assert_eq!(hostname(&none, || Some("h".into())), "0123456789ab");
    let named = RunConfig {
        hostname: Some("box".into()),
        ..none
    };
    assert_eq!(hostname(&named, || Some("h".into())), "box");
    let spec = build(&image(), &named).unwrap();
    assert_eq!(spec.hostname().as_deref(), Some("box"));
    let bad = RunConfig {
        hostname: Some("a b".into()),
        ..cfg()
    };
    assert!(build(&image(), &bad).is_err());
}

#[test]
fn namespaces_per_network_mode() {
    let types = |c: &RunConfig| -> Vec<LinuxNamespaceType> {
        build(&image(), c)
            .unwrap()
            .linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .iter()
            .flatten()
            .map(|n| n.typ())
            .collect()
    };
    use LinuxNamespaceType::*;
    assert_eq!(types(&cfg()), vec![Mount, Pid, Uts, Ipc]);
    assert_eq!(
        types(&RunConfig {
            network: super::Network::None,
            ..cfg()
        }),
        vec![Mount, Pid, Uts, Ipc, Network]
    );
}

fn caps_of(c: &RunConfig) -> (u64, u64, u64) {
    let spec = build(&image(), c).unwrap();
    let caps = spec
        .process()
        .as_ref()
        .unwrap()
        .capabilities()
        .clone()
        .unwrap();
    let m = |x: &Option<oci_spec::runtime::Capabilities>| capabilities::mask(x.as_ref().unwrap());
    (m(caps.bounding()), m(caps.effective()), m(caps.permitted()))
}

#[test]
fn capability_sets() {
    assert_eq!(caps_of(&cfg()), (0xa80425fb, 0xa80425fb, 0xa80425fb));
    let c = RunConfig {
        cap_add: s(&["NET_ADMIN"]),
        cap_drop: s(&["cap_chown"]),
        ..cfg()
    };
    let want = (0xa80425fb_u64 | 1 << 12) & !1;
    assert_eq!(caps_of(&c), (want, want, want));
    let c = RunConfig {
        cap_drop: s(&["ALL"]),
        ..cfg()
    };
    assert_eq!(caps_of(&c), (0, 0, 0));
    let c = RunConfig {
        privileged: true,
        ..cfg()
    };
    let all = (1u64 << 41) - 1;
    assert_eq!(caps_of(&c), (all, all, all));
    let c = RunConfig {
        user: Some("www".into()),
        ..cfg()
    };
    assert_eq!(caps_of(&c), (0xa80425fb, 0, 0));
    let c = RunConfig {
        cap_add: s(&["NOPE"]),
        ..cfg()
    };
    assert!(build(&image(), &c).is_err());
}

#[test]
fn security_defaults_and_privileged() {
    let spec = build(&image(), &cfg()).unwrap();
    let linux = spec.linux().as_ref().unwrap();
    assert_eq!(linux.masked_paths().as_ref().unwrap().len(), 11);
    assert!(linux
        .masked_paths()
        .as_ref()
        .unwrap()
        .contains(&"/proc/kcore".to_string()));
    assert_eq!(linux.readonly_paths().as_ref().unwrap(), &s(READONLY_PATHS));
    assert!(linux.seccomp().is_some());
    let p = spec.process().as_ref().unwrap();
    assert_eq!(p.no_new_privileges(), Some(false));
    let r = &p.rlimits().as_ref().unwrap()[0];
    assert_eq!(
        (r.typ(), r.soft(), r.hard()),
        (PosixRlimitType::RlimitNofile, 20000, 20000)
    );
    let devs: Vec<_> = linux
        .devices()
        .iter()
        .flatten()
        .map(|d| d.path().clone())
        .collect();
    assert_eq!(devs.len(), 6);
    assert!(devs.contains(&PathBuf::from("/dev/urandom")));

    let spec = build(
        &image(),
        &RunConfig {
            privileged: true,
            ..cfg()
        },
    )
    .unwrap();
    let linux = spec.linux().as_ref().unwrap();
    assert!(linux.seccomp().is_none());
    assert!(linux.masked_paths().as_ref().unwrap().is_empty());
    assert!(linux.readonly_paths().as_ref().unwrap().is_empty());

    let c = RunConfig {
        seccomp: SeccompChoice::Unconfined,
        no_new_privileges: true,
        ..cfg()
    };
    let spec = build(&image(), &c).unwrap();
    assert!(spec.linux().as_ref().unwrap().seccomp().is_none());
    assert_eq!(
        spec.process().as_ref().unwrap().no_new_privileges(),
        Some(true)
    );
}

#[test]
fn mounts_defaults_volumes_tmpfs() {
    let c = RunConfig {
        volumes: vec![
            RunConfig::parse_volume("/data/sub:/srv/data/sub:ro").unwrap(),
            RunConfig::parse_volume("/data:/srv/data").unwrap(),
        ],
        tmpfs: vec![RunConfig::parse_tmpfs("/dev/shm:size=1g").unwrap()],
        read_only: true,
        ..cfg()
    };
    let spec = build(&image(), &c).unwrap();
    let ms = spec.mounts().as_ref().unwrap();
    let dsts: Vec<_> = ms
        .iter()
        .map(|m| m.destination().display().to_string())
        .collect();
    assert_eq!(
        dsts,
        s(&[
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/mqueue",
            "/sys",
            "/sys/fs/cgroup",
            "/srv/data",
            "/dev/shm",
            "/srv/data/sub"
        ])
    );
    let by = |d: &str| ms.iter().find(|m| m.destination() == Path::new(d)).unwrap();
    assert_eq!(
        by("/srv/data/sub").options().as_ref().unwrap(),
        &s(&["rbind", "ro", "rprivate"])
    );
    assert_eq!(by("/srv/data").typ().as_deref(), Some("bind"));
    assert_eq!(
        by("/dev/shm").options().as_ref().unwrap(),
        &s(&["nosuid", "nodev", "noexec", "size=1g"])
    );
    assert!(by("/sys")
        .options()
        .as_ref()
        .unwrap()
        .contains(&"ro".to_string()));
    assert!(by("/dev/pts")
        .options()
        .as_ref()
        .unwrap()
        .contains(&"ptmxmode=0666".to_string()));
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));

    let dup = RunConfig {
        volumes: vec![RunConfig::parse_volume("/a:/x").unwrap()],
        tmpfs: vec![RunConfig::parse_tmpfs("/x").unwrap()],
        ..cfg()
    };
    assert!(build(&image(), &dup)
        .unwrap_err()
        .to_string()
        .contains("duplicate mount point"));
}

#[test]
fn volume_parsing() {
    let v = RunConfig::parse_volume("/h:/c").unwrap();
    assert_eq!(
        (v.src, v.dst.as_str(), v.read_only),
        (PathBuf::from("/h"), "/c", false)
    );
    assert!(RunConfig::parse_volume("/h:/c/:ro").unwrap().read_only);
    assert_eq!(RunConfig::parse_volume("/h:/c/").unwrap().dst, "/c");
    assert!(RunConfig::parse_volume("./rel:/c")
        .unwrap()
        .src
        .is_absolute());
    for bad in [
        "/h",
        "/h:rel",
        "/h:/",
        "named:/c",
        "/h:/c:bogus",
        "/h:/c/../d",
        ":/c",
        "/a:/b:ro:x",
    ] {
        assert!(RunConfig::parse_volume(bad).is_err(), "{bad}");
    }
    let e = RunConfig::parse_volume("named:/c").unwrap_err().to_string();
    assert!(e.contains("named volumes"), "{e}");
}

#[test]
fn tmpfs_parsing() {
    let t = RunConfig::parse_tmpfs("/run:size=64m,mode=1777,exec").unwrap();
    assert_eq!(t.dst, "/run");
    assert_eq!(t.options, s(&["size=64m", "mode=1777", "exec"]));
    assert!(RunConfig::parse_tmpfs("/tmp").unwrap().options.is_empty());
    for bad in [
        "tmp",
        "/",
        "/t:size=lots",
        "/t:mode=999",
        "/t:bogus",
        "/t:uid=x",
    ] {
        assert!(RunConfig::parse_tmpfs(bad).is_err(), "{bad}");
    }
}

#[test]
fn network_and_security_opt_parsing() {
    assert_eq!(Network::parse("none").unwrap(), Network::None);
    assert!(Network::parse("bridge").is_err());
    let (nnp, sc) =
        RunConfig::parse_security_opts(&s(&["no-new-privileges", "seccomp=unconfined"])).unwrap();
    assert!(nnp);
    assert_eq!(sc, SeccompChoice::Unconfined);
    let (nnp, sc) =
        RunConfig::parse_security_opts(&s(&["no-new-privileges:false", "seccomp=/p.json"]))
            .unwrap();
    assert!(!nnp);
    assert_eq!(sc, SeccompChoice::Profile("/p.json".into()));
    assert!(RunConfig::parse_security_opts(&s(&["apparmor=x"])).is_err());
    assert!(RunConfig::parse_security_opts(&s(&["seccomp="])).is_err());
}

#[test]
fn validation_errors() {
    let bad_id = RunConfig {
        container_id: "abc".into(),
        ..cfg()
    };
    assert!(bad_id
        .validate()
        .unwrap_err()
        .to_string()
        .contains("64 lowercase hex"));
    let bad_env = RunConfig {
        env: s(&["NOVALUE"]),
        ..cfg()
    };
    assert!(bad_env.validate().is_err());
    assert!(cfg().validate().is_ok());
}

#[test]
fn etc_files_content() {
    let c = cfg();
    let files = etc_files_from(
        &c,
        "hosty",
        Some("127.0.0.1 localhost\n10.0.0.2 db\n"),
        Some("nameserver 10.0.0.1\n"),
    );
    let get = |d: &str| {
        files
            .iter()
            .find(|(p, _)| p == d)
            .map(|(_, c)| c.clone())
            .unwrap()
    };
    assert_eq!(get("/etc/hostname"), "hosty\n");
    assert_eq!(
        get("/etc/hosts"),
        "127.0.0.1 localhost\n10.0.0.2 db\n127.0.1.1\thosty\n"
    );
    assert_eq!(get("/etc/resolv.conf"), "nameserver 10.0.0.1\n");

    let none = RunConfig {
        network: Network::None,
        ..cfg()
    };
    let files = etc_files_from(&none, "0123456789ab", Some("10.0.0.2 db\n"), None);
    let hosts = &files.iter().find(|(p, _)| p == "/etc/hosts").unwrap().1;
    assert!(hosts.starts_with("127.0.0.1\tlocalhost\n"));
    assert!(hosts.ends_with("127.0.1.1\t0123456789ab\n"));
    assert!(!hosts.contains("db"));

    // Already named: not added twice.
    let files = etc_files_from(&c, "db", Some("10.0.0.2 db\n"), None);
    assert_eq!(
        files.iter().find(|(p, _)| p == "/etc/hosts").unwrap().1,
        "10.0.0.2 db\n"
    );

    // A user mount over /etc/resolv.conf wins.
    let vol = RunConfig {
        volumes: vec![RunConfig::parse_volume("/r:/etc/resolv.conf").unwrap()],
        ..cfg()
    };
    let files = etc_files_from(&vol, "h", None, Some("x"));
    assert_eq!(files.len(), 2);
    assert!(files.iter().all(|(p, _)| p != "/etc/resolv.conf"));
}

#[test]
fn spec_serializes_for_libcontainer() {
    let spec = build(&image(), &cfg()).unwrap();
    let v = serde_json::to_value(&spec).unwrap();
    assert_eq!(v["ociVersion"], "1.0.2");
    assert!(v["root"]["path"].as_str().unwrap().starts_with('/'));
    assert_eq!(v["process"]["cwd"], "/");
    assert_eq!(v["process"]["args"], json!(["sh"]));
    assert_eq!(v["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    assert!(v["process"]["capabilities"]["bounding"]
        .as_array()
        .unwrap()
        .contains(&json!("CAP_CHOWN")));
}
