//! Tests of verification and hostile input: digest mismatches of configs,
//! manifests and layers (found by `read` and by `finish`), and malformed
//! archives and manifests, each failing with a message naming the problem.

use std::io::Read;

use serde_json::json;

use super::tests::*;
use super::*;

#[test]
fn config_and_manifest_digest_mismatches_are_refused() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"x")]);
    let mut entries = docker_legacy(&[(&["t:1"], &[&a])]);
    let cfg = entries
        .iter_mut()
        .find(|(n, _)| n.ends_with(".json") && n.len() == 69)
        .unwrap();
    cfg.1 = E::File(config_for(&[&a], "arm64"));
    let input = fx.open(&fx.file("badcfg.tar", &tar_of(&entries))).unwrap();
    let e = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    assert!(
        e.to_string().contains("digest mismatch for image config"),
        "{e}"
    );

    let (oci, m, _) = mislabelled_oci();
    let mut entries = oci.entries(vec![m.clone()]);
    let mpath = format!(
        "blobs/sha256/{}",
        m["digest"]
            .as_str()
            .unwrap()
            .strip_prefix("sha256:")
            .unwrap()
    );
    let blob = entries.iter_mut().find(|(n, _)| *n == mpath).unwrap();
    if let E::File(d) = &mut blob.1 {
        let i = d.len() - 2;
        d[i] = b' ';
    }
    let input = fx.open(&fx.file("badman.tar", &tar_of(&entries))).unwrap();
    let e = err_text(input.resolve(&Selector::Only, &Platform::default()));
    assert!(e.contains("digest mismatch for image manifest"), "{e}");
    assert!(e.contains(m["digest"].as_str().unwrap()), "{e}");
}

/// Layer whose content does not match: `read` fails at the end of the
/// stream, and `finish` reports the mismatch even when nothing was read.
#[test]
fn layer_digest_mismatch_is_found_by_read_and_finish() {
    let fx = Fixture::new();
    let good = layer(&[("f", b"good")]);
    let evil = layer(&[("f", b"evil")]);
    let mut entries = docker_legacy(&[(&["t:1"], &[&good])]);
    let l = entries
        .iter_mut()
        .find(|(n, _)| n.ends_with("/layer.tar"))
        .unwrap();
    l.1 = E::File(evil.clone());
    let input = fx
        .open(&fx.file("badlayer.tar", &tar_of(&entries)))
        .unwrap();
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    let mut r = input.open_layer(&src, 0).unwrap();
    let mut out = Vec::new();
    let e = r.read_to_end(&mut out).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("digest mismatch for layer 1"), "{e}");
    assert!(
        e.to_string().contains(&Digest::of(&good).to_string()),
        "{e}"
    );
    assert_eq!(out, evil);
    let e = input.open_layer(&src, 0).unwrap().finish().unwrap_err();
    match e {
        Error::DigestMismatch {
            what,
            expected,
            found,
            ..
        } => {
            assert!(what.contains("diff_id"), "{what}");
            assert_eq!(expected, Digest::of(&good).to_string());
            assert_eq!(found, Digest::of(&evil).to_string());
        }
        e => panic!("unexpected {e}"),
    }

    // A compressed OCI blob that decompresses to the right diff but is not
    // the announced blob.
    let mut oci = Oci::default();
    let m = oci.image(
        &[(
            gzip(&good),
            good.clone(),
            "application/vnd.oci.image.layer.v1.tar+gzip",
        )],
        "amd64",
    );
    let mut entries = oci.entries(vec![m]);
    let gz_path = format!("blobs/sha256/{}", Digest::of(&gzip(&good)).hex());
    let blob = entries.iter_mut().find(|(n, _)| *n == gz_path).unwrap();
    if let E::File(d) = &mut blob.1 {
        d[4] ^= 1; // mtime byte of the gzip header: same content, another blob
    }
    let input = fx.open(&fx.file("badblob.tar", &tar_of(&entries))).unwrap();
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    let (got, fin) = {
        let mut r = input.open_layer(&src, 0).unwrap();
        let mut out = Vec::new();
        let res = r.read_to_end(&mut out);
        assert!(res.unwrap_err().to_string().contains("blob"));
        (out, r.finish())
    };
    assert_eq!(got, good);
    let e = err_text(fin);
    assert!(
        e.contains("digest mismatch for layer 1") && e.contains("blob"),
        "{e}"
    );
}

#[test]
fn malformed_inputs_fail_with_clear_errors() {
    let fx = Fixture::new();
    let a = layer(&[("a", &[9u8; 5000][..])]);
    let docker = tar_of(&docker_legacy(&[(&["t:1"], &[&a])]));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "empty file"),
        (
            "garbage",
            b"this is not an archive at all".repeat(40),
            "neither a tar archive nor gzip or zstd",
        ),
        (
            "truncated",
            docker[..docker.len() / 2].to_vec(),
            "truncated tar archive",
        ),
        (
            "gzip-garbage",
            [&[0x1f, 0x8b, 8, 0][..], &[0x55; 100][..]].concat(),
            "corrupt gzip stream",
        ),
        (
            "zstd-not-tar",
            zstd_of(b"hello"),
            "decompressed content is not a tar archive",
        ),
        (
            "pre-1.10",
            tar_of(&[("repositories".into(), E::File(b"{}".to_vec()))]),
            "without manifest.json",
        ),
        (
            "no-index",
            tar_of(&[("oci-layout".into(), E::File(b"{}".to_vec()))]),
            "OCI image layout without index.json",
        ),
    ];
    for (name, data, want) in cases {
        let e = err_text(fx.open(&fx.file(name, &data)));
        assert!(e.contains(want), "{name}: {e}");
        assert!(e.contains(name), "{name}: {e}");
    }
    let e = err_text(fx.open(fx.dir.path()));
    assert!(e.contains("neither an OCI image layout"), "{e}");
}

