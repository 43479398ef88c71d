//! Image names (`busybox:latest`) as docker normalises them, their file
//! names under `refs/`, and `PATH:NAME` / `PATH@INDEX` arguments.

use std::path::{Path, PathBuf};

use crate::format::Selector;
use crate::{Error, Result};

/// `busybox` -> `busybox:latest`; drops docker's implicit `docker.io/library/`.
pub fn normalize_name(name: &str) -> Result<String> {
    let bad = || Error::Invalid(format!("invalid image name `{name}`"));
    if name.is_empty()
        || name.len() > 255
        || name.starts_with(['/', '.', '-', ':'])
        || name.contains(['\0', '\n', ' ', '@', '\\'])
        || name
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty())
    {
        return Err(bad());
    }
    let name = name
        .strip_prefix("docker.io/library/")
        .or_else(|| name.strip_prefix("docker.io/"))
        .unwrap_or(name);
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        let tag = last.rsplit(':').next().unwrap_or("");
        if tag.is_empty() {
            return Err(bad());
        }
        Ok(name.to_string())
    } else {
        Ok(format!("{name}:latest"))
    }
}

pub(super) fn escape_name(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

pub(super) fn unescape_name(file: &str) -> String {
    file.replace("%2F", "/").replace("%25", "%")
}

/// `PATH`, `PATH:NAME[:TAG]` or `PATH@INDEX` where PATH exists; None when `arg`
/// is not a path at all (then it is a stored image's name or ID).
pub fn split_path_selector(arg: &str) -> Option<(PathBuf, Selector)> {
    if Path::new(arg).exists() {
        return Some((PathBuf::from(arg), Selector::Only));
    }
    if let Some((path, index)) = arg.rsplit_once('@') {
        if Path::new(path).exists() {
            if let Ok(i) = index.parse::<usize>() {
                return Some((PathBuf::from(path), Selector::Index(i)));
            }
        }
    }
    // The first `:` after which the prefix is an existing path.
    for (i, _) in arg.match_indices(':') {
        let (path, name) = (&arg[..i], &arg[i + 1..]);
        if !name.is_empty() && Path::new(path).exists() {
            return Some((PathBuf::from(path), Selector::Name(name.to_string())));
        }
    }
    None
}
