//! Picking one image out of an input: `PATH:NAME[:TAG]` / `PATH@INDEX`
//! argument parsing, platform strings, reference matching (`busybox` is
//! `busybox:latest` is `docker.io/library/busybox:latest`) and the choice
//! among candidates, with errors that list what the input holds.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::Result;

use super::{Platform, Selector};

/// One image manifest found in an input, before it is read in full.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// Position in `manifest.json` or `index.json` (what `@INDEX` selects).
    pub top: usize,
    pub names: Vec<String>,
    pub platform: Option<Platform>,
    pub target: Target,
}

#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Entry `n` of a docker `manifest.json`.
    Docker(usize),
    /// An OCI (or docker v2) image manifest blob.
    Oci(super::oci::Descriptor),
}

impl Selector {
    /// Split a CLI image argument into a path and a selector:
    /// `PATH`, `PATH:NAME[:TAG]` or `PATH@INDEX`. An argument that is an
    /// existing path is taken whole, even when it contains `:` or `@`; else
    /// the shortest existing prefix before a `:` (or the last `@`) is the path.
    pub fn parse_path_arg(arg: &str) -> (PathBuf, Selector) {
        if Path::new(arg).exists() {
            return (PathBuf::from(arg), Selector::Only);
        }
        if let Some((path, index)) = arg.rsplit_once('@') {
            if !index.is_empty()
                && index.bytes().all(|b| b.is_ascii_digit())
                && Path::new(path).exists()
            {
                if let Ok(i) = index.parse() {
                    return (PathBuf::from(path), Selector::Index(i));
                }
            }
        }
        for (i, _) in arg.match_indices(':') {
            let (path, name) = (&arg[..i], &arg[i + 1..]);
            if !path.is_empty() && !name.is_empty() && Path::new(path).exists() {
                return (PathBuf::from(path), Selector::Name(name.to_string()));
            }
        }
        (PathBuf::from(arg), Selector::Only)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Only => f.write_str("the only image"),
            Selector::Name(n) => write!(f, "name `{n}`"),
            Selector::Index(i) => write!(f, "index @{i}"),
        }
    }
}

impl Platform {
    /// `os/arch[/variant]`, e.g. `linux/arm64/v8`.
    pub fn parse(s: &str) -> Result<Platform> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok = |p: &&str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        };
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(v.to_string()),
            }),
            _ => Err(Error::Invalid(format!(
                "platform `{s}` is not of the form os/arch[/variant], e.g. linux/arm64/v8"
            ))),
        }
    }

    /// Whether an image for `self` satisfies a request for `want`. A request
    /// without variant takes any variant; arm64 without variant means v8.
    pub fn satisfies(&self, want: &Platform) -> bool {
        if self.os != want.os || self.architecture != want.architecture {
            return false;
        }
        let Some(want_v) = &want.variant else {
            return true;
        };
        let default = (self.architecture == "arm64").then_some("v8");
        self.variant.as_deref().or(default) == Some(want_v.as_str())
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// `docker.io/library/busybox` -> `busybox:latest`; digests stay as they are.
pub(crate) fn normalize_ref(r: &str) -> String {
    let mut s = r;
    for prefix in ["docker.io/", "index.docker.io/", "registry-1.docker.io/"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
            break;
        }
    }
    let s = s.strip_prefix("library/").unwrap_or(s);
    let last = s.rsplit('/').next().unwrap_or(s);
    if last.contains(':') || s.contains('@') {
        s.to_string()
    } else {
        format!("{s}:latest")
    }
}

pub(crate) fn name_matches(wanted: &str, name: &str) -> bool {
    wanted == name || normalize_ref(wanted) == normalize_ref(name)
}

/// `@0 busybox:latest (linux/amd64), @1 <unnamed> (linux/arm64)`.
pub(crate) fn listing(cands: &[&Candidate]) -> String {
    let items: Vec<String> = cands
        .iter()
        .map(|c| {
            let names = if c.names.is_empty() {
                "<unnamed>".to_string()
            } else {
                c.names.join(", ")
            };
            match &c.platform {
                Some(p) => format!("@{} {names} ({p})", c.top),
                None => format!("@{} {names}", c.top),
            }
        })
        .collect();
    items.join("; ")
}

