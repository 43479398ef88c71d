//! `docker save` archives. `manifest.json` is a list of
//! `{"Config": "<hex>.json", "RepoTags": [...], "Layers": ["<id>/layer.tar", ...]}`.
//! Legacy archives (Engine < 25) keep each layer as an uncompressed
//! `<id>/layer.tar` (a layer repeated in the stack is a symlink to the first
//! copy, `../<id>/layer.tar`) beside `<id>/json`, `<id>/VERSION` and a
//! `repositories` file, none of which is needed. Engine 25+ writes an OCI
//! layout (`index.json`, `oci-layout`, `blobs/sha256/`) plus a
//! `manifest.json` whose paths point into `blobs/`; this module reads that
//! `manifest.json`, and blob digests come from the paths.
//!
//! The config is verified against the hex in its name when the name has one
//! (both layouts do); layers are verified against the config's diff_ids.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::archive::{normalize, Container};
use super::oci::ConfigJson;
use super::select::{Candidate, Target};
use super::{parse_json, ImageSource, LayerSource, Platform, MAX_IMAGES, MAX_JSON, MAX_LAYERS};
use crate::digest::Digest;
use crate::error::Error;
use crate::Result;

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers", default)]
    layers: Vec<String>,
}

fn entries(c: &Container, file: &Path) -> Result<Vec<Entry>> {
    let raw = c
        .read_capped("manifest.json", MAX_JSON)
        .map_err(|reason| Error::Format {
            file: file.to_path_buf(),
            reason,
        })?;
    let list: Vec<Entry> = parse_json(&raw, "manifest.json", file)?;
    if list.len() > MAX_IMAGES {
        return Err(Error::Format {
            file: file.to_path_buf(),
            reason: format!(
                "manifest.json lists {} images, more than the limit of {MAX_IMAGES}",
                list.len()
            ),
        });
    }
    Ok(list)
}

/// The digest a member name promises: `<hex>.json` or `blobs/sha256/<hex>`.
fn digest_in_name(name: &str) -> Option<Digest> {
    let base = name.rsplit('/').next()?;
    let hex = base.strip_suffix(".json").unwrap_or(base);
    Digest::from_hex(hex)
}

/// The images of `manifest.json`; the platform (from the config) only for
/// those `want` accepts, each config member read once however many entries
/// (or links) name it.
pub(crate) fn candidates(
    c: &Container,
    file: &Path,
    want: &dyn Fn(usize, &[String]) -> bool,
) -> Result<Vec<Candidate>> {
    let list = entries(c, file)?;
    let mut seen: HashMap<(u64, u64), Option<Platform>> = HashMap::new();
    Ok(list
        .into_iter()
        .enumerate()
        .map(|(top, e)| {
            let names = e.repo_tags.unwrap_or_default();
            // Best effort: the listing must not fail on one broken image.
            let platform = if want(top, &names) {
                c.member_id(&e.config).ok().and_then(|id| {
                    seen.entry(id)
                        .or_insert_with(|| {
                            c.read_capped(&e.config, MAX_JSON)
                                .ok()
                                .and_then(|raw| serde_json::from_slice::<ConfigJson>(&raw).ok())
                                .and_then(|cfg| cfg.platform())
                        })
                        .clone()
                })
            } else {
                None
            };
            Candidate {
                top,
                names,
                platform,
                target: Target::Docker(top),
            }
        })
        .collect())
}

pub(crate) fn build(c: &Container, file: &Path, n: usize) -> Result<ImageSource> {
    let bad = |reason: String| Error::Format {
        file: file.to_path_buf(),
        reason,
    };
    let list = entries(c, file)?;
    let e = list
        .get(n)
        .ok_or_else(|| bad(format!("manifest.json has no entry {n}")))?;
    let config_name = normalize(&e.config)
        .ok_or_else(|| bad(format!("config `{}` points outside the archive", e.config)))?;
    let config = c
        .read_capped(&config_name, MAX_JSON)
        .map_err(|r| bad(format!("image config: {r}")))?;
    let found = Digest::of(&config);
    if let Some(expected) = digest_in_name(&config_name) {
        if found != expected {
            return Err(Error::DigestMismatch {
                file: file.to_path_buf(),
                what: format!("image config `{config_name}`"),
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    if e.layers.len() > MAX_LAYERS {
        return Err(bad(format!(
            "image has {} layers, more than the limit of {MAX_LAYERS}",
            e.layers.len()
        )));
    }
    let parsed: ConfigJson = parse_json(&config, &config_name, file)?;
    let diff_ids = parsed.diff_ids(e.layers.len(), file)?;
    let mut layers = Vec::with_capacity(e.layers.len());
    for (i, (name, diff_id)) in e.layers.iter().zip(diff_ids).enumerate() {
        let location = normalize(name).ok_or_else(|| {
            bad(format!(
                "layer {} `{name}` points outside the archive",
                i + 1
            ))
        })?;
        let size = c
            .size(&location)
            .map_err(|r| bad(format!("layer {}: {r}", i + 1)))?;
        let blob_digest = location
            .starts_with("blobs/sha256/")
            .then(|| digest_in_name(&location))
            .flatten();
        layers.push(LayerSource {
            location,
            blob_digest,
            diff_id: Some(diff_id),
            size,
        });
    }
    Ok(ImageSource {
        config_digest: Some(found),
        config,
        names: e.repo_tags.clone().unwrap_or_default(),
        layers,
        synthesized: false,
    })
}
