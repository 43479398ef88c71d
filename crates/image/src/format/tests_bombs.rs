//! Resource bombs against the input side: huge extension headers in the
//! outer tar, manifest and index fan-out, too many layers, whole-input
//! compression bombs, and stopping a layer reader without draining it.
//! Bounds are checked by counting (documents read, bytes pulled), not by
//! measuring memory or time.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::json;

use super::archive::CAPPED_READS;
use super::layer::LayerSpec;
use super::tests::*;
use super::*;

fn reads() -> usize {
    CAPPED_READS.with(|n| n.get())
}

/// The reviewer's bomb: a GNU long-name member announcing 300 MiB in the
/// outer archive was read whole into memory by tar-rs. The header alone
/// must now be refused (the file here is sparse: nothing behind it is
/// read, and the test costs no disk).
#[test]
fn outer_long_name_bomb_is_refused_from_its_header() {
    let fx = Fixture::new();
    let p = fx.dir.path().join("bomb.tar");
    let mut f = std::fs::File::create(&p).unwrap();
    let size: u64 = 300 << 20;
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
    h.set_entry_type(tar::EntryType::GNULongName);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    f.write_all(h.as_bytes()).unwrap();
    f.set_len(512 + size + 2048).unwrap();
    drop(f);
    let e = err_text(fx.open(&p));
    assert!(e.contains("GNU long name"), "{e}");
    assert!(e.contains("exceeds"), "{e}");
}

/// Many PAX headers for one outer member add up to the same 1 MiB cap.
#[test]
fn outer_repeated_pax_headers_are_capped() {
    let fx = Fixture::new();
    let mut b = tar::Builder::new(Vec::new());
    let big = vec![b'a'; 600 << 10];
    for _ in 0..3 {
        b.append_pax_extensions([("comment", &big[..])]).unwrap();
    }
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    b.append_data(&mut h, "x", &b"x"[..]).unwrap();
    let p = fx.file("pax.tar", &b.into_inner().unwrap());
    let e = err_text(fx.open(&p));
    assert!(e.contains("add up to more than"), "{e}");
}

/// `docker save` archive whose manifest.json lists `n` entries, all naming
/// configs that lead to the same 1 MiB config (directly or by symlink).
fn fanout_archive(n: usize, via_links: bool) -> Vec<u8> {
    let cfg = format!(
        r#"{{"os":"linux","architecture":"amd64","rootfs":{{"type":"layers","diff_ids":[]}},"pad":"{}"}}"#,
        "a".repeat(1 << 20)
    );
    let mut entries = vec![("c.json".to_string(), E::File(cfg.into_bytes()))];
    let mut manifest = Vec::new();
    for i in 0..n {
        let name = if via_links {
            entries.push((format!("l{i}.json"), E::Symlink("c.json".into())));
            format!("l{i}.json")
        } else {
            "c.json".to_string()
        };
        manifest.push(json!({"Config": name, "RepoTags": [format!("img:{i}")], "Layers": []}));
    }
    entries.push((
        "manifest.json".into(),
        E::File(serde_json::to_vec(&manifest).unwrap()),
    ));
    tar_of(&entries)
}

/// Every manifest.json entry used to read and parse its config, even for
/// `@INDEX`; the same config is now read once, and a selector reads only
/// the configs of the images it can pick.
#[test]
fn docker_manifest_fanout_reads_each_config_once() {
    let fx = Fixture::new();
    for via_links in [false, true] {
        let p = fx.file("fan.tar", &fanout_archive(500, via_links));
        let input = fx.open(&p).unwrap();
        let before = reads();
        let images = input.images().unwrap();
        assert_eq!(images.len(), 500);
        assert_eq!(images[499].platform.as_deref(), Some("linux/amd64"));
        // manifest.json and the one config.
        assert_eq!(reads() - before, 2, "links: {via_links}");
        let before = reads();
        let src = input
            .resolve(&Selector::Index(7), &Platform::default())
            .unwrap();
        assert_eq!(src.names, vec!["img:7"]);
        // Candidates (manifest.json + one config), then the build (both again).
        assert_eq!(reads() - before, 4, "links: {via_links}");
    }
    let p = fx.file("toomany.tar", &fanout_archive(MAX_IMAGES + 1, false));
    let e = err_text(fx.open(&p).unwrap().images());
    assert!(e.contains("more than the limit of 1024"), "{e}");
}

