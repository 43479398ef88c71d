//! Every entry kind: files, directories, links, devices, xattrs, long
//! names, sparse files, duplicates and directory times.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use tar::EntryType;

use super::*;

#[test]
fn regular_files_dirs_and_missing_parents() {
    let l = Layer::new()
        .dir("etc", 0o750)
        .file("etc/hostname", b"box\n")
        .file("deep/er/file", b"x")
        .build();
    let (u, r) = unpack(&[l]);
    let stats = r.unwrap();
    assert_eq!(u.read("etc/hostname"), "box\n");
    assert_eq!(u.meta("etc").mode() & 0o7777, 0o750);
    assert_eq!(u.meta("etc/hostname").mode() & 0o7777, 0o644);
    assert_eq!(u.meta("deep").mode() & 0o7777, 0o755);
    assert_eq!(u.meta("deep/er").mode() & 0o7777, 0o755);
    assert_eq!(u.read("deep/er/file"), "x");
    assert_eq!(
        stats,
        UnpackStats {
            entries: 3,
            files: 2,
            bytes: 5
        }
    );
}

#[test]
fn modes_owners_and_times() {
    if !need_root("modes_owners_and_times") {
        return;
    }
    let l = Layer::new()
        .file_with("bin/su", b"su", |h| {
            h.set_mode(0o4755);
            h.set_uid(4_294_967_294);
            h.set_gid(4_294_967_294);
            h.set_mtime(1_234_567_890);
        })
        .file_with("bin/sg", b"sg", |h| {
            h.set_mode(0o2711);
            h.set_uid(1000);
            h.set_gid(50);
        })
        .dir_with("tmp", |h| {
            h.set_mode(0o1777);
            h.set_uid(7);
            h.set_mtime(1_500_000_000);
        })
        .dir_with("shared", |h| {
            h.set_mode(0o2775);
            h.set_gid(50);
        })
        .file_with("shared/rootfile", b"r", |h| h.set_mode(0o666))
        .file("shared/plain", b"p")
        .pax(&[
            ("uid", b"3000000000"),
            ("gid", b"3000000001"),
            ("mtime", b"1700000000.25"),
        ])
        .file("pax-owned", b"p")
        .build();
    let u = unpack_ok(&[l]);
    let su = u.meta("bin/su");
    assert_eq!(su.mode() & 0o7777, 0o4755, "setuid survives chown");
    assert_eq!((su.uid(), su.gid()), (4_294_967_294, 4_294_967_294));
    assert_eq!(su.mtime(), 1_234_567_890);
    let sg = u.meta("bin/sg");
    assert_eq!(sg.mode() & 0o7777, 0o2711);
    assert_eq!((sg.uid(), sg.gid()), (1000, 50));
    let tmp = u.meta("tmp");
    assert_eq!(tmp.mode() & 0o7777, 0o1777);
    assert_eq!(tmp.uid(), 7);
    assert_eq!(tmp.mtime(), 1_500_000_000);
    let shared = u.meta("shared");
    assert_eq!((shared.mode() & 0o7777, shared.gid()), (0o2775, 50));
    let rf = u.meta("shared/rootfile");
    assert_eq!(
        (rf.gid(), rf.mode() & 0o7777),
        (0, 0o666),
        "chown in a setgid dir; chmod past the umask"
    );
    assert_eq!(u.meta("shared/plain").gid(), 0);
    let p = u.meta("pax-owned");
    assert_eq!((p.uid(), p.gid()), (3_000_000_000, 3_000_000_001));
    assert_eq!((p.mtime(), p.mtime_nsec()), (1_700_000_000, 250_000_000));
}

#[test]
fn symlinks_are_stored_verbatim_with_owner_and_time() {
    let l = Layer::new()
        .symlink("abs", "/etc/shadow")
        .symlink("up", "../../../outside")
        .build();
    let u = unpack_ok(&[l]);
    assert_eq!(fs::read_link(u.p("abs")).unwrap(), Path::new("/etc/shadow"));
    assert_eq!(
        fs::read_link(u.p("up")).unwrap(),
        Path::new("../../../outside")
    );
    assert_eq!(u.meta("abs").mtime(), 1_600_000_000);
    if nix::unistd::geteuid().is_root() {
        let mut h = hdr(EntryType::Symlink, 0o777, 0);
        h.set_uid(4_294_967_294);
        h.set_gid(12);
        let mut b = tar::Builder::new(Vec::new());
        b.append_link(&mut h, "owned", "target").unwrap();
        let u = unpack_ok(&[b.into_inner().unwrap()]);
        let m = u.meta("owned");
        assert!(m.file_type().is_symlink());
        assert_eq!((m.uid(), m.gid()), (4_294_967_294, 12));
    }
}

