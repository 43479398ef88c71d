//! `LayerReader`: the uncompressed tar stream of one layer, decompressed and
//! hashed on a background thread so that the consumer (the unpacker) only
//! parses tar and writes files. The worker sends ~1 MiB chunks through a
//! bounded channel (4 in flight), so memory stays a few MiB per layer however
//! big the layer is; spent chunks go back to the worker for reuse.
//!
//! Verification: the stored bytes are hashed against the blob digest (when
//! the format names one) and the uncompressed bytes against the diff_id. For
//! an uncompressed layer both are the same stream and are hashed once. A
//! mismatch found at the end of the stream is reported by `read` as an
//! `InvalidData` error (so the unpacker fails) and by `finish` as
//! `Error::DigestMismatch`.
//!
//! Stopping: `finish` reads the layer to its end (the digests need every
//! byte); `abort` (after the unpacker failed) and dropping the reader stop
//! the worker instead: a stop flag makes its next read of the stored bytes
//! fail, so at most the chunk in progress is still decompressed.

use std::io::{self, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::compress::{read_head, Compression, READ_BUFFER};
use crate::digest::{Digest, Hasher, HashingReader};
use crate::error::Error;
use crate::Result;

const CHUNK: usize = 1 << 20;
const IN_FLIGHT: usize = 4;

/// What the layer is expected to hash to, and how to name it in errors.
pub(crate) struct LayerSpec {
    pub file: PathBuf,
    /// 1-based.
    pub layer: usize,
    pub location: String,
    pub blob_digest: Option<Digest>,
    pub diff_id: Option<Digest>,
}

enum Msg {
    Data(Vec<u8>),
    End(Result<(Digest, u64)>),
}

/// Uncompressed tar stream of one layer, hashed while read.
pub struct LayerReader {
    rx: Receiver<Msg>,
    recycle: Sender<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
    /// Set once the worker has reported the end.
    end: Option<Result<(Digest, u64)>>,
    /// Time the worker spent hashing the uncompressed stream (overlapped
    /// with extraction), in nanoseconds.
    hash_nanos: Arc<AtomicU64>,
    worker: Option<JoinHandle<()>>,
    /// Set to make the worker give up (see `abort`).
    stop: Arc<AtomicBool>,
    file: PathBuf,
    layer: usize,
}

/// The stored bytes, failing once the consumer has asked the worker to stop.
struct Stoppable {
    inner: Box<dyn Read + Send>,
    stop: Arc<AtomicBool>,
}

impl Read for Stoppable {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("layer reading stopped"));
        }
        self.inner.read(buf)
    }
}

impl LayerReader {
    pub(crate) fn spawn(stored: Box<dyn Read + Send>, spec: LayerSpec) -> Result<LayerReader> {
        let (tx, rx) = mpsc::sync_channel(IN_FLIGHT);
        let (recycle, spare) = mpsc::channel();
        let file = spec.file.clone();
        let layer = spec.layer;
        let hash_nanos = Arc::new(AtomicU64::new(0));
        let worker_nanos = Arc::clone(&hash_nanos);
        let stop = Arc::new(AtomicBool::new(false));
        let stored = Box::new(Stoppable {
            inner: stored,
            stop: Arc::clone(&stop),
        });
        let worker = std::thread::Builder::new()
            .name(format!("layer-{layer}"))
            .spawn(move || {
                let end = produce(stored, &spec, &tx, &spare, &worker_nanos);
                // The consumer may have gone away; nothing left to tell then.
                let _ = tx.send(Msg::End(end));
            })
            .map_err(|e| Error::Layer {
                file: file.clone(),
                layer,
                reason: format!("cannot start reader thread: {e}"),
            })?;
        Ok(LayerReader {
            rx,
            recycle,
            chunk: Vec::new(),
            pos: 0,
            end: None,
            hash_nanos,
            worker: Some(worker),
            stop,
            file,
            layer,
        })
    }

    /// Stops reading the layer without draining it (the unpacker failed and
    /// the rest is not wanted): the worker stops at its next read of the
    /// stored bytes and is joined. Returns the verification error the worker
    /// had already reported, if any (a digest mismatch explains a broken
    /// stream better than the tar error it caused); only messages already
    /// queued are looked at, so this never waits for more data.
    pub fn abort(mut self) -> Option<Error> {
        for _ in 0..=IN_FLIGHT {
            if self.end.is_some() {
                break;
            }
            match self.rx.try_recv() {
                Ok(Msg::Data(_)) => {}
                Ok(Msg::End(r)) => self.end = Some(r),
                Err(_) => break,
            }
        }
        // Drop stops and joins the worker.
        self.end.take().and_then(|r| r.err())
    }

    /// Drain what the tar parser left unread, then verify. Returns the diff_id
    /// (sha256 of the uncompressed stream) and the number of stored bytes read.
    pub fn finish(self) -> Result<(Digest, u64)> {
        self.finish_timed().map(|(d, n, _)| (d, n))
    }

