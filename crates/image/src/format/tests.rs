//! Tests of input detection, selection and verified layer streams, on
//! archives and layouts built here with the `tar`, flate2 and zstd crates.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;

/// One member of a test tar.
#[derive(Clone)]
pub(super) enum E {
    File(Vec<u8>),
    Symlink(String),
    Dir,
    /// A file whose name is carried by a PAX `path` record.
    PaxFile(Vec<u8>),
}

pub(super) fn tar_of(entries: &[(String, E)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, e) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        match e {
            E::File(data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, name, &data[..]).unwrap();
            }
            E::Symlink(target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, name, target).unwrap();
            }
            E::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, name, std::io::empty()).unwrap();
            }
            E::PaxFile(data) => {
                let rec = format!("path={name}\n");
                let mut len = rec.len() + 3;
                if format!("{len} {rec}").len() != len {
                    len += 1;
                }
                let record = format!("{len} {rec}");
                let mut x = tar::Header::new_ustar();
                x.set_path("PaxHeaders/x").unwrap();
                x.set_entry_type(tar::EntryType::XHeader);
                x.set_size(record.len() as u64);
                x.set_cksum();
                b.append(&x, record.as_bytes()).unwrap();
                let mut f = tar::Header::new_ustar();
                f.set_path("truncated-name").unwrap();
                f.set_entry_type(tar::EntryType::Regular);
                f.set_mode(0o644);
                f.set_size(data.len() as u64);
                f.set_cksum();
                b.append(&f, &data[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// A layer tar holding the given files.
pub(super) fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let e: Vec<(String, E)> = files
        .iter()
        .map(|(n, d)| (n.to_string(), E::File(d.to_vec())))
        .collect();
    tar_of(&e)
}

pub(super) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub(super) fn zstd_of(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

pub(super) fn config_for(layers: &[&[u8]], arch: &str) -> Vec<u8> {
    let ids: Vec<String> = layers.iter().map(|l| Digest::of(l).to_string()).collect();
    serde_json::to_vec(&json!({"architecture": arch, "os": "linux", "config": {}, "rootfs": {"type": "layers", "diff_ids": ids}}))
        .unwrap()
}

/// A legacy `docker save` archive; a layer repeated in a stack becomes a
/// symlink to its first copy, as docker writes it.
pub(super) fn docker_legacy(images: &[(&[&str], &[&[u8]])]) -> Vec<(String, E)> {
    let mut out = Vec::new();
    let mut manifest = Vec::new();
    let mut written: BTreeMap<Digest, String> = BTreeMap::new();
    for (n, (tags, layers)) in images.iter().enumerate() {
        let config = config_for(layers, "amd64");
        let config_name = format!("{}.json", Digest::of(&config).hex());
        out.push((config_name.clone(), E::File(config)));
        let mut paths = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            let id = Digest::of(format!("{n}-{i}").as_bytes()).hex().to_string();
            out.push((format!("{id}/"), E::Dir));
            out.push((format!("{id}/VERSION"), E::File(b"1.0".to_vec())));
            out.push((format!("{id}/json"), E::File(b"{}".to_vec())));
            match written.get(&Digest::of(l)) {
                Some(first) => out.push((
                    format!("{id}/layer.tar"),
                    E::Symlink(format!("../{first}/layer.tar")),
                )),
                None => {
                    out.push((format!("{id}/layer.tar"), E::File(l.to_vec())));
                    written.insert(Digest::of(l), id.clone());
                }
            }
            paths.push(format!("{id}/layer.tar"));
        }
        manifest.push(json!({"Config": config_name, "RepoTags": tags, "Layers": paths}));
    }
    out.push((
        "manifest.json".into(),
        E::File(serde_json::to_vec(&manifest).unwrap()),
    ));
    out.push(("repositories".into(), E::File(b"{}".to_vec())));
    out
}

/// Builds OCI layouts: blobs by digest plus `index.json`.
#[derive(Default)]
pub(super) struct Oci {
    blobs: BTreeMap<String, Vec<u8>>,
}

impl Oci {
    pub(super) fn blob(&mut self, media: &str, data: &[u8]) -> Value {
        let d = Digest::of(data);
        self.blobs
            .insert(format!("blobs/sha256/{}", d.hex()), data.to_vec());
        json!({"mediaType": media, "digest": d.to_string(), "size": data.len()})
    }
    /// `layers`: (stored bytes, uncompressed bytes, announced media type).
    pub(super) fn image(&mut self, layers: &[(Vec<u8>, Vec<u8>, &str)], arch: &str) -> Value {
        let raw: Vec<&[u8]> = layers.iter().map(|l| &l.1[..]).collect();
        let config = self.blob(
            "application/vnd.oci.image.config.v1+json",
            &config_for(&raw, arch),
        );
        let descs: Vec<Value> = layers
            .iter()
            .map(|(stored, _, media)| self.blob(media, stored))
            .collect();
        let manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config, "layers": descs});
        self.blob(
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest).unwrap(),
        )
    }
    pub(super) fn index_blob(&mut self, manifests: Vec<Value>) -> Value {
        let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
        self.blob(
            "application/vnd.oci.image.index.v1+json",
            &serde_json::to_vec(&index).unwrap(),
        )
    }
    pub(super) fn entries(&self, top: Vec<Value>) -> Vec<(String, E)> {
        let index = json!({"schemaVersion": 2, "manifests": top});
        let mut out = vec![
            (
                "oci-layout".to_string(),
                E::File(br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            ),
            (
                "index.json".to_string(),
                E::File(serde_json::to_vec(&index).unwrap()),
            ),
        ];
        out.extend(
            self.blobs
                .iter()
                .map(|(k, v)| (k.clone(), E::File(v.clone()))),
        );
        out
    }
}

