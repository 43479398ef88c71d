//! The groups about starting processes in containers: `run` (one
//! `/bin/true` per start, back-to-back and isolated), `exec` (into a
//! running container of each tool's own) and `concurrency` (16 and 32
//! simultaneous starts). All use the busybox image prepared by
//! scripts/bench-setup.sh, the same content for every tool.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use criterion::Criterion;

use crate::harness::{
    cgroup_hybrid, checked, checked_detached, crun, docker_up, peer, quiet, succeeds,
    wrap_crun_like, Case, Ctx, Mode, Outcome, Plan,
};

const MODES: [(Mode, &str); 2] = [
    (Mode::BackToBack, "back-to-back"),
    (Mode::Isolated, "isolated"),
];

fn plan(mode: Mode) -> Plan {
    match mode {
        Mode::BackToBack => Plan::FAST,
        Mode::Isolated => Plan::ISOLATED,
    }
}

fn ids(group: &str, names: &[&str], params: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| params.iter().map(move |p| format!("{group}/{n}/{p}")))
        .collect()
}

/// Loads `tar` into the store `root` (untimed setup); returns the image ID
/// that `runbox load` prints, or why it failed.
pub fn runbox_load(ctx: &Ctx, root: &Path, state: &Path, tar: &Path) -> Result<String, String> {
    let mut c = ctx.runbox(root, state);
    c.arg("load").arg("-q").arg(tar);
    let out = checked(c)?;
    out.split_whitespace()
        .last()
        .map(str::to_string)
        .ok_or_else(|| format!("runbox load -q {}: printed no image ID", tar.display()))
}

/// The runbox store used by `run` and `concurrency`, with busybox loaded.
fn runbox_store(ctx: &Ctx, tag: &str, ids: &[String]) -> Option<(PathBuf, PathBuf, String)> {
    let (root, state) = (ctx.store(tag), ctx.state(tag));
    if ctx.list_only {
        return Some((root, state, String::new()));
    }
    match runbox_load(ctx, &root, &state, &ctx.busybox().docker_tar) {
        Ok(id) => Some((root, state, id)),
        Err(e) => {
            eprintln!("\n!!!!!!!! RUNBOX FAILED: cannot load the busybox image, runbox {tag} benchmarks skipped:\n!!!!!!!! {e}\n");
            ctx.skip(ids, &format!("runbox load failed: {e}"));
            None
        }
    }
}

