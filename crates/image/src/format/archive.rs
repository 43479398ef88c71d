//! Random access to the members of an image container: an uncompressed tar
//! file (scanned once by `scan`: headers are read, bounded, and data is
//! seeked past) or a directory.
//! Members are addressed by normalized names (`./a//b` is `a/b`); symlinks and
//! hard links between members are resolved inside the container with a bounded
//! depth, and never to a name outside it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
#[cfg(unix)]
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext};
use crate::Result;

#[cfg(test)]
thread_local! {
    /// Documents read by `read_capped` on this thread: tests count reads.
    pub(crate) static CAPPED_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Longest chain of member links followed before giving up.
const MAX_LINK_DEPTH: usize = 16;
/// Upper bound on the members we keep in the index; see `worth_indexing`.
const MAX_INDEXED: usize = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    File,
    Dir,
    Symlink,
    Hardlink,
    Other,
}

#[derive(Debug, Clone)]
pub struct Member {
    /// Byte offset of the data in the tar file.
    pub offset: u64,
    pub size: u64,
    pub kind: MemberKind,
    pub link: Option<String>,
}

/// Where the members live.
pub enum Container {
    Tar {
        file: Arc<File>,
        members: HashMap<String, Member>,
        markers: Markers,
    },
    Dir {
        root: PathBuf,
    },
}

/// Which top-level names that tell formats apart are present in a tar.
#[derive(Debug, Default, Clone, Copy)]
pub struct Markers {
    pub manifest_json: bool,
    pub index_json: bool,
    pub oci_layout: bool,
    pub repositories: bool,
}

/// `./a//b/` -> `a/b`; `a/../b` -> `b`; None when the name climbs out of the root.
/// A leading `/` is dropped: tar member names are relative to the archive.
pub fn normalize(name: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in name.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// Only names that an image archive can refer to are kept, so that a huge
/// rootfs tar does not turn into a huge index: top-level names, everything
/// under `blobs/`, and second-level `*.tar`, `*.json`, `json`, `VERSION`
/// (the legacy `<id>/layer.tar` layout).
fn worth_indexing(name: &str) -> bool {
    let mut it = name.splitn(3, '/');
    let first = it.next().unwrap_or("");
    match (it.next(), it.next()) {
        (None, _) => true,
        _ if first == "blobs" => true,
        (Some(second), None) => {
            second.ends_with(".tar")
                || second.ends_with(".json")
                || second == "json"
                || second == "VERSION"
        }
        _ => false,
    }
}

/// A seekable buffered reader that keeps its buffer across short forward
/// seeks (std's `BufReader::seek` always drops it), so scanning a tar of many
/// small members costs few syscalls.
struct ScanReader {
    inner: BufReader<File>,
    pos: u64,
}

impl Read for ScanReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ScanReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::Current(d) => self
                .pos
                .checked_add_signed(d)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?,
            SeekFrom::End(_) => {
                self.pos = self.inner.seek(to)?;
                return Ok(self.pos);
            }
        };
        let delta = i64::try_from(i128::from(target) - i128::from(self.pos))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
        self.inner.seek_relative(delta)?;
        self.pos = target;
        Ok(target)
    }
}

