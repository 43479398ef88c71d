//! Hostile archives (escapes through `..`, absolute names, symlinks and
//! hard links) and malformed streams.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tar::EntryType;

use super::*;

/// A directory outside the root holding one file, checked after each test.
struct Outside {
    dir: tempfile::TempDir,
}

impl Outside {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("victim"), b"untouched").unwrap();
        Outside { dir }
    }
    fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }
    fn assert_untouched(&self) {
        let names: Vec<_> = fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("victim")]);
        assert_eq!(
            fs::read(self.dir.path().join("victim")).unwrap(),
            b"untouched"
        );
        assert_eq!(
            fs::metadata(self.dir.path().join("victim"))
                .unwrap()
                .nlink(),
            1
        );
    }
}

#[test]
fn hostile_dotdot_escape() {
    let l = Layer::new()
        .raw(b"../escape", EntryType::Regular, b"", b"x")
        .build();
    let (u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "../escape");
    assert!(reason.contains(".."), "{reason}");
    assert!(!u.root.parent().unwrap().join("escape").exists());
}

#[test]
fn hostile_inner_dotdot_escape() {
    let l = Layer::new()
        .raw(b"a/../../escape", EntryType::Regular, b"", b"x")
        .build();
    let (u, r) = unpack(&[l]);
    let (entry, _) = entry_err(r, 1);
    assert_eq!(entry, "a/../../escape");
    assert!(!u.root.parent().unwrap().join("escape").exists());
}

#[test]
fn hostile_absolute_name_lands_inside() {
    let l = Layer::new()
        .raw(b"/etc/x-runbox-test", EntryType::Regular, b"", b"in")
        .build();
    let u = unpack_ok(&[l]);
    assert_eq!(u.read("etc/x-runbox-test"), "in");
    assert!(!Path::new("/etc/x-runbox-test").exists());
}

#[test]
fn hostile_symlink_then_write_through_it_same_layer() {
    let out = Outside::new();
    let l = Layer::new()
        .symlink("evil", out.path())
        .file("evil/x", b"pwned")
        .build();
    let (_u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "evil/x");
    assert!(reason.contains("symlink"), "{reason}");
    out.assert_untouched();
}

#[test]
fn hostile_symlink_from_lower_layer_written_through() {
    let out = Outside::new();
    let l1 = Layer::new()
        .symlink("evil", out.path())
        .symlink("rel", "../../..")
        .build();
    let l2 = Layer::new().file("evil/x", b"pwned").build();
    let l3 = Layer::new().file("evil/victim", b"pwned").build();
    let (_u, r) = unpack(&[l1.clone(), l2]);
    let (_, reason) = entry_err(r, 2);
    assert!(reason.contains("symlink"), "{reason}");
    let (_u, r) = unpack(&[l1, l3]);
    entry_err(r, 2);
    out.assert_untouched();
}

#[test]
fn hostile_symlink_replaced_by_file_is_not_followed() {
    // A later regular file over a symlink replaces the link itself.
    let out = Outside::new();
    let victim = format!("{}/victim", out.path());
    let l1 = Layer::new().symlink("v", &victim).build();
    let l2 = Layer::new().file("v", b"pwned").build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("v"), "pwned");
    out.assert_untouched();
}

#[test]
fn hostile_hardlink_dotdot_target() {
    let out = Outside::new();
    let l = Layer::new()
        .raw(b"passwd", EntryType::Link, b"../../etc/passwd", b"")
        .build();
    let (_u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "passwd");
    assert!(reason.contains("hard link target"), "{reason}");
    out.assert_untouched();
}

#[test]
fn hostile_hardlink_absolute_target_resolves_inside() {
    let out = Outside::new();
    let victim = format!("{}/victim", out.path());
    let l = Layer::new().hardlink("grab", &victim).build();
    let (u, r) = unpack(&[l]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("does not exist"), "{reason}");
    assert!(!u.exists("grab"));
    out.assert_untouched();
    // Through a symlinked directory made by the archive: refused too.
    let l = Layer::new()
        .symlink("o", out.path())
        .raw(b"grab2", EntryType::Link, b"o/victim", b"")
        .build();
    let (_u, r) = unpack(&[l]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("symlink"), "{reason}");
    out.assert_untouched();
}

