//! Tests of unpacking layer streams built in code, with shared helpers: a
//! layer builder (incl. raw hostile headers) and an unpack that runs both
//! with writer threads and without and checks that the trees agree.
//! `kinds`: every entry kind; `whiteouts`: layer semantics; `hostile`:
//! escapes (each checks the outside target is untouched) and malformed
//! streams; `bombs`: resource bombs and overflowing sizes.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tar::{EntryType, Header};

use super::*;

mod bombs;
mod hostile;
mod kinds;
mod whiteouts;

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