pub(super) fn write_dir(dir: &Path, entries: &[(String, E)]) {
    for (name, e) in entries {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        if let E::File(d) = e {
            std::fs::write(p, d).unwrap();
        }
    }
}

pub(super) fn with_name(mut d: Value, name: &str) -> Value {
    d["annotations"] = json!({"org.opencontainers.image.ref.name": name});
    d
}

pub(super) fn with_platform(mut d: Value, platform: &str) -> Value {
    let p = Platform::parse(platform).unwrap();
    d["platform"] = json!({"os": p.os, "architecture": p.architecture, "variant": p.variant});
    d
}

pub(super) struct Fixture {
    pub(super) dir: tempfile::TempDir,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub(super) fn file(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, data).unwrap();
        p
    }
    pub(super) fn scratch(&self) -> PathBuf {
        let p = self.dir.path().join("scratch");
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    pub(super) fn open(&self, path: &Path) -> Result<Input> {
        Input::open(path, &self.scratch())
    }
}

/// All bytes of a layer, and what `finish` says.
pub(super) fn read_layer(
    input: &Input,
    src: &ImageSource,
    i: usize,
) -> (Vec<u8>, Result<(Digest, u64)>) {
    let mut r = input.open_layer(src, i).unwrap();
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    (out, r.finish())
}

pub(super) fn err_text(r: Result<impl std::fmt::Debug>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn legacy_docker_archive_with_symlinked_layer() {
    let fx = Fixture::new();
    let a = layer(&[("a.txt", b"first")]);
    let b = layer(&[("b.txt", b"second")]);
    let stack: &[&[u8]] = &[&a, &b, &a];
    // The file name says gzip; the content decides.
    let path = fx.file(
        "image.tar.gz",
        &tar_of(&docker_legacy(&[(&["busybox:latest"], stack)])),
    );
    let input = fx.open(&path).unwrap();
    assert_eq!(input.kind, InputKind::DockerArchive);
    assert_eq!(input.compression, Compression::None);
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    assert_eq!(src.names, vec!["busybox:latest"]);
    assert_eq!(src.layers.len(), 3);
    assert!(!src.synthesized);
    assert_eq!(
        src.config_digest,
        Some(Digest::of(&config_for(stack, "amd64")))
    );
    assert_eq!(src.layers[2].blob_digest, None);
    for (i, want) in stack.iter().enumerate() {
        let (got, fin) = read_layer(&input, &src, i);
        assert_eq!(&got[..], *want, "layer {i}");
        assert_eq!(fin.unwrap(), (Digest::of(want), want.len() as u64));
    }
    let images = input.images().unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].platform.as_deref(), Some("linux/amd64"));
}

