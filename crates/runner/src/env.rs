//! The container's environment, with docker's rules: `--env-file` parsing,
//! `-e KEY` taken from the host, and the merge order
//! `PATH, HOSTNAME, [TERM]` < image `Env` < `-e`/`--env-file`, each later
//! `KEY=VALUE` replacing an earlier one in place; `HOME` is appended last
//! (from the user's passwd entry, else `/`) unless already set.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// docker's default PATH for Linux containers.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Larger env files than this are refused.
const MAX_ENV_FILE: u64 = 1 << 20;

/// The key of `KEY=VALUE` (the whole string when there is no `=`).
pub fn key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// Sets `entry` in `env`: replaces the entry with the same key in place, or
/// appends it (docker's ReplaceOrAppendEnvValues).
pub fn replace_or_append(env: &mut Vec<String>, entry: &str) {
    let k = key(entry);
    match env.iter_mut().find(|e| key(e) == k) {
        Some(e) => *e = entry.to_string(),
        None => env.push(entry.to_string()),
    }
}

/// Whether `env` sets `k`.
pub fn has(env: &[String], k: &str) -> bool {
    env.iter().any(|e| key(e) == k && e.contains('='))
}

/// Checks one `KEY=VALUE` entry the CLI resolved.
pub fn validate_entry(entry: &str) -> Result<()> {
    let bad = |reason: &str| Error::InvalidOption {
        option: "--env",
        value: entry.to_string(),
        reason: reason.into(),
    };
    let Some((k, _)) = entry.split_once('=') else {
        return Err(bad("expected KEY=VALUE"));
    };
    if k.is_empty() {
        return Err(bad("empty variable name"));
    }
    if entry.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    Ok(())
}

/// Resolves one `-e` argument: `KEY=VALUE` as is; `KEY` from `lookup` (the
/// host environment), dropped when the host does not set it, like docker.
pub fn resolve_arg(arg: &str, lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    if arg.contains('=') {
        Some(arg.to_string())
    } else {
        lookup(arg).map(|v| format!("{arg}={v}"))
    }
}

/// Parses env-file content (docker format): one `KEY=VALUE` per line, `#`
/// comments and blank lines skipped, leading whitespace of the line
/// trimmed, values taken literally (no quote removal); a bare `KEY` is taken
/// from `lookup`, and dropped when unset.
pub fn parse_env_file_content(
    content: &str,
    origin: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>> {
    let content = content.strip_prefix('\u{feff}').unwrap_or(content);
    let mut out = Vec::new();
    for (n, raw) in content.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, value) = match line.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (line.trim_end(), None),
        };
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(Error::InvalidFile {
                what: "env file",
                path: origin.to_path_buf(),
                reason: format!(
                    "line {}: variable `{k}` is empty or contains whitespace",
                    n + 1
                ),
            });
        }
        match value {
            Some(v) => out.push(format!("{k}={v}")),
            None => out.extend(lookup(k).map(|v| format!("{k}={v}"))),
        }
    }
    Ok(out)
}

/// Reads and parses an `--env-file`, taking bare keys from the host.
pub fn parse_env_file(path: &Path) -> Result<Vec<String>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("open env file", path, e))?;
    let mut buf = Vec::new();
    file.take(MAX_ENV_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read env file", path, e))?;
    if buf.len() as u64 > MAX_ENV_FILE {
        return Err(Error::InvalidFile {
            what: "env file",
            path: path.to_path_buf(),
            reason: format!("larger than {MAX_ENV_FILE} bytes"),
        });
    }
    let content = String::from_utf8(buf).map_err(|_| Error::InvalidFile {
        what: "env file",
        path: path.to_path_buf(),
        reason: "not valid UTF-8".into(),
    })?;
    parse_env_file_content(&content, path, |k| std::env::var(k).ok())
}