#[test]
fn hardlinks_within_and_across_layers() {
    let l1 = Layer::new().file("usr/bin/python3.11", b"py").build();
    let l2 = Layer::new()
        .hardlink("usr/bin/python3", "usr/bin/python3.11")
        .file("a", b"A")
        .hardlink("b/c", "./a")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(
        u.meta("usr/bin/python3").ino(),
        u.meta("usr/bin/python3.11").ino()
    );
    assert_eq!(u.meta("b/c").ino(), u.meta("a").ino());
    assert_eq!(u.read("b/c"), "A");
}

#[test]
fn devices_and_fifos() {
    if !need_root("devices_and_fifos") {
        return;
    }
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, maj, min) in [
        ("dev/null", EntryType::Char, 1, 3),
        ("dev/sda", EntryType::Block, 8, 0),
        ("dev/big", EntryType::Char, 4000, 70000),
        ("run/fifo", EntryType::Fifo, 0, 0),
    ] {
        let mut h = hdr(kind, 0o620, 0);
        h.set_device_major(maj).unwrap();
        h.set_device_minor(min).unwrap();
        h.set_gid(5);
        b.append_data(&mut h, name, &[][..]).unwrap();
    }
    let u = unpack_ok(&[b.into_inner().unwrap()]);
    let null = u.meta("dev/null");
    assert!(null.file_type().is_char_device());
    assert_eq!(null.rdev(), rustix::fs::makedev(1, 3));
    assert_eq!(null.mode() & 0o7777, 0o620);
    assert_eq!(null.gid(), 5);
    assert!(u.meta("dev/sda").file_type().is_block_device());
    assert_eq!(u.meta("dev/sda").rdev(), rustix::fs::makedev(8, 0));
    assert_eq!(u.meta("dev/big").rdev(), rustix::fs::makedev(4000, 70000));
    assert!(u.meta("run/fifo").file_type().is_fifo());
    assert_eq!(u.meta("run/fifo").mtime(), 1_600_000_000);
}

fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::lgetxattr(path, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

#[test]
fn xattrs_from_pax_records() {
    if !need_root("xattrs_from_pax_records") {
        return;
    }
    // A valid v2 capability blob: cap_net_bind_service permitted+effective.
    let cap: &[u8] = &[
        0x01, 0, 0, 0x02, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let l = Layer::new()
        .pax(&[
            ("SCHILY.xattr.security.capability", cap),
            ("SCHILY.xattr.user.note", b"hello"),
            ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
        ])
        .file_with("usr/bin/ping", b"elf", |h| h.set_uid(1))
        .pax(&[("SCHILY.xattr.user.dir", b"d")])
        .dir("data", 0o755)
        .build();
    let u = unpack_ok(&[l]);
    let ping = u.p("usr/bin/ping");
    assert_eq!(
        get_xattr(&ping, "security.capability").as_deref(),
        Some(cap)
    );
    assert_eq!(
        get_xattr(&ping, "user.note").as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(
        get_xattr(&ping, "trusted.overlay.opaque"),
        None,
        "trusted.* is never restored"
    );
    assert_eq!(u.meta("usr/bin/ping").uid(), 1);
    assert_eq!(
        get_xattr(&u.p("data"), "user.dir").as_deref(),
        Some(&b"d"[..])
    );
}

#[test]
fn long_names_and_link_names() {
    let long_dir = "d".repeat(120);
    let long_file = format!("{long_dir}/{}", "f".repeat(150));
    let long_target = format!("/{}", "t".repeat(200));
    let l = Layer::new()
        .file(&long_file, b"long")
        .symlink("ln", &long_target)
        .pax(&[("path", b"pax/named"), ("linkpath", b"pax/target")])
        .raw(b"ignored", EntryType::Symlink, b"ignored", b"")
        .build();
    let u = unpack_ok(&[l]);
    assert_eq!(u.read(&long_file), "long");
    assert_eq!(fs::read_link(u.p("ln")).unwrap(), Path::new(&long_target));
    assert_eq!(
        fs::read_link(u.p("pax/named")).unwrap(),
        Path::new("pax/target")
    );
}

/// An old-GNU `S` header; `chunks` are (offset, data); more than 4 chunks
/// spill into extension blocks.
pub(super) fn gnu_sparse(name: &str, real_size: u64, chunks: &[(u64, &[u8])]) -> Vec<u8> {
    fn oct(dst: &mut [u8], v: u64) {
        let s = format!("{:0w$o}\0", v, w = dst.len() - 1);
        dst.copy_from_slice(s.as_bytes());
    }
    let stored: usize = chunks.iter().map(|c| c.1.len()).sum();
    let mut h = hdr(EntryType::GNUSparse, 0o644, stored as u64);
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    let b = h.as_mut_bytes();
    for (i, (off, data)) in chunks.iter().take(4).enumerate() {
        oct(&mut b[386 + i * 24..398 + i * 24], *off);
        oct(&mut b[398 + i * 24..410 + i * 24], data.len() as u64);
    }
    b[482] = u8::from(chunks.len() > 4);
    oct(&mut b[483..495], real_size);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    let rest: Vec<_> = chunks.iter().skip(4).collect();
    for (bi, group) in rest.chunks(21).enumerate() {
        let mut ext = [0u8; 512];
        for (i, (off, data)) in group.iter().enumerate() {
            oct(&mut ext[i * 24..i * 24 + 12], *off);
            oct(&mut ext[i * 24 + 12..i * 24 + 24], data.len() as u64);
        }
        ext[504] = u8::from((bi + 1) * 21 < rest.len());
        out.extend_from_slice(&ext);
    }
    for (_, d) in chunks {
        out.extend_from_slice(d);
    }
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn assert_sparse(u: &Unpacked, rel: &str, size: u64, chunks: &[(u64, &[u8])]) {
    let data = fs::read(u.p(rel)).unwrap();
    assert_eq!(data.len() as u64, size);
    let mut want = vec![0u8; size as usize];
    for (off, d) in chunks {
        want[*off as usize..*off as usize + d.len()].copy_from_slice(d);
    }
    assert!(data == want, "content of {rel}");
    let blocks = u.meta(rel).blocks() * 512;
    assert!(
        blocks < size / 2,
        "{rel} has holes: {blocks} bytes allocated of {size}"
    );
}

#[test]
fn gnu_sparse_files_with_extension_blocks() {
    let mib = 1 << 20;
    let few: Vec<(u64, &[u8])> = vec![(0, b"head"), (4 * mib, b"tail")];
    let many: Vec<(u64, &[u8])> = (0..30u64).map(|i| (i * mib, &b"chunk"[..])).collect();
    let l = Layer::new()
        .bytes(&gnu_sparse("few", 8 * mib, &few))
        .bytes(&gnu_sparse("many", 31 * mib, &many))
        .file("after", b"ok")
        .build();
    let u = unpack_ok(&[l]);
    assert_sparse(&u, "few", 8 * mib, &few);
    assert_sparse(&u, "many", 31 * mib, &many);
    assert_eq!(u.read("after"), "ok");
}

#[test]
fn pax_sparse_0_1_and_1_0() {
    let mib: u64 = 1 << 20;
    let chunks: Vec<(u64, &[u8])> = vec![(mib, b"one"), (5 * mib, b"two!")];
    let data: Vec<u8> = chunks.iter().flat_map(|c| c.1.to_vec()).collect();
    let map01 = format!("{},3,{},4", mib, 5 * mib);
    let mut map10 = format!("2\n{}\n3\n{}\n4\n", mib, 5 * mib).into_bytes();
    map10.resize(512, 0);
    map10.extend_from_slice(&data);
    let size = (6 * mib).to_string();
    let l = Layer::new()
        .pax(&[
            ("GNU.sparse.map", map01.as_bytes()),
            ("GNU.sparse.size", size.as_bytes()),
            ("GNU.sparse.name", b"sparse01"),
        ])
        .file("GNUSparseFile.1/sparse01", &data)
        .pax(&[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.realsize", size.as_bytes()),
            ("GNU.sparse.name", b"dir/sparse10"),
        ])
        .file("GNUSparseFile.1/sparse10", &map10)
        .build();
    let u = unpack_ok(&[l]);
    assert_sparse(&u, "sparse01", 6 * mib, &chunks);
    assert_sparse(&u, "dir/sparse10", 6 * mib, &chunks);
    assert!(!u.exists("GNUSparseFile.1"));
}

#[test]
fn duplicate_entries_last_wins() {
    let l1 = Layer::new()
        .file("f", b"first")
        .dir("d", 0o700)
        .file("d/child", b"c")
        .dir("gone", 0o755)
        .file("gone/x", b"x")
        .file("was-file", b"f")
        .build();
    let l2 = Layer::new()
        .file("f", b"second")
        .symlink("f2", "f")
        .file("f2", b"not a link")
        .dir("d", 0o751)
        .file("gone", b"now a file")
        .dir("was-file", 0o755)
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("f"), "second");
    assert!(u.meta("f2").file_type().is_file());
    assert_eq!(u.read("f2"), "not a link");
    assert_eq!(u.meta("d").mode() & 0o7777, 0o751);
    assert_eq!(u.read("d/child"), "c", "dir over dir keeps children");
    assert_eq!(u.read("gone"), "now a file");
    assert!(u.meta("was-file").is_dir());
}

#[test]
fn directory_mtimes_applied_last_topmost_wins() {
    let l1 = Layer::new()
        .dir_with("a", |h| h.set_mtime(1_000))
        .dir_with("a/b", |h| h.set_mtime(2_000))
        .file("a/b/f", b"x")
        .dir_with("c", |h| h.set_mtime(3_000))
        .build();
    let l2 = Layer::new()
        .dir_with("c", |h| h.set_mtime(4_000))
        .file("a/new", b"y")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.meta("a").mtime(), 1_000);
    assert_eq!(u.meta("a/b").mtime(), 2_000);
    assert_eq!(u.meta("c").mtime(), 4_000);
}