#[test]
fn docker_25_layout_reads_blobs_with_digests() {
    let fx = Fixture::new();
    let l1 = layer(&[("etc/os-release", b"ID=test")]);
    let mut oci = Oci::default();
    let m = oci.image(
        &[(
            l1.clone(),
            l1.clone(),
            "application/vnd.oci.image.layer.v1.tar",
        )],
        "amd64",
    );
    let mut entries = oci.entries(vec![with_name(m, "latest")]);
    let config_hex = Digest::of(&config_for(&[&l1], "amd64")).hex().to_string();
    let manifest = json!([{"Config": format!("blobs/sha256/{config_hex}"), "RepoTags": ["docker.io/library/app:1"],
        "Layers": [format!("blobs/sha256/{}", Digest::of(&l1).hex())]}]);
    entries.push((
        "manifest.json".into(),
        E::File(serde_json::to_vec(&manifest).unwrap()),
    ));
    let path = fx.file("d25.tar", &tar_of(&entries));
    let input = fx.open(&path).unwrap();
    assert_eq!(input.kind, InputKind::DockerArchive);
    let src = input
        .resolve(&Selector::Name("app:1".into()), &Platform::default())
        .unwrap();
    assert_eq!(src.layers[0].blob_digest, Some(Digest::of(&l1)));
    assert_eq!(src.config_digest.as_ref().unwrap().hex(), config_hex);
    let (got, fin) = read_layer(&input, &src, 0);
    assert_eq!(got, l1);
    assert_eq!(fin.unwrap(), (Digest::of(&l1), l1.len() as u64));
}

/// An OCI image with a multi-member gzip layer labelled as plain tar, a
/// zstd layer labelled gzip and a plain layer labelled gzip (as skopeo does).
pub(super) fn mislabelled_oci() -> (Oci, Value, Vec<Vec<u8>>) {
    let l1 = layer(&[("one", &[1u8; 70_000][..])]);
    let mut l1_gz = gzip(&l1[..1000]);
    l1_gz.extend(gzip(&l1[1000..]));
    let l2 = layer(&[("two", b"2")]);
    let l3 = layer(&[("three", b"3")]);
    let mut oci = Oci::default();
    let m = oci.image(
        &[
            (l1_gz, l1.clone(), "application/vnd.oci.image.layer.v1.tar"),
            (
                zstd_of(&l2),
                l2.clone(),
                "application/vnd.oci.image.layer.v1.tar+gzip",
            ),
            (
                l3.clone(),
                l3.clone(),
                "application/vnd.oci.image.layer.v1.tar+gzip",
            ),
        ],
        "amd64",
    );
    (oci, m, vec![l1, l2, l3])
}

fn check_mislabelled(input: &Input, want: &[Vec<u8>]) {
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    assert_eq!(src.layers.len(), 3);
    for (i, w) in want.iter().enumerate() {
        let (got, fin) = read_layer(input, &src, i);
        assert_eq!(&got, w, "layer {i}");
        let (diff_id, stored) = fin.unwrap();
        assert_eq!(diff_id, Digest::of(w));
        assert_eq!(stored, src.layers[i].size);
    }
}

#[test]
fn oci_dir_and_tar_with_mislabelled_layer_compression() {
    let fx = Fixture::new();
    let (oci, m, want) = mislabelled_oci();
    let entries = oci.entries(vec![with_name(m, "v1")]);
    let dir = fx.dir.path().join("layout");
    write_dir(&dir, &entries);
    let input = fx.open(&dir).unwrap();
    assert_eq!(input.kind, InputKind::OciLayoutDir);
    check_mislabelled(&input, &want);
    // The same layout as a tar, with `./` prefixes as some tools write them.
    let dotted: Vec<(String, E)> = entries
        .iter()
        .map(|(n, e)| (format!("./{n}"), e.clone()))
        .collect();
    let path = fx.file("oci.tar", &tar_of(&dotted));
    let input = fx.open(&path).unwrap();
    assert_eq!(input.kind, InputKind::OciArchive);
    check_mislabelled(&input, &want);
    assert_eq!(
        input
            .resolve(&Selector::Name("v1".into()), &Platform::default())
            .unwrap()
            .names,
        vec!["v1"]
    );
}

