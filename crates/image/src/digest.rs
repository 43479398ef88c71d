//! `sha256:<hex>` digests, parsing and validation, and readers that hash
//! while streaming (sha2's SHA-NI path is picked at run time).

use std::fmt;
use std::io::{self, Read};

use sha2::Digest as _;

/// A validated `sha256:<64 lowercase hex>` digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Digest(s.to_string()))
    }
    pub fn from_sha256_bytes(bytes: &[u8]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(bytes)))
    }
    pub fn of(data: &[u8]) -> Digest {
        Digest::from_sha256_bytes(&sha2::Sha256::digest(data))
    }
    /// Like `parse`, but says why a string is not a usable digest (only
    /// sha256 is supported: other algorithms are named in the message).
    pub fn parse_checked(s: &str) -> Result<Digest, String> {
        if let Some(d) = Digest::parse(s) {
            return Ok(d);
        }
        match s.split_once(':') {
            Some(("sha256", _)) => Err(format!("malformed sha256 digest `{}`", truncate(s))),
            Some((algo, _)) if !algo.is_empty() => Err(format!(
                "unsupported digest algorithm `{}` in `{}` (only sha256 is supported)",
                truncate(algo),
                truncate(s)
            )),
            _ => Err(format!("malformed digest `{}`", truncate(s))),
        }
    }
    /// A digest from its 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Option<Digest> {
        Digest::parse(&format!("sha256:{hex}"))
    }
    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Keeps long hostile strings out of error messages.
fn truncate(s: &str) -> String {
    if s.len() <= 80 {
        return s.to_string();
    }
    let mut end = 80;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// An incremental sha256 (SHA-NI when the CPU has it).
#[derive(Clone, Default)]
pub struct Hasher(sha2::Sha256);

impl Hasher {
    pub fn new() -> Hasher {
        Hasher::default()
    }
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
    pub fn finish(self) -> Digest {
        Digest::from_sha256_bytes(&self.0.finalize())
    }
}

/// A reader that counts the bytes it passes on and, when asked to, hashes them.
pub struct HashingReader<R> {
    inner: R,
    hasher: Option<Hasher>,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R, hash: bool) -> Self {
        HashingReader {
            inner,
            hasher: hash.then(Hasher::new),
            count: 0,
        }
    }
    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The digest of everything read (None when hashing was off) and the count.
    pub fn finish(self) -> (Option<Digest>, u64) {
        (self.hasher.map(Hasher::finish), self.count)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        self.count += n as u64;
        Ok(n)
    }
}

/// Chain ID of a layer stack (OCI image-spec config.md): chain(L0) = diff(L0),
/// chain(Ln) = sha256(chain(Ln-1) + " " + diff(Ln)).
pub fn chain_id(diff_ids: &[Digest]) -> Option<Digest> {
    let mut it = diff_ids.iter();
    let mut chain = it.next()?.clone();
    for d in it {
        chain = Digest::of(format!("{chain} {d}").as_bytes());
    }
    Some(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_id_of_one_layer_is_its_diff_id() {
        let d = Digest::of(b"a");
        assert_eq!(chain_id(std::slice::from_ref(&d)), Some(d));
    }

    #[test]
    fn chain_id_follows_the_spec() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let want = Digest::of(format!("{a} {b}").as_bytes());
        assert_eq!(chain_id(&[a, b]), Some(want));
    }

    #[test]
    fn parse_checked_names_the_problem() {
        let e = Digest::parse_checked(&format!("sha512:{}", "a".repeat(128))).unwrap_err();
        assert!(e.contains("unsupported digest algorithm `sha512`"), "{e}");
        let e = Digest::parse_checked("sha256:xyz").unwrap_err();
        assert!(e.contains("malformed sha256 digest"), "{e}");
        let ok = format!("sha256:{}", "b".repeat(64));
        assert_eq!(Digest::parse_checked(&ok).unwrap().as_str(), ok);
        assert_eq!(Digest::from_hex(&"b".repeat(64)).unwrap().as_str(), ok);
    }

    #[test]
    fn hashing_reader_hashes_and_counts() {
        let data = vec![7u8; 300_000];
        let mut r = HashingReader::new(&data[..], true);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
        assert_eq!(r.finish(), (Some(Digest::of(&data)), 300_000));
        let mut h = Hasher::new();
        h.update(b"ab");
        h.update(b"c");
        assert_eq!(h.finish(), Digest::of(b"abc"));
    }

    #[test]
    fn parse_rejects_bad_digests() {
        assert!(Digest::parse("sha256:abc").is_none());
        assert!(Digest::parse(&format!("sha512:{}", "a".repeat(64))).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "A".repeat(64))).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "a".repeat(64))).is_some());
    }
}
