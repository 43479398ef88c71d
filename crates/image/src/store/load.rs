//! `Store::load`: from an input to a stored image. The fast paths come
//! first (this file was loaded before; this chain is stored), then the
//! unpack into the session directory and the rename into place.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::digest::{chain_id, Digest};
use crate::error::IoContext;
use crate::format::{ImageSource, Input, Selector};
use crate::unpack::{UnpackStats, Unpacker};
use crate::{Error, Result};

use super::locks::{lock_file, write_atomic, Lock, Session};
use super::names::normalize_name;
use super::names_of;
use super::{ImageRecord, LoadObserver, LoadOptions, LoadReport, Store};

impl Store {
    /// Loads an image from `path` (archive or layout), unpacking only what is
    /// not stored yet.
    pub fn load(
        &self,
        path: &Path,
        opts: &LoadOptions,
        observer: &mut dyn LoadObserver,
    ) -> Result<LoadReport> {
        let started = Instant::now();
        observer.phase("resolving");
        let source_key = source_key(path, opts);

        // Fastest path (every `run image.tar` after the first): this very
        // file was loaded before. It needs no session and no sweep.
        if let Some(key) = &source_key {
            if let Some(mut image) = self.reuse_key(key, opts)? {
                image.names = names_of(&self.refs()?, &image.id);
                return Ok(self.reused(image, started));
            }
        }
        let session = Session::new(self)?;
        // Debris of killed loads goes to the trash now; emptied after our load.
        crate::gc::sweep_sessions(self, Some(&session.name))?;

        let input = Input::open(path, &session.dir)?;
        let source = input.resolve(&opts.selector, &opts.platform)?;
        let resolve = started.elapsed();
        let mut report = if source.synthesized {
            self.load_rootfs_tar(&input, &source, &session.dir, observer)?
        } else {
            self.load_image(&input, &source, &session.dir, observer)?
        };
        report.resolve = resolve;
        let t = Instant::now();
        self.add_names(&report.image.id, &source_names(Some(&source), opts))?;
        if let Some(key) = &source_key {
            write_atomic(
                &self.root.join("sources").join(key),
                report.image.id.as_str().as_bytes(),
            )?;
        }
        self.touch(&report.image.id)?;
        report.image = self.read_record(&report.image.id)?;
        report.commit += t.elapsed();
        report.total = started.elapsed();
        drop(session);
        // Only old trash: a fresh delete would slow the next unpack nearby.
        crate::gc::empty_trash(self, Duration::from_secs(600));
        Ok(report)
    }

    fn reused(&self, image: ImageRecord, started: Instant) -> LoadReport {
        let layers = image.layers.len();
        LoadReport {
            stats: UnpackStats {
                files: image.files,
                bytes: image.size,
                ..Default::default()
            },
            image,
            unpacked: false,
            layers,
            resolve: started.elapsed(),
            extract: Duration::ZERO,
            verify: Duration::ZERO,
            commit: Duration::ZERO,
            total: started.elapsed(),
            bytes_read: 0,
        }
    }

    /// [`Store::load`]'s fast path alone: when `path` was loaded before
    /// (as `opts` say) and its rootfs is still there, gives it the names
    /// the load would, marks it used and returns its record, without names.
    pub(crate) fn reuse_source(
        &self,
        path: &Path,
        opts: &LoadOptions,
    ) -> Result<Option<ImageRecord>> {
        match source_key(path, opts) {
            Some(key) => self.reuse_key(&key, opts),
            None => Ok(None),
        }
    }

    fn reuse_key(&self, key: &str, opts: &LoadOptions) -> Result<Option<ImageRecord>> {
        let p = self.root.join("sources").join(key);
        let Ok(text) = fs::read_to_string(&p) else {
            return Ok(None);
        };
        let Some(id) = Digest::parse(text.trim()) else {
            return Ok(None);
        };
        let mut rec = match self.read_json(&id) {
            Ok(rec) if rec.rootfs.is_dir() => rec,
            _ => return Ok(None),
        };
        self.add_names(&id, &source_names(None, opts))?;
        rec.last_used = self.touch(&id)?;
        Ok(Some(rec))
    }