#[test]
fn whole_archive_gzip_and_zstd_are_decompressed_once_into_scratch() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"aaa")]);
    let docker = tar_of(&docker_legacy(&[(&["x:1"], &[&a])]));
    let (oci, m, want) = mislabelled_oci();
    let oci_tar = tar_of(&oci.entries(vec![m]));
    for (name, data, kind, comp) in [
        (
            "d.tar.gz",
            gzip(&docker),
            InputKind::DockerArchive,
            Compression::Gzip,
        ),
        (
            "o.tar.zst",
            zstd_of(&oci_tar),
            InputKind::OciArchive,
            Compression::Zstd,
        ),
    ] {
        let input = fx.open(&fx.file(name, &data)).unwrap();
        assert_eq!((input.kind, input.compression), (kind, comp), "{name}");
        // The decompressed copy is unlinked at once: nothing stays behind.
        assert_eq!(std::fs::read_dir(fx.scratch()).unwrap().count(), 0);
        if kind == InputKind::OciArchive {
            check_mislabelled(&input, &want);
        } else {
            let src = input
                .resolve(&Selector::Only, &Platform::default())
                .unwrap();
            assert_eq!(read_layer(&input, &src, 0).0, a);
        }
    }
}

#[test]
fn rootfs_tar_is_one_synthesized_layer() {
    let fx = Fixture::new();
    let rootfs = tar_of(&[
        ("./".into(), E::Dir),
        ("./bin/".into(), E::Dir),
        ("./bin/sh".into(), E::File(b"#!shell".to_vec())),
        ("./.dockerenv".into(), E::File(Vec::new())),
    ]);
    for (name, data) in [
        ("rootfs.tar", rootfs.clone()),
        ("rootfs.tgz", gzip(&rootfs)),
    ] {
        let input = fx.open(&fx.file(name, &data)).unwrap();
        assert_eq!(input.kind, InputKind::RootfsTar);
        let src = input
            .resolve(&Selector::Only, &Platform::default())
            .unwrap();
        assert!(src.synthesized);
        assert_eq!(src.config_digest, None);
        assert_eq!(src.config, SYNTHESIZED_CONFIG.as_bytes());
        assert_eq!(src.layers.len(), 1);
        assert_eq!(src.layers[0].diff_id, None);
        let (got, fin) = read_layer(&input, &src, 0);
        assert_eq!(got, rootfs);
        assert_eq!(fin.unwrap(), (Digest::of(&rootfs), rootfs.len() as u64));
    }
}

#[test]
fn nested_index_and_platform_selection() {
    let fx = Fixture::new();
    let amd = layer(&[("arch", b"amd64")]);
    let arm = layer(&[("arch", b"arm64")]);
    let mut oci = Oci::default();
    let m_amd = oci.image(
        &[(
            gzip(&amd),
            amd.clone(),
            "application/vnd.oci.image.layer.v1.tar+gzip",
        )],
        "amd64",
    );
    let m_arm = oci.image(
        &[(
            arm.clone(),
            arm.clone(),
            "application/vnd.oci.image.layer.v1.tar",
        )],
        "arm64",
    );
    let mut attestation = with_platform(
        oci.blob("application/vnd.oci.image.manifest.v1+json", b"{}"),
        "unknown/unknown",
    );
    attestation["annotations"] = json!({"vnd.docker.reference.type": "attestation-manifest"});
    let inner = oci.index_blob(vec![
        with_platform(m_arm, "linux/arm64/v8"),
        attestation,
        with_platform(m_amd, "linux/amd64"),
    ]);
    // Two levels: index.json -> index (named) -> index -> manifests.
    let outer = oci.index_blob(vec![inner]);
    let path = fx.file(
        "multi.tar",
        &tar_of(&oci.entries(vec![with_name(outer, "multi:1")])),
    );
    let input = fx.open(&path).unwrap();
    let images = input.images().unwrap();
    let plats: Vec<_> = images.iter().map(|i| i.platform.clone().unwrap()).collect();
    assert_eq!(plats, ["linux/arm64/v8", "linux/amd64"]);
    assert!(images
        .iter()
        .all(|i| i.index == 0 && i.names == ["multi:1"]));

    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    assert_eq!(read_layer(&input, &src, 0).0, amd);
    let src = input
        .resolve(
            &Selector::Name("multi:1".into()),
            &Platform::parse("linux/arm64").unwrap(),
        )
        .unwrap();
    assert_eq!(read_layer(&input, &src, 0).0, arm);
    let e = err_text(input.resolve(
        &Selector::Index(0),
        &Platform::parse("linux/s390x").unwrap(),
    ));
    assert!(
        e.contains(
            "no image for platform linux/s390x; available platforms: linux/arm64/v8, linux/amd64"
        ),
        "{e}"
    );
    assert!(e.contains("multi.tar"), "{e}");
}

