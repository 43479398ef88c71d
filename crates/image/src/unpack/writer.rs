//! A small pool of writer threads that create small regular files while the
//! main thread parses the stream: file creation is kernel-bound, and two
//! cores creating files finish ~1.4x sooner than one. Memory is bounded (at
//! most `MAX_QUEUED` bytes of file data buffered); larger files are written
//! inline by the caller.
//!
//! Ordering rules (enforced by the caller through `is_pending`/`flush`):
//! anything that may touch a queued path or a directory above one (a
//! replacement, a whiteout, a hard link to it) waits until the queue drains.

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::fsops::{self, FsError, Meta};

/// Files up to this size go to the pool.
pub(crate) const MAX_POOLED_FILE: u64 = 1 << 20;
/// Bytes of file data that may wait in the queue.
const MAX_QUEUED: usize = 32 << 20;

/// One small file to create in `dir`.
pub(crate) struct Job {
    pub dir: Arc<OwnedFd>,
    pub name: Vec<u8>,
    pub path: Vec<u8>,
    /// The entry name as stored, for the error message.
    pub entry: String,
    pub data: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub chown: bool,
    pub chmod: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    queued_bytes: usize,
    busy: usize,
    /// The first failure: (entry, reason).
    error: Option<(String, String)>,
    closing: bool,
    /// Workers asleep on `work` and whether the producer sleeps on `done`:
    /// wake-ups (a futex call each) are only sent to someone waiting.
    idle: usize,
    producer_waiting: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signals workers: a job arrived or the pool closes.
    work: Condvar,
    /// Signals the producer: room in the queue or a job finished.
    done: Condvar,
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// Paths queued since the last flush, and every directory above them.
    pending: HashSet<Vec<u8>>,
    pending_dirs: HashSet<Vec<u8>>,
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    // A worker never panics while holding the lock; recover anyway.
    s.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("unpack-writer-{i}"))
                .spawn(move || worker(&s));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let mut p = Pool {
                        shared,
                        threads: handles,
                        pending: HashSet::new(),
                        pending_dirs: HashSet::new(),
                    };
                    p.close();
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            threads: handles,
            pending: HashSet::new(),
            pending_dirs: HashSet::new(),
        })
    }

    /// True if `path` is queued or lies above something queued.
    pub(crate) fn is_pending(&self, path: &[u8]) -> bool {
        !self.pending.is_empty()
            && (self.pending.contains(path) || self.pending_dirs.contains(path))
    }

    /// True if `dir` or a directory above it is a queued file.
    pub(crate) fn blocks_dir(&self, dir: &[u8]) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let mut p = dir;
        loop {
            if self.pending.contains(p) {
                return true;
            }
            match p.iter().rposition(|&b| b == b'/') {
                Some(i) => p = &p[..i],
                None => return false,
            }
        }
    }

    /// Queues a file, waiting while the queue holds too much data. Returns
    /// an earlier worker failure instead, if any.
    pub(crate) fn submit(&mut self, job: Job) -> Result<(), (String, String)> {
        let mut dir: &[u8] = &job.path;
        while let Some(i) = dir.iter().rposition(|&b| b == b'/') {
            dir = &dir[..i];
            if !self.pending_dirs.insert(dir.to_vec()) {
                break;
            }
        }
        self.pending.insert(job.path.clone());
        let mut st = lock(&self.shared);
        while st.error.is_none()
            && st.queued_bytes > 0
            && st.queued_bytes + job.data.len() > MAX_QUEUED
        {
            st.producer_waiting = true;
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.producer_waiting = false;
        if let Some(e) = st.error.clone() {
            return Err(e);
        }
        st.queued_bytes += job.data.len();
        st.queue.push_back(job);
        let wake = st.idle > 0;
        drop(st);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(())
    }

    /// Waits until every queued file is written; returns the first failure.
    pub(crate) fn flush(&mut self) -> Result<(), (String, String)> {
        let mut st = lock(&self.shared);
        while !st.queue.is_empty() || st.busy > 0 {
            st.producer_waiting = true;
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.producer_waiting = false;
        self.pending.clear();
        self.pending_dirs.clear();
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn close(&mut self) {
        lock(&self.shared).closing = true;
        self.shared.work.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

fn worker(s: &Shared) {
    loop {
        let job = {
            let mut st = lock(s);
            loop {
                if let Some(job) = st.queue.pop_front() {
                    st.busy += 1;
                    break job;
                }
                if st.closing {
                    return;
                }
                st.idle += 1;
                st = s.work.wait(st).unwrap_or_else(|p| p.into_inner());
                st.idle -= 1;
            }
        };
        let len = job.data.len();
        // After a failure the rest is still written: the load fails anyway.
        let r = write_job(&job);
        let mut st = lock(s);
        st.busy -= 1;
        st.queued_bytes -= len;
        if let Err(e) = r {
            st.error.get_or_insert((job.entry, e.0));
        }
        let wake = st.producer_waiting;
        drop(st);
        if wake {
            s.done.notify_all();
        }
    }
}

fn write_job(job: &Job) -> Result<(), FsError> {
    let dir = job.dir.as_fd();
    let file = fsops::create_file(dir, &job.name, &job.path, job.mode)?;
    (&file).write_all(&job.data).map_err(|e| {
        FsError(format!(
            "failed to write `{}`: {e}",
            String::from_utf8_lossy(&job.path)
        ))
    })?;
    let meta = Meta {
        uid: job.uid,
        gid: job.gid,
        mode: job.mode,
        mtime: job.mtime,
        xattrs: &job.xattrs,
        chown: job.chown,
        chmod: job.chmod,
    };
    fsops::apply_meta_fd(file.as_fd(), &meta, &job.path, true)
}