    /// `finish`, plus the time spent hashing the uncompressed stream on the
    /// reader thread (it overlaps with extraction).
    pub fn finish_timed(mut self) -> Result<(Digest, u64, Duration)> {
        while self.end.is_none() {
            self.next_message();
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        let hashing = Duration::from_nanos(self.hash_nanos.load(Ordering::Relaxed));
        self.end
            .take()
            .unwrap_or_else(|| Err(self.lost()))
            .map(|(d, n)| (d, n, hashing))
    }

    fn lost(&self) -> Error {
        Error::Layer {
            file: self.file.clone(),
            layer: self.layer,
            reason: "layer reader thread stopped".into(),
        }
    }

    /// Wait for the next chunk or the end.
    fn next_message(&mut self) {
        match self.rx.recv() {
            Ok(Msg::Data(d)) => {
                let spent = std::mem::replace(&mut self.chunk, d);
                self.pos = 0;
                if spent.capacity() > 0 {
                    let _ = self.recycle.send(spent);
                }
            }
            Ok(Msg::End(r)) => self.end = Some(r),
            Err(_) => self.end = Some(Err(self.lost())),
        }
    }
}

impl Read for LayerReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.chunk.len() {
                let n = buf.len().min(self.chunk.len() - self.pos);
                buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            match &self.end {
                Some(Ok(_)) => return Ok(0),
                Some(Err(e)) => {
                    let kind = match e {
                        Error::DigestMismatch { .. } => io::ErrorKind::InvalidData,
                        _ => io::ErrorKind::Other,
                    };
                    return Err(io::Error::new(kind, e.to_string()));
                }
                None => self.next_message(),
            }
        }
    }
}

impl Drop for LayerReader {
    fn drop(&mut self) {
        // The flag fails the worker's next read; closing our end makes its
        // next send fail. Either way it stops.
        self.stop.store(true, Ordering::Relaxed);
        let (_, dead) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.rx, dead));
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The worker: read, decompress, hash, send. Returns the diff_id and stored size.
fn produce(
    stored: Box<dyn Read + Send>,
    spec: &LayerSpec,
    tx: &SyncSender<Msg>,
    spare: &Receiver<Vec<u8>>,
    hash_nanos: &AtomicU64,
) -> Result<(Digest, u64)> {
    let layer_err = |reason: String| Error::Layer {
        file: spec.file.clone(),
        layer: spec.layer,
        reason,
    };
    let mut stored = stored;
    let mut head = [0u8; 4];
    let n = read_head(&mut stored, &mut head)
        .map_err(|e| layer_err(format!("cannot read `{}`: {e}", spec.location)))?;
    let compression = Compression::sniff(&head[..n]);
    // Uncompressed: the stored bytes are the diff, one hash serves both.
    let hash_stored = spec.blob_digest.is_some() && compression != Compression::None;
    let mut src = HashingReader::new(
        io::Cursor::new(head).take(n as u64).chain(stored),
        hash_stored,
    );
    let mut diff = Hasher::new();
    let gone = || layer_err("reader dropped".into());
    {
        let buffered = BufReader::with_capacity(READ_BUFFER, &mut src);
        let mut stream = compression.decoder(buffered).map_err(|e| {
            layer_err(format!(
                "cannot start {compression} decoder for `{}`: {e}",
                spec.location
            ))
        })?;
        loop {
            let mut chunk = spare
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
            chunk.resize(CHUNK, 0);
            let n = read_head(&mut stream, &mut chunk).map_err(|e| {
                layer_err(format!(
                    "cannot read {compression} layer `{}`: {e}",
                    spec.location
                ))
            })?;
            if n == 0 {
                break;
            }
            chunk.truncate(n);
            let t = Instant::now();
            diff.update(&chunk);
            hash_nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            tx.send(Msg::Data(chunk)).map_err(|_| gone())?;
        }
    }
    // Bytes after the end of a compressed stream still belong to the blob.
    io::copy(&mut src, &mut io::sink())
        .map_err(|e| layer_err(format!("cannot read `{}`: {e}", spec.location)))?;
    let (stored_digest, stored_len) = src.finish();
    let diff_id = diff.finish();
    let mismatch = |what: &str, expected: &Digest, found: &Digest| Error::DigestMismatch {
        file: spec.file.clone(),
        what: format!("layer {} (`{}`) {what}", spec.layer, spec.location),
        expected: expected.to_string(),
        found: found.to_string(),
    };
    if let Some(expected) = &spec.blob_digest {
        let found = stored_digest.as_ref().unwrap_or(&diff_id);
        if found != expected {
            return Err(mismatch("blob", expected, found));
        }
    }
    if let Some(expected) = &spec.diff_id {
        if &diff_id != expected {
            return Err(mismatch("diff_id", expected, &diff_id));
        }
    }
    Ok((diff_id, stored_len))
}