    /// An image with known diff_ids: skip unpacking when its chain is stored.
    fn load_image(
        &self,
        input: &Input,
        source: &ImageSource,
        session_dir: &Path,
        observer: &mut dyn LoadObserver,
    ) -> Result<LoadReport> {
        let diff_ids: Vec<Digest> = source
            .layers
            .iter()
            .map(|l| {
                l.diff_id.clone().ok_or_else(|| Error::Format {
                    file: input.path.clone(),
                    reason: format!("layer {} has no diff_id", l.location),
                })
            })
            .collect::<Result<_>>()?;
        let id = source.config_digest.clone().ok_or_else(|| Error::Format {
            file: input.path.clone(),
            reason: "image config has no digest".into(),
        })?;
        let chain = chain_id(&diff_ids).unwrap_or_else(|| Digest::of(b""));
        let rootfs = self.rootfs_path(&chain);
        let mut report = LoadReport {
            image: self.new_record(id.clone(), &chain, source, diff_ids.clone())?,
            unpacked: false,
            layers: source.layers.len(),
            stats: UnpackStats::default(),
            resolve: Duration::ZERO,
            extract: Duration::ZERO,
            verify: Duration::ZERO,
            commit: Duration::ZERO,
            total: Duration::ZERO,
            bytes_read: 0,
        };
        // Held until the record is written, so that `prune` never sees our
        // rootfs without its record.
        let _unpack_lock = lock_file(&self.lock_path(&chain, "unpack"), Lock::Exclusive)?;
        {
            // Another loader may have finished while we waited.
            if !rootfs.is_dir() {
                let target = session_dir.join(format!("rootfs-{}", chain.hex()));
                fs::create_dir(&target).ctx("create unpack directory", &target)?;
                let stats = self.unpack_layers(input, source, &target, observer, &mut report)?;
                report.stats = stats;
                report.unpacked = true;
                let t = Instant::now();
                fs::rename(&target, &rootfs).ctx("rename unpacked image into", &rootfs)?;
                report.commit += t.elapsed();
            }
        }
        if !report.unpacked {
            // Size figures come from whichever record first unpacked this chain.
            if let Some(other) = self.records()?.into_iter().find(|r| r.chain_id == chain) {
                report.stats.files = other.files;
                report.stats.bytes = other.size;
            }
        }
        report.image.size = report.stats.bytes;
        report.image.files = report.stats.files;
        let t = Instant::now();
        if !self.record_path(&id).exists() || report.unpacked {
            self.write_record(&report.image)?;
        }
        report.commit += t.elapsed();
        Ok(report)
    }

    /// A plain rootfs tar: the diff_id (and so the chain and the image ID)
    /// is only known once the layer has been read.
    fn load_rootfs_tar(
        &self,
        input: &Input,
        source: &ImageSource,
        session_dir: &Path,
        observer: &mut dyn LoadObserver,
    ) -> Result<LoadReport> {
        let target = session_dir.join("rootfs-unverified");
        fs::create_dir(&target).ctx("create unpack directory", &target)?;
        let placeholder = Digest::of(b"");
        let mut report = LoadReport {
            image: self.new_record(placeholder.clone(), &placeholder, source, vec![])?,
            unpacked: true,
            layers: 1,
            stats: UnpackStats::default(),
            resolve: Duration::ZERO,
            extract: Duration::ZERO,
            verify: Duration::ZERO,
            commit: Duration::ZERO,
            total: Duration::ZERO,
            bytes_read: 0,
        };
        let (stats, diff_ids) =
            self.unpack_layers_with_ids(input, source, &target, observer, &mut report)?;
        report.stats = stats;
        let t = Instant::now();
        let mut config: serde_json::Value =
            serde_json::from_slice(&source.config).map_err(|e| Error::Format {
                file: input.path.clone(),
                reason: format!("synthesized config: {e}"),
            })?;
        config["rootfs"] = serde_json::json!({
            "type": "layers",
            "diff_ids": diff_ids.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
        });
        let config_bytes = serde_json::to_vec(&config).expect("JSON value serialises");
        let id = Digest::of(&config_bytes);
        let chain = chain_id(&diff_ids).expect("one layer");
        let rootfs = self.rootfs_path(&chain);
        // Held until the record is written, so that `prune` never sees our
        // rootfs without its record.
        let _unpack_lock = lock_file(&self.lock_path(&chain, "unpack"), Lock::Exclusive)?;
        if rootfs.is_dir() {
            report.unpacked = false;
        } else {
            fs::rename(&target, &rootfs).ctx("rename unpacked image into", &rootfs)?;
        }
        let mut image = report.image.clone();
        image.id = id;
        image.chain_id = chain;
        image.rootfs = rootfs;
        image.config = config;
        image.layers = diff_ids;
        image.size = stats.bytes;
        image.files = stats.files;
        self.write_record(&image)?;
        report.image = image;
        report.commit += t.elapsed();
        Ok(report)
    }

