//! The image record: what the store knows about one image, as stored in
//! `images/<id>.json` (names and last use are filled in when read).

use std::path::PathBuf;
use std::time::SystemTime;

use crate::digest::Digest;

/// One stored image.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    /// Image ID: digest of the config blob.
    pub id: Digest,
    /// Names pointing at this image (from `refs/`, filled in when read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    /// Regular files in the rootfs.
    #[serde(default)]
    pub files: u64,
    /// `created` from the config, if any.
    pub created: Option<String>,
    #[serde(with = "unix_time")]
    pub loaded: SystemTime,
    /// Last load or run (mtime of `images/<id>.used`).
    #[serde(with = "unix_time", default = "epoch")]
    pub last_used: SystemTime,
}

pub(crate) fn epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH
}

/// Times as float seconds since the epoch in records and JSON output.
mod unix_time {
    use std::time::{Duration, SystemTime};

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        s.serialize_f64(secs)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let secs: f64 = serde::Deserialize::deserialize(d)?;
        Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0)))
    }
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
