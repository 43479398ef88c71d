//! Tests against the real images in `tests/data` (docker save 20.10, skopeo
//! OCI layouts, docker export, zstd of a whole archive); the facts come from
//! `tests/data/expected.json`.

use std::path::PathBuf;

use serde_json::Value;

use super::*;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

fn expected() -> Value {
    let raw = std::fs::read(data_dir().join("expected.json")).expect("tests/data/expected.json");
    serde_json::from_slice(&raw).unwrap()
}

/// Open, resolve and stream every layer; returns the source and the diff_ids
/// that `finish` computed.
fn load(name: &str, selector: Selector) -> (Input, ImageSource, Vec<Digest>) {
    let scratch = tempfile::tempdir().unwrap();
    let input = Input::open(&data_dir().join(name), scratch.path()).unwrap();
    let src = input.resolve(&selector, &Platform::default()).unwrap();
    let mut diff_ids = Vec::new();
    for i in 0..src.layers.len() {
        let mut r = input.open_layer(&src, i).unwrap();
        // Read like a tar parser: up to the end-of-archive blocks only.
        let mut ar = tar::Archive::new(&mut r);
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            std::io::copy(&mut e, &mut std::io::sink()).unwrap();
        }
        let (diff_id, stored) = r.finish().unwrap();
        assert_eq!(stored, src.layers[i].size, "{name} layer {i}");
        diff_ids.push(diff_id);
    }
    (input, src, diff_ids)
}

fn digests(v: &Value) -> Vec<Digest> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| Digest::parse(d.as_str().unwrap()).unwrap())
        .collect()
}

#[test]
fn real_docker_save_archives() {
    let exp = expected();
    let multi = &exp["busybox_multi"];
    let want_ids = digests(&multi["diff_ids"]);
    for (file, sel) in [
        ("busybox-multi.tar", Selector::Only),
        ("busybox-multi.tar.zst", Selector::Only),
        (
            "busybox-two-images.tar",
            Selector::Name("runbox-test/busybox-multi".into()),
        ),
        ("busybox-two-images.tar", Selector::Index(0)),
    ] {
        let (input, src, ids) = load(file, sel);
        assert_eq!(input.kind, InputKind::DockerArchive, "{file}");
        assert_eq!(
            src.config_digest.as_ref().unwrap().as_str(),
            multi["image_id"].as_str().unwrap(),
            "{file}"
        );
        assert_eq!(ids, want_ids, "{file}");
        assert_eq!(src.names, vec![multi["name"].as_str().unwrap().to_string()]);
    }
    let (_, src, _) = load(
        "busybox-two-images.tar",
        Selector::Name("runbox-test/busybox-base:latest".into()),
    );
    assert_eq!(
        src.config_digest.unwrap().as_str(),
        exp["busybox_base"]["image_id"].as_str().unwrap()
    );
    let scratch = tempfile::tempdir().unwrap();
    let two = Input::open(&data_dir().join("busybox-two-images.tar"), scratch.path()).unwrap();
    let e = two
        .resolve(&Selector::Only, &Platform::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("holds 2 images") && e.contains("runbox-test/busybox-base:latest"),
        "{e}"
    );
}

#[test]
fn real_oci_layouts_and_rootfs() {
    let exp = expected();
    let want_ids = digests(&exp["busybox_multi"]["diff_ids"]);
    for (key, file, kind) in [
        ("oci_gzip", "busybox-oci-gzip", InputKind::OciLayoutDir),
        ("oci_gzip", "busybox-oci-gzip.tar", InputKind::OciArchive),
        ("oci_plain", "busybox-oci-plain", InputKind::OciLayoutDir),
    ] {
        let (input, src, ids) = load(
            file,
            Selector::Name(exp[key]["tag"].as_str().unwrap().into()),
        );
        assert_eq!(input.kind, kind, "{file}");
        assert_eq!(
            src.config_digest.unwrap().as_str(),
            exp[key]["config"].as_str().unwrap(),
            "{file}"
        );
        assert_eq!(ids, want_ids, "{file}");
        assert!(src.layers.iter().all(|l| l.blob_digest.is_some()));
    }
    let (input, src, ids) = load("busybox-rootfs.tar", Selector::Only);
    assert_eq!(input.kind, InputKind::RootfsTar);
    assert!(src.synthesized);
    let whole = std::fs::read(data_dir().join("busybox-rootfs.tar")).unwrap();
    assert_eq!(ids, vec![Digest::of(&whole)]);
}
