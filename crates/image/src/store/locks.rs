//! File locks, atomic writes and load sessions: the only coordination
//! between concurrent runbox processes (see the rules in `store`).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::IoContext;
use crate::{Error, Result};

use super::Store;

/// Largest record or ref file we agree to read.
const MAX_META: u64 = 16 << 20;

/// A load's private scratch directory, and the lock that says it is alive.
pub(super) struct Session {
    pub(super) name: String,
    pub(super) dir: PathBuf,
    _lock: File,
}

impl Session {
    pub(super) fn new(store: &Store) -> Result<Session> {
        let tmp = store.root().join("tmp");
        let mut attempts = 0;
        let (name, lock_path, lock) = loop {
            let name = format!("{}.{:08x}", std::process::id(), rand::random::<u32>());
            let lock_path = tmp.join(format!("{name}.lock"));
            let lock = lock_file(&lock_path, Lock::Exclusive)?;
            // A sweeper may have taken and unlinked the fresh file before we
            // locked it: then take another name.
            if same_file(&lock, &lock_path) {
                break (name, lock_path, lock);
            }
            attempts += 1;
            if attempts == 5 {
                return Err(Error::Invalid(format!(
                    "session lock `{}` keeps vanishing",
                    lock_path.display()
                )));
            }
        };
        let _ = &lock_path;
        let dir = tmp.join(&name);
        fs::create_dir(&dir).ctx("create session directory", &dir)?;
        Ok(Session {
            name,
            dir,
            _lock: lock,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // What is left in the session (a failed unpack) is trash.
        let parent = self.dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let trash = parent.parent().map(|r| r.join("trash")).unwrap_or_default();
        let empty = fs::read_dir(&self.dir)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        if empty {
            let _ = fs::remove_dir(&self.dir);
        } else {
            let _ = fs::rename(&self.dir, trash.join(format!("session-{}", self.name)));
        }
        let _ = fs::remove_file(parent.join(format!("{}.lock", self.name)));
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Lock {
    Shared,
    Exclusive,
    TryExclusive,
}

pub(crate) fn lock_file(path: &Path, how: Lock) -> Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ctx("open lock", path)?;
    match how {
        Lock::Shared => f.lock_shared().ctx("lock", path)?,
        Lock::Exclusive => f.lock().ctx("lock", path)?,
        Lock::TryExclusive => match f.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(Error::io(
                    "lock",
                    path,
                    std::io::Error::from(std::io::ErrorKind::WouldBlock),
                ))
            }
            Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        },
    }
    Ok(f)
}

fn same_file(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Writes `bytes` to a temporary name beside `path`, then renames over it.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_file_name(format!(
        ".{}.{}.{:x}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
        std::process::id(),
        rand::random::<u32>()
    ));
    let mut f = File::create(&tmp).ctx("create", &tmp)?;
    f.write_all(bytes).ctx("write", &tmp)?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("rename into", path, e)
    })
}

pub(super) fn read_capped(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let mut buf = Vec::new();
    f.take(MAX_META + 1)
        .read_to_end(&mut buf)
        .ctx("read", path)?;
    if buf.len() as u64 > MAX_META {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            reason: "larger than 16 MiB".into(),
        });
    }
    Ok(Some(buf))
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
        _ => Ok(()),
    }
}