pub fn run(c: &mut Criterion, ctx: &Ctx) {
    const G: &str = "run";
    let params = ["back-to-back", "isolated"];
    let all = [
        "native",
        "unshare-chroot",
        "bwrap",
        "crun",
        "crun-wrapper",
        "runc",
        "docker",
        "docker-network-none",
        "runbox",
        "runbox-network-none",
        "runbox-rootfs",
    ];
    if !ctx.filter.any(&ids(G, &all, &params)) {
        return;
    }
    let img = ctx.busybox();
    if !ctx.list_only && !img.ready() {
        eprintln!(
            "bench: SKIP group run: images missing in {}: run scripts/bench-setup.sh",
            ctx.dir.display()
        );
        ctx.skip(&ids(G, &all, &params), "images not prepared");
        return;
    }
    let runbox_ids = ids(
        G,
        &["runbox", "runbox-network-none", "runbox-rootfs"],
        &params,
    );
    let store = if ctx.filter.any(&runbox_ids) {
        runbox_store(ctx, "run", &runbox_ids)
    } else {
        None
    };
    let rootfs = img.rootfs.to_string_lossy().into_owned();
    let bundle = img.bundle.to_string_lossy().into_owned();
    let mut g = c.benchmark_group(G);

    for (mode, p) in MODES {
        let case = Case::new("native", p, || Outcome::of(Command::new("/bin/true")));
        crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
    }
    if peer("unshare", "util-linux") && peer("chroot", "coreutils") {
        // The floor: the namespaces a container has, nothing else.
        let proc_dir = format!("--mount-proc={rootfs}/proc");
        for (mode, p) in MODES {
            let case = Case::new("unshare-chroot", p, || {
                let mut c = Command::new("unshare");
                c.args(["-mpiuf", &proc_dir, "chroot", &rootfs, "/bin/true"]);
                Outcome::of(c)
            });
            crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
        }
    }
    if peer("bwrap", "bubblewrap") {
        for (mode, p) in MODES {
            let case = Case::new("bwrap", p, || {
                let mut c = Command::new("bwrap");
                c.args([
                    "--unshare-all",
                    "--ro-bind",
                    &rootfs,
                    "/",
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "/bin/true",
                ]);
                Outcome::of(c)
            });
            crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
        }
    }
    if peer("crun", "crun") {
        for (mode, p) in MODES {
            let case = Case::new("crun", p, || {
                let id = format!("rb-{}-{}", std::process::id(), ctx.next());
                Outcome::of(crun(&["run", "-b", &bundle, &id]))
            });
            crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
        }
        if cgroup_hybrid() {
            // What the hybrid-cgroup wrapper alone costs, to subtract from crun.
            for (mode, p) in MODES {
                let case = Case::new("crun-wrapper", p, || {
                    Outcome::of(wrap_crun_like("/bin/true", &[] as &[&str]))
                });
                crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
            }
        }
    }
    if peer("runc", "runc") {
        for (mode, p) in MODES {
            let case = Case::new("runc", p, || {
                let id = format!("rb-{}-{}", std::process::id(), ctx.next());
                let mut c = Command::new("runc");
                c.args(["run", "-b", &bundle, &id]);
                Outcome::of(c)
            });
            crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
        }
    }
    if ctx
        .filter
        .any(&ids(G, &["docker", "docker-network-none"], &params))
        && docker_up()
    {
        for (name, net) in [("docker", None), ("docker-network-none", Some("none"))] {
            for (mode, p) in MODES {
                let case = Case::new(name, p, || {
                    let mut c = Command::new("docker");
                    c.args(["run", "--rm"]);
                    if let Some(n) = net {
                        c.args(["--network", n]);
                    }
                    c.args([img.docker_ref.as_str(), "/bin/true"]);
                    Outcome::of(c)
                });
                crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode).few());
            }
        }
    }
    if let Some((root, state, image)) = &store {
        for (name, extra) in [
            ("runbox", &[][..]),
            ("runbox-network-none", &["--network", "none"][..]),
        ] {
            for (mode, p) in MODES {
                let case = Case::new(name, p, || {
                    let mut c = ctx.runbox(root, state);
                    c.arg("run")
                        .args(extra)
                        .args([image.as_str(), "--", "/bin/true"]);
                    Outcome::of(c)
                });
                crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
            }
        }
        for (mode, p) in MODES {
            let case = Case::new("runbox-rootfs", p, || {
                let mut c = ctx.runbox(root, state);
                c.args(["run", "--rootfs", &rootfs, "--", "/bin/true"]);
                Outcome::of(c)
            });
            crate::harness::measure(ctx, &mut g, G, case, mode, plan(mode));
        }
    }
    g.finish();
}

/// A container kept running for `exec`, and how to stop it.
struct Target {
    /// What `exec` commands name: a pid, an ID or a container name.
    handle: String,
    child: Option<Child>,
    stop: Option<Command>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(c) = self.stop.take() {
            if !succeeds(c) {
                eprintln!("bench: exec: could not stop container `{}`", self.handle);
            }
        }
        if let Some(mut ch) = self.child.take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
}

