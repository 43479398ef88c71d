//! The content-addressed image store. (Being written; API below is the contract.)

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::digest::Digest;
use crate::format::{Platform, Selector};
use crate::Result;

/// One stored image.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    /// Image ID: digest of the config blob.
    pub id: Digest,
    pub names: Vec<String>,
    /// Chain ID of the layers: the key of the rootfs directory.
    pub chain_id: Digest,
    /// The flattened plain directory.
    pub rootfs: PathBuf,
    /// The image config JSON (OCI/docker image config).
    pub config: serde_json::Value,
    /// diff_ids, bottom first.
    pub layers: Vec<Digest>,
    /// Bytes of file content in the rootfs.
    pub size: u64,
    /// `created` from the config, if any.
    pub created: Option<String>,
    pub loaded: SystemTime,
    pub last_used: SystemTime,
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("invalid digest `{s}`")))
    }
}

pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: &Path) -> Result<Store> {
        Ok(Store { root: root.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory for per-container writable layers (`upper`/`work`), on the
    /// store's filesystem so overlayfs can use it.
    pub fn containers_dir(&self) -> PathBuf {
        self.root.join("containers")
    }

    /// Looks up a stored image by name[:tag], full ID, `sha256:` ID or unique ID prefix.
    pub fn lookup(&self, reference: &str) -> Result<ImageRecord> {
        let _ = reference;
        todo!("store work")
    }

    /// For `runbox run IMAGE`: if `arg` names an existing file or directory, load it
    /// (cheap when already stored) and return its record; otherwise look it up.
    pub fn resolve_or_load(&self, arg: &str, platform: &Platform) -> Result<ImageRecord> {
        let _ = (arg, platform, Selector::Only);
        todo!("store work")
    }

    /// Marks the image used now (for `prune --until`).
    pub fn touch(&self, id: &Digest) -> Result<()> {
        let _ = id;
        todo!("store work")
    }
}
