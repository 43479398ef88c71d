//! Pure decisions about entry names: normalizing a tar path into a safe
//! root-relative path, and classifying it as a plain entry, a whiteout or an
//! opaque-directory marker (OCI image-spec `layer.md`). No syscalls here; the
//! file system side lives in `fsops`.

/// Longest normalized path accepted (Linux PATH_MAX minus the NUL).
pub(crate) const MAX_PATH: usize = 4095;

const WHITEOUT_PREFIX: &[u8] = b".wh.";
const OPAQUE_MARKER: &[u8] = b".wh..wh..opq";
/// aufs metadata names (`.wh..wh.plnk`, `.wh..wh.aufs`): never content.
const AUFS_META_PREFIX: &[u8] = b".wh..wh.";

/// What an entry name means once normalized.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Class<'a> {
    /// An ordinary entry at this root-relative path ("" is the root itself).
    Plain,
    /// `.wh.NAME`: remove `dir/NAME` from lower layers.
    Whiteout { dir: &'a [u8], name: &'a [u8] },
    /// `.wh..wh..opq`: hide all lower-layer children of `dir`.
    Opaque { dir: &'a [u8] },
    /// aufs bookkeeping (`.wh..wh.plnk/...`): skipped, never written.
    AufsMeta,
}

/// Turns a tar entry name into a root-relative path without `.`/`..`/empty
/// components and without a leading `/` (absolute names are relative to the
/// root). `..` that would climb above the root is refused; one that stays
/// inside is resolved lexically, so the result never names a path outside.
pub(crate) fn normalize(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.contains(&0) {
        return Err("name contains a NUL byte");
    }
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    for comp in raw.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                if out.is_empty() {
                    return Err("path escapes the root with `..`");
                }
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(comp);
            }
        }
    }
    if out.len() > MAX_PATH {
        return Err("path is longer than 4095 bytes");
    }
    Ok(out)
}

/// Splits a normalized path into (parent, final component).
pub(crate) fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

/// Classifies a normalized path by its final component. The typeflag and
/// link name of the entry do not matter: docker emits whiteouts as regular
/// files, sometimes with a stray link name.
pub(crate) fn classify(path: &[u8]) -> Result<Class<'_>, &'static str> {
    if in_aufs_meta(path) {
        return Ok(Class::AufsMeta);
    }
    let (dir, base) = split_parent(path);
    if !base.starts_with(WHITEOUT_PREFIX) {
        return Ok(Class::Plain);
    }
    if base == OPAQUE_MARKER {
        return Ok(Class::Opaque { dir });
    }
    let name = &base[WHITEOUT_PREFIX.len()..];
    match name {
        b"" => Err("whiteout names no file"),
        b"." | b".." => Err("whiteout names `.` or `..`"),
        _ => Ok(Class::Whiteout { dir, name }),
    }
}

/// True when a component is aufs bookkeeping (skipped whatever lies below).
fn in_aufs_meta(path: &[u8]) -> bool {
    path.split(|&b| b == b'/')
        .any(|c| c.starts_with(AUFS_META_PREFIX) && c != OPAQUE_MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> Result<String, &'static str> {
        normalize(s.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn normalize_strips_dots_slashes_and_leading_root() {
        assert_eq!(norm("./usr//bin/./ls").unwrap(), "usr/bin/ls");
        assert_eq!(norm("/etc/x").unwrap(), "etc/x");
        assert_eq!(norm("./").unwrap(), "");
        assert_eq!(norm("/").unwrap(), "");
        assert_eq!(norm("a/b/").unwrap(), "a/b");
    }

    #[test]
    fn normalize_resolves_inner_dotdot_and_refuses_escapes() {
        assert_eq!(norm("a/b/../c").unwrap(), "a/c");
        assert_eq!(norm("a/..").unwrap(), "");
        assert!(norm("../escape").is_err());
        assert!(norm("a/../../escape").is_err());
        assert!(norm("/../etc").is_err());
        assert!(norm("./..").is_err());
    }

    #[test]
    fn normalize_refuses_nul_and_overlong() {
        assert!(normalize(b"a\0b").is_err());
        let long = "a/".repeat(3000);
        assert!(norm(&long).is_err());
    }

    #[test]
    fn split_parent_of_nested_and_top_level() {
        assert_eq!(split_parent(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split_parent(b"c"), (&b""[..], &b"c"[..]));
    }

    #[test]
    fn classify_plain_whiteout_opaque() {
        assert_eq!(classify(b"usr/bin/ls").unwrap(), Class::Plain);
        assert_eq!(classify(b"usr/.whatever").unwrap(), Class::Plain);
        assert_eq!(
            classify(b"usr/.wh.ls").unwrap(),
            Class::Whiteout {
                dir: b"usr",
                name: b"ls"
            }
        );
        assert_eq!(
            classify(b".wh.top").unwrap(),
            Class::Whiteout {
                dir: b"",
                name: b"top"
            }
        );
        assert_eq!(
            classify(b"etc/.wh..wh..opq").unwrap(),
            Class::Opaque { dir: b"etc" }
        );
        assert_eq!(
            classify(b".wh..wh..opq").unwrap(),
            Class::Opaque { dir: b"" }
        );
    }

    #[test]
    fn classify_aufs_meta_and_bad_whiteouts() {
        assert_eq!(classify(b".wh..wh.plnk").unwrap(), Class::AufsMeta);
        assert_eq!(classify(b".wh..wh.plnk/123.456").unwrap(), Class::AufsMeta);
        assert!(in_aufs_meta(b".wh..wh.aufs/x"));
        assert!(!in_aufs_meta(b"a/.wh..wh..opq"));
        assert!(classify(b"a/.wh.").is_err());
        assert!(classify(b"a/.wh...").is_err());
    }
}