#[test]
fn selectors_by_name_and_index_and_the_listing_error() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"busybox")]);
    let b = layer(&[("b", b"alpine")]);
    let entries = docker_legacy(&[
        (&["busybox:latest"], &[&a]),
        (&["docker.io/library/alpine:3.19"], &[&b]),
    ]);
    let input = fx.open(&fx.file("two.tar", &tar_of(&entries))).unwrap();
    let e = err_text(input.resolve(&Selector::Only, &Platform::default()));
    assert!(e.contains("holds 2 images"), "{e}");
    assert!(
        e.contains(
            "@0 busybox:latest (linux/amd64); @1 docker.io/library/alpine:3.19 (linux/amd64)"
        ),
        "{e}"
    );
    let first = |sel: Selector| {
        let src = input.resolve(&sel, &Platform::default()).unwrap();
        read_layer(&input, &src, 0).0
    };
    assert_eq!(first(Selector::Name("busybox".into())), a);
    assert_eq!(
        first(Selector::Name("docker.io/library/busybox:latest".into())),
        a
    );
    assert_eq!(first(Selector::Name("alpine:3.19".into())), b);
    assert_eq!(first(Selector::Index(1)), b);
    let e = err_text(input.resolve(&Selector::Name("alpine".into()), &Platform::default()));
    assert!(
        e.contains("no image with name `alpine`; the input holds: @0 busybox:latest"),
        "{e}"
    );
    let e = err_text(input.resolve(&Selector::Index(2), &Platform::default()));
    assert!(e.contains("no image with index @2"), "{e}");
}

#[test]
fn long_member_names_gnu_and_pax() {
    let fx = Fixture::new();
    let a = layer(&[("a", b"long names")]);
    let config = config_for(&[&a], "amd64");
    let dir = "d".repeat(120);
    let pax_name = format!("{}/layer.tar", "p".repeat(150));
    let manifest = json!([{"Config": format!("{}.json", Digest::of(&config).hex()), "RepoTags": null,
        "Layers": [format!("{dir}/layer.tar"), pax_name]}]);
    let config2 = config_for(&[&a, &a], "amd64");
    let manifest = {
        let mut m = manifest;
        m[0]["Config"] = json!(format!("{}.json", Digest::of(&config2).hex()));
        m
    };
    let entries = vec![
        (format!("{dir}/layer.tar"), E::File(a.clone())),
        (pax_name.clone(), E::PaxFile(a.clone())),
        (
            format!("{}.json", Digest::of(&config2).hex()),
            E::File(config2),
        ),
        (
            "manifest.json".into(),
            E::File(serde_json::to_vec(&manifest).unwrap()),
        ),
    ];
    let input = fx.open(&fx.file("long.tar", &tar_of(&entries))).unwrap();
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    assert_eq!(src.layers[1].location, pax_name);
    for i in 0..2 {
        let (got, fin) = read_layer(&input, &src, i);
        assert_eq!(got, a);
        fin.unwrap();
    }
}

#[test]
fn dropping_a_layer_reader_early_does_not_hang() {
    let fx = Fixture::new();
    let big = layer(&[("big", &vec![3u8; 12 << 20][..])]);
    let input = fx
        .open(&fx.file("big.tar", &tar_of(&docker_legacy(&[(&["b:1"], &[&big])]))))
        .unwrap();
    let src = input
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    let mut r = input.open_layer(&src, 0).unwrap();
    let mut first = [0u8; 512];
    r.read_exact(&mut first).unwrap();
    assert_eq!(&first[..], &big[..512]);
    drop(r);
    // finish drains what was not read and still verifies.
    let mut r = input.open_layer(&src, 0).unwrap();
    r.read_exact(&mut first).unwrap();
    assert_eq!(r.finish().unwrap(), (Digest::of(&big), big.len() as u64));
}

#[test]
fn identity_is_stable_and_follows_changes() {
    let fx = Fixture::new();
    let path = fx.file("rootfs.tar", &layer(&[("x", b"1")]));
    let input = fx.open(&path).unwrap();
    let id = InputIdentity::of(&path).unwrap();
    assert_eq!(input.identity(), &id);
    assert_eq!(id.path, std::fs::canonicalize(&path).unwrap());
    assert_eq!(id.size, std::fs::metadata(&path).unwrap().len());
    std::fs::write(&path, layer(&[("x", b"22")])).unwrap();
    let changed = InputIdentity::of(&path).unwrap();
    assert_ne!(changed.key(), id.key());
}
