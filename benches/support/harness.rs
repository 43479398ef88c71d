//! The machinery shared by every benchmark group: the bench directory and
//! its images, which peers are installed, the command-line filter (so that
//! setup work happens only for benchmarks that will run), timing whole
//! processes back-to-back or after an idle pause through criterion's
//! `iter_custom`, scratch directories that are deleted only at the very end
//! (a large `rm -rf` slows file creation nearby for minutes).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, SamplingMode};

/// Everything the groups need to know about this run.
pub struct Ctx {
    /// Prepared by scripts/bench-setup.sh.
    pub dir: PathBuf,
    pub runbox: PathBuf,
    /// Tmpfs directory for runbox `--state` dirs (runc, crun and docker keep
    /// their state on /run too).
    pub state_base: PathBuf,
    pub idle: Duration,
    pub filter: Filter,
    /// `--list`: register benchmarks without running any setup or probe.
    pub list_only: bool,
    scratch: PathBuf,
    counter: AtomicU64,
    /// Every case's fate, written to runbox-runs.json for scripts/bench-table.
    pub record: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Ctx {
    pub fn new(dir: PathBuf, runbox: PathBuf, filter: Filter, list_only: bool) -> Ctx {
        let pid = std::process::id();
        let state_base = std::env::var_os("RUNBOX_BENCH_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/run/runbox-bench"))
            .join(pid.to_string());
        let idle_ms = std::env::var("RUNBOX_BENCH_IDLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        Ctx {
            scratch: dir.join("scratch").join(pid.to_string()),
            dir,
            runbox,
            state_base,
            idle: Duration::from_millis(idle_ms),
            filter,
            list_only,
            counter: AtomicU64::new(0),
            record: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A unique number for container names and scratch paths.
    pub fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// A new, not yet existing path under this run's scratch dir. Nothing
    /// is deleted until [`Ctx::cleanup`], so no timed run follows a deletion.
    pub fn fresh(&self, tag: &str) -> PathBuf {
        self.scratch.join(format!("{tag}-{}", self.next()))
    }

    /// A fresh path whose directory exists (for `tar -C`).
    pub fn fresh_dir(&self, tag: &str) -> PathBuf {
        let p = self.fresh(tag);
        if let Err(e) = std::fs::create_dir_all(&p) {
            eprintln!("bench: cannot create {}: {e}", p.display());
        }
        p
    }

    /// A runbox store root that lives for the whole run (for warm runs).
    pub fn store(&self, tag: &str) -> PathBuf {
        self.scratch.join(format!("store-{tag}"))
    }

    pub fn state(&self, tag: &str) -> PathBuf {
        self.state_base.join(tag)
    }

    /// `runbox --root ROOT --state STATE`
    pub fn runbox(&self, root: &Path, state: &Path) -> Command {
        let mut c = Command::new(&self.runbox);
        c.arg("--root").arg(root).arg("--state").arg(state);
        c
    }

    pub fn busybox(&self) -> Image {
        Image::new(&self.dir, "busybox")
    }

    pub fn debian(&self) -> Image {
        Image::new(&self.dir, "debian")
    }

    /// Notes a benchmark that was skipped or how its runs went.
    pub fn note(&self, id: &str, status: &str, runs: u32, failed: u32, detail: &str) {
        let v = serde_json::json!({"id": id, "status": status, "runs": runs, "failed": failed, "detail": detail});
        if let Ok(mut r) = self.record.lock() {
            r.push(v);
        }
    }

    /// Notes a whole function skipped (for each id it would have had).
    pub fn skip(&self, ids: &[String], why: &str) {
        for id in ids.iter().filter(|id| self.filter.matches(id)) {
            self.note(id, "skipped", 0, 0, why);
        }
    }

    /// Scratch dirs of runs that were killed before cleaning up.
    pub fn remove_stale_scratch(&self) {
        let Ok(entries) = std::fs::read_dir(self.dir.join("scratch")) else {
            return;
        };
        for e in entries.flatten() {
            let stale = e
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
                .is_some_and(|pid| {
                    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                });
            if stale {
                eprintln!(
                    "bench: removing scratch of an earlier run: {}",
                    e.path().display()
                );
                remove_tree(&e.path());
            }
        }
    }

    /// Deletes all scratch output; called once, after the last measurement.
    pub fn cleanup(&self) {
        if self.scratch.exists() {
            eprintln!("bench: deleting scratch {}", self.scratch.display());
            remove_tree(&self.scratch);
        }
        let _ = std::fs::remove_dir_all(&self.state_base);
    }
}

fn remove_tree(p: &Path) {
    // Loads may leave read-only trees; rm copes with modes as root.
    let mut rm = Command::new("rm");
    rm.arg("-rf").arg(p);
    let ok = succeeds(rm);
    if !ok {
        eprintln!("bench: could not delete {}", p.display());
    }
}

/// Paths of one prepared image (see scripts/bench-setup.sh for the layout).
pub struct Image {
    pub name: &'static str,
    pub rootfs: PathBuf,
    pub bundle: PathBuf,
    pub bundle_sleep: PathBuf,
    pub docker_tar: PathBuf,
    pub oci: PathBuf,
    pub layer_tar: PathBuf,
    pub layer_tgz: PathBuf,
    /// The name docker knows it by, also the repo tag inside docker_tar.
    pub docker_ref: String,
}

impl Image {
    fn new(dir: &Path, name: &'static str) -> Image {
        let sub = dir.join(name);
        Image {
            name,
            rootfs: sub.join("rootfs"),
            bundle: sub.join("bundle"),
            bundle_sleep: sub.join("bundle-sleep"),
            docker_tar: dir.join(format!("{name}-docker.tar")),
            oci: dir.join(format!("{name}-oci")),
            layer_tar: sub.join("layer.tar"),
            layer_tgz: sub.join("layer.tar.gz"),
            docker_ref: format!("runbox-bench/{name}:latest"),
        }
    }