#[test]
fn hostile_whiteout_through_symlinked_dir() {
    let out = Outside::new();
    let l1 = Layer::new().symlink("link", out.path()).build();
    let l2 = Layer::new().file("link/.wh.victim", b"").build();
    let l3 = Layer::new().file("link/.wh..wh..opq", b"").build();
    let (_u, r) = unpack(&[l1.clone(), l2]);
    let (_, reason) = entry_err(r, 2);
    assert!(reason.contains("symlink"), "{reason}");
    let (_u, r) = unpack(&[l1, l3]);
    entry_err(r, 2);
    out.assert_untouched();
}

// ---- malformed streams -------------------------------------------------

#[test]
fn malformed_truncated_stream() {
    let l = Layer::new().file("big", &[7u8; 5000]).build();
    let (_u, r) = unpack(&[l[..512 + 1000].to_vec()]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "big");
    assert!(reason.contains("unexpected end"), "{reason}");
    let (_u, r) = unpack(&[l[..300].to_vec()]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("unexpected end"), "{reason}");
}

#[test]
fn malformed_garbage_bytes() {
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8 | 1).collect();
    let (_u, r) = unpack(&[garbage]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("checksum"), "{reason}");
}

#[test]
fn malformed_huge_pax_header() {
    let mut h = hdr(EntryType::XHeader, 0o644, 0);
    h.as_old_mut().name[..4].copy_from_slice(b"pax!");
    h.set_size(1 << 40);
    h.set_cksum();
    let l = Layer::new()
        .bytes(h.as_bytes())
        .bytes(&[b'9'; 4096])
        .build();
    let (_u, r) = unpack(&[l]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("PAX header"), "{reason}");
}

#[test]
fn malformed_size_field_garbage() {
    let mut h = hdr(EntryType::Regular, 0o644, 0);
    h.as_old_mut().name[..4].copy_from_slice(b"file");
    h.as_old_mut().size.copy_from_slice(b"12x45678901\0");
    h.set_cksum();
    let l = Layer::new().bytes(h.as_bytes()).build();
    let (_u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "file");
    assert!(reason.contains("size"), "{reason}");
    // A negative base-256 size.
    let mut h = hdr(EntryType::Regular, 0o644, 0);
    h.as_old_mut().name[..3].copy_from_slice(b"neg");
    h.as_old_mut().size = [0xff; 12];
    h.set_cksum();
    let (_u, r) = unpack(&[Layer::new().bytes(h.as_bytes()).build()]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("negative"), "{reason}");
}

#[test]
fn empty_stream_and_permissions_of_root_entry() {
    let (_u, r) = unpack(&[Vec::new()]);
    assert_eq!(r.unwrap(), UnpackStats::default());
    let l = Layer::new()
        .dir_with("./", |h| {
            h.set_mode(0o711);
            h.set_mtime(42);
        })
        .build();
    let u = unpack_ok(&[l]);
    assert_eq!(
        fs::metadata(&u.root).unwrap().permissions().mode() & 0o7777,
        0o711
    );
    assert_eq!(fs::metadata(&u.root).unwrap().mtime(), 42);
}

