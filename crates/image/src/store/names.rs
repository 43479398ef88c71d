//! Image names (`busybox:latest`) as docker normalises them, their file
//! names under `refs/`.

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
