//! The groups about images: `load` (runbox load of a docker archive and of
//! a gzip OCI layout, a reload, against docker load, umoci unpack, tar -xf /
//! tar -xzf of the same layer, sha256sum), `cold_run` (run straight from an
//! archive with an empty store, against docker load + docker run) and
//! `memory` (peak RSS, printed and written to runbox-memory.json). Every
//! output goes to a fresh scratch path; nothing is deleted until the end.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::Criterion;

use crate::harness::{docker_up, peer, succeeds, Case, Ctx, Image, Mode, Outcome, Plan};
use crate::starts::runbox_load;

fn ids(group: &str, names: &[&str], params: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|n| params.iter().map(move |p| format!("{group}/{n}/{p}")))
        .collect()
}

/// busybox is small: many iterations; debian (~120 MiB): few.
fn plan_for(img: &Image) -> Plan {
    if img.name == "busybox" {
        Plan::FAST
    } else {
        Plan::SLOW
    }
}

fn images(ctx: &Ctx, group: &str, all: &[&str]) -> Vec<Image> {
    let mut out = Vec::new();
    for img in [ctx.busybox(), ctx.debian()] {
        let group_ids = ids(group, all, &[img.name]);
        if !ctx.filter.any(&group_ids) {
            continue;
        }
        if !ctx.list_only && !img.ready() {
            eprintln!(
                "bench: SKIP {group} of {}: not prepared in {}: run scripts/bench-setup.sh",
                img.name,
                ctx.dir.display()
            );
            ctx.skip(&group_ids, "images not prepared");
            continue;
        }
        out.push(img);
    }
    out
}

/// Untimed: removes the image from dockerd so that the next `docker load`
/// does the whole job. (dockerd deletes its layer files here, right before
/// the timed load; that slows docker's next file creation, see README.)
fn docker_rmi(img: &Image) {
    let mut c = Command::new("docker");
    c.args(["rmi", "-f", &img.docker_ref]);
    let _ = succeeds(c);
}

pub fn load(c: &mut Criterion, ctx: &Ctx) {
    const G: &str = "load";
    let all = [
        "runbox-docker-archive",
        "runbox-oci-gzip",
        "runbox-reload",
        "docker-load",
        "umoci-unpack",
        "tar-xf",
        "tar-xzf",
        "sha256sum",
    ];
    let imgs = images(ctx, G, &all);
    if imgs.is_empty() {
        return;
    }
    let mut g = c.benchmark_group(G);
    let state = ctx.state("load");
    for img in &imgs {
        let p = img.name;
        let plan = plan_for(img);
        let path = RefCell::new(PathBuf::new());

        for (name, src) in [
            ("runbox-docker-archive", &img.docker_tar),
            ("runbox-oci-gzip", &img.oci),
        ] {
            let case = Case::new(name, p, || {
                let mut c = ctx.runbox(&path.borrow(), &state);
                c.arg("load").arg("-q").arg(src);
                Outcome::of(c)
            })
            .with_prep(|| *path.borrow_mut() = ctx.fresh("load-root"));
            crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);
        }
        // The check run loads it; every timed run finds it stored.
        let store = ctx.store(&format!("reload-{p}"));
        let case = Case::new("runbox-reload", p, || {
            let mut c = ctx.runbox(&store, &state);
            c.arg("load").arg("-q").arg(&img.docker_tar);
            Outcome::of(c)
        });
        crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);

        if ctx.filter.any(&ids(G, &["docker-load"], &[p])) && docker_up() {
            let case = Case::new("docker-load", p, || {
                let mut c = Command::new("docker");
                c.arg("load").arg("-q").arg("-i").arg(&img.docker_tar);
                Outcome::of(c)
            })
            .with_prep(|| docker_rmi(img));
            crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan.few());
        }
        if peer("umoci", "umoci") {
            let image = format!("{}:latest", img.oci.display());
            let case = Case::new("umoci-unpack", p, || {
                let mut c = Command::new("umoci");
                c.args(["unpack", "--image", &image]).arg(&*path.borrow());
                Outcome::of(c)
            })
            .with_prep(|| *path.borrow_mut() = ctx.fresh("umoci"));
            crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);
        }
        for (name, flag, layer) in [
            ("tar-xf", "-xf", &img.layer_tar),
            ("tar-xzf", "-xzf", &img.layer_tgz),
        ] {
            let case = Case::new(name, p, || {
                let mut c = Command::new("tar");
                c.arg(flag).arg(layer).arg("-C").arg(&*path.borrow());
                Outcome::of(c)
            })
            .with_prep(|| *path.borrow_mut() = ctx.fresh_dir("tar"));
            crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);
        }
        let case = Case::new("sha256sum", p, || {
            let mut c = Command::new("sha256sum");
            c.arg(&img.layer_tar);
            Outcome::of(c)
        });
        crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);
    }
    g.finish();
}

