//! The content of the container's `/etc/hostname`, `/etc/hosts` and
//! `/etc/resolv.conf`. The spawn side writes them into the container's state
//! dir and bind-mounts them (docker does the same from its container dir).
//!
//! - hostname: the hostname and a newline.
//! - hosts: with host networking, the host's /etc/hosts (as docker copies
//!   it); otherwise docker's loopback entries. Either way the container's
//!   hostname resolves (`127.0.1.1`) if the file does not name it already.
//! - resolv.conf: a copy of the host's (for `--network none` too: harmless,
//!   and tools that read it do not fail).
//!
//! A destination the user mounts over with `-v`/`--tmpfs` is skipped.

use std::io::Read;

use super::config::{Network, RunConfig};

/// Host files larger than this are not copied (an empty file is used).
const MAX_HOST_FILE: u64 = 1 << 20;

const LOOPBACK_HOSTS: &str = "\
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
fe00::0\tip6-localnet
ff00::0\tip6-mcastprefix
ff02::1\tip6-allnodes
ff02::2\tip6-allrouters
";

fn read_host_file(path: &str) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_HOST_FILE + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > MAX_HOST_FILE {
        return None;
    }
    String::from_utf8(buf).ok()
}

/// `(container path, content)` of the three files, reading the host's
/// /etc/hosts and /etc/resolv.conf.
pub fn etc_files(cfg: &RunConfig, hostname: &str) -> Vec<(String, String)> {
    etc_files_from(
        cfg,
        hostname,
        read_host_file("/etc/hosts").as_deref(),
        read_host_file("/etc/resolv.conf").as_deref(),
    )
}

fn names_host(hosts: &str, hostname: &str) -> bool {
    hosts.lines().any(|l| {
        let l = l.split('#').next().unwrap_or("");
        l.split_whitespace().skip(1).any(|n| n == hostname)
    })
}

/// [`etc_files`] with the host's files given (pure).
pub fn etc_files_from(
    cfg: &RunConfig,
    hostname: &str,
    host_hosts: Option<&str>,
    host_resolv: Option<&str>,
) -> Vec<(String, String)> {
    let mut hosts = match (cfg.network, host_hosts) {
        (Network::Host, Some(h)) => h.to_string(),
        _ => LOOPBACK_HOSTS.to_string(),
    };
    if !names_host(&hosts, hostname) {
        if !hosts.is_empty() && !hosts.ends_with('\n') {
            hosts.push('\n');
        }
        hosts.push_str(&format!("127.0.1.1\t{hostname}\n"));
    }
    let files = [
        ("/etc/hostname", format!("{hostname}\n")),
        ("/etc/hosts", hosts),
        ("/etc/resolv.conf", host_resolv.unwrap_or("").to_string()),
    ];
    let user_mounted = |dst: &str| {
        cfg.volumes.iter().any(|v| v.dst == dst) || cfg.tmpfs.iter().any(|t| t.dst == dst)
    };
    files
        .into_iter()
        .filter(|(dst, _)| !user_mounted(dst))
        .map(|(dst, content)| (dst.to_string(), content))
        .collect()
}