impl Container {
    /// Scan the headers of an uncompressed tar. `shown` names the input in errors.
    pub fn scan_tar(file: File, shown: &Path) -> Result<Container> {
        let len = file.metadata().ctx("stat", shown)?.len();
        let mut dup = file.try_clone().ctx("dup", shown)?;
        dup.seek(SeekFrom::Start(0)).ctx("seek", shown)?;
        let mut scan = ScanReader {
            inner: BufReader::with_capacity(64 << 10, dup),
            pos: 0,
        };
        let bad = |reason: String| Error::Format {
            file: shown.to_path_buf(),
            reason,
        };
        let mut members = HashMap::new();
        let mut markers = Markers::default();
        let r = super::scan::scan(&mut scan, |m| {
            let raw = String::from_utf8_lossy(&m.name);
            let Some(name) = normalize(&raw) else {
                // A `..` member cannot be part of an image layout; for a rootfs
                // tar the unpacker rejects it with a precise message.
                return Ok(());
            };
            let (offset, size) = (m.offset, m.size);
            if offset.checked_add(size).is_none_or(|end| end > len) {
                return Err(format!(
                    "truncated tar archive: member `{name}` needs {size} bytes at offset {offset}, but the file has {len}"
                ));
            }
            match name.as_str() {
                "manifest.json" => markers.manifest_json = true,
                "index.json" => markers.index_json = true,
                "oci-layout" => markers.oci_layout = true,
                "repositories" => markers.repositories = true,
                _ => {}
            }
            if !worth_indexing(&name) {
                return Ok(());
            }
            if members.len() >= MAX_INDEXED {
                return Err(format!("more than {MAX_INDEXED} top-level members"));
            }
            let kind = match m.typeflag {
                b'0' | 0 | b'7' => MemberKind::File,
                b'5' => MemberKind::Dir,
                b'2' => MemberKind::Symlink,
                b'1' => MemberKind::Hardlink,
                _ => MemberKind::Other,
            };
            let link = matches!(kind, MemberKind::Symlink | MemberKind::Hardlink)
                .then(|| String::from_utf8_lossy(&m.link).into_owned());
            members.insert(
                name,
                Member {
                    offset,
                    size,
                    kind,
                    link,
                },
            );
            Ok(())
        });
        r.map_err(bad)?;
        Ok(Container::Tar {
            file: Arc::new(file),
            members,
            markers,
        })
    }

    pub fn dir(root: &Path) -> Container {
        Container::Dir {
            root: root.to_path_buf(),
        }
    }