pub fn cold_run(c: &mut Criterion, ctx: &Ctx) {
    const G: &str = "cold_run";
    let all = ["runbox", "docker"];
    let imgs = images(ctx, G, &all);
    if imgs.is_empty() {
        return;
    }
    let mut g = c.benchmark_group(G);
    let state = ctx.state("cold_run");
    for img in &imgs {
        let plan = plan_for(img);
        let root = RefCell::new(PathBuf::new());
        let case = Case::new("runbox", img.name, || {
            let mut c = ctx.runbox(&root.borrow(), &state);
            c.arg("run").arg(&img.docker_tar).args(["--", "/bin/true"]);
            Outcome::of(c)
        })
        .with_prep(|| *root.borrow_mut() = ctx.fresh("cold-root"));
        crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan);

        if ctx.filter.any(&ids(G, &["docker"], &[img.name])) && docker_up() {
            let case = Case::new("docker", img.name, || {
                let mut load = Command::new("docker");
                load.arg("load").arg("-q").arg("-i").arg(&img.docker_tar);
                let mut run = Command::new("docker");
                run.args(["run", "--rm", &img.docker_ref, "/bin/true"]);
                Outcome::all(vec![load, run], false)
            })
            .with_prep(|| docker_rmi(img));
            crate::harness::measure(ctx, &mut g, G, case, Mode::BackToBack, plan.few());
        }
    }
    g.finish();
}

/// One memory measurement: a name, the image, and the command to run
/// (made fresh per repetition).
type MemCase<'a> = (&'static str, &'a Image, Box<dyn Fn() -> Command + 'a>);