/// The container environment, in docker's order (see the module doc).
pub fn merge(
    image_env: &[String],
    user_env: &[String],
    hostname: &str,
    tty: bool,
    home: Option<&str>,
) -> Vec<String> {
    let mut env = vec![
        format!("PATH={DEFAULT_PATH}"),
        format!("HOSTNAME={hostname}"),
    ];
    if tty {
        env.push("TERM=xterm".into());
    }
    for e in image_env.iter().chain(user_env) {
        // A bare KEY in an image config carries no value; skip it.
        if e.contains('=') {
            replace_or_append(&mut env, e);
        }
    }
    if !has(&env, "HOME") {
        env.push(format!("HOME={}", home.unwrap_or("/")));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn merge_orders_and_overrides_like_docker() {
        let env = merge(
            &v(&["PATH=/image/bin", "LANG=C", "A=1"]),
            &v(&["A=2", "B=3", "LANG=C.UTF-8"]),
            "abc123",
            false,
            Some("/root"),
        );
        assert_eq!(
            env,
            v(&[
                "PATH=/image/bin",
                "HOSTNAME=abc123",
                "LANG=C.UTF-8",
                "A=2",
                "B=3",
                "HOME=/root"
            ])
        );
    }

    #[test]
    fn path_default_term_and_home_fallback() {
        let env = merge(&[], &[], "h", true, None);
        assert_eq!(
            env,
            v(&[
                &format!("PATH={DEFAULT_PATH}"),
                "HOSTNAME=h",
                "TERM=xterm",
                "HOME=/"
            ])
        );
    }

    #[test]
    fn explicit_home_and_term_win() {
        let env = merge(
            &v(&["HOME=/img"]),
            &v(&["TERM=dumb"]),
            "h",
            true,
            Some("/root"),
        );
        assert!(env.contains(&"HOME=/img".to_string()));
        assert!(env.contains(&"TERM=dumb".to_string()));
        assert_eq!(env.iter().filter(|e| key(e) == "HOME").count(), 1);
        let env = merge(&[], &v(&["HOME=/u"]), "h", false, Some("/root"));
        assert_eq!(env.last().unwrap(), "HOME=/u");
    }

    #[test]
    fn env_args_from_host() {
        let host = |k: &str| (k == "SET").then(|| "x=y".to_string());
        assert_eq!(resolve_arg("A=1", host), Some("A=1".into()));
        assert_eq!(resolve_arg("SET", host), Some("SET=x=y".into()));
        assert_eq!(resolve_arg("UNSET", host), None);
        assert_eq!(resolve_arg("EMPTY=", host), Some("EMPTY=".into()));
    }

    #[test]
    fn env_file_format() {
        let host = |k: &str| (k == "FROM_HOST").then(|| "h".to_string());
        let got = parse_env_file_content(
            "\u{feff}# comment\n\nA=1\n  B=\"quoted\" \nFROM_HOST\nNOT_SET\nC=a=b\r\n",
            Path::new("x.env"),
            host,
        )
        .unwrap();
        assert_eq!(got, v(&["A=1", "B=\"quoted\" ", "FROM_HOST=h", "C=a=b"]));
        let e = parse_env_file_content("BAD KEY=1\n", Path::new("x.env"), host)
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.env") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn env_file_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.env");
        std::fs::write(&p, "X=1\nY=2\n").unwrap();
        assert_eq!(parse_env_file(&p).unwrap(), v(&["X=1", "Y=2"]));
        let e = parse_env_file(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("open env file") && e.contains("nope"), "{e}");
        std::fs::write(&p, [0xff, 0xfe, b'\n']).unwrap();
        assert!(parse_env_file(&p).is_err());
    }

    #[test]
    fn validate_entries() {
        assert!(validate_entry("A=1").is_ok());
        assert!(validate_entry("A=").is_ok());
        assert!(validate_entry("A").is_err());
        assert!(validate_entry("=1").is_err());
        assert!(validate_entry("A=\0").is_err());
    }
}