/// Pick one candidate: first by selector, then, among the variants of one
/// image, by platform. A single candidate is taken whatever its platform
/// (like `docker load`); the caller may check the config's architecture.
pub(crate) fn choose<'a>(
    cands: &'a [Candidate],
    selector: &Selector,
    platform: &Platform,
    file: &Path,
) -> Result<&'a Candidate> {
    let all: Vec<&Candidate> = cands.iter().collect();
    let err = |reason: String| Error::Select {
        file: file.to_path_buf(),
        reason,
    };
    if all.is_empty() {
        return Err(err("the input lists no images".into()));
    }
    let picked: Vec<&Candidate> = match selector {
        Selector::Only => all.clone(),
        Selector::Index(i) => all.iter().copied().filter(|c| c.top == *i).collect(),
        Selector::Name(n) => all
            .iter()
            .copied()
            .filter(|c| c.names.iter().any(|x| name_matches(n, x)))
            .collect(),
    };
    if picked.is_empty() {
        return Err(err(format!(
            "no image with {selector}; the input holds: {}",
            listing(&all)
        )));
    }
    if picked.len() == 1 {
        return Ok(picked[0]);
    }
    let one_image =
        !matches!(selector, Selector::Only) || picked.iter().all(|c| c.names == picked[0].names);
    if !one_image {
        return Err(err(format!(
            "holds {} images, select one with PATH:NAME[:TAG] or PATH@INDEX: {}",
            picked.len(),
            listing(&picked)
        )));
    }
    let fitting: Vec<&Candidate> = picked
        .iter()
        .copied()
        .filter(|c| c.platform.as_ref().is_some_and(|p| p.satisfies(platform)))
        .collect();
    // Prefer an exact variant match (e.g. arm/v7 over arm/v6 for linux/arm/v7).
    if let Some(exact) = fitting
        .iter()
        .find(|c| c.platform.as_ref() == Some(platform))
    {
        return Ok(exact);
    }
    match fitting.first() {
        // Two different entries for the same platform are two images.
        Some(c) if fitting.iter().any(|o| o.top != c.top && o.platform == c.platform) => Err(err(format!(
            "holds several images for {platform}, select one with PATH:NAME[:TAG] or PATH@INDEX: {}",
            listing(&fitting)
        ))),
        Some(c) => Ok(c),
        None => {
            let available: Vec<String> = picked
                .iter()
                .map(|c| {
                    c.platform
                        .as_ref()
                        .map_or_else(|| "unknown".to_string(), |p| p.to_string())
                })
                .collect();
            Err(err(format!(
                "no image for platform {platform}; available platforms: {}",
                available.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(top: usize, names: &[&str], platform: Option<&str>) -> Candidate {
        Candidate {
            top,
            names: names.iter().map(|s| s.to_string()).collect(),
            platform: platform.map(|p| Platform::parse(p).unwrap()),
            target: Target::Docker(top),
        }
    }

    #[test]
    fn platform_parse_and_match() {
        let p = Platform::parse("linux/arm64/v8").unwrap();
        assert_eq!(p.to_string(), "linux/arm64/v8");
        assert!(Platform::parse("linux").is_err());
        assert!(Platform::parse("linux//x").is_err());
        let arm64 = Platform::parse("linux/arm64").unwrap();
        assert!(arm64.satisfies(&p));
        assert!(p.satisfies(&arm64));
        assert!(!Platform::default().satisfies(&arm64));
        let v6 = Platform::parse("linux/arm/v6").unwrap();
        assert!(!v6.satisfies(&Platform::parse("linux/arm/v7").unwrap()));
    }

    #[test]
    fn references_match_like_docker() {
        assert!(name_matches("busybox", "busybox:latest"));
        assert!(name_matches("busybox", "docker.io/library/busybox:latest"));
        assert!(name_matches(
            "busybox:1.36",
            "docker.io/library/busybox:1.36"
        ));
        assert!(!name_matches("busybox:1.36", "busybox:latest"));
        assert!(name_matches(
            "localhost:5000/app",
            "localhost:5000/app:latest"
        ));
        assert!(name_matches("v1", "v1"));
        assert!(!name_matches("alpine", "busybox:latest"));
    }

    #[test]
    fn parse_path_arg_splits_only_when_the_whole_is_not_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("img.tar");
        std::fs::write(&plain, b"x").unwrap();
        let colon = dir.path().join("a:b.tar");
        std::fs::write(&colon, b"x").unwrap();
        let p = plain.to_str().unwrap();
        assert_eq!(Selector::parse_path_arg(p), (plain.clone(), Selector::Only));
        assert_eq!(
            Selector::parse_path_arg(&format!("{p}:busybox:1.36")),
            (plain.clone(), Selector::Name("busybox:1.36".into()))
        );
        assert_eq!(
            Selector::parse_path_arg(&format!("{p}@2")),
            (plain.clone(), Selector::Index(2))
        );
        let c = colon.to_str().unwrap();
        assert_eq!(Selector::parse_path_arg(c), (colon.clone(), Selector::Only));
        assert_eq!(
            Selector::parse_path_arg(&format!("{c}:x")),
            (colon.clone(), Selector::Name("x".into()))
        );
    }

    #[test]
    fn choose_by_selector_then_platform() {
        let f = Path::new("in.tar");
        let multi = [
            cand(0, &["app:1"], Some("linux/amd64")),
            cand(0, &["app:1"], Some("linux/arm64/v8")),
        ];
        assert_eq!(
            choose(&multi, &Selector::Only, &Platform::default(), f)
                .unwrap()
                .platform,
            multi[0].platform
        );
        let arm = Platform::parse("linux/arm64").unwrap();
        assert_eq!(
            choose(&multi, &Selector::Only, &arm, f).unwrap().platform,
            multi[1].platform
        );
        let e = choose(
            &multi,
            &Selector::Only,
            &Platform::parse("linux/s390x").unwrap(),
            f,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no image for platform linux/s390x; available platforms: linux/amd64, linux/arm64/v8"), "{e}");

        let two = [
            cand(0, &["busybox:latest"], Some("linux/amd64")),
            cand(1, &["alpine:3"], None),
        ];
        let e = choose(&two, &Selector::Only, &Platform::default(), f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds 2 images"), "{e}");
        assert!(
            e.contains("@0 busybox:latest (linux/amd64); @1 alpine:3"),
            "{e}"
        );
        assert_eq!(
            choose(
                &two,
                &Selector::Name("alpine:3".into()),
                &Platform::default(),
                f
            )
            .unwrap()
            .top,
            1
        );
        assert_eq!(
            choose(&two, &Selector::Index(0), &Platform::default(), f)
                .unwrap()
                .top,
            0
        );
        let e = choose(&two, &Selector::Index(5), &Platform::default(), f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no image with index @5"), "{e}");
    }
}
