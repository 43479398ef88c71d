//! Unit tests of the mount plan (pure, no root).
use super::*;
use oci_spec::runtime::{LinuxBuilder, MountBuilder, RootBuilder, SpecBuilder};

fn opts(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn options_split_into_flags_and_data() {
    let p = parse_options(&opts(&[
        "nosuid",
        "strictatime",
        "mode=755",
        "size=65536k",
        "ro",
        "rw",
    ]));
    assert_eq!(p.flags, MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
    assert_eq!(p.data, vec!["mode=755", "size=65536k"]);
    assert!(!p.bind);
    let p = parse_options(&opts(&["rbind", "ro", "rprivate"]));
    assert!(p.bind && p.recursive);
    assert_eq!(p.flags, MsFlags::MS_RDONLY);
    assert!(p.data.is_empty());
}

#[test]
fn container_paths_are_clamped_at_root() {
    assert_eq!(
        clean_container_path(Path::new("../../etc/./x")),
        Path::new("/etc/x")
    );
    assert_eq!(
        clean_container_path(Path::new("/a/b/../c")),
        Path::new("/a/c")
    );
    assert_eq!(clean_container_path(Path::new("/..")), Path::new("/"));
}

fn spec() -> Spec {
    let mounts = vec![
        MountBuilder::default()
            .destination("/proc")
            .typ("proc")
            .source("proc")
            .options(opts(&["nosuid", "noexec", "nodev"]))
            .build()
            .unwrap(),
        MountBuilder::default()
            .destination("/data/../vol")
            .typ("bind")
            .source("/srv/host")
            .options(opts(&["rbind", "ro"]))
            .build()
            .unwrap(),
        MountBuilder::default()
            .destination("/sys/fs/cgroup")
            .typ("cgroup")
            .source("cgroup")
            .options(opts(&["ro", "nosuid"]))
            .build()
            .unwrap(),
    ];
    let linux = LinuxBuilder::default()
        .masked_paths(vec!["/proc/kcore".to_string()])
        .readonly_paths(vec!["/proc/sys".to_string()])
        .build()
        .unwrap();
    SpecBuilder::default()
        .mounts(mounts)
        .linux(linux)
        .root(
            RootBuilder::default()
                .path("/r")
                .readonly(true)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

#[test]
fn plan_orders_mounts_devices_etc_and_masks() {
    let host = HostFiles {
        etc: vec![("/etc/hosts".into(), "/run/runbox/x/hosts".into())],
        console: Some("/dev/pts/7".into()),
    };
    let mode = RootfsMode::Bind { dir: "/img".into() };
    let plan = plan(&spec(), mode, "/m".into(), &host).unwrap();
    let s = &plan.steps;
    assert!(matches!(&s[0], Step::Mount { fstype, dest, flags, .. }
        if fstype == "proc" && dest == Path::new("/proc")
        && *flags == MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV));
    assert_eq!(
        s[1],
        Step::Bind {
            source: "/srv/host".into(),
            dest: "/vol".into(),
            recursive: true,
            readonly: true
        }
    );
    assert!(matches!(&s[2], Step::Cgroup { dest, .. } if dest == Path::new("/sys/fs/cgroup")));
    let binds: Vec<_> = plan
        .bind_sources()
        .map(|(p, _, _)| p.to_path_buf())
        .collect();
    assert_eq!(binds[0], Path::new("/srv/host"));
    assert!(!binds.contains(&PathBuf::from("/dev/null")));
    assert!(s.iter().any(|st| matches!(st, Step::Device(d)
        if d.path == Path::new("/dev/null") && d.major == 1 && d.minor == 3 && d.mode == 0o666)));
    assert!(binds.contains(&PathBuf::from("/dev/pts/7")));
    assert!(binds.contains(&PathBuf::from("/run/runbox/x/hosts")));
    assert!(s.contains(&Step::EtcFile {
        source: "/run/runbox/x/hosts".into(),
        dest: "/etc/hosts".into()
    }));
    assert!(s.contains(&Step::Symlink {
        target: "pts/ptmx".into(),
        link: "/dev/ptmx".into()
    }));
    assert!(s.contains(&Step::Mask("/proc/kcore".into())));
    assert!(s.contains(&Step::ReadOnly("/proc/sys".into())));
    assert_eq!(s.last(), Some(&Step::RootReadOnly));
}

#[test]
fn plan_rejects_overlay_paths_with_separators_and_root_mounts() {
    let mode = RootfsMode::Overlay {
        lower: "/a:b".into(),
        upper: "/u".into(),
        work: "/w".into(),
    };
    assert!(plan(&spec(), mode, "/m".into(), &HostFiles::default()).is_err());
    let root_mount = MountBuilder::default()
        .destination("/x/..")
        .typ("tmpfs")
        .build()
        .unwrap();
    let bad = SpecBuilder::default()
        .mounts(vec![root_mount])
        .build()
        .unwrap();
    let mode = RootfsMode::Bind { dir: "/img".into() };
    assert!(plan(&bad, mode, "/m".into(), &HostFiles::default()).is_err());
}
