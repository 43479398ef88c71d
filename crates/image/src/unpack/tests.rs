//! Tests of unpacking layer streams built in code: every entry kind, the
//! whiteout rules across layers, hostile names and links (each checks that
//! the outside target is untouched), and malformed streams.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use tar::{EntryType, Header};

use super::*;

/// Root-only tests call this first: skip (with the reason) unless
/// RUNBOX_TESTS_MUST_RUN=1, which turns a skip into a failure.
fn need_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var_os("RUNBOX_TESTS_MUST_RUN").is_some_and(|v| v == "1") {
        panic!("{test}: needs root and RUNBOX_TESTS_MUST_RUN=1");
    }
    eprintln!("skipping {test}: needs root (chown, mknod, security.* xattrs)");
    false
}

/// A layer under construction.
struct Layer(tar::Builder<Vec<u8>>);

fn hdr(kind: EntryType, mode: u32, size: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(1_600_000_000);
    h.set_uid(0);
    h.set_gid(0);
    h
}

impl Layer {
    fn new() -> Self {
        Layer(tar::Builder::new(Vec::new()))
    }
    fn file(mut self, path: &str, data: &[u8]) -> Self {
        let mut h = hdr(EntryType::Regular, 0o644, data.len() as u64);
        self.0.append_data(&mut h, path, data).unwrap();
        self
    }
    fn file_with(mut self, path: &str, data: &[u8], f: impl FnOnce(&mut Header)) -> Self {
        let mut h = hdr(EntryType::Regular, 0o644, data.len() as u64);
        f(&mut h);
        self.0.append_data(&mut h, path, data).unwrap();
        self
    }
    fn dir(self, path: &str, mode: u32) -> Self {
        self.dir_with(path, |h| h.set_mode(mode))
    }
    fn dir_with(mut self, path: &str, f: impl FnOnce(&mut Header)) -> Self {
        let mut h = hdr(EntryType::Directory, 0o755, 0);
        f(&mut h);
        self.0.append_data(&mut h, path, &[][..]).unwrap();
        self
    }
    fn symlink(mut self, path: &str, target: &str) -> Self {
        let mut h = hdr(EntryType::Symlink, 0o777, 0);
        self.0.append_link(&mut h, path, target).unwrap();
        self
    }
    fn hardlink(mut self, path: &str, target: &str) -> Self {
        let mut h = hdr(EntryType::Link, 0o644, 0);
        self.0.append_link(&mut h, path, target).unwrap();
        self
    }
    /// An entry with an arbitrary (possibly hostile) name and link name,
    /// written into the header fields directly.
    fn raw(mut self, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) -> Self {
        let mut h = hdr(kind, 0o644, data.len() as u64);
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_cksum();
        self.0.append(&h, data).unwrap();
        self
    }
    fn pax(mut self, records: &[(&str, &[u8])]) -> Self {
        self.0
            .append_pax_extensions(records.iter().copied())
            .unwrap();
        self
    }
    /// Raw bytes appended as-is (hand-made headers).
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.get_mut().extend_from_slice(b);
        self
    }
    fn build(self) -> Vec<u8> {
        self.0.into_inner().unwrap()
    }
}

struct Unpacked {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
}

impl Unpacked {
    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.root.join(rel)
    }
    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.p(rel)).unwrap()
    }
    fn exists(&self, rel: &str) -> bool {
        fs::symlink_metadata(self.p(rel)).is_ok()
    }
    fn meta(&self, rel: &str) -> fs::Metadata {
        fs::symlink_metadata(self.p(rel)).unwrap()
    }
}

fn unpack_with(layers: &[Vec<u8>], threads: usize) -> (Unpacked, Result<UnpackStats>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    fs::create_dir(&root).unwrap();
    let r = (|| {
        let opts = UnpackOptions {
            writer_threads: threads,
            ..Default::default()
        };
        let mut u = Unpacker::with_options(&root, opts)?;
        for (i, l) in layers.iter().enumerate() {
            u.apply_layer(&l[..], i + 1)?;
        }
        u.finish()
    })();
    (Unpacked { _dir: dir, root }, r)
}

/// Every file under `root`: path, type, mode, owner, mtime, link count,
/// link target and a content hash.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let extra = if m.file_type().is_symlink() {
                fs::read_link(&p).unwrap().display().to_string()
            } else if m.is_file() {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                fs::read(&p).unwrap().hash(&mut h);
                format!("{:x}", h.finish())
            } else {
                String::new()
            };
            out.push(format!(
                "{} {:o} {}:{} {} {} {}",
                p.strip_prefix(root).unwrap().display(),
                m.mode(),
                m.uid(),
                m.gid(),
                // Implicit directories get "now", which differs per run.
                if m.is_dir() { 0 } else { m.mtime() },
                m.nlink(),
                extra
            ));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Unpacks with the writer pool and on the calling thread alone; both must
/// agree (success and the resulting tree, or failure).
fn unpack(layers: &[Vec<u8>]) -> (Unpacked, Result<UnpackStats>) {
    let (inline, ri) = unpack_with(layers, 0);
    let (pooled, rp) = unpack_with(layers, 2);
    assert_eq!(ri.is_ok(), rp.is_ok(), "inline {ri:?} vs pooled {rp:?}");
    if let (Ok(a), Ok(b)) = (&ri, &rp) {
        assert_eq!(a, b);
        let (li, lp) = (listing(&inline.root), listing(&pooled.root));
        let differ: Vec<_> = li.iter().zip(&lp).filter(|(a, b)| a != b).take(3).collect();
        assert!(
            li.len() == lp.len() && differ.is_empty(),
            "inline vs pooled tree: {differ:?}"
        );
    }
    (pooled, rp)
}