    /// Follow member links to a regular file. Symlink targets are relative
    /// to the link's directory, hard link targets to the archive root.
    fn resolve_tar<'a>(
        members: &'a HashMap<String, Member>,
        name: &str,
    ) -> std::result::Result<&'a Member, String> {
        let mut cur =
            normalize(name).ok_or_else(|| format!("`{name}` points outside the archive"))?;
        for _ in 0..=MAX_LINK_DEPTH {
            let m = members.get(&cur).ok_or_else(|| {
                if cur == name {
                    format!("`{name}` is missing")
                } else {
                    format!("`{name}` leads to `{cur}`, which is missing")
                }
            })?;
            match (m.kind, &m.link) {
                (MemberKind::File, _) => return Ok(m),
                (MemberKind::Symlink, Some(target)) => {
                    if target.starts_with('/') {
                        return Err(format!(
                            "`{cur}` is a symlink to the absolute path `{target}`"
                        ));
                    }
                    let base = cur.rsplit_once('/').map_or("", |(d, _)| d);
                    cur = normalize(&format!("{base}/{target}")).ok_or_else(|| {
                        format!("`{cur}` is a symlink pointing outside the archive ({target})")
                    })?;
                }
                (MemberKind::Hardlink, Some(target)) => {
                    cur = normalize(target).ok_or_else(|| {
                        format!("`{cur}` is a hard link pointing outside the archive ({target})")
                    })?;
                }
                _ => return Err(format!("`{cur}` is not a regular file")),
            }
        }
        Err(format!(
            "`{name}`: more than {MAX_LINK_DEPTH} levels of links"
        ))
    }

    /// A member's size in bytes, following links.
    pub fn size(&self, name: &str) -> std::result::Result<u64, String> {
        match self {
            Container::Tar { members, .. } => Container::resolve_tar(members, name).map(|m| m.size),
            Container::Dir { root } => {
                let rel =
                    normalize(name).ok_or_else(|| format!("`{name}` points outside the layout"))?;
                let meta =
                    std::fs::metadata(root.join(&rel)).map_err(|e| format!("`{rel}`: {e}"))?;
                if !meta.is_file() {
                    return Err(format!("`{rel}` is not a regular file"));
                }
                Ok(meta.len())
            }
        }
    }

    /// What a name leads to, after links: equal ids are the same bytes
    /// (tar: offset and size of the member; directory: device and inode).
    pub fn member_id(&self, name: &str) -> std::result::Result<(u64, u64), String> {
        match self {
            Container::Tar { members, .. } => {
                Container::resolve_tar(members, name).map(|m| (m.offset, m.size))
            }
            Container::Dir { root } => {
                use std::os::unix::fs::MetadataExt;
                let rel =
                    normalize(name).ok_or_else(|| format!("`{name}` points outside the layout"))?;
                let meta =
                    std::fs::metadata(root.join(&rel)).map_err(|e| format!("`{rel}`: {e}"))?;
                Ok((meta.dev(), meta.ino()))
            }
        }
    }

    /// Open a member for streaming. The reader is independent of `self`
    /// (it owns a handle), so it can move to another thread.
    pub fn open(&self, name: &str) -> std::result::Result<(Box<dyn Read + Send>, u64), String> {
        match self {
            Container::Tar { file, members, .. } => {
                let m = Container::resolve_tar(members, name)?;
                let reader = MemberReader {
                    file: Arc::clone(file),
                    pos: m.offset,
                    end: m.offset + m.size,
                };
                Ok((Box::new(reader), m.size))
            }
            Container::Dir { root } => {
                let size = self.size(name)?;
                let rel = normalize(name).unwrap_or_default();
                let f =
                    File::open(root.join(&rel)).map_err(|e| format!("cannot open `{rel}`: {e}"))?;
                // Bounded like a tar member, in case the file grows.
                Ok((Box::new(f.take(size)), size))
            }
        }
    }

    /// Read a whole member that must be at most `cap` bytes (JSON documents).
    pub fn read_capped(&self, name: &str, cap: u64) -> std::result::Result<Vec<u8>, String> {
        #[cfg(test)]
        CAPPED_READS.with(|n| n.set(n.get() + 1));
        let (mut r, size) = self.open(name)?;
        if size > cap {
            return Err(format!(
                "`{name}` is {size} bytes, more than the limit of {cap} bytes"
            ));
        }
        let mut buf = Vec::with_capacity(size as usize);
        r.by_ref()
            .take(cap)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read `{name}`: {e}"))?;
        if (buf.len() as u64) < size {
            return Err(format!(
                "`{name}` is truncated: read {} of {size} bytes",
                buf.len()
            ));
        }
        Ok(buf)
    }

    pub fn markers(&self) -> Markers {
        match self {
            Container::Tar { markers, .. } => *markers,
            Container::Dir { root } => Markers {
                manifest_json: root.join("manifest.json").is_file(),
                index_json: root.join("index.json").is_file(),
                oci_layout: root.join("oci-layout").is_file(),
                repositories: root.join("repositories").is_file(),
            },
        }
    }

    /// The whole tar file as one stream (a plain rootfs tar is one layer).
    pub fn whole(&self) -> Option<(Box<dyn Read + Send>, u64)> {
        match self {
            Container::Tar { file, .. } => {
                let len = file.metadata().ok()?.len();
                Some((
                    Box::new(MemberReader {
                        file: Arc::clone(file),
                        pos: 0,
                        end: len,
                    }),
                    len,
                ))
            }
            Container::Dir { .. } => None,
        }
    }
}

/// Reads `[pos, end)` of a shared file with positional reads, so several
/// readers (and the scanner) never disturb each other's offsets.
struct MemberReader {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for MemberReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end - self.pos;
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("file ends {} bytes before the end of the member", left),
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_names() {
        assert_eq!(normalize("./a//b/").as_deref(), Some("a/b"));
        assert_eq!(
            normalize("/manifest.json").as_deref(),
            Some("manifest.json")
        );
        assert_eq!(normalize("a/../b").as_deref(), Some("b"));
        assert_eq!(normalize("../x"), None);
        assert_eq!(normalize("a/../../x"), None);
    }

    #[test]
    fn indexes_only_layout_shaped_names() {
        assert!(worth_indexing("manifest.json"));
        assert!(worth_indexing("abc/layer.tar"));
        assert!(worth_indexing("blobs/sha256/abc"));
        assert!(worth_indexing("abc/json"));
        assert!(!worth_indexing("usr/bin/ls"));
        assert!(!worth_indexing("etc/passwd"));
    }
}
