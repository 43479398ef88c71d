//! Garbage collection of the store: debris of killed loads, images not
//! used for a while, orphaned rootfs directories, dangling names, and the
//! trash. Follows the locking rules in `store`: a rootfs is only removed
//! while both of its chain locks are held exclusively.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::error::IoContext;
use crate::store::{lock_file, remove_if_exists, ImageRecord, Lock, Store};
use crate::{Error, Result};

/// Debris directories without a lock file are left alone this long: their
/// owner may be between creating the lock and the directory.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Remove images not used within this duration. None: only images
    /// without a name (and debris).
    pub until: Option<Duration>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default)]
pub struct PruneReport {
    pub images: Vec<ImageRecord>,
    /// Images kept because a running container uses them.
    pub in_use: Vec<ImageRecord>,
    /// Debris and orphans moved out (temporary dirs, unreferenced rootfs).
    pub debris: Vec<PathBuf>,
    /// Trash entries deleted.
    pub trash_removed: usize,
}

/// Moves the session directories of dead loads to the trash.
pub fn sweep_sessions(store: &Store, except: Option<&str>) -> Result<Vec<PathBuf>> {
    sweep(store, except, false)
}

fn sweep(store: &Store, except: Option<&str>, dry_run: bool) -> Result<Vec<PathBuf>> {
    let tmp = store.root().join("tmp");
    let mut moved = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(&tmp).ctx("list", &tmp)? {
        let entry = entry.ctx("list", &tmp)?;
        if let Some(n) = entry.file_name().to_str() {
            names.push(n.to_string());
        }
    }
    for name in &names {
        if name.ends_with(".lock") || Some(name.as_str()) == except {
            continue;
        }
        let dir = tmp.join(name);
        let lock_path = tmp.join(format!("{name}.lock"));
        let dead = if lock_path.exists() {
            match lock_file(&lock_path, Lock::TryExclusive) {
                Ok(_held) => true,
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    false
                }
                Err(e) => return Err(e),
            }
        } else {
            older_than(&dir, ORPHAN_GRACE)
        };
        if dead {
            if !dry_run {
                store.trash(&dir)?;
                remove_if_exists(&lock_path)?;
            }
            moved.push(dir);
        }
    }
    // Lock files whose directory is gone and whose owner is dead.
    for name in &names {
        let Some(base) = name.strip_suffix(".lock") else {
            continue;
        };
        if names.iter().any(|n| n == base) || Some(base) == except {
            continue;
        }
        let lock_path = tmp.join(name);
        if !dry_run && older_than(&lock_path, ORPHAN_GRACE) {
            if let Ok(_held) = lock_file(&lock_path, Lock::TryExclusive) {
                remove_if_exists(&lock_path)?;
            }
        }
    }
    Ok(moved)
}

fn older_than(path: &Path, age: Duration) -> bool {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d >= age)
}

/// Deletes trash entries older than `min_age` (all with `Duration::ZERO`).
/// Errors are ignored: what cannot be deleted now is retried next time.
pub fn empty_trash(store: &Store, min_age: Duration) -> usize {
    let trash = store.trash_dir();
    let Ok(entries) = fs::read_dir(&trash) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if min_age > Duration::ZERO && !older_than(&path, min_age) {
            continue;
        }
        let ok = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path).is_ok()
        } else {
            fs::remove_file(&path).is_ok()
        };
        removed += usize::from(ok);
    }
    removed
}

/// `runbox prune`.
pub fn prune(store: &Store, opts: &PruneOptions) -> Result<PruneReport> {
    let mut report = PruneReport {
        debris: sweep(store, None, opts.dry_run)?,
        ..Default::default()
    };
    let now = SystemTime::now();
    let records = store.records()?;
    let mut kept_chains: HashSet<Digest> = HashSet::new();
    let mut doomed = Vec::new();
    for rec in records {
        let unused_long_enough = match opts.until {
            Some(until) => now.duration_since(rec.last_used).unwrap_or_default() >= until,
            None => rec.names.is_empty(),
        };
        if unused_long_enough {
            doomed.push(rec);
        } else {
            kept_chains.insert(rec.chain_id.clone());
        }
    }
    let doomed_ids: HashSet<Digest> = doomed.iter().map(|r| r.id.clone()).collect();
    for rec in doomed {
        let Some(_locks) = store.try_lock_chain_exclusive(&rec.chain_id)? else {
            report.in_use.push(rec);
            continue;
        };
        // Decided under the locks: a load that shares this chain writes its
        // record while it holds the unpack lock.
        let shared = kept_chains.contains(&rec.chain_id)
            || store
                .records()?
                .iter()
                .any(|r| r.chain_id == rec.chain_id && !doomed_ids.contains(&r.id));
        if !opts.dry_run {
            store.forget_record(&rec)?;
            if !shared && !store.records()?.iter().any(|r| r.chain_id == rec.chain_id) {
                store.trash(&rec.rootfs)?;
            }
        }
        report.images.push(rec);
    }
    if !opts.dry_run {
        remove_corrupt_records(store)?;
    }
    report.debris.extend(orphan_rootfs(store, opts.dry_run)?);
    if !opts.dry_run {
        drop_dangling_refs(store)?;
        report.trash_removed = empty_trash(store, Duration::ZERO);
    }
    Ok(report)
}

/// rootfs directories that no record references (a crash between rename and
/// record, or a removed record).
fn orphan_rootfs(store: &Store, dry_run: bool) -> Result<Vec<PathBuf>> {
    let referenced: HashSet<Digest> = store.records()?.into_iter().map(|r| r.chain_id).collect();
    let dir = store.root().join("rootfs");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).ctx("list", &dir)? {
        let entry = entry.ctx("list", &dir)?;
        let Some(chain) = entry
            .file_name()
            .to_str()
            .and_then(|h| Digest::parse(&format!("sha256:{h}")))
        else {
            continue;
        };
        if referenced.contains(&chain) {
            continue;
        }
        let Some(_locks) = store.try_lock_chain_exclusive(&chain)? else {
            continue;
        };
        // Re-check under the lock: a loader may have just written its record.
        if store.records()?.iter().any(|r| r.chain_id == chain) {
            continue;
        }
        if !dry_run {
            store.trash(&entry.path())?;
        }
        out.push(entry.path());
    }
    Ok(out)
}

fn drop_dangling_refs(store: &Store) -> Result<()> {
    let ids: HashSet<Digest> = store.records()?.into_iter().map(|r| r.id).collect();
    for sub in ["refs", "sources"] {
        let dir = store.root().join(sub);
        for entry in fs::read_dir(&dir).ctx("list", &dir)? {
            let entry = entry.ctx("list", &dir)?;
            let target = fs::read_to_string(entry.path())
                .ok()
                .and_then(|t| Digest::parse(t.trim()));
            if target.is_none_or(|id| !ids.contains(&id)) {
                remove_if_exists(&entry.path())?;
            }
        }
    }
    Ok(())
}

/// Records torn by a crash (they are written without fsync); `records()`
/// skips them, so they would otherwise stay forever.
fn remove_corrupt_records(store: &Store) -> Result<()> {
    let dir = store.root().join("images");
    for entry in fs::read_dir(&dir).ctx("list", &dir)? {
        let entry = entry.ctx("list", &dir)?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "json")
            && older_than(&path, ORPHAN_GRACE)
            && fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<ImageRecord>(&b).ok())
                .is_none()
        {
            remove_if_exists(&path)?;
        }
    }
    Ok(())
}