    fn unpack_layers(
        &self,
        input: &Input,
        source: &ImageSource,
        target: &Path,
        observer: &mut dyn LoadObserver,
        report: &mut LoadReport,
    ) -> Result<UnpackStats> {
        self.unpack_layers_with_ids(input, source, target, observer, report)
            .map(|(stats, _)| stats)
    }

    fn unpack_layers_with_ids(
        &self,
        input: &Input,
        source: &ImageSource,
        target: &Path,
        observer: &mut dyn LoadObserver,
        report: &mut LoadReport,
    ) -> Result<(UnpackStats, Vec<Digest>)> {
        observer.phase("unpacking");
        let mut unpacker = Unpacker::new(target)?;
        let count = source.layers.len();
        let mut diff_ids = Vec::with_capacity(count);
        for (i, layer) in source.layers.iter().enumerate() {
            observer.layer_start(i, count, layer.size);
            let t = Instant::now();
            let reader = input.open_layer(source, i)?;
            let mut progress = ProgressReader {
                inner: reader,
                observer: &mut *observer,
                pending: 0,
            };
            let applied = unpacker.apply_layer(&mut progress, i + 1);
            let reader = progress.inner;
            report.extract += t.elapsed();
            let stats = match applied {
                Ok(stats) => stats,
                Err(e) => {
                    // A digest mismatch already found explains a broken stream
                    // better than the tar error it caused. Draining the rest
                    // to find one could take long (a bomb): stop instead.
                    let err = reader.abort().unwrap_or(e);
                    return Err(with_file(err, &input.path));
                }
            };
            let t = Instant::now();
            let (diff_id, read, hashing) = reader
                .finish_timed()
                .map_err(|e| with_file(e, &input.path))?;
            // Hashing ran beside extraction; count it and the final drain.
            report.verify += hashing + t.elapsed();
            observer.layer_done(i, &stats);
            report.bytes_read += read;
            diff_ids.push(diff_id);
        }
        let t = Instant::now();
        let stats = unpacker.finish().map_err(|e| with_file(e, &input.path))?;
        report.extract += t.elapsed();
        Ok((stats, diff_ids))
    }
}

/// Adds the file name to errors raised below the store, which do not know it.
fn with_file(err: Error, file: &Path) -> Error {
    match err {
        Error::Entry {
            file: f,
            layer,
            entry,
            reason,
        } if f.as_os_str().is_empty() => Error::Entry {
            file: file.to_path_buf(),
            layer,
            entry,
            reason,
        },
        Error::Layer {
            file: f,
            layer,
            reason,
        } if f.as_os_str().is_empty() => Error::Layer {
            file: file.to_path_buf(),
            layer,
            reason,
        },
        Error::DigestMismatch {
            file: f,
            what,
            expected,
            found,
        } if f.as_os_str().is_empty() => Error::DigestMismatch {
            file: file.to_path_buf(),
            what,
            expected,
            found,
        },
        other => other,
    }
}

/// Counts bytes for progress without a syscall per update.
struct ProgressReader<'a, R> {
    inner: R,
    observer: &'a mut dyn LoadObserver,
    pending: u64,
}

impl<R: std::io::Read> std::io::Read for ProgressReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pending += n as u64;
        if self.pending >= 1 << 20 || n == 0 {
            self.observer.layer_progress(self.pending);
            self.pending = 0;
        }
        Ok(n)
    }
}

/// The key under `sources/` for this input and these options.
fn source_key(path: &Path, opts: &LoadOptions) -> Option<String> {
    let identity = crate::format::InputIdentity::of(path).ok()?.key();
    let text = format!(
        "{identity}\n{:?}\n{}/{}/{}",
        opts.selector,
        opts.platform.os,
        opts.platform.architecture,
        opts.platform.variant.as_deref().unwrap_or("")
    );
    Some(Digest::of(text.as_bytes()).hex().to_string())
}

/// Names the image gets: those from the archive (only when it was picked by
/// name or is the only image) and the user's `--tag`s.
fn source_names(source: Option<&ImageSource>, opts: &LoadOptions) -> Vec<String> {
    let mut names: Vec<String> = match (source, &opts.selector) {
        (Some(s), Selector::Name(n)) => {
            let mut v = s.names.clone();
            v.push(n.clone());
            v
        }
        (Some(s), _) => s.names.clone(),
        (None, Selector::Name(n)) => vec![n.clone()],
        (None, _) => vec![],
    };
    // An OCI `ref.name` is often a bare tag ("latest"): not an image name.
    names.retain(|n| n.contains(':'));
    names.extend(opts.tags.iter().cloned());
    names.retain(|n| normalize_name(n).is_ok());
    names
}
