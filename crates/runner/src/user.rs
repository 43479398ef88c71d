//! Resolving `USER[:GROUP]` (from `-u` or the image's `User`) to numeric ids
//! through the image's own `/etc/passwd` and `/etc/group`, with docker/runc
//! semantics:
//!
//! - `name` or `uid`: the passwd entry matching by name or by uid gives uid,
//!   primary gid and home; a number without an entry is taken as is (gid 0,
//!   home `/`); a name without an entry is an error.
//! - `user:group`: the group is matched by name or gid in /etc/group; a number
//!   without an entry is taken as is; a name without one is an error.
//! - Supplementary groups are the groups listing the user by name, only when
//!   no group was given explicitly (runc does the same).
//!
//! Parsing is pure; [`resolve_in_rootfs`] reads the two files beneath the
//! rootfs with `openat2(RESOLVE_IN_ROOT)`, so a symlink in the image cannot
//! make us read a host file.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// Larger passwd/group files than this are refused rather than read whole.
const MAX_DB_FILE: u64 = 4 << 20;

/// runc refuses ids outside 0..=i32::MAX; so do we.
const MAX_ID: u32 = i32::MAX as u32;

/// One parsed line of a passwd file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    pub shell: String,
}

/// One parsed line of a group file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// The ids and home directory the container process runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, in group-file order, without duplicates.
    pub additional_gids: Vec<u32>,
    /// Home from the passwd entry, if the user has one.
    pub home: Option<String>,
    /// Name from the passwd entry, if the user has one.
    pub name: Option<String>,
}

/// The `:`-separated records of a passwd or group file with at least
/// `min_fields` fields; blank lines and comments skipped.
fn records(content: &str, min_fields: usize) -> impl Iterator<Item = Vec<&str>> {
    content.lines().filter_map(move |line| {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= min_fields).then_some(f)
    })
}