/// An index listing the same manifest (without a platform) many times: the
/// manifest and config are read once; too many entries are refused; and
/// platform lookups of distinct manifests stay within the read budget.
#[test]
fn oci_index_fanout_is_bounded() {
    let fx = Fixture::new();
    let mut oci = Oci::default();
    let m = oci.image(&[], "arm64");
    let p = fx.file("same.tar", &tar_of(&oci.entries(vec![m.clone(); 600])));
    let input = fx.open(&p).unwrap();
    let before = reads();
    let images = input.images().unwrap();
    assert_eq!(images.len(), 600);
    assert!(images
        .iter()
        .all(|i| i.platform.as_deref() == Some("linux/arm64")));
    // index.json, then one manifest and one config.
    assert_eq!(reads() - before, 3);

    let p = fx.file(
        "toomany.tar",
        &tar_of(&oci.entries(vec![m; MAX_IMAGES + 1])),
    );
    let e = err_text(fx.open(&p).unwrap().images());
    assert!(e.contains("more than the limit of 1024"), "{e}");

    let mut oci = Oci::default();
    let distinct: Vec<_> = (0..150)
        .map(|i| with_name(oci.image(&[], &format!("arch{i}")), &format!("n{i}")))
        .collect();
    let p = fx.file("distinct.tar", &tar_of(&oci.entries(distinct)));
    let input = fx.open(&p).unwrap();
    let before = reads();
    let images = input.images().unwrap();
    assert_eq!(images.len(), 150);
    let known = images.iter().filter(|i| i.platform.is_some()).count();
    assert_eq!(known, 128, "256 reads: a manifest and a config each");
    assert_eq!(reads() - before, 1 + 256);
    // Selecting by name reads only that image's manifest and config.
    let before = reads();
    let src = input
        .resolve(
            &Selector::Name("n149".into()),
            &Platform::parse("linux/arch149").unwrap(),
        )
        .unwrap();
    assert_eq!(src.names, vec!["n149"]);
    assert_eq!(reads() - before, 1 + 2 + 2);
}

/// One blob listed as hundreds of layers is refused before any is read.
#[test]
fn too_many_layers_are_refused() {
    let fx = Fixture::new();
    let l = layer(&[("f", b"x")]);
    let stack: Vec<&[u8]> = vec![&l; MAX_LAYERS + 1];
    let p = fx.file("layers.tar", &tar_of(&docker_legacy(&[(&["t:1"], &stack)])));
    let e = err_text(
        fx.open(&p)
            .unwrap()
            .resolve(&Selector::Only, &Platform::default()),
    );
    assert!(e.contains("257 layers, more than the limit of 256"), "{e}");

    let mut oci = Oci::default();
    let raw = vec![
        (
            l.clone(),
            l.clone(),
            "application/vnd.oci.image.layer.v1.tar"
        );
        257
    ];
    let m = oci.image(&raw, "amd64");
    let p = fx.file("oci-layers.tar", &tar_of(&oci.entries(vec![m])));
    let e = err_text(
        fx.open(&p)
            .unwrap()
            .resolve(&Selector::Only, &Platform::default()),
    );
    assert!(e.contains("257 layers, more than the limit of 256"), "{e}");
    // The limit itself is fine.
    let stack: Vec<&[u8]> = vec![&l; MAX_LAYERS];
    let p = fx.file("ok.tar", &tar_of(&docker_legacy(&[(&["t:1"], &stack)])));
    let src = fx
        .open(&p)
        .unwrap()
        .resolve(&Selector::Only, &Platform::default())
        .unwrap();
    assert_eq!(src.layers.len(), MAX_LAYERS);
}

/// A whole-compressed input that decompresses beyond the limit fails with
/// a clear error instead of filling the scratch file system.
#[test]
fn whole_input_decompression_is_capped() {
    let fx = Fixture::new();
    let data = gzip(&vec![0u8; 3 << 20]);
    let p = fx.file("bomb.tar.gz", &data);
    let src = std::fs::File::open(&p).unwrap();
    let e = decompress_capped(src, Compression::Gzip, &p, &fx.scratch(), Some(1 << 20));
    let e = err_text(e);
    assert!(e.contains("decompresses to more than 1048576 bytes"), "{e}");
    // Under the limit it works, and the default limit leaves room.
    let src = std::fs::File::open(&p).unwrap();
    let mut out =
        decompress_capped(src, Compression::Gzip, &p, &fx.scratch(), Some(4 << 20)).unwrap();
    let mut back = Vec::new();
    std::io::Seek::rewind(&mut out).unwrap();
    out.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 3 << 20);
    let free = scratch_limit(&out);
    assert!(free > 0 && free <= MAX_DECOMPRESSED, "{free}");
}

/// An endless stream of zeros, counting the bytes pulled from it.
struct Zeros(Arc<AtomicU64>);

impl Read for Zeros {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(0);
        self.0.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
}

fn spec(diff_id: Option<Digest>) -> LayerSpec {
    LayerSpec {
        file: "in.tar".into(),
        layer: 1,
        location: "l.tar".into(),
        blob_digest: None,
        diff_id,
    }
}

/// `abort` stops a layer that would never end, after a bounded amount of
/// reading (`finish` would drain it forever).
#[test]
fn layer_reader_abort_stops_without_draining() {
    let pulled = Arc::new(AtomicU64::new(0));
    let mut r = LayerReader::spawn(Box::new(Zeros(pulled.clone())), spec(None)).unwrap();
    let mut buf = [0u8; 4096];
    r.read_exact(&mut buf).unwrap();
    assert!(r.abort().is_none());
    let n = pulled.load(Ordering::Relaxed);
    assert!(n < 16 << 20, "pulled {n} bytes");
}

/// A mismatch the worker already reported is returned by `abort`.
#[test]
fn layer_reader_abort_returns_a_known_mismatch() {
    let l = layer(&[("f", b"x")]);
    let wrong = Digest::of(b"something else");
    let mut r = LayerReader::spawn(Box::new(std::io::Cursor::new(l)), spec(Some(wrong))).unwrap();
    let mut out = Vec::new();
    assert!(r.read_to_end(&mut out).is_err());
    let e = r.abort().expect("the mismatch");
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
}