fn unpack_ok(layers: &[Vec<u8>]) -> Unpacked {
    let (u, r) = unpack(layers);
    r.unwrap();
    u
}

/// The reason of an entry/layer error, asserting on the layer number.
fn entry_err(r: Result<UnpackStats>, layer_no: usize) -> (String, String) {
    match r {
        Err(Error::Entry {
            layer,
            entry,
            reason,
            ..
        }) => {
            assert_eq!(layer, layer_no);
            (entry, reason)
        }
        Err(Error::Layer { layer, reason, .. }) => {
            assert_eq!(layer, layer_no);
            (String::new(), reason)
        }
        other => panic!("expected an entry error, got {other:?}"),
    }
}

// ---- entry kinds -------------------------------------------------------

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
fn gnu_sparse(name: &str, real_size: u64, chunks: &[(u64, &[u8])]) -> Vec<u8> {
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

// ---- whiteouts ---------------------------------------------------------

#[test]
fn whiteout_removes_lower_file_and_tree() {
    let l1 = Layer::new()
        .file("etc/keep", b"k")
        .file("etc/drop", b"d")
        .file("var/cache/a/b", b"b")
        .symlink("lnk", "/etc")
        .build();
    let l2 = Layer::new()
        .file("etc/.wh.drop", b"")
        .file("var/.wh.cache", b"")
        .file(".wh.lnk", b"")
        .file("etc/.wh.never-existed", b"")
        .file("nodir/.wh.x", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("etc/keep"), "k");
    assert!(!u.exists("etc/drop"));
    assert!(!u.exists("var/cache"));
    assert!(u.exists("var"));
    assert!(!u.exists("lnk"));
    assert!(!u.exists("etc/.wh.drop"), "whiteouts never appear");
    assert!(!u.exists("nodir"));
}

#[test]
fn whiteout_never_removes_same_layer_entries() {
    let l1 = Layer::new().file("a", b"lower").file("b", b"lower").build();
    // The new `a` comes after its whiteout, the new `b` before.
    let l2 = Layer::new()
        .file(".wh.a", b"")
        .file("a", b"upper")
        .file("b", b"upper")
        .file(".wh.b", b"")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert_eq!(u.read("a"), "upper");
    assert_eq!(u.read("b"), "upper");
}

#[test]
fn opaque_marker_before_and_after_own_entries() {
    let l1 = Layer::new()
        .file("o1/lower", b"l")
        .file("o1/sub/lower", b"l")
        .file("o2/lower", b"l")
        .file("o2/sub/lower", b"l")
        .file("other/lower", b"l")
        .build();
    let l2 = Layer::new()
        .dir("o1", 0o755)
        .file("o1/.wh..wh..opq", b"")
        .file("o1/new", b"n")
        // Marker after this layer's own entries, including one in a
        // subdirectory that also held lower files.
        .dir("o2", 0o755)
        .file("o2/new", b"n")
        .file("o2/sub/new", b"n")
        .file("o2/.wh..wh..opq", b"")
        .build();
    let l3 = Layer::new().file("o2/third", b"3").build();
    let u = unpack_ok(&[l1, l2, l3]);
    assert!(!u.exists("o1/lower"));
    assert!(!u.exists("o1/sub"));
    assert_eq!(u.read("o1/new"), "n");
    assert!(!u.exists("o1/.wh..wh..opq"));
    assert!(!u.exists("o2/lower"));
    assert_eq!(u.read("o2/new"), "n");
    assert_eq!(u.read("o2/sub/new"), "n");
    assert!(
        !u.exists("o2/sub/lower"),
        "lower children of a re-made subdir are hidden"
    );
    assert_eq!(u.read("o2/third"), "3");
    assert_eq!(u.read("other/lower"), "l");
}

#[test]
fn docker_whiteout_with_typeflag_0_and_linkname() {
    let l1 = Layer::new().file("x/f", b"1").build();
    let l2 = Layer::new()
        .raw(b"x/.wh.f", EntryType::Regular, b"x/.wh.f", b"")
        .raw(b"x/g", EntryType::Regular, b"some/link", b"data")
        .build();
    let u = unpack_ok(&[l1, l2]);
    assert!(!u.exists("x/f"));
    assert!(!u.exists("x/.wh.f"));
    assert_eq!(
        u.read("x/g"),
        "data",
        "typeflag 0 is a file whatever its link name"
    );
}

// ---- hostile archives --------------------------------------------------

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
fn writer_pool_keeps_entry_order_semantics() {
    let mut l1 = Layer::new()
        .file("old/f", b"lower")
        .file("swap", b"was file");
    for i in 0..300 {
        l1 = l1.file(
            &format!("many/{}/f{i}", i % 7),
            format!("content {i}").as_bytes(),
        );
    }
    let l2 = Layer::new()
        .file("p", b"one")
        .file("p", b"two")
        .hardlink("p-link", "p")
        .file("q", b"a file first")
        .dir("q", 0o755)
        .file("q/inside", b"in")
        .file("r", b"own")
        .file(".wh.r", b"")
        .file("old/f", b"upper")
        .dir("swap", 0o700)
        .file("swap/x", b"x")
        .file("many/3/f3", b"replaced")
        .build();
    let u = unpack_ok(&[l1.build(), l2]);
    assert_eq!(u.read("p"), "two");
    assert_eq!(u.meta("p-link").ino(), u.meta("p").ino());
    assert_eq!(u.read("q/inside"), "in");
    assert_eq!(u.read("r"), "own");
    assert_eq!(u.read("old/f"), "upper");
    assert_eq!(u.read("swap/x"), "x");
    assert_eq!(u.read("many/3/f3"), "replaced");
    assert_eq!(u.read("many/5/f299"), "content 299");
}