/// Polls until `pid` has a child (the container's pid 1 under `unshare --fork`).
fn first_child(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let path = format!("/proc/{pid}/task/{pid}/children");
    while Instant::now() < deadline {
        if let Some(c) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
        {
            return Some(c);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn start_nsenter_target(rootfs: &str) -> Result<Target, String> {
    let mut c = Command::new("unshare");
    c.args([
        "-mpiuf",
        "--kill-child",
        &format!("--mount-proc={rootfs}/proc"),
        "chroot",
        rootfs,
        "/bin/sleep",
        "100000",
    ]);
    let child = quiet(c).spawn().map_err(|e| format!("unshare: {e}"))?;
    let pid = first_child(child.id());
    let mut t = Target {
        handle: String::new(),
        child: Some(child),
        stop: None,
    };
    match pid {
        Some(p) => {
            t.handle = p.to_string();
            Ok(t)
        }
        None => Err("unshare: the sleeping container process did not appear".into()),
    }
}

pub fn exec(c: &mut Criterion, ctx: &Ctx) {
    const G: &str = "exec";
    let params = ["back-to-back", "isolated"];
    let all = ["nsenter", "crun", "runc", "docker", "runbox"];
    if !ctx.filter.any(&ids(G, &all, &params)) {
        return;
    }
    let img = ctx.busybox();
    if !ctx.list_only && !img.ready() {
        eprintln!(
            "bench: SKIP group exec: images missing in {}: run scripts/bench-setup.sh",
            ctx.dir.display()
        );
        ctx.skip(&ids(G, &all, &params), "images not prepared");
        return;
    }
    let rootfs = img.rootfs.to_string_lossy().into_owned();
    let bundle = img.bundle_sleep.to_string_lossy().into_owned();
    let wants = |n: &str| ctx.filter.any(&ids(G, &[n], &params)) && !ctx.list_only;
    let mut g = c.benchmark_group(G);
    let mut measure_exec =
        |name: &str, target: Result<Target, String>, make: &dyn Fn(&str) -> Command| {
            let t = match target {
                Ok(t) => t,
                Err(e) => {
                    let loud = if name == "runbox" {
                        "\n!!!!!!!! RUNBOX FAILED: "
                    } else {
                        "bench: SKIP "
                    };
                    eprintln!("{loud}exec/{name}: cannot start the container to exec into: {e}");
                    ctx.skip(
                        &ids(G, &[name], &params),
                        &format!("container start failed: {e}"),
                    );
                    return;
                }
            };
            for (mode, p) in MODES {
                let case = Case::new(name, p, || Outcome::of(make(&t.handle)));
                let budget = if name == "docker" {
                    plan(mode).few()
                } else {
                    plan(mode)
                };
                crate::harness::measure(ctx, &mut g, G, case, mode, budget);
            }
            drop(t);
        };

    if (wants("nsenter") || ctx.list_only)
        && peer("nsenter", "util-linux")
        && peer("unshare", "util-linux")
    {
        let t = if ctx.list_only {
            Ok(dummy())
        } else {
            start_nsenter_target(&rootfs)
        };
        measure_exec("nsenter", t, &|pid| {
            let mut c = Command::new("nsenter");
            c.args(["-t", pid, "-m", "-u", "-i", "-p", "-r", "-w", "/bin/true"]);
            c
        });
    }
    if (wants("crun") || ctx.list_only) && peer("crun", "crun") {
        let id = format!("rb-exec-{}", std::process::id());
        let t = if ctx.list_only {
            Ok(dummy())
        } else {
            checked_detached(crun(&["run", "-d", "-b", &bundle, &id])).map(|_| {
                let mut stop = Command::new("crun");
                stop.args(["delete", "-f", &id]);
                Target {
                    handle: id.clone(),
                    child: None,
                    stop: Some(stop),
                }
            })
        };
        // crun exec itself does not trip over hybrid cgroups: no wrapper.
        measure_exec("crun", t, &|id| {
            let mut c = Command::new("crun");
            c.args(["exec", id, "/bin/true"]);
            c
        });
    }
    if (wants("runc") || ctx.list_only) && peer("runc", "runc") {
        let id = format!("rb-exec-{}", std::process::id());
        let t = if ctx.list_only {
            Ok(dummy())
        } else {
            let mut start = Command::new("runc");
            start.args(["run", "-d", "-b", &bundle, &id]);
            checked_detached(start).map(|_| {
                let mut stop = Command::new("runc");
                stop.args(["delete", "-f", &id]);
                Target {
                    handle: id.clone(),
                    child: None,
                    stop: Some(stop),
                }
            })
        };
        measure_exec("runc", t, &|id| {
            let mut c = Command::new("runc");
            c.args(["exec", id, "/bin/true"]);
            c
        });
    }
    if ctx.list_only || (wants("docker") && docker_up()) {
        let name = format!("runbox-bench-exec-{}", std::process::id());
        let t = if ctx.list_only {
            Ok(dummy())
        } else {
            let mut start = Command::new("docker");
            start.args([
                "run",
                "-d",
                "--name",
                &name,
                &img.docker_ref,
                "/bin/sleep",
                "100000",
            ]);
            checked(start).map(|_| {
                let mut stop = Command::new("docker");
                stop.args(["rm", "-f", &name]);
                Target {
                    handle: name.clone(),
                    child: None,
                    stop: Some(stop),
                }
            })
        };
        measure_exec("docker", t, &|name| {
            let mut c = Command::new("docker");
            c.args(["exec", name, "/bin/true"]);
            c
        });
    }
    if wants("runbox") || ctx.list_only {
        let (root, state) = (ctx.store("exec"), ctx.state("exec"));
        let mut help = Command::new(&ctx.runbox);
        help.args(["exec", "--help"]);
        if !ctx.list_only && !succeeds(help) {
            eprintln!("\n!!!!!!!! RUNBOX: exec/runbox skipped: `runbox exec` does not exist yet (`runbox exec --help` failed)\n");
            ctx.skip(
                &ids(G, &["runbox"], &params),
                "`runbox exec` not implemented",
            );
        } else {
            let t = if ctx.list_only {
                Ok(dummy())
            } else {
                start_runbox_target(ctx, &root, &state)
            };
            measure_exec("runbox", t, &|id| {
                let mut c = ctx.runbox(&root, &state);
                c.args(["exec", id, "/bin/true"]);
                c
            });
        }
    }
    g.finish();
}

fn dummy() -> Target {
    Target {
        handle: "x".into(),
        child: None,
        stop: None,
    }
}

/// `runbox run -d IMAGE -- /bin/sleep 100000`, docker-style: prints the
/// container ID. Stopped with `runbox rm -f ID`.
fn start_runbox_target(ctx: &Ctx, root: &Path, state: &Path) -> Result<Target, String> {
    let image = runbox_load(ctx, root, state, &ctx.busybox().docker_tar)?;
    let mut start = ctx.runbox(root, state);
    start.args(["run", "-d", &image, "--", "/bin/sleep", "100000"]);
    let out = checked_detached(start)?;
    let id = out
        .split_whitespace()
        .last()
        .ok_or("runbox run -d printed no container ID")?
        .to_string();
    let mut stop = ctx.runbox(root, state);
    stop.args(["rm", "-f", &id]);
    Ok(Target {
        handle: id,
        child: None,
        stop: Some(stop),
    })
}

pub fn concurrency(c: &mut Criterion, ctx: &Ctx) {
    const G: &str = "concurrency";
    let params = ["16", "32"];
    let all = ["runbox", "docker", "crun", "runc"];
    if !ctx.filter.any(&ids(G, &all, &params)) {
        return;
    }
    let img = ctx.busybox();
    if !ctx.list_only && !img.ready() {
        eprintln!("bench: SKIP group concurrency: images missing: run scripts/bench-setup.sh");
        ctx.skip(&ids(G, &all, &params), "images not prepared");
        return;
    }
    let bundle = img.bundle.to_string_lossy().into_owned();
    let runbox_ids = ids(G, &["runbox"], &params);
    let store = if ctx.filter.any(&runbox_ids) {
        runbox_store(ctx, "concurrency", &runbox_ids)
    } else {
        None
    };
    let mut g = c.benchmark_group(G);
    let measure_n =
        |g: &mut criterion::BenchmarkGroup<'_, _>, name: &str, make: &dyn Fn() -> Command| {
            for n in [16usize, 32] {
                let case = Case::new(name, &n.to_string(), || {
                    Outcome::all((0..n).map(|_| make()).collect(), true)
                });
                crate::harness::measure(ctx, g, G, case.reporting(), Mode::BackToBack, Plan::SLOW);
            }
        };
    if let Some((root, state, image)) = &store {
        measure_n(&mut g, "runbox", &|| {
            let mut c = ctx.runbox(root, state);
            c.args(["run", image.as_str(), "--", "/bin/true"]);
            c
        });
    }
    if ctx.filter.any(&ids(G, &["docker"], &params)) && docker_up() {
        measure_n(&mut g, "docker", &|| {
            let mut c = Command::new("docker");
            c.args(["run", "--rm", &img.docker_ref, "/bin/true"]);
            c
        });
    }
    if peer("crun", "crun") {
        measure_n(&mut g, "crun", &|| {
            crun(&[
                "run",
                "-b",
                &bundle,
                &format!("rb-{}-{}", std::process::id(), ctx.next()),
            ])
        });
    }
    if peer("runc", "runc") {
        measure_n(&mut g, "runc", &|| {
            let mut c = Command::new("runc");
            c.args([
                "run",
                "-b",
                &bundle,
                &format!("rb-{}-{}", std::process::id(), ctx.next()),
            ]);
            c
        });
    }
    g.finish();
}
