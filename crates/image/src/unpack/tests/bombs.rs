//! Resource bombs and arithmetic edge cases in layer streams: repeated
//! extension headers, sizes near `u64::MAX`, huge sparse files. Each must
//! end in a clean error, early (memory checks count the bytes read rather
//! than measure RSS).

use std::io::Read;

use tar::EntryType;

use super::*;

/// An endless stream repeating `unit`, counting the bytes handed out.
struct Repeat {
    unit: Vec<u8>,
    pos: usize,
    total: std::rc::Rc<std::cell::Cell<u64>>,
}

impl Read for Repeat {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.unit.len() - self.pos);
        buf[..n].copy_from_slice(&self.unit[self.pos..self.pos + n]);
        self.pos = (self.pos + n) % self.unit.len();
        self.total.set(self.total.get() + n as u64);
        Ok(n)
    }
}

/// Applies an endless repetition of `unit` (whole tar blocks, no end
/// marker); returns the error reason and the bytes read before it.
fn apply_endless(unit: Vec<u8>) -> (String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let total = std::rc::Rc::new(std::cell::Cell::new(0));
    let r = Repeat {
        unit,
        pos: 0,
        total: total.clone(),
    };
    let opts = UnpackOptions {
        writer_threads: 0,
        ..Default::default()
    };
    let mut u = Unpacker::with_options(dir.path(), opts).unwrap();
    let (_, reason) = entry_err(u.apply_layer(r, 1), 1);
    (reason, total.get())
}

/// One tar entry's blocks without the end-of-archive marker.
fn blocks_of(l: Layer) -> Vec<u8> {
    let mut b = l.build();
    b.truncate(b.len() - 1024);
    b
}

/// Each `x` header is under the 1 MiB cap, but an endless run of them used
/// to pile up in memory for the one entry that never comes.
#[test]
fn bomb_repeated_pax_headers_are_capped_per_entry() {
    let big = vec![b'a'; 600 << 10];
    let (reason, read) = apply_endless(blocks_of(Layer::new().pax(&[("comment", &big[..])])));
    assert!(reason.contains("add up to more than"), "{reason}");
    // Two headers of 600 KiB plus one read buffer (1 MiB): nowhere near
    // the hundreds of MiB the stream would deliver.
    assert!(read < 4 << 20, "read {read} bytes before failing");
    // A few small PAX headers for one entry are still fine.
    let l = Layer::new()
        .pax(&[("uid", b"7")])
        .pax(&[("gid", b"8")])
        .file("f", b"x")
        .build();
    let u = unpack_ok(&[l]);
    assert_eq!(u.read("f"), "x");
}

/// A GNU long name header repeated without an entry is refused at once.
#[test]
fn bomb_repeated_gnu_long_names_are_refused() {
    let name = "n".repeat(300);
    let mut h = hdr(EntryType::GNULongName, 0o644, name.len() as u64 + 1);
    h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    h.set_cksum();
    let mut unit = h.as_bytes().to_vec();
    unit.extend_from_slice(name.as_bytes());
    unit.resize(1024, 0);
    let (reason, read) = apply_endless(unit);
    assert!(reason.contains("two GNU long name headers"), "{reason}");
    assert!(read <= 1 << 20, "read {read} bytes before failing");
}

/// PAX `size` of u64::MAX on an entry whose data is never read (a
/// directory) used to overflow `remaining + padding` (a panic).
#[test]
fn overflow_pax_size_near_u64_max_is_an_error() {
    let l = Layer::new()
        .pax(&[("size", b"18446744073709551615")])
        .dir("d", 0o755)
        .file("after", b"x")
        .build();
    let (_u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "d");
    assert!(reason.contains("too large"), "{reason}");
}

/// A GNU volume header with a base-256 size near u64::MAX used to
/// overflow `size + padding` (a panic).
#[test]
fn overflow_volume_label_size_is_an_error() {
    let mut h = hdr(EntryType::new(b'V'), 0o644, 0);
    h.as_old_mut().name[..3].copy_from_slice(b"vol");
    let mut size = [0xffu8; 12];
    size[0] = 0x80;
    size[1..4].copy_from_slice(&[0, 0, 0]);
    size[11] = 0xf5; // u64::MAX - 10
    h.as_old_mut().size = size;
    h.set_cksum();
    let l = Layer::new().bytes(h.as_bytes()).build();
    let (_u, r) = unpack(&[l]);
    let (_, reason) = entry_err(r, 1);
    assert!(reason.contains("too large"), "{reason}");
}

/// A sparse file's logical size is capped: `ftruncate` to any size the
/// header claims would be a bomb for later readers.
#[test]
fn bomb_sparse_real_size_is_capped() {
    let size = (1u64 << 40).to_string();
    let l = Layer::new()
        .pax(&[
            ("GNU.sparse.map", b"0,1"),
            ("GNU.sparse.size", size.as_bytes()),
            ("GNU.sparse.name", b"huge"),
        ])
        .file("GNUSparseFile.1/huge", b"x")
        .build();
    let (u, r) = unpack(&[l]);
    let (entry, reason) = entry_err(r, 1);
    assert_eq!(entry, "huge");
    assert!(reason.contains("exceeds"), "{reason}");
    assert!(!u.exists("huge"));
}

/// Zeros after the end-of-archive marker must still be hashed, so a
/// compression bomb of them is refused after a bounded amount.
#[test]
fn bomb_endless_trailing_zeros_are_refused() {
    let (reason, read) = apply_endless(vec![0u8; 4096]);
    assert!(
        reason.contains("follow the end-of-archive marker"),
        "{reason}"
    );
    assert!(read < 70 << 20, "read {read} bytes before failing");
}