#[test]
fn hostile_links_to_outside_are_never_followed_by_links_or_removal() {
    let out = Outside::new();
    let victim = format!("{}/victim", out.path());
    let l1 = Layer::new()
        .symlink("s", &victim)
        .hardlink("h", "s")
        .symlink("d/dirlink", out.path())
        .symlink("gone", out.path())
        .build();
    let l2 = Layer::new()
        .file("d/.wh..wh..opq", b"")
        .file(".wh.gone", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    // The hard link shares the symlink's inode, not the victim's.
    assert!(u.meta("h").file_type().is_symlink());
    assert_eq!(u.meta("h").ino(), u.meta("s").ino());
    assert!(!u.exists("d/dirlink"));
    assert!(!u.exists("gone"));
    out.assert_untouched();
}

/// Random header corruption (checksums fixed so the parser reads the bad
/// fields) must end in Ok or a clean error: no panic, hang or escape.
#[test]
fn malformed_random_header_mutations() {
    let out = Outside::new();
    let base = Layer::new()
        .dir("d", 0o755)
        .file("d/f", &[1u8; 700])
        .symlink("d/l", "f")
        .hardlink("d/h", "d/f")
        .pax(&[("path", b"p/x"), ("SCHILY.xattr.user.a", b"b")])
        .file("ignored", b"pax")
        .bytes(&super::kinds::gnu_sparse(
            "s",
            1 << 20,
            &[(0, b"a"), (4096, b"b")],
        ))
        .build();
    let headers: Vec<usize> = (0..base.len() / 512)
        .filter(|&i| {
            let b = &base[i * 512..i * 512 + 512];
            b[257..262] == *b"ustar" || b[156] == b'x'
        })
        .collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..300 {
        let mut l = base.clone();
        let h = headers[next() as usize % headers.len()];
        for _ in 0..1 + next() % 4 {
            let off = h * 512 + (next() % 512) as usize;
            l[off] = match next() % 4 {
                0 => 0,
                1 => 0xff,
                2 => b'7',
                _ => next() as u8,
            };
        }
        let mut hdr_bytes = [0u8; 512];
        hdr_bytes.copy_from_slice(&l[h * 512..h * 512 + 512]);
        let sum: u32 = hdr_bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        l[h * 512 + 148..h * 512 + 156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let (_u, _r) = unpack_with(&[l], 0);
    }
    out.assert_untouched();
}

// ---- metadata never by name --------------------------------------------

/// A fresh node's name swapped for a symlink to a host file, or for a hard
/// link to a host fifo, is refused before any chmod/chown/xattr/times.
#[test]
fn hostile_swapped_new_node_is_refused() {
    use rustix::fs::FileType;
    let out = Outside::new();
    let victim = out.dir.path().join("victim");
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("n")).unwrap();
    let d = fs::File::open(dir.path()).unwrap();
    let e = fsops::open_new_node(d.as_fd(), b"n", b"w/n", FileType::Fifo, None).unwrap_err();
    assert!(e.0.contains("replaced"), "{}", e.0);
    // The real symlink passes, and its metadata lands on the link itself.
    let fd = fsops::open_new_node(d.as_fd(), b"n", b"w/n", FileType::Symlink, None).unwrap();
    let meta = fsops::Meta {
        uid: 0,
        gid: 0,
        mode: 0o777,
        mtime: (12345, 0),
        xattrs: &[],
        chown: false,
        chmod: false,
    };
    fsops::apply_meta_path_fd(fd.as_fd(), &meta, b"w/n", false).unwrap();
    assert_eq!(
        fs::symlink_metadata(dir.path().join("n")).unwrap().mtime(),
        12345
    );
    assert_ne!(fs::metadata(&victim).unwrap().mtime(), 12345);
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o7777, 0o600);
    // A hard link to a fifo elsewhere has two links: not the node made here.
    let fifo = out.dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    fs::hard_link(&fifo, dir.path().join("h")).unwrap();
    let e = fsops::open_new_node(d.as_fd(), b"h", b"w/h", FileType::Fifo, None).unwrap_err();
    assert!(e.0.contains("replaced"), "{}", e.0);
    fs::remove_file(&fifo).unwrap();
    out.assert_untouched();
}

/// The reviewer's race: a thread keeps renaming symlinks to a host file
/// over the name of fifos being unpacked. The host file's mode must never
/// change (chmod used to follow the swapped-in symlink).
#[test]
fn hostile_symlink_swapped_in_after_mknod_is_not_followed() {
    let out = Outside::new();
    let victim = out.dir.path().join("victim");
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    fs::create_dir_all(root.join("w")).unwrap();
    let mut l = Layer::new();
    for _ in 0..5000 {
        let mut h = hdr(EntryType::Fifo, 0o666, 0);
        l.0.append_data(&mut h, "w/n", &[][..]).unwrap();
    }
    let l = l.build();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, w, v) = (stop.clone(), root.join("w"), victim.clone());
    let attacker = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let tmp = w.join(format!("t{i}"));
            i += 1;
            if std::os::unix::fs::symlink(&v, &tmp).is_ok() {
                let _ = fs::rename(&tmp, w.join("n"));
            }
        }
    });
    // Stop the attacker even if the unpack panics.
    struct StopOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let guard = StopOnDrop(stop);
    let opts = UnpackOptions {
        writer_threads: 0,
        ..Default::default()
    };
    let r = Unpacker::with_options(&root, opts).and_then(|mut u| u.apply_layer(&l[..], 1));
    drop(guard);
    attacker.join().unwrap();
    let mode = fs::metadata(&victim).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o600, "host file chmodded; unpack said {r:?}");
    out.assert_untouched();
}
