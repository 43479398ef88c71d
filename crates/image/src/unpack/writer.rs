//! Writer threads that finish small regular files while the main thread
//! parses the stream. The main thread creates each file (the part that
//! takes the directory lock, in archive order) and hands the open file plus
//! its buffered contents over; a worker writes the data, sets owner, mode,
//! xattrs and times through the fd, and closes it. Because the name exists
//! from the start and the worker only touches the inode through its fd, a
//! later entry that replaces, links or whites out that name behaves exactly
//! as in a sequential unpack. Memory and fds are bounded: at most
//! `MAX_QUEUED` bytes and `MAX_JOBS` files wait; larger files are written
//! inline.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::fsops::{self, FsError, Meta};

/// Files up to this size go to the pool.
pub(crate) const MAX_POOLED_FILE: u64 = 1 << 20;
/// Bytes of file data that may wait in the queue.
const MAX_QUEUED: usize = 32 << 20;
/// Open files that may wait in the queue (each holds an fd).
const MAX_JOBS: usize = 256;

/// One small file, already created, to fill and finish.
pub(crate) struct Job {
    pub file: File,
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
                    };
                    p.close();
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            threads: handles,
        })
    }

    /// Queues a file, waiting while the queue holds too much data. Returns
    /// an earlier worker failure instead, if any.
    pub(crate) fn submit(&mut self, job: Job) -> Result<(), (String, String)> {
        let mut st = lock(&self.shared);
        while st.error.is_none()
            && !st.queue.is_empty()
            && (st.queued_bytes + job.data.len() > MAX_QUEUED || st.queue.len() >= MAX_JOBS)
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
    (&job.file).write_all(&job.data).map_err(|e| {
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
    fsops::apply_meta_fd(job.file.as_fd(), &meta, &job.path, true)
}