    pub fn ready(&self) -> bool {
        self.rootfs.is_dir() && self.docker_tar.is_file() && self.oci.join("index.json").is_file()
    }
}

/// The benchmark filter as criterion will apply it (first positional
/// argument), so that setup work and the memory group (not a criterion
/// benchmark) run only when wanted.
#[derive(Debug, Default)]
pub struct Filter {
    pattern: Option<String>,
    exact: bool,
}

impl Filter {
    pub fn from_args<I: IntoIterator<Item = String>>(args: I) -> Filter {
        const TAKES_VALUE: &[&str] = &[
            "--color",
            "-c",
            "--save-baseline",
            "-s",
            "--baseline",
            "-b",
            "--baseline-lenient",
            "--format",
            "--profile-time",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--output-format",
            "--logfile",
        ];
        let mut f = Filter::default();
        let mut it = args.into_iter().skip(1);
        while let Some(a) = it.next() {
            if a == "--exact" {
                f.exact = true;
            } else if TAKES_VALUE.contains(&a.as_str()) {
                it.next();
            } else if !a.starts_with('-') && f.pattern.is_none() {
                f.pattern = Some(a);
            }
        }
        f
    }

    /// Whether criterion would run the benchmark with this full id. The
    /// regex subset people type (literals, `^`, `$`, `.`, `.*`, top-level
    /// `|`) is matched as the regex would; anything richer is assumed to
    /// match, so setup is never wrongly skipped.
    pub fn matches(&self, id: &str) -> bool {
        let Some(p) = &self.pattern else { return true };
        if self.exact {
            return p == id;
        }
        p.split('|')
            .any(|alt| match_simple(alt, id).unwrap_or(true))
    }

    pub fn any(&self, ids: &[String]) -> bool {
        ids.iter().any(|id| self.matches(id))
    }
}

/// One alternative of a filter: `Some(matched)`, or `None` when it uses
/// regex syntax beyond `^ $ . .*`.
fn match_simple(alt: &str, id: &str) -> Option<bool> {
    let (anchored, rest) = alt.strip_prefix('^').map_or((false, alt), |r| (true, r));
    let (to_end, body) = rest.strip_suffix('$').map_or((false, rest), |r| (true, r));
    if body.contains(|c: char| "^$+?()[]{}\\".contains(c)) || body.replace(".*", "").contains('*') {
        return None;
    }
    let pat: Vec<char> = body.chars().collect();
    let text: Vec<char> = id.chars().collect();
    let starts: Vec<usize> = if anchored {
        vec![0]
    } else {
        (0..=text.len()).collect()
    };
    Some(
        starts
            .into_iter()
            .any(|s| match_here(&pat, &text[s..], to_end)),
    )
}

/// Backtracking match of `.`, `.*` and literals at the start of `text`.
fn match_here(pat: &[char], text: &[char], to_end: bool) -> bool {
    match pat {
        [] => !to_end || text.is_empty(),
        ['.', '*', rest @ ..] => (0..=text.len()).any(|k| match_here(rest, &text[k..], to_end)),
        [c, rest @ ..] => match text.split_first() {
            Some((t, tail)) if *c == '.' || c == t => match_here(rest, tail, to_end),
            _ => false,
        },
    }
}

/// `which`: true when `prog` is an executable on PATH.
pub fn have(prog: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(prog)).is_ok_and(|m| {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        })
    })
}

