//! OCI image layouts (image-spec `image-layout.md`), as a directory or a tar:
//! `oci-layout`, `index.json` (the root, unverifiable), `blobs/sha256/<hex>`.
//! `index.json` lists manifests or nested indexes (multi-platform images),
//! which are walked to their image manifests; every blob read is checked
//! against its descriptor's size and digest. Image names come from the
//! `org.opencontainers.image.ref.name` and `io.containerd.image.name`
//! annotations of the index entries and are inherited by nested manifests.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::archive::Container;
use super::select::{Candidate, Target};
use super::{parse_json, ImageSource, LayerSource, Platform, MAX_IMAGES, MAX_JSON, MAX_LAYERS};
use crate::digest::Digest;
use crate::error::Error;
use crate::Result;

/// Nested indexes deeper than this are refused (a loop cannot be built with
/// content addresses, but a very deep chain can).
const MAX_DEPTH: usize = 8;
/// Bound on blobs read while listing (nested indexes, and the manifests and
/// configs read for platforms the index does not state), against fan-out
/// bombs. Platform lookups beyond it leave the platform unknown.
const MAX_INDEX_READS: usize = 256;

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CONTAINERD_NAME: &str = "io.containerd.image.name";

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    pub size: i64,
    #[serde(default)]
    pub platform: Option<PlatformJson>,
    #[serde(default)]
    pub annotations: Option<HashMap<String, String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PlatformJson {
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl PlatformJson {
    pub fn to_platform(&self) -> Platform {
        Platform {
            os: self.os.clone(),
            architecture: self.architecture.clone(),
            variant: self.variant.clone().filter(|v| !v.is_empty()),
        }
    }
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    layers: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// The parts of an image config the loader needs.
#[derive(Deserialize)]
pub(crate) struct ConfigJson {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub variant: Option<String>,
    pub rootfs: Option<RootFs>,
}

#[derive(Deserialize)]
pub(crate) struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

impl ConfigJson {
    pub fn platform(&self) -> Option<Platform> {
        (!self.os.is_empty() && !self.architecture.is_empty()).then(|| Platform {
            os: self.os.clone(),
            architecture: self.architecture.clone(),
            variant: self.variant.clone().filter(|v| !v.is_empty()),
        })
    }

    /// The diff_ids, validated, exactly one per layer.
    pub fn diff_ids(&self, layers: usize, file: &Path) -> Result<Vec<Digest>> {
        let bad = |reason: String| Error::Format {
            file: file.to_path_buf(),
            reason,
        };
        let ids = &self
            .rootfs
            .as_ref()
            .ok_or_else(|| bad("image config has no `rootfs`".into()))?
            .diff_ids;
        if ids.len() != layers {
            return Err(bad(format!(
                "image config lists {} diff_ids but the manifest has {layers} layers",
                ids.len()
            )));
        }
        ids.iter()
            .map(|d| {
                Digest::parse_checked(d)
                    .map_err(|e| bad(format!("image config rootfs.diff_ids: {e}")))
            })
            .collect()
    }
}

fn is_index_type(media_type: &str) -> bool {
    media_type == "application/vnd.oci.image.index.v1+json"
        || media_type == "application/vnd.docker.distribution.manifest.list.v2+json"
}

fn is_manifest_type(media_type: &str) -> bool {
    media_type == "application/vnd.oci.image.manifest.v1+json"
        || media_type == "application/vnd.docker.distribution.manifest.v2+json"
}

/// The path of a blob in the layout, with the digest validated.
pub(crate) fn blob_path(desc: &Descriptor, file: &Path) -> Result<(String, Digest)> {
    let digest = Digest::parse_checked(&desc.digest).map_err(|e| Error::Format {
        file: file.to_path_buf(),
        reason: e,
    })?;
    Ok((format!("blobs/sha256/{}", digest.hex()), digest))
}

/// Read a JSON blob named by a descriptor, checking size and digest.
pub(crate) fn read_blob(
    c: &Container,
    desc: &Descriptor,
    what: &str,
    file: &Path,
) -> Result<Vec<u8>> {
    let bad = |reason: String| Error::Format {
        file: file.to_path_buf(),
        reason,
    };
    let (path, digest) = blob_path(desc, file)?;
    if desc.size < 0 {
        return Err(bad(format!(
            "{what} {digest} has a negative size ({})",
            desc.size
        )));
    }
    if desc.size as u64 > MAX_JSON {
        return Err(bad(format!(
            "{what} {digest} is {} bytes, more than the limit of {MAX_JSON} bytes",
            desc.size
        )));
    }
    let actual = c
        .size(&path)
        .map_err(|e| bad(format!("{what} {digest} is missing: {e}")))?;
    if actual != desc.size as u64 {
        return Err(bad(format!(
            "{what} {digest}: blob has {actual} bytes but its descriptor says {}",
            desc.size
        )));
    }
    let data = c.read_capped(&path, MAX_JSON).map_err(bad)?;
    let found = Digest::of(&data);
    if found != digest {
        return Err(Error::DigestMismatch {
            file: file.to_path_buf(),
            what: format!("{what} `{path}`"),
            expected: digest.to_string(),
            found: found.to_string(),
        });
    }
    Ok(data)
}

fn names_of(desc: &Descriptor) -> Vec<String> {
    let Some(a) = &desc.annotations else {
        return Vec::new();
    };
    [CONTAINERD_NAME, REF_NAME]
        .iter()
        .filter_map(|k| a.get(*k).filter(|v| !v.is_empty()).cloned())
        .collect()
}

/// Attestations and other non-runnable manifests in buildx indexes.
fn is_runnable(desc: &Descriptor) -> bool {
    let attestation = desc
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("vnd.docker.reference.type"));
    let unknown = desc
        .platform
        .as_ref()
        .is_some_and(|p| p.os == "unknown" || p.architecture == "unknown");
    !attestation && !unknown
}

/// Walk `index.json` to its image manifests; then read the platform from
/// the config of those `want` accepts whose descriptor does not state it,
/// once per manifest digest and within the same read budget.
pub(crate) fn candidates(
    c: &Container,
    file: &Path,
    want: &dyn Fn(usize, &[String]) -> bool,
) -> Result<Vec<Candidate>> {
    let bad = |reason: String| Error::Format {
        file: file.to_path_buf(),
        reason,
    };
    let raw = c.read_capped("index.json", MAX_JSON).map_err(bad)?;
    let index: Index = parse_json(&raw, "index.json", file)?;
    let manifests = index
        .manifests
        .ok_or_else(|| bad("index.json has no `manifests` list".into()))?;
    if manifests.len() > MAX_IMAGES {
        return Err(bad(format!(
            "index.json lists {} manifests, more than the limit of {MAX_IMAGES}",
            manifests.len()
        )));
    }
    let mut out = Vec::new();
    let mut reads = 0;
    for (top, desc) in manifests.into_iter().enumerate() {
        let names = names_of(&desc);
        walk(c, file, desc, top, &names, 0, &mut reads, &mut out)?;
    }
    let mut platforms: HashMap<String, Option<Platform>> = HashMap::new();
    for cand in &mut out {
        let Target::Oci(desc) = &cand.target else {
            continue;
        };
        if cand.platform.is_some() || !want(cand.top, &cand.names) {
            continue;
        }
        if let Some(p) = platforms.get(&desc.digest) {
            cand.platform = p.clone();
            continue;
        }
        // A manifest and its config.
        if reads + 2 > MAX_INDEX_READS {
            continue;
        }
        reads += 2;
        let p = platform_from_config(c, file, desc);
        platforms.insert(desc.digest.clone(), p.clone());
        cand.platform = p;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn walk(
    c: &Container,
    file: &Path,
    desc: Descriptor,
    top: usize,
    names: &[String],
    depth: usize,
    reads: &mut usize,
    out: &mut Vec<Candidate>,
) -> Result<()> {
    let bad = |reason: String| Error::Format {
        file: file.to_path_buf(),
        reason,
    };
    if !is_runnable(&desc) {
        return Ok(());
    }
    let leaf = |desc: Descriptor, out: &mut Vec<Candidate>| {
        if out.len() >= MAX_IMAGES {
            return Err(bad(format!(
                "the indexes list more than {MAX_IMAGES} image manifests"
            )));
        }
        let platform = desc.platform.as_ref().map(PlatformJson::to_platform);
        out.push(Candidate {
            top,
            names: names.to_vec(),
            platform,
            target: Target::Oci(desc),
        });
        Ok(())
    };
    if is_manifest_type(&desc.media_type) {
        return leaf(desc, out);
    }
    if depth >= MAX_DEPTH {
        return Err(bad(format!(
            "image indexes nested more than {MAX_DEPTH} deep"
        )));
    }
    *reads += 1;
    if *reads > MAX_INDEX_READS {
        return Err(bad(format!(
            "more than {MAX_INDEX_READS} nested image indexes"
        )));
    }
    // Without a known media type, the blob itself says what it is.
    let raw = read_blob(c, &desc, "image index", file)?;
    let index: Index = parse_json(&raw, &desc.digest, file)?;
    match index.manifests {
        Some(children) if is_index_type(&desc.media_type) || index.layers.is_none() => {
            let mut inherited = names.to_vec();
            for n in names_of(&desc) {
                if !inherited.contains(&n) {
                    inherited.push(n);
                }
            }
            for child in children {
                walk(c, file, child, top, &inherited, depth + 1, reads, out)?;
            }
            Ok(())
        }
        _ => leaf(desc, out),
    }
}

/// Read an image manifest and its config, all verified.
pub(crate) fn build(
    c: &Container,
    file: &Path,
    cand: &Candidate,
    desc: &Descriptor,
) -> Result<ImageSource> {
    let bad = |reason: String| Error::Format {
        file: file.to_path_buf(),
        reason,
    };
    let raw = read_blob(c, desc, "image manifest", file)?;
    let manifest: Manifest = parse_json(&raw, &desc.digest, file)?;
    let config_desc = manifest.config.ok_or_else(|| {
        bad(format!(
            "image manifest {} has no config (schema 1 manifests are not supported)",
            desc.digest
        ))
    })?;
    let config = read_blob(c, &config_desc, "image config", file)?;
    if manifest.layers.len() > MAX_LAYERS {
        return Err(bad(format!(
            "image manifest {} has {} layers, more than the limit of {MAX_LAYERS}",
            desc.digest,
            manifest.layers.len()
        )));
    }
    let parsed: ConfigJson = parse_json(&config, &config_desc.digest, file)?;
    let diff_ids = parsed.diff_ids(manifest.layers.len(), file)?;
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for (i, (l, diff_id)) in manifest.layers.iter().zip(diff_ids).enumerate() {
        let (path, digest) = blob_path(l, file)?;
        if l.size < 0 {
            return Err(bad(format!(
                "layer {} ({digest}) has a negative size ({})",
                i + 1,
                l.size
            )));
        }
        let actual = c
            .size(&path)
            .map_err(|e| bad(format!("layer {} ({digest}) is missing: {e}", i + 1)))?;
        if actual != l.size as u64 {
            return Err(bad(format!(
                "layer {} ({digest}): blob has {actual} bytes but the manifest says {}",
                i + 1,
                l.size
            )));
        }
        layers.push(LayerSource {
            location: path,
            blob_digest: Some(digest),
            diff_id: Some(diff_id),
            size: actual,
        });
    }
    Ok(ImageSource {
        config_digest: Some(Digest::of(&config)),
        config,
        names: cand.names.clone(),
        layers,
        synthesized: false,
    })
}

/// The platform of a manifest whose descriptor does not say, from its config.
pub(crate) fn platform_from_config(
    c: &Container,
    file: &Path,
    desc: &Descriptor,
) -> Option<Platform> {
    let raw = read_blob(c, desc, "image manifest", file).ok()?;
    let manifest: Manifest = serde_json::from_slice(&raw).ok()?;
    let config = read_blob(c, manifest.config.as_ref()?, "image config", file).ok()?;
    serde_json::from_slice::<ConfigJson>(&config)
        .ok()?
        .platform()
}