/// Parses passwd content. Malformed lines and comments are skipped, as
/// libc and runc do, since images often carry odd entries.
pub fn parse_passwd(content: &str) -> Vec<PasswdEntry> {
    records(content, 4)
        .filter_map(|f| {
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f.get(5).unwrap_or(&"").to_string(),
                shell: f.get(6).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// Parses group content, skipping malformed lines and comments.
pub fn parse_group(content: &str) -> Vec<GroupEntry> {
    records(content, 3)
        .filter_map(|f| {
            let members = f
                .get(3)
                .map(|m| {
                    m.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            Some(GroupEntry {
                name: f[0].to_string(),
                gid: f[2].parse().ok()?,
                members,
            })
        })
        .collect()
}

fn parse_id(kind: &'static str, s: &str) -> Result<Option<u32>> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    match s.parse::<u64>() {
        Ok(n) if n <= u64::from(MAX_ID) => Ok(Some(n as u32)),
        _ => Err(Error::InvalidOption {
            option: "--user",
            value: s.to_string(),
            reason: format!("{kind} ids must be in range 0-{MAX_ID}"),
        }),
    }
}

/// Resolves a `USER[:GROUP]` spec against passwd/group content (`None` when
/// the image lacks the file). An empty user means root, like docker.
pub fn resolve(spec: &str, passwd: Option<&str>, group: Option<&str>) -> Result<ResolvedUser> {
    let (user_arg, group_arg) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = passwd.map(parse_passwd).unwrap_or_default();
    let user_arg = if user_arg.is_empty() { "0" } else { user_arg };
    let user_num = parse_id("user", user_arg)?;

    let entry = passwd
        .iter()
        .find(|e| e.name == user_arg || Some(e.uid) == user_num);
    let mut resolved = match (entry, user_num) {
        (Some(e), _) => ResolvedUser {
            uid: e.uid,
            gid: e.gid,
            additional_gids: Vec::new(),
            home: Some(e.home.clone()).filter(|h| !h.is_empty()),
            name: Some(e.name.clone()),
        },
        (None, Some(uid)) => ResolvedUser {
            uid,
            gid: 0,
            additional_gids: Vec::new(),
            home: None,
            name: None,
        },
        (None, None) => {
            return Err(Error::UserNotFound {
                kind: "user",
                name: user_arg.to_string(),
                reason: "no matching entries in passwd file".into(),
            })
        }
    };

    let groups = group.map(parse_group).unwrap_or_default();
    match group_arg {
        Some(g) if !g.is_empty() => {
            let group_num = parse_id("group", g)?;
            let found = groups
                .iter()
                .find(|e| e.name == g || Some(e.gid) == group_num);
            resolved.gid = match (found, group_num) {
                (Some(e), _) => e.gid,
                (None, Some(gid)) => gid,
                (None, None) => {
                    return Err(Error::UserNotFound {
                        kind: "group",
                        name: g.to_string(),
                        reason: "no matching entries in group file".into(),
                    })
                }
            };
        }
        _ => {
            if let Some(name) = &resolved.name {
                for g in groups
                    .iter()
                    .filter(|g| g.members.iter().any(|m| m == name))
                {
                    if !resolved.additional_gids.contains(&g.gid) {
                        resolved.additional_gids.push(g.gid);
                    }
                }
            }
        }
    }
    Ok(resolved)
}

/// Resolves `spec` with the image's `/etc/passwd` and `/etc/group`.
/// Missing files are fine (numeric ids still work).
pub fn resolve_in_rootfs(spec: &str, rootfs: &Path) -> Result<ResolvedUser> {
    let passwd = read_in_root(rootfs, "etc/passwd")?;
    let group = read_in_root(rootfs, "etc/group")?;
    resolve(spec, passwd.as_deref(), group.as_deref())
}

/// Reads a small text file at `rel` beneath `root`, resolving every symlink
/// as if `root` were `/` (RESOLVE_IN_ROOT). `Ok(None)` when it does not exist.
pub fn read_in_root(root: &Path, rel: &str) -> Result<Option<String>> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};

    let full = root.join(rel);
    let dir = match rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return Err(Error::io("open rootfs", root, e.into())),
    };
    let fd = match openat2(
        &dir,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(Error::io("open", &full, e.into())),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| Error::io("stat", &full, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidFile {
            what: "image file",
            path: full,
            reason: "not a regular file".into(),
        });
    }
    let mut buf = Vec::new();
    file.take(MAX_DB_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read", &full, e))?;
    if buf.len() as u64 > MAX_DB_FILE {
        return Err(Error::InvalidFile {
            what: "image file",
            path: full,
            reason: format!("larger than {MAX_DB_FILE} bytes"),
        });
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "\
root:x:0:0:root:/root:/bin/sh
# a comment
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
broken line
alice:x:1000:1000:Alice:/home/alice:/bin/bash
bob:x:1001:100::/home/bob:/bin/sh
nohome:x:1002:1002:::
";
    const GROUP: &str = "\
root:x:0:
wheel:x:10:alice,bob
users:x:100:
alice:x:1000:
audio:x:29:alice
staff:x:50:bob
";

    fn res(spec: &str) -> Result<ResolvedUser> {
        resolve(spec, Some(PASSWD), Some(GROUP))
    }

    #[test]
    fn parses_passwd_and_skips_garbage() {
        let p = parse_passwd(PASSWD);
        assert_eq!(p.len(), 5);
        assert_eq!(p[2].name, "alice");
        assert_eq!(p[2].uid, 1000);
        assert_eq!(p[2].home, "/home/alice");
        assert_eq!(p[2].shell, "/bin/bash");
    }

    #[test]
    fn parses_group_members() {
        let g = parse_group(GROUP);
        assert_eq!(g[1].members, vec!["alice", "bob"]);
        assert!(g[0].members.is_empty());
    }

    #[test]
    fn empty_user_is_root_with_home() {
        let r = res("").unwrap();
        assert_eq!((r.uid, r.gid), (0, 0));
        assert_eq!(r.home.as_deref(), Some("/root"));
    }

    #[test]
    fn name_gives_primary_gid_home_and_supplementary_groups() {
        let r = res("alice").unwrap();
        assert_eq!((r.uid, r.gid), (1000, 1000));
        assert_eq!(r.home.as_deref(), Some("/home/alice"));
        assert_eq!(r.additional_gids, vec![10, 29]);
    }

    #[test]
    fn numeric_uid_matches_entry() {
        let r = res("1001").unwrap();
        assert_eq!((r.uid, r.gid), (1001, 100));
        assert_eq!(r.name.as_deref(), Some("bob"));
        assert_eq!(r.additional_gids, vec![10, 50]);
    }

    #[test]
    fn numeric_uid_without_entry_or_files() {
        let r = res("4242").unwrap();
        assert_eq!((r.uid, r.gid, r.home.clone()), (4242, 0, None));
        let r = resolve("77:88", None, None).unwrap();
        assert_eq!((r.uid, r.gid), (77, 88));
        assert!(r.additional_gids.is_empty());
    }

    #[test]
    fn name_and_group_name() {
        let r = res("alice:staff").unwrap();
        assert_eq!((r.uid, r.gid), (1000, 50));
        // An explicit group means no supplementary groups (runc semantics).
        assert!(r.additional_gids.is_empty());
        let r = res("bob:1234").unwrap();
        assert_eq!((r.uid, r.gid), (1001, 1234));
    }

    #[test]
    fn unknown_user_and_group_are_errors() {
        let e = res("xyz").unwrap_err().to_string();
        assert_eq!(
            e,
            "unable to find user xyz: no matching entries in passwd file"
        );
        let e = resolve("xyz", None, None).unwrap_err().to_string();
        assert!(e.contains("unable to find user xyz"), "{e}");
        let e = res("alice:nogroup").unwrap_err().to_string();
        assert_eq!(
            e,
            "unable to find group nogroup: no matching entries in group file"
        );
    }

    #[test]
    fn out_of_range_id_is_an_error() {
        let e = res("4294967296").unwrap_err().to_string();
        assert!(e.contains("range"), "{e}");
        assert!(res("0:2147483648").is_err());
    }

    #[test]
    fn entry_without_home_gives_none() {
        let r = res("nohome").unwrap();
        assert_eq!(r.home, None);
    }

    #[test]
    fn reads_files_inside_root_and_not_through_escaping_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/passwd"), PASSWD).unwrap();
        // An absolute symlink must resolve inside the root, not on the host.
        std::fs::write(outside.path().join("group"), "evil:x:666:alice\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("group"), root.path().join("etc/group"))
            .unwrap();
        let r = resolve_in_rootfs("alice", root.path()).unwrap();
        assert_eq!(r.uid, 1000);
        assert!(r.additional_gids.is_empty(), "read the host file: {r:?}");
        assert_eq!(read_in_root(root.path(), "etc/group").unwrap(), None);
        assert_eq!(read_in_root(root.path(), "etc/shadow").unwrap(), None);
    }

    #[test]
    fn relative_symlink_is_clamped_at_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("lib")).unwrap();
        std::fs::write(root.path().join("lib/passwd"), "carol:x:5:6::/c:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("../../../../lib/passwd", root.path().join("etc/passwd"))
            .unwrap();
        let r = resolve_in_rootfs("carol", root.path()).unwrap();
        assert_eq!((r.uid, r.gid, r.home.as_deref()), (5, 6, Some("/c")));
    }
}