#[test]
fn malformed_manifests_fail_at_resolve() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"a")]);
    let resolve_err = |name: &str, entries: &[(String, E)]| {
        let input = fx.open(&fx.file(name, &tar_of(entries))).unwrap();
        err_text(input.resolve(&Selector::Only, &Platform::default()))
    };
    let mut entries = docker_legacy(&[(&["t:1"], &[&a])]);
    let set_manifest = |entries: &mut Vec<(String, E)>, data: Vec<u8>| {
        entries
            .iter_mut()
            .find(|(n, _)| n == "manifest.json")
            .unwrap()
            .1 = E::File(data);
    };
    set_manifest(&mut entries, b"[{\"Config\": ".to_vec());
    let e = resolve_err("badjson.tar", &entries);
    assert!(e.contains("`manifest.json` is not valid"), "{e}");
    set_manifest(&mut entries, vec![b' '; (MAX_JSON + 1) as usize]);
    let e = resolve_err("huge.tar", &entries);
    assert!(e.contains("more than the limit of 16777216 bytes"), "{e}");
    let cfg = format!("{}.json", Digest::of(&config_for(&[&a], "amd64")).hex());
    set_manifest(
        &mut entries,
        serde_json::to_vec(&json!([{"Config": cfg, "Layers": ["../../etc/passwd"]}])).unwrap(),
    );
    let e = resolve_err("escape.tar", &entries);
    assert!(e.contains("points outside the archive"), "{e}");
    set_manifest(
        &mut entries,
        serde_json::to_vec(&json!([{"Config": cfg, "Layers": ["nope/layer.tar"]}])).unwrap(),
    );
    let e = resolve_err("missing.tar", &entries);
    assert!(e.contains("`nope/layer.tar` is missing"), "{e}");
    set_manifest(
        &mut entries,
        serde_json::to_vec(&json!([{"Config": cfg, "Layers": []}])).unwrap(),
    );
    let e = resolve_err("count.tar", &entries);
    assert!(
        e.contains("lists 1 diff_ids but the manifest has 0 layers"),
        "{e}"
    );

    // OCI: missing blob, negative size, foreign digest algorithm, size lies.
    let mut oci = Oci::default();
    let m = oci.image(
        &[(
            a.clone(),
            a.clone(),
            "application/vnd.oci.image.layer.v1.tar",
        )],
        "amd64",
    );
    let full = oci.entries(vec![m.clone()]);
    let layer_path = format!("blobs/sha256/{}", Digest::of(&a).hex());
    let without: Vec<_> = full
        .iter()
        .filter(|(n, _)| *n != layer_path)
        .cloned()
        .collect();
    let e = resolve_err("noblob.tar", &without);
    assert!(e.contains("layer 1") && e.contains("is missing"), "{e}");
    for (name, field, value, want) in [
        ("neg.tar", "size", json!(-5), "negative size"),
        (
            "huge-size.tar",
            "size",
            json!(1u64 << 40),
            "more than the limit",
        ),
        (
            "sha512.tar",
            "digest",
            json!(format!("sha512:{}", "a".repeat(128))),
            "unsupported digest algorithm `sha512`",
        ),
        ("size-lie.tar", "size", json!(3), "blob has"),
    ] {
        let mut d = m.clone();
        d[field] = value;
        let e = resolve_err(name, &oci.entries(vec![d]));
        assert!(e.contains(want), "{name}: {e}");
    }
}

#[test]
fn corrupt_compressed_layer_fails_read_and_finish() {
    let fx = Fixture::new();
    let l = layer(&[("f", &[4u8; 100_000][..])]);
    let gz = gzip(&l);
    let cut = gz[..gz.len() / 2].to_vec();
    let mut oci = Oci::default();
    let m = oci.image(
        &[(
            cut,
            l.clone(),
            "application/vnd.oci.image.layer.v1.tar+gzip",
        )],
        "amd64",
    );
    let input = fx
        .open(&fx.file("cut.tar", &tar_of(&oci.entries(vec![m]))))
        .unwrap();
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    let mut r = input.open_layer(&src, 0).unwrap();
    let e = r.read_to_end(&mut Vec::new()).unwrap_err().to_string();
    assert!(
        e.contains("layer 1: cannot read gzip layer `blobs/sha256/"),
        "{e}"
    );
    let e = r.finish().unwrap_err();
    assert!(matches!(e, Error::Layer { layer: 1, .. }), "{e}");
}

#[test]
fn layer_links_that_leave_the_archive_are_refused() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"a")]);
    for (name, target, want) in [
        (
            "abs.tar",
            "/etc/passwd",
            "symlink to the absolute path `/etc/passwd`",
        ),
        (
            "up.tar",
            "../../../etc/passwd",
            "symlink pointing outside the archive",
        ),
        ("loop.tar", "layer.tar", "levels of links"),
    ] {
        let mut entries = docker_legacy(&[(&["t:1"], &[&a])]);
        let l = entries
            .iter_mut()
            .find(|(n, _)| n.ends_with("/layer.tar"))
            .unwrap();
        l.1 = E::Symlink(target.into());
        let input = fx.open(&fx.file(name, &tar_of(&entries))).unwrap();
        let e = err_text(input.resolve(&Selector::Only, &Platform::default()));
        assert!(e.contains(want), "{name}: {e}");
    }
}
