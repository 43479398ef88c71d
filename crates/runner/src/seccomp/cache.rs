//! On-disk cache of compiled seccomp programs, so a start loads a few KiB
//! instead of recompiling.
//!
//! ```text
//! CACHE_DIR/<sha256 of (compiler version, profile JSON)>.bpf
//!     "RBXBPF1\n" | sha256(program bytes) | program bytes (8 per insn)
//! ```
//!
//! Files are written to a unique temporary name and renamed into place, so
//! readers never see a partial file; the checksum catches a file torn by a
//! crash (the disk may have no journal). Racing writers write identical
//! bytes. A bad or unreadable entry is recompiled and replaced. A cache that
//! cannot be written is not an error: the program is returned and the next
//! start compiles again.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use oci_spec::runtime::LinuxSeccomp;
use sha2::{Digest, Sha256};

use super::{compile, BpfProgram};
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"RBXBPF1\n";
/// Bump when the compiler's output changes for the same profile.
const COMPILER_VERSION: &str = "runbox-seccomp-bpf v1 x86_64";
const MAX_FILE: u64 = (MAGIC.len() + 32 + super::bpf::MAX_INSNS * 8) as u64;

/// The cache key of a profile.
pub fn cache_key(profile: &LinuxSeccomp) -> Result<String> {
    let json = serde_json::to_vec(profile)
        .map_err(|e| Error::Seccomp(format!("cannot serialize profile: {e}")))?;
    let mut h = Sha256::new();
    h.update(COMPILER_VERSION.as_bytes());
    h.update([0]);
    h.update(&json);
    Ok(hex::encode(h.finalize()))
}

/// The compiled program for `profile`, from `cache_dir` when present and
/// intact, else compiled and stored there.
pub fn cached_program(profile: &LinuxSeccomp, cache_dir: &Path) -> Result<BpfProgram> {
    let key = cache_key(profile)?;
    let path = cache_dir.join(format!("{key}.bpf"));
    if let Some(prog) = read_entry(&path) {
        return Ok(prog);
    }
    let prog = compile(profile)?;
    // Best effort, see the module doc.
    let _ = write_entry(cache_dir, &key, &prog);
    Ok(prog)
}

fn read_entry(path: &Path) -> Option<BpfProgram> {
    let file = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut buf).ok()?;
    if buf.len() as u64 > MAX_FILE || buf.len() < MAGIC.len() + 32 || &buf[..8] != MAGIC {
        return None;
    }
    let (sum, body) = buf[8..].split_at(32);
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    BpfProgram::from_bytes(body).ok()
}

fn write_entry(cache_dir: &Path, key: &str, prog: &BpfProgram) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(cache_dir)?;
    let body = prog.to_bytes();
    let tmp = cache_dir.join(format!(
        ".{key}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&Sha256::digest(&body))?;
        f.write_all(&body)?;
        std::fs::rename(&tmp, cache_dir.join(format!("{key}.bpf")))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
