//! `sha256:<hex>` digests, parsing and validation, and readers that hash
//! while streaming (sha2's SHA-NI path is picked at run time).

use std::fmt;

/// A validated `sha256:<64 lowercase hex>` digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Digest(s.to_string()))
    }
    pub fn from_sha256_bytes(bytes: &[u8]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(bytes)))
    }
    pub fn of(data: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest::from_sha256_bytes(&sha2::Sha256::digest(data))
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
    fn parse_rejects_bad_digests() {
        assert!(Digest::parse("sha256:abc").is_none());
        assert!(Digest::parse(&format!("sha512:{}", "a".repeat(64))).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "A".repeat(64))).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "a".repeat(64))).is_some());
    }
}