/// Prints the note for a missing peer; returns whether it is there.
pub fn peer(prog: &str, package: &str) -> bool {
    if have(prog) {
        return true;
    }
    eprintln!(
        "bench: SKIP {prog} benchmarks: `{prog}` is not installed (apt-get install -y {package}, or run scripts/bench-setup.sh)"
    );
    false
}

/// True when dockerd answers.
pub fn docker_up() -> bool {
    if !peer("docker", "docker.io") {
        return false;
    }
    let mut info = Command::new("docker");
    info.arg("info");
    let up = succeeds(info);
    if !up {
        eprintln!("bench: SKIP docker benchmarks: dockerd is not running (start it: dockerd >/var/log/dockerd.log 2>&1 &, or run scripts/bench-setup.sh)");
    }
    up
}

/// Hybrid cgroups (v1 controllers plus a cgroup2 at /sys/fs/cgroup/unified):
/// crun refuses to start there unless that mount is hidden.
pub fn cgroup_hybrid() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').nth(4) == Some("/sys/fs/cgroup/unified"))
    })
}

/// `crun ARGS` as it must be started here: on hybrid cgroups, in a mount
/// namespace of its own without /sys/fs/cgroup/unified (see
/// [`wrap_crun_like`]).
pub fn crun(args: &[&str]) -> Command {
    wrap_crun_like("crun", args)
}

/// Set on a command made by [`wrap_crun_like`].
pub const HIDE_CGROUP2_ENV: &str = "RUNBOX_BENCH_HIDE_CGROUP2";

/// `prog ARGS`, on hybrid cgroups with the cgroup2 mount hidden as crun
/// needs it: between fork and exec the child enters a new mount namespace,
/// makes it private (so nothing propagates back to the host) and detaches
/// /sys/fs/cgroup/unified there. No extra process or exec (a shell wrapper,
/// `unshare -m sh -c 'umount ...; exec crun ...'`, cost 1.5-5 ms here, to be
/// subtracted from a noisy median); `crun-wrapper` times this around
/// /bin/true, to compare with `native`.
#[allow(unsafe_code)]
pub fn wrap_crun_like<A: AsRef<std::ffi::OsStr>>(
    prog: impl AsRef<std::ffi::OsStr>,
    args: &[A],
) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(prog);
    c.args(args);
    if cgroup_hybrid() {
        // Says so to the peak-RSS measurer, which re-creates the command
        // in another process (see rss.rs).
        c.env(HIDE_CGROUP2_ENV, "1");
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls (nix passes these short paths on the stack:
        // no allocation, no lock).
        unsafe {
            c.pre_exec(|| {
                use nix::mount::{mount, umount2, MntFlags, MsFlags};
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
                mount(
                    None::<&str>,
                    "/",
                    None::<&str>,
                    MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                    None::<&str>,
                )?;
                umount2("/sys/fs/cgroup/unified", MntFlags::MNT_DETACH)?;
                Ok(())
            });
        }
    }
    c
}

