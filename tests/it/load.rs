//! `runbox load`, `images`, `inspect`, `rmi`, `prune` against the real
//! images in tests/data (made by scripts/make-test-images.sh) and archives
//! built here.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{require_root, stderr, stdout, TestEnv};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&fs::read(data("expected.json")).unwrap()).unwrap()
}

/// `load --timings=json -q PATH`: (image id, timings JSON).
fn load_json(env: &TestEnv, arg: &str) -> (String, serde_json::Value) {
    let out = env.run(&["load", "-q", "--timings=json", arg]);
    assert!(out.status.success(), "load {arg} failed: {}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let timings = stderr(&out)
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("timings JSON on stderr");
    (id, timings)
}

fn inspect(env: &TestEnv, reference: &str) -> serde_json::Value {
    let out = env.run(&["inspect", reference]);
    assert!(out.status.success(), "inspect failed: {}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0].clone()
}

/// The flattened tree of busybox-multi, whatever format it came in.
fn assert_busybox_multi_tree(rootfs: &Path) {
    assert_eq!(
        fs::read_to_string(rootfs.join("hello.txt")).unwrap(),
        "added in layer 2\n"
    );
    assert_eq!(
        fs::read_to_string(rootfs.join("data/new.txt")).unwrap(),
        "new data\n"
    );
    assert_eq!(
        fs::read_to_string(rootfs.join("same.txt")).unwrap(),
        "same\n"
    );
    assert!(
        !rootfs.join("etc/removed-by-layer2").exists(),
        "whiteout not applied"
    );
    assert!(
        !rootfs.join("data/old.txt").exists(),
        "opaque dir not applied"
    );
    assert!(!rootfs.join("data/sub").exists(), "opaque dir not applied");
    assert!(
        !rootfs.join("etc/.wh.removed-by-layer2").exists(),
        "whiteout file left"
    );
    assert!(
        !rootfs.join("data/.wh..wh..opq").exists(),
        "opaque marker left"
    );
    let busybox = fs::symlink_metadata(rootfs.join("bin/busybox")).unwrap();
    assert!(busybox.is_file() && busybox.mode() & 0o111 != 0);
    assert_eq!(
        fs::read_link(rootfs.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    let setuid = fs::metadata(rootfs.join("usr/share/runbox/setuid.sh"))
        .or_else(|_| fs::metadata(rootfs.join("setuid.sh")));
    if let Ok(m) = setuid {
        assert_eq!(m.permissions().mode() & 0o7777, 0o4755, "setuid bit lost");
    }
    let a = fs::metadata(rootfs.join("usr/share/runbox/base.txt")).unwrap();
    let b = fs::metadata(rootfs.join("usr/share/runbox/base-hardlink.txt")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hard link became a copy");
    let tmp = fs::metadata(rootfs.join("tmp")).unwrap();
    assert_eq!(
        tmp.permissions().mode() & 0o7777,
        0o1777,
        "sticky /tmp lost"
    );
}

#[test]
fn loads_docker_save_archive_and_reuses_it() {
    if !require_root("loads_docker_save_archive_and_reuses_it") {
        return;
    }
    let env = TestEnv::new();
    let exp = &expected()["busybox_multi"];
    let file = data("busybox-multi.tar");
    let (id, t) = load_json(&env, file.to_str().unwrap());
    assert_eq!(id, exp["image_id"].as_str().unwrap());
    assert_eq!(t["unpacked"], true);
    assert_eq!(t["layers"], 5);
    let img = inspect(&env, "runbox-test/busybox-multi");
    assert_eq!(img["id"], exp["image_id"]);
    assert_eq!(img["layers"], exp["diff_ids"]);
    assert_eq!(img["config"]["config"]["Env"], exp["env"]);
    assert_eq!(img["config"]["config"]["Entrypoint"], exp["entrypoint"]);
    assert!(img["names"]
        .as_array()
        .unwrap()
        .contains(&"runbox-test/busybox-multi:latest".into()));
    assert!(img["size"].as_u64().unwrap() > 1_000_000);
    for key in ["rootfs", "created", "last_used", "loaded"] {
        assert!(!img[key].is_null(), "inspect lacks {key}");
    }
    let rootfs = PathBuf::from(img["rootfs"].as_str().unwrap());
    assert!(rootfs.starts_with(env.root()));
    assert_busybox_multi_tree(&rootfs);

    // Loading it again reads no layer data.
    let (id2, t2) = load_json(&env, file.to_str().unwrap());
    assert_eq!(id2, id);
    assert_eq!(t2["unpacked"], false);
    assert_eq!(t2["bytes_read"], 0);

    // Also by ID prefix, and in the listing.
    assert_eq!(inspect(&env, &id[7..19])["id"], exp["image_id"]);
    let out = env.run(&["images", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], exp["image_id"]);
    let table = stdout(&env.run(&["images"]));
    assert!(
        table.contains("runbox-test/busybox-multi") && table.contains(&id[7..19]),
        "{table}"
    );
}

#[test]
fn loads_every_real_format_to_the_same_tree() {
    if !require_root("loads_every_real_format_to_the_same_tree") {
        return;
    }
    let exp = expected();
    let cases = [
        (
            "busybox-multi.tar.zst",
            exp["busybox_multi"]["image_id"].clone(),
        ),
        ("busybox-oci-gzip", exp["oci_gzip"]["image_id"].clone()),
        ("busybox-oci-gzip.tar", exp["oci_gzip"]["image_id"].clone()),
        ("busybox-oci-plain", exp["oci_plain"]["image_id"].clone()),
    ];
    for (file, want) in cases {
        let env = TestEnv::new();
        let (id, _) = load_json(&env, data(file).to_str().unwrap());
        assert_eq!(id, want.as_str().unwrap(), "{file}");
        let img = inspect(&env, &id);
        assert_busybox_multi_tree(Path::new(img["rootfs"].as_str().unwrap()));
    }
}

#[test]
fn rootfs_tarball_gets_a_synthesized_config() {
    if !require_root("rootfs_tarball_gets_a_synthesized_config") {
        return;
    }
    let env = TestEnv::new();
    let file = data("busybox-rootfs.tar");
    let (id, t) = load_json(&env, file.to_str().unwrap());
    assert_eq!(t["layers"], 1);
    let img = inspect(&env, &id);
    assert_eq!(
        img["config"]["rootfs"]["diff_ids"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(img["layers"], img["config"]["rootfs"]["diff_ids"]);
    let rootfs = PathBuf::from(img["rootfs"].as_str().unwrap());
    assert_eq!(
        fs::read_to_string(rootfs.join("hello.txt")).unwrap(),
        "added in layer 2\n"
    );
    // The same file again: the identity cache answers, nothing is read.
    let (id2, t2) = load_json(&env, file.to_str().unwrap());
    assert_eq!((id2, t2["unpacked"].clone()), (id, false.into()));
}

#[test]
fn images_with_the_same_layers_share_one_rootfs() {
    if !require_root("images_with_the_same_layers_share_one_rootfs") {
        return;
    }
    let env = TestEnv::new();
    let (docker_id, _) = load_json(&env, data("busybox-multi.tar").to_str().unwrap());
    let (oci_id, t) = load_json(&env, data("busybox-oci-plain").to_str().unwrap());
    assert_ne!(docker_id, oci_id, "skopeo rewrites the config");
    assert_eq!(
        t["unpacked"], false,
        "same chain must not be unpacked twice"
    );
    let a = inspect(&env, &docker_id);
    let b = inspect(&env, &oci_id);
    assert_eq!(a["rootfs"], b["rootfs"]);
    // Removing one keeps the shared rootfs for the other.
    let out = env.run(&["rmi", &docker_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(Path::new(b["rootfs"].as_str().unwrap())
        .join("hello.txt")
        .exists());
    let out = env.run(&["rmi", &oci_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!Path::new(b["rootfs"].as_str().unwrap()).exists());
    assert_eq!(stdout(&env.run(&["images", "-q"])), "");
}

#[test]
fn multi_image_archive_needs_a_selector() {
    if !require_root("multi_image_archive_needs_a_selector") {
        return;
    }
    let env = TestEnv::new();
    let exp = expected();
    let file = data("busybox-two-images.tar");
    let f = file.to_str().unwrap();
    let out = env.run(&["load", f]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(
        err.contains("runbox-test/busybox-base") && err.contains("runbox-test/busybox-multi"),
        "{err}"
    );
    assert_eq!(error_lines(&err), 1, "error must be one line: {err}");

    let (id, _) = load_json(&env, &format!("{f}:runbox-test/busybox-base"));
    assert_eq!(id, exp["busybox_base"]["image_id"].as_str().unwrap());
    let manifest = &exp["two_images"]["manifest"];
    let (id, _) = load_json(&env, &format!("{f}@0"));
    assert_eq!(id, manifest[0]["config"].as_str().unwrap());
}

#[test]
fn bad_inputs_fail_with_one_line_and_125() {
    if !require_root("bad_inputs_fail_with_one_line_and_125") {
        return;
    }
    let env = TestEnv::new();
    let dir = env.dir.path();
    let garbage = dir.join("garbage.tar");
    fs::write(&garbage, vec![0x5a; 10_000]).unwrap();
    let truncated = dir.join("truncated.tar");
    let full = fs::read(data("busybox-multi.tar")).unwrap();
    fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let missing = dir.join("missing.tar");
    for path in [&garbage, &truncated, &missing] {
        let out = env.run(&["load", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(125), "{}", path.display());
        let err = stderr(&out);
        assert_eq!(error_lines(&err), 1, "not one line: {err}");
        assert!(
            err.contains(path.file_name().unwrap().to_str().unwrap()),
            "no file named: {err}"
        );
        assert!(stdout(&out).is_empty());
    }
    // Nothing half-made is visible.
    assert_eq!(fs::read_dir(env.root().join("rootfs")).unwrap().count(), 0);
    assert_eq!(fs::read_dir(env.root().join("images")).unwrap().count(), 0);
}

/// Lines of an error report (progress lines come before it).
fn error_lines(stderr: &str) -> usize {
    let start = stderr.find("runbox: ").expect("an error line");
    stderr[start..].trim().lines().count()
}

/// A rootfs tar of `n` small files, big enough that a load takes a while.
fn many_files_tar(path: &Path, n: usize) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    for i in 0..n {
        let data = vec![b'x'; 2048];
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, format!("d{}/f{i}", i % 50), &data[..])
            .unwrap();
    }
    b.finish().unwrap();
}

#[test]
fn killed_load_leaves_no_half_image_and_next_load_works() {
    if !require_root("killed_load_leaves_no_half_image_and_next_load_works") {
        return;
    }
    let env = TestEnv::new();
    let tarball = env.dir.path().join("many.tar");
    many_files_tar(&tarball, 40_000);
    let mut child = env
        .cmd()
        .args(["load", "-q", tarball.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once it has started writing files into its session directory.
    let tmp = env.root().join("tmp");
    let mut killed_midway = false;
    // Bounded by time, not by a count: a busy machine may take long to start it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let writing = fs::read_dir(&tmp)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.path().is_dir()
                    && fs::read_dir(e.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .any(|u| fs::read_dir(u.path()).is_ok_and(|mut d| d.next().is_some()))
            });
        if writing {
            child.kill().unwrap();
            killed_midway = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::yield_now();
    }
    child.wait().unwrap();
    assert!(killed_midway, "the load finished before it could be killed");
    assert_eq!(
        fs::read_dir(env.root().join("rootfs")).unwrap().count(),
        0,
        "half image visible"
    );
    assert_eq!(fs::read_dir(env.root().join("images")).unwrap().count(), 0);

    // The next load succeeds and moves the debris out of tmp/.
    let (id, t) = load_json(&env, tarball.to_str().unwrap());
    assert_eq!(t["unpacked"], true);
    assert_eq!(t["files"], 40_000);
    let dirs: Vec<_> = fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(
        dirs.is_empty(),
        "debris left in tmp: {:?}",
        dirs.iter().map(|d| d.path()).collect::<Vec<_>>()
    );
    let rootfs = PathBuf::from(inspect(&env, &id)["rootfs"].as_str().unwrap().to_string());
    assert_eq!(fs::read_dir(rootfs.join("d7")).unwrap().count(), 800);
    // prune empties the trash that holds the debris and, as `docker image
    // prune` does, removes the image, which has no name.
    let out = env.run(&["prune"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&id), "{}", stdout(&out));
    assert_eq!(fs::read_dir(env.root().join("trash")).unwrap().count(), 0);
    assert!(!rootfs.exists());
}

#[test]
fn concurrent_loads_of_one_image_unpack_it_once() {
    if !require_root("concurrent_loads_of_one_image_unpack_it_once") {
        return;
    }
    let env = TestEnv::new();
    let file = data("busybox-multi.tar");
    let children: Vec<_> = (0..4)
        .map(|_| {
            env.cmd()
                .args(["load", "-q", "--timings=json", file.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut unpacked = 0;
    let mut ids = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        ids.push(stdout(&out).trim().to_string());
        let t: serde_json::Value = serde_json::from_str(
            stderr(&out)
                .lines()
                .rev()
                .find(|l| l.starts_with('{'))
                .unwrap(),
        )
        .unwrap();
        unpacked += usize::from(t["unpacked"] == true);
    }
    assert_eq!(unpacked, 1, "the chain was unpacked {unpacked} times");
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert_eq!(fs::read_dir(env.root().join("rootfs")).unwrap().count(), 1);
}

#[test]
fn prune_until_removes_only_images_unused_that_long() {
    if !require_root("prune_until_removes_only_images_unused_that_long") {
        return;
    }
    let env = TestEnv::new();
    let (id, _) = load_json(&env, data("busybox-multi.tar").to_str().unwrap());
    let out = env.run(&["prune", "--until", "1h"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&env.run(&["images", "-q"])).trim(),
        id,
        "a fresh image was pruned"
    );
    // Age the image's last use by two hours.
    let hex = &id[7..];
    let used = env.root().join("images").join(format!("{hex}.used"));
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(&used)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let dry = env.run(&["prune", "--until", "1h", "--dry-run"]);
    assert!(stdout(&dry).contains(&id), "{}", stdout(&dry));
    assert_eq!(
        stdout(&env.run(&["images", "-q"])).trim(),
        id,
        "dry run removed it"
    );
    let out = env.run(&["prune", "--until", "1h"]);
    assert!(stdout(&out).contains(&id));
    assert_eq!(stdout(&env.run(&["images", "-q"])), "");
    assert_eq!(fs::read_dir(env.root().join("rootfs")).unwrap().count(), 0);
    let bad = env.run(&["prune", "--until", "soon"]);
    assert_eq!(bad.status.code(), Some(125));
}

#[test]
fn global_options_work_after_the_subcommand_and_tags_apply() {
    if !require_root("global_options_work_after_the_subcommand_and_tags_apply") {
        return;
    }
    let env = TestEnv::new();
    let out = Command::new(crate::common::runbox_bin())
        .args(["load", "--tag", "mine:v1", "-q"])
        .arg(data("busybox-multi.tar"))
        .arg("--root")
        .arg(env.root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let img = inspect(&env, "mine:v1");
    let names = img["names"].as_array().unwrap();
    assert!(
        names.contains(&"mine:v1".into())
            && names.contains(&"runbox-test/busybox-multi:latest".into())
    );
    let missing = env.run(&["inspect", "nope"]);
    assert_eq!(missing.status.code(), Some(125));
    assert!(stderr(&missing).contains("no such image: nope"));
}

#[test]
fn rmi_and_prune_spare_an_image_a_container_uses() {
    if !require_root("rmi_and_prune_spare_an_image_a_container_uses") {
        return;
    }
    let env = TestEnv::new();
    let (id, _) = load_json(&env, data("busybox-multi.tar").to_str().unwrap());
    let name = format!("pinned-{}", std::process::id());
    let out = env.run(&[
        "run",
        "-d",
        "--name",
        &name,
        "--entrypoint",
        "",
        &id,
        "sleep",
        "100",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Whatever happens below, the container goes.
    struct Remove<'a>(&'a TestEnv, &'a str);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = self.0.run(&["rm", "-f", self.1]);
        }
    }
    let _remove = Remove(&env, &name);

    let rmi = env.run(&["rmi", &id]);
    assert_eq!(rmi.status.code(), Some(125));
    assert!(stderr(&rmi).contains("in use"), "{}", stderr(&rmi));
    let prune = env.run(&["prune", "--until", "0s"]);
    assert!(prune.status.success(), "{}", stderr(&prune));
    assert!(stderr(&prune).contains("in use"), "{}", stderr(&prune));
    assert_eq!(stdout(&env.run(&["images", "-q"])).trim(), id);

    let out = env.run(&["rm", "-f", &name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rmi = env.run(&["rmi", &id]);
    assert!(rmi.status.success(), "{}", stderr(&rmi));
    assert_eq!(fs::read_dir(env.root().join("rootfs")).unwrap().count(), 0);
}

#[test]
fn usage_errors_exit_125_and_help_exits_0() {
    let env = TestEnv::new();
    let bad = env.run(&["load", "--no-such-flag", "x.tar"]);
    assert_eq!(bad.status.code(), Some(125), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("--no-such-flag"));
    let missing = env.run(&["load"]);
    assert_eq!(missing.status.code(), Some(125));
    // Where IMAGE (or, with --rootfs, the command, or exec's container) is
    // expected, an unknown option is named as one, not taken for a name.
    for args in [
        &["run", "--no-such-flag", "img", "true"][..],
        &["run", "--rootfs", "/", "-z", "true"],
        &["exec", "--no-such-flag", "ctr", "true"],
    ] {
        let bad = env.run(args);
        assert_eq!(bad.status.code(), Some(125), "{args:?}: {}", stderr(&bad));
        assert!(
            stderr(&bad).contains("unexpected argument '-"),
            "{args:?}: {}",
            stderr(&bad)
        );
    }
    // After `--` it is the command (here not found: 127 when run as root).
    if nix::unistd::geteuid().is_root() {
        let root = env.dir.path().join("emptyroot");
        std::fs::create_dir_all(&root).unwrap();
        let o = env.run(&["run", "--rootfs", root.to_str().unwrap(), "--", "-z"]);
        assert!(
            !stderr(&o).contains("unexpected argument"),
            "{}",
            stderr(&o)
        );
        assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    }
    let help = env.run(&["load", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Examples"));
}