/// Peak RSS of runbox run and load (and of peers, for scale). Not timed:
/// printed, and written to `out` as JSON for scripts/bench-table.
pub fn memory(ctx: &Ctx, out: &Path) {
    const G: &str = "memory";
    let all = [
        "runbox-run",
        "runbox-load",
        "runbox-load-oci",
        "tar-xf",
        "umoci-unpack",
        "crun-run",
        "runc-run",
    ];
    let any = [ctx.busybox(), ctx.debian()]
        .iter()
        .any(|i| ctx.filter.any(&ids(G, &all, &[i.name])));
    if !any || ctx.list_only {
        return;
    }
    let (bb, deb) = (ctx.busybox(), ctx.debian());
    if !bb.ready() || !deb.ready() {
        eprintln!("bench: SKIP group memory: images missing: run scripts/bench-setup.sh");
        return;
    }
    let state = ctx.state("memory");
    let store = ctx.store("memory");
    let loaded: Vec<(&Image, Result<String, String>)> = [&bb, &deb]
        .into_iter()
        .map(|i| (i, runbox_load(ctx, &store, &state, &i.docker_tar)))
        .collect();
    let (store, state) = (&store, &state);
    let mut cases: Vec<MemCase<'_>> = Vec::new();
    for (img, id) in &loaded {
        match id {
            Ok(id) => {
                let id = id.clone();
                cases.push((
                    "runbox-run",
                    img,
                    Box::new(move || {
                        let mut c = ctx.runbox(store, state);
                        c.args(["run", &id, "--", "/bin/true"]);
                        c
                    }),
                ));
            }
            Err(e) => {
                eprintln!(
                    "\n!!!!!!!! RUNBOX FAILED: memory/runbox-run/{} skipped: load failed: {e}\n",
                    img.name
                );
            }
        }
    }
    cases.push((
        "runbox-load",
        &deb,
        Box::new(|| {
            let mut c = ctx.runbox(&ctx.fresh("mem-root"), state);
            c.arg("load").arg("-q").arg(&deb.docker_tar);
            c
        }),
    ));
    cases.push((
        "runbox-load-oci",
        &deb,
        Box::new(|| {
            let mut c = ctx.runbox(&ctx.fresh("mem-root"), state);
            c.arg("load").arg("-q").arg(&deb.oci);
            c
        }),
    ));
    cases.push((
        "tar-xf",
        &deb,
        Box::new(|| {
            let mut c = Command::new("tar");
            c.arg("-xf")
                .arg(&deb.layer_tar)
                .arg("-C")
                .arg(ctx.fresh_dir("mem-tar"));
            c
        }),
    ));
    if peer("umoci", "umoci") {
        cases.push((
            "umoci-unpack",
            &deb,
            Box::new(|| {
                let mut c = Command::new("umoci");
                c.args([
                    "unpack",
                    "--image",
                    &format!("{}:latest", deb.oci.display()),
                ])
                .arg(ctx.fresh("mem-umoci"));
                c
            }),
        ));
    }
    if peer("crun", "crun") {
        let bundle = bb.bundle.to_string_lossy().into_owned();
        cases.push((
            "crun-run",
            &bb,
            Box::new(move || {
                crate::harness::crun(&["run", "-b", &bundle, &format!("rb-mem-{}", ctx.next())])
            }),
        ));
    }
    if peer("runc", "runc") {
        cases.push((
            "runc-run",
            &bb,
            Box::new(|| {
                let mut c = Command::new("runc");
                c.arg("run")
                    .arg("-b")
                    .arg(&bb.bundle)
                    .arg(format!("rb-mem-{}", ctx.next()));
                c
            }),
        ));
    }

    const REPS: usize = 3;
    let mut rows = Vec::new();
    for (name, img, make) in &cases {
        let id = format!("{G}/{name}/{}", img.name);
        if !ctx.filter.matches(&id) {
            continue;
        }
        let mut kib = Vec::new();
        let mut error = None;
        for _ in 0..REPS {
            match crate::rss::max_rss_kib(&make()) {
                Ok(k) => kib.push(k),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = error {
            let loud = if name.starts_with("runbox") {
                "\n!!!!!!!! RUNBOX FAILED: "
            } else {
                "bench: SKIP "
            };
            eprintln!("{loud}{id}: {e}");
            ctx.note(&id, "skipped", kib.len() as u32 + 1, 1, &e);
            continue;
        }
        kib.sort_unstable();
        let median = kib[kib.len() / 2];
        let max = kib[kib.len() - 1];
        println!(
            "{id:<40} peak RSS median {:>8.1} MiB  max {:>8.1} MiB  ({REPS} runs)",
            median as f64 / 1024.0,
            max as f64 / 1024.0
        );
        ctx.note(&id, "measured", kib.len() as u32, 0, "");
        rows.push(serde_json::json!({
            "id": id, "group": G, "function": name, "image": img.name,
            "max_rss_kib": kib, "median_kib": median,
        }));
    }
    // Keep an earlier run's entries for what this run did not measure
    // (`cargo bench -- memory/runbox-run` must not drop the load numbers).
    let fresh_ids: Vec<serde_json::Value> =
        rows.iter().filter_map(|r| r.get("id").cloned()).collect();
    let earlier: Vec<serde_json::Value> = std::fs::read(out)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("entries").and_then(|e| e.as_array().cloned()))
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.get("id").is_some_and(|id| !fresh_ids.contains(id)))
        .collect();
    let rows: Vec<serde_json::Value> = earlier.into_iter().chain(rows).collect();
    let doc = serde_json::json!({
        "what": "peak RSS (getrusage RUSAGE_CHILDREN ru_maxrss) of the command and the processes it waited for",
        "entries": rows,
    });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    if let Err(e) = std::fs::create_dir_all(out.parent().unwrap_or(Path::new(".")))
        .and_then(|_| std::fs::write(out, text))
    {
        eprintln!("bench: cannot write {}: {e}", out.display());
    } else {
        println!("memory: written to {}", out.display());
    }
}