/// stdin, stdout and stderr to /dev/null.
pub fn quiet(mut c: Command) -> Command {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Runs `c` with output to /dev/null; true on exit status 0.
pub fn succeeds(c: Command) -> bool {
    quiet(c).status().is_ok_and(|s| s.success())
}

/// Runs `c` capturing its output; stdout on success, a description of the
/// failure (status and stderr) otherwise.
pub fn checked(mut c: Command) -> Result<String, String> {
    let shown = describe(&c);
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{shown}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Like [`checked`] for commands that leave a process behind (`run -d`):
/// output goes to unnamed temp files, not pipes, because the detached
/// container inherits them and a pipe would never reach end-of-file.
pub fn checked_detached(mut c: Command) -> Result<String, String> {
    use std::io::{Read, Seek};
    let shown = describe(&c);
    let tmp = |what: &str| {
        tempfile::tempfile().map_err(|e| format!("{shown}: temp file for {what}: {e}"))
    };
    let (mut out, mut err) = (tmp("stdout")?, tmp("stderr")?);
    let dup = |f: &std::fs::File| {
        f.try_clone()
            .map_err(|e| format!("{shown}: dup temp file: {e}"))
    };
    let status = c
        .stdin(Stdio::null())
        .stdout(dup(&out)?)
        .stderr(dup(&err)?)
        .status()
        .map_err(|e| format!("{shown}: cannot start: {e}"))?;
    let read = |f: &mut std::fs::File| {
        let mut s = String::new();
        let _ = f.rewind().and_then(|_| f.read_to_string(&mut s));
        s
    };
    if status.success() {
        Ok(read(&mut out))
    } else {
        Err(format!("{shown}: {status}: {}", read(&mut err).trim()))
    }
}

pub fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Set during a case's untimed check run, so that failures keep stderr.
static CHECKING: AtomicBool = AtomicBool::new(false);

/// What one timed action did: how many processes it ran, how many failed,
/// and the first failure's description.
#[derive(Debug, Default)]
pub struct Outcome {
    pub runs: u32,
    pub failed: u32,
    pub error: Option<String>,
}

impl Outcome {
    pub fn of(c: Command) -> Outcome {
        Outcome::all(vec![c], false)
    }

    /// Runs the commands one after another (`parallel == false`) or all at
    /// once, waiting for every one.
    pub fn all(cmds: Vec<Command>, parallel: bool) -> Outcome {
        let mut o = Outcome::default();
        if parallel {
            let mut children = Vec::with_capacity(cmds.len());
            let checking = CHECKING.load(Ordering::Relaxed);
            for c in cmds {
                let shown = describe(&c);
                let mut c = quiet(c);
                if checking {
                    // The check run: keep stderr, it says why a command fails.
                    c.stderr(Stdio::piped());
                }
                match c.spawn() {
                    Ok(ch) => children.push((shown, ch)),
                    Err(e) => o.fail(format!("{shown}: cannot start: {e}")),
                }
            }
            for (shown, ch) in children {
                match ch.wait_with_output() {
                    Ok(out) if out.status.success() => o.runs += 1,
                    Ok(out) => o.fail(format!(
                        "{shown}: {}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                    Err(e) => o.fail(format!("{shown}: wait: {e}")),
                }
            }
        } else {
            for c in cmds {
                let shown = describe(&c);
                if CHECKING.load(Ordering::Relaxed) {
                    // The check run: keep stderr, it says why a command fails.
                    match checked(c) {
                        Ok(_) => o.runs += 1,
                        Err(e) => {
                            o.fail(e);
                            break;
                        }
                    }
                    continue;
                }
                match quiet(c).status() {
                    Ok(s) if s.success() => o.runs += 1,
                    Ok(s) => {
                        o.fail(format!("{shown}: {s}"));
                        break;
                    }
                    Err(e) => {
                        o.fail(format!("{shown}: cannot start: {e}"));
                        break;
                    }
                }
            }
        }
        o
    }

    fn fail(&mut self, e: String) {
        self.runs += 1;
        self.failed += 1;
        self.error.get_or_insert(e);
    }
}

/// How a case is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    BackToBack,
    /// Sleep [`Ctx::idle`] before each start, outside the timed span.
    Isolated,
}

/// How long to measure: samples and roughly how many timed iterations in
/// all (criterion flat sampling), bounded in measured time.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub samples: usize,
    pub iters: u32,
    pub max: Duration,
}

impl Plan {
    pub const FAST: Plan = Plan {
        samples: 20,
        iters: 300,
        max: Duration::from_secs(2),
    };
    pub const ISOLATED: Plan = Plan {
        samples: 10,
        iters: 30,
        max: Duration::from_secs(3),
    };
    /// Half a run per sample asked: criterion does at least one, so 10 in all.
    pub const SLOW: Plan = Plan {
        samples: 10,
        iters: 5,
        max: Duration::from_secs(30),
    };

    /// docker takes hundreds of ms per command: criterion's minimum of 10 samples.
    pub fn few(self) -> Plan {
        Plan {
            samples: 10,
            ..self
        }
    }
}

/// One benchmark: `prep` runs untimed before every iteration, `action` is
/// timed. Both are called once more, untimed, as a check before measuring.
pub struct Case<'a> {
    pub name: String,
    pub param: String,
    pub is_runbox: bool,
    /// Print the failure count even when it is zero (concurrency).
    pub always_report: bool,
    pub prep: Box<dyn FnMut() + 'a>,
    pub action: Box<dyn FnMut() -> Outcome + 'a>,
}

impl<'a> Case<'a> {
    pub fn new(name: &str, param: &str, action: impl FnMut() -> Outcome + 'a) -> Case<'a> {
        Case {
            name: name.to_string(),
            param: param.to_string(),
            is_runbox: name.starts_with("runbox"),
            always_report: false,
            prep: Box::new(|| {}),
            action: Box::new(action),
        }
    }

    pub fn reporting(mut self) -> Case<'a> {
        self.always_report = true;
        self
    }

    pub fn with_prep(mut self, prep: impl FnMut() + 'a) -> Case<'a> {
        self.prep = Box::new(prep);
        self
    }
}

/// Checks `case` with one untimed run, then measures it in `group` (named
/// `group_name`). A failing check skips the case with a printed reason;
/// failures during measurement are counted and printed, never panics.
pub fn measure(
    ctx: &Ctx,
    group: &mut BenchmarkGroup<'_, WallTime>,
    group_name: &str,
    mut case: Case<'_>,
    mode: Mode,
    plan: Plan,
) {
    let id = format!("{group_name}/{}/{}", case.name, case.param);
    if !ctx.filter.matches(&id) {
        return;
    }
    let est = if ctx.list_only {
        Duration::from_millis(1)
    } else {
        CHECKING.store(true, Ordering::Relaxed);
        (case.prep)();
        let t = Instant::now();
        let o = (case.action)();
        let mut est = t.elapsed();
        CHECKING.store(false, Ordering::Relaxed);
        if o.failed == 0 && est < Duration::from_millis(100) {
            // Cheap: the median of three more runs sizes the measurement better
            // than one cold run.
            let mut more: Vec<Duration> = (0..3)
                .map(|_| {
                    (case.prep)();
                    let t = Instant::now();
                    let _ = (case.action)();
                    t.elapsed()
                })
                .collect();
            more.sort();
            est = more[1];
        }
        if o.failed > 0 {
            let err = o.error.unwrap_or_default();
            ctx.note(
                &id,
                "skipped",
                o.runs,
                o.failed,
                &format!("check run failed: {err}"),
            );
            if case.is_runbox {
                eprintln!("\n!!!!!!!! RUNBOX FAILED: {id}: skipped, its check run failed:\n!!!!!!!! {err}\n");
            } else {
                eprintln!("bench: SKIP {id}: check run failed: {err}");
            }
            return;
        }
        est.max(Duration::from_micros(50))
    };
    let total = (est * plan.iters).min(plan.max);
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(plan.samples)
        .measurement_time(total.max(Duration::from_millis(1)))
        .warm_up_time((est * 2).clamp(Duration::from_millis(1), Duration::from_secs(1)));
    let failed = Cell::new(0u32);
    let runs = Cell::new(0u32);
    let first_error: Cell<Option<String>> = Cell::new(None);
    let idle = ctx.idle;
    group.bench_function(
        BenchmarkId::new(case.name.clone(), case.param.clone()),
        |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    (case.prep)();
                    if mode == Mode::Isolated {
                        std::thread::sleep(idle);
                    }
                    let t = Instant::now();
                    let o = (case.action)();
                    timed += t.elapsed();
                    runs.set(runs.get() + o.runs);
                    failed.set(failed.get() + o.failed);
                    if let Some(e) = o.error {
                        let prev = first_error.take();
                        first_error.set(prev.or(Some(e)));
                    }
                }
                timed
            })
        },
    );
    if ctx.list_only || runs.get() == 0 {
        // Listed only, or filtered out by criterion with a regex that
        // Filter could not read.
        return;
    }
    let err = first_error.take().unwrap_or_default();
    ctx.note(&id, "measured", runs.get(), failed.get(), &err);
    if failed.get() > 0 || case.always_report {
        let loud = if case.is_runbox && failed.get() > 0 {
            "!!!!!!!! RUNBOX "
        } else {
            "bench: "
        };
        eprintln!(
            "{loud}{id}: {} of {} runs failed (their time is included){}{err}",
            failed.get(),
            runs.get(),
            if err.is_empty() { "" } else { "; first: " },
        );
    }
}
